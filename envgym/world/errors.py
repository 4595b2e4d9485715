"""Typed errors of the core: each names what is wrong and subclasses the builtin that callers already catch."""

from __future__ import annotations


class ReplayError(ValueError):
    """A task's reference solution fails on the world it was written for: the task is broken, not the agent."""


class UnknownTaskError(KeyError):
    """A task id that the environment does not have."""

    def __str__(self) -> str:  # KeyError would show the message in quotes
        return str(self.args[0]) if self.args else ""


class UnknownEntityError(KeyError):
    """An entity (table) name that the world does not have."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class EnvConfigError(ValueError):
    """An env setting that cannot work: no tasks, an unknown user simulator, confirmation mode or attack."""


class UnknownComparisonError(ValueError):
    """A precondition or assertion names a comparison operator that does not exist."""


class ToolError(Exception):
    """Raised by a Python or mechanism tool to report a controlled failure; the message is shown to the agent. `kind` (a
    `ToolErrorKind` value, e.g. "precondition" or "not_found") says why; unset, the failure is a tool_error."""

    def __init__(self, message: str = "", kind: str | None = None):
        super().__init__(message)
        self.kind = kind
