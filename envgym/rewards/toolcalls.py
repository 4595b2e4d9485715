"""Per-tool-call rewards: each call labelled valid or error, needed, redundant, with a small shaping scalar.

The env records every tool call it executes (`ToolCallRecord`, in the order the calls appear in the
conversation) and `score_tool_calls` labels them:

- valid: the call executed (`ok`); error: it did not (unknown tool, bad arguments, failed precondition).
- needed: a valid call whose result was used (a value first seen in it appears in a later assistant message or
  a later tool call's arguments) or that moved the world state closer to the task's target.
- redundant: the same tool with the same arguments as an earlier call, with no state change in between, so it
  could not have told the agent anything new or done anything new.
- credited: a needed call that earns the shaping credit. Calls are deduplicated first (identical calls, in one
  turn or across turns, earn once), a call that broke a policy rule or was held by the guard earns nothing
  (`excluded`), and at most as many calls of each tool earn as the task's reference solution makes (`reference`).
  So the credit of an episode is bounded by its reference solution, however many calls the agent makes; the
  reward it adds is bounded below a success by `envgym.rewards.credit`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from envgym.protocol import ParsedCall
from envgym.world.errors import ReplayError
from envgym.world.state import WorldState
from envgym.world.tools import ToolResult

# Result values this short or this common would "appear" in almost any later message by chance.
_MIN_VALUE_CHARS = 3
_COMMON_VALUES = frozenset({"true", "false", "null", "none", "yes", "the", "and", "not", "error", "ok"})
_TEXT_VALUE_RE = re.compile(r"[\w@.+-]*\d[\w@.+-]*|[\w.+-]+@[\w.-]+")


class ToolCallMismatchError(ValueError):
    """The records given to `score_tool_calls` do not match the tool calls in the conversation."""


@dataclass(slots=True)  # not frozen: the log builds one per call when scored, and a frozen __init__ costs more
class ToolCallRecord:
    """One executed tool call as the env saw it.

    `distance_before`/`distance_after`: the number of records differing from the task's target state before
    and after the call; None when the env did not compute it.
    """

    step: int
    name: str
    arguments: dict[str, Any]
    ok: bool
    error: str | None
    result: str
    state_changed: bool
    distance_before: int | None
    distance_after: int | None


@dataclass(frozen=True)
class ToolCallWeights:
    """Shaping reward per label; a call's reward is the sum of the weights of its labels."""

    valid: float = 0.0
    error: float = -0.1
    needed: float = 0.1
    redundant: float = -0.1


@dataclass(frozen=True)
class ToolCallReward:
    """The labels of one call and its shaping reward; `as_info` is the JSON form put in the env's `info`."""

    step: int
    name: str
    valid: bool
    needed: bool
    redundant: bool
    reward: float
    credited: bool = False
    broke_rule: bool = False

    @property
    def error(self) -> bool:
        return not self.valid

    def as_info(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "name": self.name,
            "valid": self.valid,
            "error": self.error,
            "needed": self.needed,
            "redundant": self.redundant,
            "credited": self.credited,
            "broke_rule": self.broke_rule,
            "reward": self.reward,
        }


def state_distance(state: WorldState, target: WorldState) -> int:
    """The number of records (entity, key) that differ between `state` and the task's `target` state."""
    return len({(change.entity, change.key) for change in state.diff(target)})


class ToolCallLog:
    """One episode's tool calls as `score_tool_calls` needs them, kept by the env as the calls run.

    The state is compared with the target only around calls of write tools (`before` then `record`): hashing and
    diffing on every read would dominate a step. `target` gives the episode's target state; when it cannot be
    computed (the reference solution fails to replay) distances stay unknown and no call counts as progress.
    """

    def __init__(self, write_tools: frozenset[str], target: Callable[[], WorldState]):
        self.write_tools = write_tools
        self.target = target
        # ToolCallRecord fields as plain tuples of strings, numbers and None, the call's arguments kept beside
        # them: the cycle collector stops watching such a tuple at its first pass, while it traverses a record
        # object, or a tuple holding any dict, in each of its collections (the full ones walk the whole heap).
        self._rows: list[tuple[Any, ...]] = []
        self._arguments: list[dict[str, Any]] = []
        self._seen: set[tuple[str, str]] = set()  # calls made since the state last changed
        self._distance: int | None = None  # records differing from the target, known after the first write

    @property
    def records(self) -> list[ToolCallRecord]:
        """The calls logged so far, in order."""
        return [ToolCallRecord(step, name, arguments, *rest)
                for (step, name, *rest), arguments in zip(self._rows, self._arguments, strict=True)]

    def before(self, call: ParsedCall, state: WorldState) -> str | None:
        """The state's hash before a call of a write tool (None for any other call)."""
        if call.name not in self.write_tools:
            return None
        if self._distance is None:
            self._distance = self._measure(state)
        return state.hash()

    def record(self, step: int, call: ParsedCall, result: ToolResult, content: str, state: WorldState,
               before_hash: str | None) -> dict[str, Any]:
        """Log one call; returns its per-step label for `info["tool_calls"]`."""
        before = self._distance
        changed = before_hash is not None and state.hash() != before_hash
        if changed:
            self._distance = self._measure(state)
            self._seen.clear()
        self._rows.append((
            step, call.name, result.ok, result.error, content, changed, before if before_hash else None,
            self._distance if before_hash else None,
        ))
        self._arguments.append(call.arguments if isinstance(call.arguments, dict) else {})
        key = (call.name, call.raw_arguments)
        label = {"name": call.name, "valid": result.ok, "error": result.error_kind, "redundant": key in self._seen}
        self._seen.add(key)
        return label

    def _measure(self, state: WorldState) -> int | None:
        try:
            return state_distance(state, self.target())
        except ReplayError:
            return None


def leaves(value: Any) -> Iterator[Any]:
    """The scalars inside nested dicts and lists, depth first."""
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def result_values(result: str) -> set[str]:
    """The values of a tool result that would show the agent used it.

    A JSON result gives its string and number leaves; a plain-text result gives its identifier-like words
    (containing a digit, or e-mail addresses). Values shorter than 3 characters and common words are left out.
    """
    try:
        parsed = json.loads(result)
    except (json.JSONDecodeError, TypeError):
        candidates = _TEXT_VALUE_RE.findall(result)
    else:
        candidates = [
            str(v) for v in leaves(parsed) if isinstance(v, str | int | float) and not isinstance(v, bool)
        ]
    # Sentence punctuation sticks to words in plain text ("order O1001."); it is not part of the value.
    cleaned = {c.strip().strip(".,;:") for c in candidates}
    return {c for c in cleaned if len(c) >= _MIN_VALUE_CHARS and c.lower() not in _COMMON_VALUES}


def _contains_value(text: str, value: str) -> bool:
    # The substring test first: most values are absent, and each distinct value is a regex to compile.
    return value in text and re.search(rf"(?<![\w.]){re.escape(value)}(?![\w])", text) is not None


def _call_positions(messages: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
    """(message index, tool name) of every tool call in the assistant messages, in order."""
    positions = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            positions.append((index, str(fn.get("name", ""))))
    return positions


def _message_text(message: dict[str, Any]) -> str:
    """The content of a message and the arguments of its tool calls."""
    parts = [message.get("content") or ""]
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        arguments = fn.get("arguments", "")
        parts.append(arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False))
    return "\n".join(str(p) for p in parts)


def _canonical(record: ToolCallRecord) -> str:
    return json.dumps([record.name, record.arguments], sort_keys=True, default=str)


def score_tool_calls(
    records: list[ToolCallRecord],
    messages: list[dict[str, Any]],
    weights: ToolCallWeights = ToolCallWeights(),
    *,
    reference: Sequence[str] | None = None,
    excluded: Collection[int] = (),
) -> list[ToolCallReward]:
    """Label every call in `records` (see the module docstring) and give each its shaping reward: the `needed`
    weight goes to credited calls only.

    `reference` is the tool names of the task's reference solution, one per call (None: no bound per tool);
    `excluded` the positions of calls that broke a rule (`envgym.rewards.rules.rule_breaking_calls`).
    `records[i]` must be the i-th entry of `tool_calls` across the assistant messages of `messages`; a count
    or name mismatch raises ValueError naming the first call that does not match.
    """
    positions = _call_positions(messages)
    if len(positions) != len(records):
        raise ToolCallMismatchError(
            f"score_tool_calls: {len(records)} records but {len(positions)} tool calls in the messages; "
            "expected one record per tool call, in order"
        )
    for i, (record, (_, name)) in enumerate(zip(records, positions, strict=True)):
        if record.name != name:
            raise ToolCallMismatchError(f"score_tool_calls: record {i} is {record.name!r} but tool call {i} is {name!r}")
    texts = [_message_text(m) for m in messages]
    slots = Counter(reference) if reference is not None else None
    paid: set[str] = set()
    rewards = []
    for i, record in enumerate(records):
        needed = record.ok and (
            _moved_toward_target(record) or _result_used(record, positions[i][0], messages, texts)
        )
        redundant = _repeats_without_change(records, i)
        broke = i in excluded
        credited = needed and not broke and _canonical(record) not in paid
        if credited and slots is not None:
            credited = slots[record.name] > 0
            slots[record.name] -= int(credited)
        if credited:
            paid.add(_canonical(record))
        reward = (weights.valid if record.ok else weights.error) + (weights.needed if credited else 0.0)
        reward += weights.redundant if redundant else 0.0
        rewards.append(ToolCallReward(record.step, record.name, record.ok, needed, redundant, reward, credited, broke))
    return rewards


def _moved_toward_target(record: ToolCallRecord) -> bool:
    if record.distance_before is None or record.distance_after is None:
        return False
    return record.distance_after < record.distance_before


def _result_used(
    record: ToolCallRecord, call_index: int, messages: Sequence[dict[str, Any]], texts: Sequence[str]
) -> bool:
    """Whether a value first seen in the result appears in an assistant message after the call.

    Values already in the conversation up to the call (the user's words, the call's own arguments) do not
    count: repeating them later shows nothing about the result.
    """
    known = "\n".join(texts[: call_index + 1])
    values = {v for v in result_values(record.result) if not _contains_value(known, v)}
    if not values:
        return False
    later = "\n".join(
        text
        for index, text in enumerate(texts)
        if index > call_index and messages[index].get("role") == "assistant"
    )
    return any(_contains_value(later, v) for v in values)


def _repeats_without_change(records: Sequence[ToolCallRecord], i: int) -> bool:
    """Whether call i repeats an earlier identical call with no state change by the calls in between."""
    key = _canonical(records[i])
    for j in range(i - 1, -1, -1):
        if _canonical(records[j]) == key:
            return True
        if records[j].state_changed:
            return False
    return False


def shaping_reward(rewards: Sequence[ToolCallReward]) -> float:
    """The episode's total per-call shaping reward."""
    return sum(r.reward for r in rewards)
