"""Executing tools against world state: validation, declarative effects, Python tools, injected failures.

Every failure is a `ToolResult` with `ok=False`, a `ToolErrorKind` and a message naming the problem; a Python tool
that raises something other than `ToolError` (a bug, a sandbox timing out) is reported the same way, never raised.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, overload

from envgym.world import query
from envgym.world.errors import ToolError, UnknownComparisonError
from envgym.world.folder import resolve_python
from envgym.world.spec import Effect, ToolSpec, WorldSpec
from envgym.world.state import Record, WorldState, next_key
from envgym.world.validate import compile_validator


class ToolErrorKind(StrEnum):
    """Why a tool call failed. A StrEnum, so `info` and JSON carry the same plain strings as before."""

    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    PARSE_ERROR = "parse_error"  # the action held a tool call that could not be read at all
    PRECONDITION = "precondition"
    NOT_FOUND = "not_found"
    TRANSIENT = "transient"  # an injected failure (`failure_rate`, `ToolFaults.transient`): retrying may work
    RATE_LIMITED = "rate_limited"  # refused by the tool's rate limit (`ToolFaults.rate_limit`): retrying works
    TOOL_ERROR = "tool_error"  # a Python tool raised ToolError: a controlled failure
    TOOL_CRASHED = "tool_crashed"  # a Python tool raised anything else: a bug or a broken resource
    GUARD_DENIED = "guard_denied"  # the guard held the call and confirmation was refused


@dataclass(slots=True)
class ToolResult:
    """The outcome of one tool call: a JSON-able value when ok, else an error kind and message.

    The value may share nested objects with the world state: serialise it before the next tool call.
    """

    ok: bool
    value: Any = None
    error: str | None = None
    error_kind: ToolErrorKind | None = None

    def payload(self) -> Any:
        return self.value if self.ok else {"error": self.error}


class ResultLog(Sequence[ToolResult]):
    """An episode's tool results in call order, read as `ToolResult`s and kept as four columns.

    An env keeps every result until the episode ends (the rubric reads them). Each container an episode keeps
    adds to the count that sets how often CPython's cycle collector runs, and its full collections walk the whole
    heap: they were 28% of a retail lookup step's CPU with a `ToolResult` and a log row kept per call, 22% without
    (`env_collector_share` in benchmarks/env_step.py). The columns are four lists that only grow; the `ToolResult`
    an index gives is made on the spot (equal to the one appended, not the same object).
    """

    __slots__ = ("_error", "_kind", "_ok", "_value")

    def __init__(self) -> None:
        self._ok: list[bool] = []
        self._value: list[Any] = []
        self._error: list[str | None] = []
        self._kind: list[ToolErrorKind | None] = []

    def append(self, result: ToolResult) -> None:
        self._ok.append(result.ok)
        self._value.append(result.value)
        self._error.append(result.error)
        self._kind.append(result.error_kind)

    def __len__(self) -> int:
        return len(self._ok)

    @overload
    def __getitem__(self, index: int) -> ToolResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[ToolResult]: ...
    def __getitem__(self, index: int | slice) -> ToolResult | list[ToolResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return ToolResult(self._ok[index], self._value[index], self._error[index], self._kind[index])

    def __iter__(self) -> Iterator[ToolResult]:
        return map(ToolResult, self._ok, self._value, self._error, self._kind)

    def __repr__(self) -> str:
        return f"ResultLog({list(self)!r})"


RETRYABLE = frozenset({ToolErrorKind.TRANSIENT, ToolErrorKind.RATE_LIMITED})


class FaultLedger:
    """One episode's account of each tool's calls, which plays the tools' failure modes (`ToolSpec.faults`)
    deterministically: transient failures draw from the episode's seeded rng, the rate limit counts the calls that
    went through since its last refusal. The call right after a failed one always goes through."""

    def __init__(self) -> None:
        self._through: dict[str, int] = {}  # calls that went through since the tool's last rate-limit refusal
        self._failed: set[str] = set()  # tools whose last call failed by a fault

    def fault(self, tool: ToolSpec, rng: random.Random) -> ToolResult | None:
        """The failure of this call of `tool`, or None when it goes through."""
        faults, name = tool.faults, tool.name
        if faults is None:
            return None
        if name in self._failed:
            self._failed.discard(name)
        elif faults.transient and rng.random() < faults.transient:
            self._failed.add(name)
            return ToolResult(False, error=f"{name}: service temporarily unavailable, please retry",
                              error_kind=ToolErrorKind.TRANSIENT)
        elif faults.rate_limit is not None and self._through.get(name, 0) >= faults.rate_limit:
            self._through[name] = 0
            self._failed.add(name)
            return ToolResult(False, error=f"{name}: rate limit exceeded after {faults.rate_limit} calls, retry "
                              "the call", error_kind=ToolErrorKind.RATE_LIMITED)
        self._through[name] = self._through.get(name, 0) + 1
        return None


def _arg(value: Any, args: dict[str, Any]) -> Any:
    """Resolve an effect value: '$name' is the argument `name`, '$$x' the literal '$x', anything else itself."""
    if isinstance(value, str) and value.startswith("$"):
        if value.startswith("$$"):
            return value[1:]
        return query.argument(value[1:], args)
    return value


def compare(actual: Any, op: str, expected: Any) -> bool:
    """The comparison used by preconditions and assertions."""
    try:
        match op:
            case "eq":
                return bool(actual == expected)
            case "ne":
                return bool(actual != expected)
            case "lt":
                return bool(actual < expected)
            case "le":
                return bool(actual <= expected)
            case "gt":
                return bool(actual > expected)
            case "ge":
                return bool(actual >= expected)
            case "in":
                return actual in expected
            case "not_in":
                return actual not in expected
            case "contains":
                return expected in actual
            case "exists":
                return actual is not None
            case "not_exists":
                return actual is None
    except TypeError:
        return False
    raise UnknownComparisonError(f"unknown comparison {op!r}; expected one of eq, ne, lt, le, gt, ge, in, not_in, "
                                 "contains, exists, not_exists")


def _project(record: Record, returns: str | list[str] | None) -> Any:
    # Shallow on purpose: results are serialised before the next call can change the state (see ToolResult).
    if returns is None:
        return dict(record)
    if isinstance(returns, str):
        return record.get(returns)
    return {f: record.get(f) for f in returns}


def _not_found(effect: Effect, args: dict[str, Any], match: dict[str, Any]) -> str:
    if effect.not_found_error:
        return effect.not_found_error.format(**args)
    return f"no {effect.entity} with " + ", ".join(f"{f}={v!r}" for f, v in match.items())


def _refs(world: WorldSpec, entity: str) -> dict[str, str]:
    return {f: spec.ref for f, spec in world.entities[entity].fields.items() if spec.ref}


def _run_query(effect: Effect, world: WorldSpec, state: WorldState, args: dict[str, Any]) -> ToolResult:
    """The aggregate and update_many effects (filters, no single target record)."""
    table = state.table(effect.entity)
    # update_many writes the rows, so they are taken as this state's own copies; aggregate only reads.
    rows = query.filter_rows(list(table.values() if effect.op == "update_many" else dict.values(table)), effect,
                             args, compare)
    key = world.entities[effect.entity].key
    if effect.op == "aggregate":
        return ToolResult(True, query.aggregate(rows, effect, key))
    for pre in effect.preconditions:
        rows = [r for r in rows if compare(r.get(pre.field), pre.op, _arg(pre.value, args))]
    for record in rows:
        for fname, value in effect.set.items():
            record[fname] = copy.deepcopy(_arg(value, args))
    return ToolResult(True, {"updated": sorted(str(r[key]) for r in rows)})


def _run_effect(effect: Effect, state: WorldState, args: dict[str, Any], world: WorldSpec) -> ToolResult:
    table = state.table(effect.entity)
    # Reads go through dict.get / dict.values: they see records without copying them (see world.state.Table),
    # which is safe because only update and delete write, and those take the record through table[key] first.
    op = effect.op
    if op in ("aggregate", "update_many"):
        return _run_query(effect, world, state, args)
    if op in ("get", "update", "delete"):
        key_arg = effect.key_arg
        match: dict[str, Any] | None = None  # made only for the not-found message when the key is an argument
        if key_arg is not None:
            key = args.get(key_arg)
            key = key if type(key) is str else str(key)
            record = dict.get(table, key)
        else:
            match = {f: _arg(v, args) for f, v in effect.match.items()}
            key, record = next(
                ((k, r) for k, r in dict.items(table) if all(r.get(f) == v for f, v in match.items())), ("", None)
            )
        if record is None:
            if match is None:
                assert key_arg is not None
                match = {key_arg: args.get(key_arg)}
            return ToolResult(False, error=_not_found(effect, args, match), error_kind=ToolErrorKind.NOT_FOUND)
        for pre in effect.preconditions:
            if not compare(record.get(pre.field), pre.op, _arg(pre.value, args)):
                return ToolResult(
                    False, error=pre.error.format(**{**record, **args}), error_kind=ToolErrorKind.PRECONDITION
                )
        if op == "get":
            if effect.expand:
                record = query.expand(record, effect, state.tables, _refs(world, effect.entity))
            return ToolResult(True, _project(record, effect.returns))
        if op == "delete":
            del table[key]
            return ToolResult(True, {"deleted": key})
        record = table[key]  # this state's own copy, safe to change
        for fname, value in effect.set.items():
            record[fname] = copy.deepcopy(_arg(value, args))
        return ToolResult(True, _project(record, effect.returns))
    if op == "list":
        match = {f: _arg(v, args) for f, v in effect.match.items()}
        match = {f: v for f, v in match.items() if v is not None}
        rows = [r for r in dict.values(table) if all(r.get(f) == v for f, v in match.items())]
        if effect.filters or effect.sort_by or effect.page_arg or effect.expand:
            rows = query.sort_and_page(query.filter_rows(rows, effect, args, compare), effect, args)
            refs = _refs(world, effect.entity)
            return ToolResult(True, [_project(query.expand(r, effect, state.tables, refs), effect.returns) for r in rows])
        return ToolResult(True, [_project(r, effect.returns) for r in rows[: effect.limit]])
    if op == "search":
        needle = str(args.get(effect.query_arg or "query", "")).lower()
        fields = effect.search_fields or None
        rows = [
            r
            for r in dict.values(table)
            if any(needle in str(v).lower() for f, v in r.items() if fields is None or f in fields)
        ]
        if effect.filters or effect.sort_by or effect.page_arg:
            rows = query.sort_and_page(query.filter_rows(rows, effect, args, compare), effect, args)
        return ToolResult(True, [_project(r, effect.returns) for r in rows[: effect.limit]])
    # create
    values = {f: copy.deepcopy(_arg(v, args)) for f, v in effect.set.items()}
    if effect.check_refs:
        for fname, entity in _refs(world, effect.entity).items():
            if values.get(fname) is not None and str(values[fname]) not in state.table(entity):
                return ToolResult(False, error=f"no {entity} with {fname}={values[fname]!r}", error_kind=ToolErrorKind.NOT_FOUND)
    return ToolResult(True, values)


def _create_key(effect: Effect, world: WorldSpec, state: WorldState, values: dict[str, Any]) -> str:
    entity = world.entities[effect.entity]
    if values.get(entity.key) is not None:
        return str(values[entity.key])
    return next_key(state.table(effect.entity), entity.prefix, entity.key_format)


class ToolExecutor:
    """Runs a world's tools: validates arguments, applies effects or Python functions, injects failures."""

    def __init__(
        self,
        world: WorldSpec,
        env_dir: Path | None = None,
        extra: dict[str, Callable[..., Any]] | None = None,
    ):
        self.world = world
        self.env_dir = env_dir
        self.extra = dict(extra or {})
        self.tools: dict[str, ToolSpec] = {t.name: t for t in world.tools}
        self._validators = {t.name: compile_validator(t.parameters) for t in world.tools}
        self._python: dict[str, Callable[..., Any]] = {}
        for tool in world.tools:
            if tool.python is not None:
                self._python[tool.name] = resolve_python(env_dir, tool.python)
        if world.mechanisms:  # only worlds with mechanisms pay for the import
            from envgym.world.mechanisms import implementations

            self._python.update(implementations(world))
        self._python.update(self.extra)

    # Compiled validators are closures and folder tools live in modules imported by path, which another process
    # does not have: a pickle carries only what the executor is built from, and unpickling builds it again.
    def __getstate__(self) -> dict[str, Any]:
        return {"world": self.world, "env_dir": self.env_dir, "extra": self.extra}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["world"], state["env_dir"], state["extra"])  # type: ignore[misc]

    def implementations(self) -> dict[str, Callable[..., Any]]:
        """tool name -> its Python implementation (folder functions and `extra`), for checks over them."""
        return dict(self._python)

    def openai_tools(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function-calling schemas (what the agent sees)."""
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in self.world.tools
        ]

    def execute(
        self,
        state: WorldState,
        name: str,
        args: Any,
        rng: random.Random | None = None,
        failure_rate: float = 0.0,
        faults: FaultLedger | None = None,
    ) -> ToolResult:
        """Validate and run one call. Never raises for bad input; returns an error result that names the problem.
        With `rng`, a call may fail transiently (`failure_rate`); with `faults` too, by the tool's failure modes."""
        tool = self.tools.get(name)
        if tool is None:
            return ToolResult(
                False,
                error=f"unknown tool {name!r}; available tools: {', '.join(sorted(self.tools))}",
                error_kind=ToolErrorKind.UNKNOWN_TOOL,
            )
        if not isinstance(args, dict):
            return ToolResult(
                False,
                error=f"arguments of {name} must be a JSON object, got {type(args).__name__}",
                error_kind=ToolErrorKind.INVALID_ARGUMENTS,
            )
        problem = self._validators[name](args)
        if problem is not None:
            return ToolResult(False, error=f"{name}: {problem}", error_kind=ToolErrorKind.INVALID_ARGUMENTS)
        if failure_rate > 0 and rng is not None and rng.random() < failure_rate:
            return ToolResult(
                False, error=f"{name}: service temporarily unavailable, please retry", error_kind=ToolErrorKind.TRANSIENT
            )
        if (tool.faults is not None and faults is not None and rng is not None
                and (failed := faults.fault(tool, rng)) is not None):
            return failed
        if tool.effect is not None:
            result = _run_effect(tool.effect, state, args, self.world)
            if result.ok and tool.effect.op == "create":
                values = result.value
                key = _create_key(tool.effect, self.world, state, values)
                values[self.world.entities[tool.effect.entity].key] = key
                state.put(tool.effect.entity, key, values)
                result = ToolResult(True, _project(values, tool.effect.returns))
            return result
        fn = self._python.get(name)
        if fn is None:
            return ToolResult(
                False, error=f"tool {name!r} has no implementation here", error_kind=ToolErrorKind.TOOL_ERROR
            )
        try:
            return ToolResult(True, fn(state, **args))
        except ToolError as exc:
            return ToolResult(False, error=str(exc), error_kind=ToolErrorKind(exc.kind or ToolErrorKind.TOOL_ERROR))
        except Exception as exc:  # any string is a legal action, so a tool's bug must not end the episode
            return ToolResult(False, error=f"tool {name!r} failed: {type(exc).__name__}: {exc}",
                              error_kind=ToolErrorKind.TOOL_CRASHED)
