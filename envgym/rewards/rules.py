"""The policy's rules (`WorldSpec.rules`), checked on the trajectory at the end of an episode.

The trajectory is the conversation (OpenAI-format messages) plus each tool call's result, in order. A call is
*attempted* when its tool exists and its arguments parsed and validated, whatever happened next (done, not found,
failed a precondition, transient failure, or held by the guard and refused or declined: a write the agent tried
is evidence whether or not it ran). A *write* is a call of a tool that is not read-only (`ToolSpec.read_only`).
Each declared rule is one binary reward component:

- ``rule_authenticate`` (when `authenticate_with` is declared): no attempted call of a tool in `requires_auth`
  (unset: every tool but the authenticating ones) before a call of an `authenticate_with` tool succeeded. With
  `identity` declared, the key that call returned is the authenticated user, and a later `requires_auth` call may
  name only that user (an argument named like the identity entity's key) and records the user owns (an argument
  named like the key of an entity in `owner_fields`, whose record in the final state has that user in its owner
  field; a record that does not exist gave nothing away).
- ``rule_confirm`` (`confirm_writes`): every attempted write follows a standing confirmation. A confirmation stands
  when an assistant turn without tool calls asked for one (`is_confirmation_request`) and the user's next message
  said yes (`is_affirmative`); a later "no" withdraws it, and a write that succeeds uses it up, so each write needs
  its own yes. A write that did not succeed leaves it standing (a retry after a transient failure is no new write).
- ``rule_no_extra_writes`` (`no_unrequested_writes`): every attempted write is one the reference solution makes:
  the same tool with the same arguments (values compared as text, so 2 and "2" are one value). A write to a
  record the task names but with a value it did not ask for fails the rule even when a later write puts the asked
  value back: the final state is not the only evidence, and trying values until the user stops complaining is
  guessing.

`rule_violations` names the calls that broke each rule; `rule_breaking_calls` adds the calls the guard held. Shaping
rewards (`envgym.rewards.toolcalls`, `envgym.rewards.program`) give such calls no credit.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from envgym.world.spec import PolicyRules, TaskSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolResult

# Calls that are no valid call of an existing tool: nothing was proposed that a rule could judge. A call the guard
# held is an attempt (it names a tool and valid arguments), so the rules see it.
_NOT_ATTEMPTED = {"parse_error", "invalid_arguments", "unknown_tool"}
_GUARD_HELD = "guard_denied"

_REQUEST_RE = re.compile(
    r"\b(confirm|proceed|go ahead|shall i|should i|may i|do you want|would you like|"
    r"is that (ok|okay|alright|right|correct)|ok to)\b|\(yes/no\)"
)
# A request to act, as opposed to "can you confirm your email?", which asks for a fact.
_ACTION_REQUEST_RE = re.compile(
    r"\b(proceed|go ahead|shall i|should i|may i|want me to|like me to|ok to|do you confirm|"
    r"confirm (that )?you (still )?(want|would like))\b|\(yes/no\)"
)
_YES_RE = re.compile(
    r"^\W*(yes|yeah|yep|yup|sure|ok|okay|correct|confirmed?|i confirm|go ahead|please do|please go ahead|"
    r"please proceed|do it|proceed|absolutely|of course|sounds good|go for it|that'?s (right|correct|fine))\b|"
    r"\byes\b"
)
_NO_RE = re.compile(r"^\W*(no|nope|don'?t|do not|wait|stop|not yet|cancel that)\b|\b(don'?t|do not) (do|proceed|go)")


def is_confirmation_request(text: str) -> bool:
    """Whether an agent's reply asks the user to confirm something (the rubric's and the scripted user's test)."""
    lowered = text.lower()
    return bool(_REQUEST_RE.search(lowered) or _ACTION_REQUEST_RE.search(lowered))


def is_action_request(text: str) -> bool:
    """Whether an agent's reply asks for the go-ahead to act (stronger than asking to confirm a fact)."""
    return bool(_ACTION_REQUEST_RE.search(text.lower()))


def is_affirmative(text: str) -> bool:
    lowered = text.lower()
    return not _NO_RE.search(lowered) and bool(_YES_RE.search(lowered))


def is_negative(text: str) -> bool:
    return bool(_NO_RE.search(text.lower()))


@dataclass(frozen=True)
class Call:
    """One tool call of the trajectory and what came of it (`value`: its result as the agent saw it)."""

    message_index: int
    name: str
    arguments: dict[str, Any]
    attempted: bool
    ok: bool
    value: Any = None
    held: bool = False  # the guard held it and it did not run


def trajectory_calls(messages: list[dict[str, Any]], results: Sequence[ToolResult]) -> Iterator[Call]:
    """The calls in order, each paired with its result (`results[i]` answers the i-th tool message)."""
    pending: dict[str, dict[str, Any]] = {}
    outcomes = iter(results)
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            pending = {tc["id"]: tc["function"] for tc in message.get("tool_calls") or []}
        elif message.get("role") == "tool":
            result = next(outcomes, None)
            fn = pending.get(str(message.get("tool_call_id")), {})
            try:
                arguments = json.loads(fn.get("arguments") or "{}")
            except (TypeError, json.JSONDecodeError):
                arguments = {}
            attempted = result is not None and result.error_kind not in _NOT_ATTEMPTED
            yield Call(index, str(message.get("name")), arguments if isinstance(arguments, dict) else {},
                       attempted, result is not None and result.ok, result.value if result is not None else None,
                       held=result is not None and result.error_kind == _GUARD_HELD)


def auth_required(rules: PolicyRules, world: WorldSpec) -> set[str]:
    """The tools that need prior authentication (the explicit list, else every tool but the authenticating ones)."""
    if rules.requires_auth is not None:
        return set(rules.requires_auth)
    return {t.name for t in world.tools} - set(rules.authenticate_with)


def write_target(world: WorldSpec, name: str, arguments: dict[str, Any]) -> str:
    """A write as a comparable string: the tool and every argument, values written as text (2 and "2" are one
    value; a record key and the values set on it both count)."""
    del world  # every argument counts, whatever the tool's kind
    return json.dumps([name, {str(k): _as_text(v) for k, v in arguments.items()}], sort_keys=True, default=str)


def _as_text(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float | str):
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            return text
        if not math.isfinite(number):
            return text
        return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)
    if isinstance(value, list):
        return [_as_text(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _as_text(v) for k, v in value.items()}
    return str(value)


def _is_write(world: WorldSpec, name: str) -> bool:
    tool = world.tool(name)
    return tool is not None and not tool.read_only


def _identity_key(rules: PolicyRules, world: WorldSpec, value: Any) -> Any:
    """The authenticated user's key from an authenticating call's result: the key itself or a record holding it."""
    if isinstance(value, dict) and rules.identity is not None:
        return value.get(world.entities[rules.identity].key)
    return value


def _names_only_own_records(
    rules: PolicyRules, world: WorldSpec, state: WorldState | None, arguments: dict[str, Any], who: Any
) -> bool:
    assert rules.identity is not None
    if arguments.get(world.entities[rules.identity].key, who) != who:
        return False
    for entity, owner_field in rules.owner_fields.items():
        key = arguments.get(world.entities[entity].key)
        record = state.get(entity, key) if state is not None and isinstance(key, str) else None
        if record is not None and record.get(owner_field) != who:
            return False
    return True


def authentication_violations(
    rules: PolicyRules, world: WorldSpec, calls: list[Call], state: WorldState | None = None
) -> list[int]:
    """The positions in `calls` of attempted calls that needed authentication and came before it, or named a user
    or record other than the authenticated user's."""
    needs = auth_required(rules, world)
    authenticated, who = False, None
    broken = []
    for i, call in enumerate(calls):
        if call.attempted and call.name in needs:
            foreign = rules.identity is not None and not _names_only_own_records(
                rules, world, state, call.arguments, who)
            if not authenticated or foreign:
                broken.append(i)
        if call.ok and call.name in rules.authenticate_with:
            authenticated, who = True, _identity_key(rules, world, call.value)
    return broken


def check_authentication(
    rules: PolicyRules, world: WorldSpec, calls: list[Call], state: WorldState | None = None
) -> bool:
    return not authentication_violations(rules, world, calls, state)


def confirmation_violations(world: WorldSpec, messages: list[dict[str, Any]], calls: list[Call]) -> list[int]:
    """The positions in `calls` of attempted writes without a standing confirmation."""
    by_message: dict[int, list[int]] = {}
    for i, call in enumerate(calls):
        by_message.setdefault(call.message_index, []).append(i)
    asked = confirmed = False
    broken = []
    for index, message in enumerate(messages):
        role = message.get("role")
        content = str(message.get("content") or "")
        if role == "assistant":
            asked = not message.get("tool_calls") and is_confirmation_request(content)
        elif role == "user":
            if asked and is_affirmative(content):
                confirmed = True
            elif is_negative(content):
                confirmed = False
            asked = False
        elif role == "tool":
            for i in by_message.get(index, []):
                call = calls[i]
                if not (call.attempted and _is_write(world, call.name)):
                    continue
                if not confirmed:
                    broken.append(i)
                elif call.ok:
                    confirmed = False
    return broken


def check_confirmations(world: WorldSpec, messages: list[dict[str, Any]], calls: list[Call]) -> bool:
    return not confirmation_violations(world, messages, calls)


def unrequested_write_violations(world: WorldSpec, task: TaskSpec, calls: list[Call]) -> list[int]:
    """The positions in `calls` of attempted writes that are not one of the reference solution's writes."""
    requested = {write_target(world, c.name, c.arguments) for c in task.solution if _is_write(world, c.name)}
    return [i for i, c in enumerate(calls)
            if c.attempted and _is_write(world, c.name) and write_target(world, c.name, c.arguments) not in requested]


def check_requested_writes(world: WorldSpec, task: TaskSpec, calls: list[Call]) -> bool:
    return not unrequested_write_violations(world, task, calls)


def rule_violations(
    world: WorldSpec,
    task: TaskSpec,
    messages: list[dict[str, Any]],
    results: Sequence[ToolResult],
    state: WorldState | None = None,
) -> dict[str, list[int]]:
    """For each rule `world.rules` declares (the component names of `check_rules`), the positions of the calls that
    broke it, counting tool messages in order (`results[i]` answers the i-th); {} when no rule is declared."""
    rules = world.rules
    if rules is None:
        return {}
    calls = list(trajectory_calls(messages, results))
    violations: dict[str, list[int]] = {}
    if rules.authenticate_with:
        violations["rule_authenticate"] = authentication_violations(rules, world, calls, state)
    if rules.confirm_writes:
        violations["rule_confirm"] = confirmation_violations(world, messages, calls)
    if rules.no_unrequested_writes:
        violations["rule_no_extra_writes"] = unrequested_write_violations(world, task, calls)
    return violations


def rule_breaking_calls(
    world: WorldSpec,
    task: TaskSpec,
    messages: list[dict[str, Any]],
    results: Sequence[ToolResult],
    state: WorldState | None = None,
) -> set[int]:
    """The positions (as in `rule_violations`) of every call that broke a declared rule or that the guard held:
    the calls a shaping reward must not pay for."""
    broken = {i for positions in rule_violations(world, task, messages, results, state).values() for i in positions}
    broken.update(i for i, c in enumerate(trajectory_calls(messages, results)) if c.held)
    return broken


def check_rules(
    world: WorldSpec,
    task: TaskSpec,
    messages: list[dict[str, Any]],
    results: Sequence[ToolResult],
    state: WorldState | None = None,
) -> dict[str, float]:
    """One binary component per declared rule of `world.rules` (none when the world declares no rules); `state`
    is the final state, where record owners are looked up."""
    return {name: float(not broken) for name, broken in rule_violations(world, task, messages, results, state).items()}
