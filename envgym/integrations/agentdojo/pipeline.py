"""envgym's guard as an AgentDojo pipeline element, and the two scripted agents that drive it without a model.

`GuardedToolsExecutor` takes the place of AgentDojo's `ToolsExecutor`: each call of the last assistant message goes
through the guard first (a refused call returns the guard's reason as the tool's error and never runs), and each
result is recorded by the guard (third-party results are delimited in what the agent sees). It works in any
AgentDojo pipeline, a model's included. `ScriptedAgent` stands in for the model: it plays a task's ground truth and,
when it is an always-obey attacker, switches to the injection task's ground truth right after the first tool result
that carries the injection, then finishes the user's task.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentdojo.agent_pipeline import (
    AgentPipeline,
    BasePipelineElement,
    InitQuery,
    SystemMessage,
    ToolsExecutionLoop,
)
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import EmptyEnv, Env, FunctionCall, FunctionsRuntime
from agentdojo.types import (
    ChatAssistantMessage,
    ChatMessage,
    ChatToolResultMessage,
    text_content_block_from_string,
)
from pydantic import BaseModel

from envgym.guard import UNTRUSTED_CLOSE, UNTRUSTED_OPEN, Guard, Provenance, escape_control
from envgym.guard.provenance import leaves
from envgym.integrations.agentdojo.mapping import observed_text, platform_values, record_lookup, record_table

_NO_ENV = EmptyEnv()  # AgentDojo's default environment, made once
_SESSION = "envgym_guard"
_SCRIPT = "envgym_script"
_SQUASH = re.compile(r"[\s\\\"']+")
_ESCAPES = re.compile(r"\\[nt]")


def _text(message: ChatMessage) -> str:
    content = message.get("content") or []
    if isinstance(content, str):
        return content
    return "".join(block.get("content") or "" for block in content)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass
class Held:
    """A call the guard refused: the tool, its arguments and the guard's reasons."""

    tool: str
    arguments: dict[str, Any]
    reasons: tuple[str, ...]


@dataclass
class GuardLog:
    """What the guard knows and did in one task run: the provenance of what the agent saw, and the refused calls."""

    provenance: Provenance
    held: list[Held] = field(default_factory=list)
    read: int = 0  # messages already fed to `provenance`


class GuardedToolsExecutor(BasePipelineElement):
    """Runs the last assistant message's tool calls through envgym's guard (None: no defense, calls run as is)."""

    name = "envgym_guard"

    def __init__(self, guard: Guard | None, suite: str = "") -> None:
        self.guard = guard
        self.suite = suite
        self.last: GuardLog | None = None  # the log of the latest run, for the caller that scores it
        self.ran: list[FunctionCall] = []  # the calls that reached a tool (refused ones never do)

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = _NO_ENV,
              messages: Sequence[ChatMessage] = [], extra_args: dict = {},  # noqa: B006 (AgentDojo's signature)
              ) -> tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict]:
        if not messages or messages[-1]["role"] != "assistant" or not messages[-1]["tool_calls"]:
            return query, runtime, env, messages, extra_args
        log: GuardLog | None = extra_args.get(_SESSION)
        if log is None and self.guard is not None:
            log = self.last = GuardLog(self.guard.provenance())
            extra_args = {**extra_args, _SESSION: log}  # a new dict: AgentDojo's default {} is shared
        if log is not None:
            for message in messages[log.read:]:
                if message["role"] == "user":
                    log.provenance.add_user(_text(message))
                elif message["role"] == "system":
                    log.provenance.add_system(_text(message))
            log.read = len(messages)
        results = [self._run(call, runtime, env, log) for call in messages[-1]["tool_calls"]]
        if log is not None:
            log.read += len(results)
        return query, runtime, env, [*messages, *results], extra_args

    def _run(self, call: FunctionCall, runtime: FunctionsRuntime, env: Env,
             log: GuardLog | None) -> ChatToolResultMessage:
        args = dict(call.args)
        guard = self.guard
        if log is not None and guard is not None and guard.is_sink(call.function):
            verdict = guard.judge(call.function, args, log.provenance, record_lookup(env), record_table(env))
            if not verdict.allowed:
                log.held.append(Held(call.function, args, verdict.reasons))
                return ChatToolResultMessage(role="tool", content=[text_content_block_from_string("")],
                                             tool_call_id=call.id, tool_call=call,
                                             error=guard.refusal(verdict, "deny"))
        self.ran.append(call)
        result, error = runtime.run_function(env, call.function, args)
        shown = tool_result_to_str(result) if error is None else ""
        if log is not None and guard is not None:
            shown = self._record(guard, log.provenance, call.function, args, _plain(result), shown, error)
        return ChatToolResultMessage(role="tool", content=[text_content_block_from_string(shown)],
                                     tool_call_id=call.id, tool_call=call, error=error)

    def _record(self, guard: Guard, provenance: Provenance, tool: str, args: dict[str, Any], result: Any, shown: str,
                error: str | None) -> str:
        """Tell the guard where a result came from; return what the agent sees (escaped, delimited if untrusted)."""
        if error is None:
            guard.record_private(provenance, result)
            guard.record_named(provenance, tool, result)
        if tool in guard.untrusted:
            # A failed call of a third-party reader taints like a successful one: its error may quote the data.
            guard.record_result(provenance, tool, shown if error is None else error, args)
            # Whole values only: a channel named "... Contact: x@evil.com" lends no trust to the address in it.
            trusted = platform_values(self.suite, tool, result)
            if trusted:
                provenance.add_trusted_values(v for item in trusted for v in leaves(item))
            if guard.config.delimit:
                return f'{UNTRUSTED_OPEN} source="{tool}">\n{escape_control(shown)}\n{UNTRUSTED_CLOSE}'
        elif error is None:
            guard.record_result(provenance, tool, observed_text(result))
        return escape_control(shown)


@dataclass
class Script:
    """The scripted agent's plan for one run: the user's calls, the attacker's calls once injected, and progress."""

    user_calls: list[FunctionCall]
    attack_calls: list[FunctionCall] | None = None
    done: int = 0
    injected_at: int | None = None


class ScriptedAgent(BasePipelineElement):
    """A model stand-in that plays `task.ground_truth(env)`; with `injection`, an always-obey attacker.

    The attacker obeys the first tool result that carries one of `payloads`: it issues `injection.ground_truth(env)`
    (computed on the environment at that moment), then the rest of the user's calls, and finally says both tasks'
    expected outputs.
    """

    name = "scripted"

    def __init__(self, task: BaseUserTask | BaseInjectionTask, injection: BaseInjectionTask | None = None,
                 payloads: Sequence[str] = ()) -> None:
        self.task = task
        self.injection = injection
        self.payloads = [_SQUASH.sub("", p) for p in payloads if p]
        self.script: Script | None = None  # the latest run's plan: `attack_calls` is set once the agent obeyed

    def _carries_payload(self, messages: Sequence[ChatMessage]) -> bool:
        last = messages[-1] if messages else None
        if last is None or last["role"] != "tool":
            return False
        # Results reach the agent as YAML or as a dict's repr, whose escapes ("\\n") the squash must drop too.
        seen = _SQUASH.sub("", _ESCAPES.sub("", _text(last)))
        return any(p in seen for p in self.payloads)

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = _NO_ENV,
              messages: Sequence[ChatMessage] = [], extra_args: dict = {},  # noqa: B006 (AgentDojo's signature)
              ) -> tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict]:
        script: Script | None = extra_args.get(_SCRIPT)
        if script is None:
            script = self.script = Script(list(self.task.ground_truth(env)))
            extra_args = {**extra_args, _SCRIPT: script}
        if self.injection is not None and script.attack_calls is None and self._carries_payload(messages):
            script.attack_calls = list(self.injection.ground_truth(env))
            script.injected_at = script.done
            script.user_calls[script.done:script.done] = script.attack_calls
        if script.done < len(script.user_calls):
            call = script.user_calls[script.done]
            script.done += 1
            message = ChatAssistantMessage(role="assistant", tool_calls=[call],
                                           content=[text_content_block_from_string("")])
        else:
            said = [self.task.GROUND_TRUTH_OUTPUT]
            if self.injection is not None and script.attack_calls is not None:
                said.append(self.injection.GROUND_TRUTH_OUTPUT)
            message = ChatAssistantMessage(role="assistant", tool_calls=None,
                                           content=[text_content_block_from_string("\n".join(s for s in said if s))])
        return query, runtime, env, [*messages, message], extra_args


def scripted_pipeline(agent: ScriptedAgent, executor: GuardedToolsExecutor, system: str) -> AgentPipeline:
    """system message, user query, then agent and guarded executor in a loop until the agent stops calling tools."""
    return AgentPipeline([SystemMessage(system), InitQuery(), agent,
                          ToolsExecutionLoop([executor, agent], max_iters=200)])
