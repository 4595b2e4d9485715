"""Evaluation: pass@k and pass^k, benign utility, utility under attack, attack success, cost and failure labels.

`evaluate` plays every task `runs` times (and every (task, attack) pair `attack_runs` times) and returns an
`EvalReport`; `EvalReport.write` saves report.md, results.json and chart.png. Rates are reported as
numerator/denominator. With `envgym.play.policies.AttackerPolicy`, the scripted agent that always obeys injected
instructions, attack success measures the guard and not the model.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envgym.env import ToolWorldEnv
from envgym.play.episode import Trajectory, run_episode
from envgym.play.policies import Policy
from envgym.rewards.combine import RewardSource
from envgym.world.tools import ToolErrorKind

FAILURE_LABELS = ("guard_blocked", "hallucinated_tool", "invalid_arguments", "loop", "max_steps", "gave_up",
                  "wrong_tool")
LOOP_REPEATS = 3


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that at least one of k trials drawn from n (c successes) succeeds: 1 - C(n-c,k)/C(n,k)."""
    _check_nck(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that all k trials drawn from n (c successes) succeed (tau-bench's pass^k): C(c,k)/C(n,k)."""
    _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_nck(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


def mean_over_tasks(successes: dict[str, list[bool]], k: int, estimator: Callable[[int, int, int], float]) -> float:
    """An estimator averaged over tasks, each with its own n trials and c successes (as tau-bench averages)."""
    if not successes:
        return 0.0
    return statistics.fmean(estimator(len(runs), sum(runs), k) for runs in successes.values())


def failure_label(messages: list[dict[str, Any]], tool_errors: Sequence[str], truncated: bool) -> str:
    """Why a failed episode failed, the first that applies in the order of FAILURE_LABELS."""
    kinds = set(tool_errors)
    if ToolErrorKind.GUARD_DENIED in kinds:
        return "guard_blocked"
    if ToolErrorKind.UNKNOWN_TOOL in kinds:
        return "hallucinated_tool"
    if kinds & {ToolErrorKind.INVALID_ARGUMENTS, ToolErrorKind.PARSE_ERROR}:
        return "invalid_arguments"
    calls = Counter(
        json.dumps(tc.get("function", tc), sort_keys=True, default=str)
        for m in messages if m.get("role") == "assistant" for tc in m.get("tool_calls") or []
    )
    if calls and max(calls.values()) >= LOOP_REPEATS:
        return "loop"
    if truncated:
        return "max_steps"
    if not calls:
        return "gave_up"
    return "wrong_tool"


def failure_of(t: Trajectory) -> str | None:
    """The failure label of an episode (None when it succeeded)."""
    return None if t.success else failure_label(t.messages, t.tool_errors, t.truncated)


def episode_row(t: Trajectory) -> dict[str, Any]:
    """One evaluated episode as results.json lists it."""
    return {"task_id": t.task_id, "attack": t.attack, "run": t.run, "success": t.success, "reward": t.reward,
            "steps": t.steps, "tokens": t.tokens, "wall_s": t.wall_s, "attack_reached": t.attack_reached,
            "guard_held": len(t.guard), "guard_approved": sum(1 for h in t.guard if h["approved"]),
            "failure": failure_of(t)}


PolicyFactory = Callable[[ToolWorldEnv], Policy]


@dataclass
class EvalReport:
    """All episodes of one evaluation and the settings they ran under."""

    env: str
    policy: str
    runs: int
    guard: bool
    confirm: str
    episodes: list[Trajectory] = field(default_factory=list)
    reward_source: str = "env"
    rewards: list[float] = field(default_factory=list)  # per episode, from the reward source

    def score(self, source: RewardSource) -> None:
        """Score every episode with `source`, one group per (task, attack): the rewards training would see."""
        groups: dict[tuple[str, str | None], list[int]] = defaultdict(list)
        for i, e in enumerate(self.episodes):
            groups[(e.task_id, e.attack)].append(i)
        self.rewards = [e.reward for e in self.episodes]
        for indices in groups.values():
            for i, value in zip(indices, source.score([self.episodes[i] for i in indices]), strict=True):
                self.rewards[i] = value
        self.reward_source = source.name

    def _benign(self) -> list[Trajectory]:
        return [e for e in self.episodes if e.attack is None]

    def _attacked(self) -> list[Trajectory]:
        return [e for e in self.episodes if e.attack is not None]

    def reliability(self) -> list[dict[str, float]]:
        """pass@k and pass^k for k = 1..runs over the benign episodes, averaged over tasks."""
        per_task: dict[str, list[bool]] = defaultdict(list)
        for e in self._benign():
            per_task[e.task_id].append(e.success)
        if not per_task:
            return []
        n = min(len(v) for v in per_task.values())
        return [{"k": k, "pass@k": mean_over_tasks(per_task, k, pass_at_k),
                 "pass^k": mean_over_tasks(per_task, k, pass_hat_k)} for k in range(1, n + 1)]

    def summary(self) -> dict[str, Any]:
        """The headline numbers (rates as numerator/denominator), JSON-serialisable."""
        benign, attacked = self._benign(), self._attacked()
        rows = self.reliability()
        held = [h for e in self.episodes for h in e.guard]

        def rate(num: int, den: int) -> dict[str, Any]:
            return {"num": num, "den": den, "rate": num / den if den else None}

        def median(values: list[float]) -> float | None:
            return statistics.median(values) if values else None

        return {
            "env": self.env, "policy": self.policy, "runs": self.runs, "guard": self.guard, "confirm": self.confirm,
            "episodes": len(self.episodes), "tasks": len({e.task_id for e in benign}),
            "reward_source": self.reward_source,
            "reward_mean": statistics.fmean(self.rewards or [e.reward for e in self.episodes])
            if self.episodes else None,
            "pass@1": rows[0]["pass@k"] if rows else None,
            "pass@k": {str(r["k"]): r["pass@k"] for r in rows},
            "pass^k": {str(r["k"]): r["pass^k"] for r in rows},
            "benign_utility": rate(sum(e.success for e in benign), len(benign)),
            "utility_under_attack": rate(sum(e.success for e in attacked), len(attacked)),
            "targeted_asr": rate(sum(bool(e.attack_reached) for e in attacked), len(attacked)),
            "guard_held": len(held),
            "guard_approved": sum(1 for h in held if h["approved"]),
            "median_steps": median([e.steps for e in self.episodes]),
            "median_tokens": median([e.tokens for e in self.episodes]),
            "median_wall_s": median([e.wall_s for e in self.episodes]),
            "failures": dict(Counter(f for f in map(failure_of, benign) if f)),
            "failures_under_attack": dict(Counter(f for f in map(failure_of, attacked) if f)),
        }

    def attack_breakdown(self) -> dict[str, dict[str, dict[str, int]]]:
        """Attack success per goal and per template: {"goal"|"template": {name: {"num", "den"}}}."""
        table: dict[str, dict[str, dict[str, int]]] = {"goal": {}, "template": {}}
        for e in self._attacked():
            assert e.attack is not None
            goal, _, template = e.attack.partition("/")
            for axis, name in (("goal", goal), ("template", template)):
                cell = table[axis].setdefault(name, {"num": 0, "den": 0})
                cell["num"] += int(bool(e.attack_reached))
                cell["den"] += 1
        return table

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write report.md, results.json and chart.png into `out_dir`; returns their paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"report": out / "report.md", "results": out / "results.json", "chart": out / "chart.png"}
        paths["results"].write_text(json.dumps(
            {"summary": self.summary(), "reliability": self.reliability(), "attacks": self.attack_breakdown(),
             "episodes": [episode_row(e) for e in self.episodes]}, indent=1, default=str))
        paths["report"].write_text(self.markdown())
        self.chart(paths["chart"])
        return paths

    def markdown(self) -> str:
        s = self.summary()

        def frac(r: dict[str, Any]) -> str:
            return f"{r['num']}/{r['den']} ({r['rate']:.1%})" if r["den"] else "n/a"

        def num(v: float | None, fmt: str = ".2f") -> str:
            return "n/a" if v is None else format(v, fmt)

        lines = [
            f"# Evaluation: {self.env} with policy {self.policy}", "",
            f"Guard {f'on, confirmation `{self.confirm}`' if self.guard else 'off'}, {self.runs} runs per task, "
            f"{s['episodes']} episodes over {s['tasks']} tasks.", "",
            "## Reliability (benign episodes)", "", "| k | pass@k | pass^k |", "|---|---|---|",
            *(f"| {r['k']} | {r['pass@k']:.3f} | {r['pass^k']:.3f} |" for r in self.reliability()), "",
            "## Security", "", "| metric | value |", "|---|---|",
            f"| benign utility | {frac(s['benign_utility'])} |",
            f"| utility under attack | {frac(s['utility_under_attack'])} |",
            f"| targeted attack success | {frac(s['targeted_asr'])} |",
            f"| calls held by the guard | {s['guard_held']} ({s['guard_approved']} confirmed) |", "",
            "## Cost per episode (median)", "", "| steps | tokens | wall time (s) |", "|---|---|---|",
            f"| {num(s['median_steps'], '.1f')} | {num(s['median_tokens'], '.0f')} | {num(s['median_wall_s'], '.4f')} |",
            "", "## Failures", "", "| label | benign | under attack |", "|---|---|---|",
            *(f"| {label} | {s['failures'].get(label, 0)} | {s['failures_under_attack'].get(label, 0)} |"
              for label in FAILURE_LABELS),
        ]
        breakdown = self.attack_breakdown()
        for axis in ("goal", "template"):
            if breakdown[axis]:
                lines += ["", f"## Attack success by {axis}", "", f"| {axis} | successful / pairs |", "|---|---|",
                          *(f"| {name} | {c['num']}/{c['den']} |" for name, c in sorted(breakdown[axis].items()))]
        return "\n".join(lines) + "\n"

    def chart(self, path: Path) -> None:
        """pass@k and pass^k against k, and the three security rates, in one PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        s, rows = self.summary(), self.reliability()
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        ks = [r["k"] for r in rows]
        left.plot(ks, [r["pass@k"] for r in rows], marker="o", label="pass@k")
        left.plot(ks, [r["pass^k"] for r in rows], marker="s", label="pass^k")
        left.set(xlabel="k", ylabel="rate", ylim=(0, 1.05), title=f"{self.env}: {self.policy}")
        left.set_xticks(ks or [1])
        left.legend()
        names = ["benign utility", "utility under attack", "attack success"]
        rates = [s[k]["rate"] or 0.0 for k in ("benign_utility", "utility_under_attack", "targeted_asr")]
        right.bar(names, rates, color=["tab:green", "tab:blue", "tab:red"])
        right.set(ylim=(0, 1.05), title=f"guard on ({self.confirm})" if self.guard else "guard off")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def evaluate(env: ToolWorldEnv, make_policy: PolicyFactory, policy_name: str, *, runs: int = 1,
             tasks: list[str] | None = None, attacks: list[str] | None = None, attack_runs: int = 1,
             seed: int = 0, reward_source: RewardSource | None = None,
             on_episode: Callable[[Trajectory], None] | None = None) -> EvalReport:
    """Play each task `runs` times, then each (task, attack) pair `attack_runs` times, on one env; score them with
    `reward_source` when given (as the trainer would); `on_episode` sees each episode as it ends (the CLI's bar)."""
    task_ids = tasks or [t.id for t in env.data.tasks]
    guard = env.security.guard is not None
    confirm = env.security.confirm_mode if isinstance(env.security.confirm_mode, str) else "callback"
    report = EvalReport(env.data.name, policy_name, runs, guard, confirm)
    jobs: list[tuple[str, str | None, int]] = [(t, None, r) for t in task_ids for r in range(runs)]
    jobs += [(t, a, r) for t in task_ids for a in attacks or [] for r in range(attack_runs)]
    policy = make_policy(env)
    for i, (task_id, attack, run) in enumerate(jobs):
        episode = run_episode(env, policy, seed=seed + i, options={"task_id": task_id, "attack": attack}, run=run)
        report.episodes.append(episode)
        if on_episode is not None:
            on_episode(episode)
    if reward_source is not None:
        report.score(reward_source)
    return report
