"""The one episode loop and the one trajectory record, used by the runner, eval, the trainer and synth rollouts.

`EpisodeRun` is the loop's body: it resets the env, takes one action per `step` and keeps the `Trajectory` up to
date; `run_episode` drives it with a policy. Callers that choose actions themselves (the trainer's lockstep groups)
drive `EpisodeRun` directly. Any object with Gymnasium's `reset`/`step` and the `info` contract of `envgym.env`
works (a `gym.make` env, a RemoteEnv).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envgym.play.policies import Policy


@dataclass
class Trajectory:
    """One episode: the whole conversation, the tools, the reward and its components, and what happened on the
    way. `run` is the episode's index among repeats of the same task; `guard` lists the calls the guard held."""

    env_name: str
    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    terminated: bool = False
    truncated: bool = False
    wall_s: float = 0.0
    tokens: int = 0
    tool_calls: int = 0
    tool_errors: list[str] = field(default_factory=list)
    tool_calls_needed: int = 0  # calls the env labelled needed at the end (envgym.rewards.toolcalls)
    tool_calls_credited: int = 0  # of those, the calls that earn shaping credit (deduplicated, bounded, no rule broken)
    broke_rule_calls: list[int] = field(default_factory=list)  # positions of the calls that broke a rule or were held
    answer_reported: bool | None = None  # the final reply stated a value a tool returned (None: the task asks none)
    seed: int | None = None
    run: int = 0
    attack: str | None = None
    attack_reached: bool | None = None
    guard: list[dict[str, Any]] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.reward >= 1.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, default=str)


class EpisodeRun:
    """One episode in progress: constructed by resetting `env`, advanced by `step(action)` until `done`.

    `obs` and `info` are what the env last returned; `trajectory` (of type `record`, which may extend
    `Trajectory`) is complete once `done`.
    """

    def __init__(self, env: Any, *, seed: int | None = None, options: dict[str, Any] | None = None, run: int = 0,
                 record: type[Trajectory] = Trajectory):
        self.env = env
        self._started = time.perf_counter()
        self.obs, self.info = env.reset(seed=seed, options=options)
        self._seen = len(self.info["messages"])
        self.trajectory = record(self.info["env_name"], self.info["task_id"], list(self.info["messages"]),
                                 self.info["tools"], seed=seed, run=run)
        self.done = False

    def step(self, action: Any) -> list[dict[str, Any]]:
        """Take one action; returns the messages the env answered with (tool results or the user's reply)."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.obs, self.info = obs, info
        messages = info["messages"]
        answer = messages[self._seen + 1:]  # after the agent's own message
        self._seen = len(messages)
        t = self.trajectory
        t.steps += 1
        t.reward, t.terminated, t.truncated = float(reward), bool(terminated), bool(truncated)
        t.messages = list(messages)
        t.tool_calls += sum(1 for m in answer if m.get("role") == "tool")
        t.tool_errors.extend(info.get("tool_errors") or [])
        if terminated or truncated:
            self._finish(info)
        return answer

    def stop(self) -> None:
        """End the episode before the env did (the caller's turn or token budget ran out): truncated, reward 0,
        since the env never graded it."""
        self.trajectory.reward, self.trajectory.truncated = 0.0, True
        self._finish({})

    def _finish(self, info: dict[str, Any]) -> None:
        t = self.trajectory
        t.reward_components = info.get("reward_components", {})
        labels = info.get("tool_call_rewards") or ()
        t.tool_calls_needed = sum(bool(r.get("needed")) for r in labels)
        t.tool_calls_credited = sum(bool(r.get("credited")) for r in labels)
        t.broke_rule_calls = [i for i, r in enumerate(labels) if r.get("broke_rule")]
        t.answer_reported = info.get("answer_reported")
        t.guard = list(info.get("guard", []))
        if "attack" in info:
            t.attack, t.attack_reached = info["attack"]["id"], info["attack"]["goal_reached"]
        t.wall_s = time.perf_counter() - self._started
        self.done = True


def run_episode(env: Any, policy: Policy, *, seed: int | None = None, options: dict[str, Any] | None = None,
                run: int = 0) -> Trajectory:
    """Play one episode to its end with `policy` and return its trajectory."""
    tokens_before = int(getattr(policy, "tokens", 0))
    episode = EpisodeRun(env, seed=seed, options=options, run=run)
    while not episode.done:
        episode.step(policy.act(episode.obs, episode.info))
    episode.trajectory.tokens = int(getattr(policy, "tokens", 0)) - tokens_before
    return episode.trajectory


def run_episodes(env: Any, policy: Policy, episodes: int, *, seed: int = 0, task_ids: Sequence[str] | None = None,
                 out: str | Path | None = None,
                 on_episode: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
    """Run `episodes` episodes (over `task_ids` in turn when given), appending each trajectory to `out` as JSONL;
    `on_episode` sees each one as it ends (the CLI's progress bar)."""
    results: list[Trajectory] = []
    sink = Path(out).open("a") if out else None  # noqa: SIM115 (closed in finally; optional)
    try:
        for i in range(episodes):
            options = {"task_id": task_ids[i % len(task_ids)]} if task_ids else None
            trajectory = run_episode(env, policy, seed=seed + i, options=options)
            results.append(trajectory)
            if sink:
                sink.write(trajectory.to_json() + "\n")
                sink.flush()
            if on_episode is not None:
                on_episode(trajectory)
    finally:
        if sink:
            sink.close()
    return results
