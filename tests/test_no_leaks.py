"""No observation, tool result or info field of oracle, random and attacker runs on any bundled environment holds
a reference solution, a rubric criterion, an assertion or an attack's goal; attack payloads reach the agent only
through tool results of attacked episodes."""

from __future__ import annotations

import json
import re

import pytest

from envgym.env import ToolWorldEnv
from envgym.play.policies import AttackerPolicy, OraclePolicy, Policy, RandomPolicy
from envgym.registry import bundled_dir, env_dirs
from envgym.world.spec import TaskSpec

ENVS = [p.name for p in env_dirs(bundled_dir())]
HIDDEN_INFO_KEYS = {"solution", "rubric", "assertions", "required_outputs", "final_reply", "meta", "target"}


def _secrets(task: TaskSpec) -> list[str]:
    """Texts only the grader may see for `task`."""
    secrets = [json.dumps([c.model_dump() for c in task.solution]), *task.rubric]
    secrets += [json.dumps(a.model_dump(mode="json")) for a in task.assertions]
    secrets += [a.description for a in task.assertions if a.description]
    if len(task.solution) > 1:  # the whole plan at once, in the Hermes form a policy would echo
        secrets.append(json.dumps([{"name": c.name, "arguments": c.arguments} for c in task.solution]))
    return secrets


def _play(env: ToolWorldEnv, policy: Policy, task: TaskSpec, attack: str | None) -> list[tuple[str, str]]:
    """(where, text) for everything the agent was shown: observations, tool results, info fields."""
    shown: list[tuple[str, str]] = []
    obs, info = env.reset(seed=1, options={"task_id": task.id, "attack": attack})
    done = False
    while True:
        shown.append(("observation", obs))
        shown += [(f"message:{m['role']}", str(m.get("content") or "")) for m in info["messages"]]
        leaked = HIDDEN_INFO_KEYS & set(info)
        assert not leaked, f"info exposes {leaked}"
        shown.append(("info", json.dumps({k: v for k, v in info.items() if k != "messages"}, default=str)))
        if done:
            return shown
        obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        done = terminated or truncated


def _attack_goals(env: ToolWorldEnv) -> list[str]:
    suite = env.security.attacks
    return [g.description for g in suite.spec.goals.values()] if suite is not None else []  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ENVS)
def test_benign_runs_show_no_hidden_text(name: str) -> None:
    env = ToolWorldEnv(bundled_dir() / name, max_steps=8)
    goals = _attack_goals(env)
    tasks = env.data.tasks[:: max(1, len(env.data.tasks) // 12)]
    for policy in (OraclePolicy(env.data), RandomPolicy(seed=3)):
        for task in tasks:
            for where, text in _play(env, policy, task, None):
                for secret in [*_secrets(task), *goals]:
                    assert secret not in text, f"{name}/{task.id}: {where} shows {secret[:80]!r}"


def test_attacked_runs_show_payloads_only_in_tool_results_and_never_the_goal() -> None:
    env = ToolWorldEnv(bundled_dir() / "workspace")
    assert env.security.attacks is not None
    goals = _attack_goals(env)
    attacks = env.security.attacks.attack_ids()
    policy = AttackerPolicy(env)
    pairs = [(task, attacks[i % len(attacks)]) for i, task in enumerate(env.data.tasks)]
    pairs += [(env.data.tasks[0], a) for a in attacks]
    for task, attack in pairs:
        payload = env.security.attacks.payload(env.data.initial, attack, task)
        # The longest run without brackets: the guard escapes tags and control tokens in tool results.
        payload_line = max(re.split(r"[\n<>\[\]|]", payload), key=len)
        marker = json.dumps(payload_line, ensure_ascii=False)[1:-1]
        shown = _play(env, policy, task, attack)
        assert any(marker in text for where, text in shown if where == "message:tool"), (task.id, attack)
        for where, text in shown:
            for secret in [*_secrets(task), *goals]:
                assert secret not in text, f"{task.id}/{attack}: {where} shows {secret[:80]!r}"
            if where in ("message:system", "message:user", "info"):
                assert payload_line not in text and marker not in text, f"{task.id}/{attack}: payload in {where}"


def test_the_scan_would_catch_a_leak() -> None:
    task = ToolWorldEnv(bundled_dir() / "retail").data.tasks[0]
    leaky_tool_result = f'{{"note": "{task.rubric[0]}"}}'
    assert any(secret in leaky_tool_result for secret in _secrets(task))
