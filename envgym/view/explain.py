"""Why an episode got its reward: failed components, answer checks, guard verdicts and, by replaying the agent's
turns on a fresh env, the world-state diff against the task's target and the per-call rewards.

The replay is exact because an env is deterministic by seed: the same seed, task, attack and agent turns reach the
same state (the guard's recorded approvals are given back in order). Whether it was exact is checked, not assumed:
the replayed conversation must equal the recorded one, and where it does not (an LLM user, a changed environment)
`replay_note` says so and no diff is shown.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from envgym.env import ToolWorldEnv
from envgym.guard.core import Verdict
from envgym.loader import EnvironmentData
from envgym.play.eval import failure_label
from envgym.rewards.answers import check_answers
from envgym.rewards.rules import rule_violations
from envgym.view.records import EpisodeRecord

COMPONENT_MEANING = {
    "state": "the final world state is not the one the task's reference solution reaches",
    "assertions": "an assertion of the task does not hold on the final state",
    "answers": "an answer the task asks for was not said, or was guessed among other values",
    "outputs": "a required output was not said to the user",
    "rule_authenticate": "a tool acted for a user before that user was authenticated, or for another user",
    "rule_confirm": "a write was attempted without the user's yes to it first",
    "rule_no_extra_writes": "a write the reference solution does not make was attempted",
}
"""What a failed reward component means (envgym.rewards.rubric and envgym.rewards.rules), for people."""

_REFUSAL = re.compile(r"guard: (?P<tool>\S+) was not run \((?P<who>[^)]*)\)\. It needs confirmation because "
                      r"(?P<reasons>.*?)\. Untrusted data")


@dataclass
class Explanation:
    """What the viewers show beside the conversation; every list is empty where nothing applies."""

    failure: str | None  # the eval failure label of a failed episode (envgym.play.eval.FAILURE_LABELS)
    failed_components: list[str]
    answers: list[dict[str, Any]]  # per answer type: expected, missing, wrong_choices, extra, ok
    guard: list[dict[str, Any]]  # per held call: tool, approved, reasons, message index of its result if denied
    diff: list[dict[str, Any]]  # final state against the target: entity, key, kind, field, episode, target
    violations: dict[str, list[int]]  # rule component -> indices (in messages) of the tool results that broke it
    tool_call_rewards: list[dict[str, Any]]
    state_hash: str | None = None
    replayed_reward: float | None = None
    replay_note: str | None = None  # why there is no diff (None: the replay matched the record)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


_WHO_REFUSED = re.compile(r"(guard: \S+ was not run) \([^)]*\)")


def _turn_key(message: dict[str, Any]) -> tuple[Any, ...]:
    """What must be equal between a recorded and a replayed message. A refusal's "(who refused)" is left out: the
    replay gives the recorded decisions back through a callback, whose refusal names no user."""
    calls = tuple((c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
                  for c in message.get("tool_calls") or [])
    return message.get("role"), _WHO_REFUSED.sub(r"\1", message.get("content") or ""), calls


def guard_refusals(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls the guard refused, read from their tool results (the refusal text names the reasons)."""
    found = []
    for index, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        match = _REFUSAL.search(str(message.get("content") or ""))
        if match:
            found.append({"tool": match["tool"], "approved": False, "reasons": match["reasons"].split("; "),
                          "message": index})
    return found


def answer_checks(data: EnvironmentData, record: EpisodeRecord) -> list[dict[str, Any]]:
    """The task's answers per type: what was expected, what is missing and what was offered beyond it."""
    task = data.task(record.task_id)
    return [{"type": v.type, "expected": sorted(v.expected), "missing": sorted(v.missing),
             "wrong_choices": sorted(v.wrong_choices), "extra": sorted(v.extra), "ok": v.ok}
            for v in check_answers(task.answers, record.messages)]


def explain(record: EpisodeRecord, data: EnvironmentData | None) -> Explanation:
    """Explain `record`; `data` is its environment (None: unknown here, so no replay and no answer checks)."""
    failed = sorted(k for k, v in record.components.items() if v < 1.0)
    failure = None if record.success else failure_label(record.messages, record.tool_errors, record.truncated)
    result = Explanation(failure=failure, failed_components=failed, answers=[], guard=guard_refusals(record.messages),
                         diff=[], violations={}, tool_call_rewards=[])
    if data is None:
        result.replay_note = f"environment {record.env!r} is not registered here, so the episode was not replayed"
        return result
    try:
        result.answers = answer_checks(data, record)
    except KeyError as exc:  # UnknownTaskError
        result.replay_note = str(exc.args[0] if exc.args else exc)
        return result
    _replay(record, data, result)
    return result


def _replay(record: EpisodeRecord, data: EnvironmentData, result: Explanation) -> None:
    turns = [m for m in record.messages if m.get("role") == "assistant"]
    approvals = iter(record.guard or [])
    held: list[dict[str, Any]] = []

    def confirm(verdict: Verdict) -> bool:
        decision = next(approvals, None)
        approved = bool(decision and decision.get("approved"))
        held.append({"tool": verdict.tool, "approved": approved, "reasons": list(verdict.reasons), "message": None})
        return approved

    # The recorded approvals are replayed; a producer that kept none ran with the world's own confirmation mode.
    env = ToolWorldEnv(data=data, max_steps=max(len(turns), 1), failure_rate=record.failure_rate,
                       confirm=confirm if record.guard is not None else None)
    try:
        env.reset(seed=record.seed, options={"task_id": record.task_id, "attack": record.attack})
        info: dict[str, Any] = {}
        reward: Any = 0.0
        for turn in turns:
            before = len(env.messages)  # the index the turn gets: where its held calls are shown
            _, reward, terminated, truncated, info = env.step({k: v for k, v in turn.items() if k != "role"})
            for h in held:
                if h["message"] is None:
                    h["message"] = before
            if (terminated or truncated) and turn is not turns[-1]:
                break
        if [_turn_key(m) for m in env.messages] != [_turn_key(m) for m in record.messages]:
            result.replay_note = ("replaying the agent's turns gave another conversation (an LLM user, another seed "
                                  "or a changed environment), so no state diff is shown")
            return
        assert env.state is not None and env.task is not None
        target = env.security.target_state(env.task)
        result.diff = [{"entity": c.entity, "key": c.key, "field": c.field,
                        "kind": {"added": "missing", "removed": "extra", "changed": "differs"}[c.kind],
                        "episode": _jsonable(c.before), "target": _jsonable(c.after)}
                       for c in env.state.diff(target)]
        tool_indices = [i for i, m in enumerate(env.messages) if m.get("role") == "tool"]
        broken = rule_violations(data.world, env.task, env.messages, env.tool_results, env.state)
        result.violations = {rule: [tool_indices[p] for p in positions if p < len(tool_indices)]
                             for rule, positions in broken.items() if positions}
        result.tool_call_rewards = list(info.get("tool_call_rewards") or [])
        result.state_hash = info.get("state_hash")
        result.replayed_reward = float(reward)
        components = info.get("reward_components") or {}
        if components and record.components and components != record.components:
            result.notes.append(f"the replay graded {components}, the record says {record.components}")
        if record.guard is not None:
            result.guard = held
    finally:
        env.close()
