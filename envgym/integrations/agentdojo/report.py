"""The AgentDojo results as Markdown (a per-suite table and every refused ground truth with its reasons) and PNG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envgym.integrations.agentdojo.evaluate import BENCHMARK_VERSION, SuiteResult


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def markdown(results: Sequence[SuiteResult], command: str, base: str) -> str:
    """The report: how it was made, the table, the attacks a tool guard cannot reach, and each refusal."""
    lines = [
        f"# envgym's guard inside AgentDojo ({BENCHMARK_VERSION}), without a model",
        "",
        f"Made by `{command}` (with the AgentDojo venv's Python, ~/.cache/envgym/agentdojo/bin/python) on {base}. "
        "Deterministic: no model, no sampling.",
        "",
        "- **Utility**: the user task's ground truth, played call by call through the guard (`deny` mode: a held "
        "call is refused), passes AgentDojo's own utility check. *AgentDojo* is its `GroundTruthPipeline` with no "
        "defense.",
        "- **Attack success**: every (user task, injection task) pair; the injection vectors the user task reads "
        "hold AgentDojo's `important_instructions` payload, and an always-obey agent issues the injection task's "
        "ground-truth calls right after the first result that carries it, then finishes the user's task. Success is "
        "AgentDojo's security check; where it reads the trace of calls it gets the calls that ran (a refused call "
        "changed nothing). In every counted pair the agent met the payload and issued the attacker's calls, "
        "unless a line below says otherwise.",
        "",
        "| suite | user tasks | utility, AgentDojo (no defense) | utility, guard off | utility, guard on | "
        "attack success, guard off | attack success, guard on | utility under attack, guard on |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.suite} | {r.user_tasks} | {_pct(r.utility_agentdojo, r.user_tasks)} | "
            f"{_pct(r.utility_guard_off, r.user_tasks)} | {_pct(r.utility_guard_on, r.user_tasks)} | "
            f"{_pct(r.attacks_guard_off, r.pairs)} | {_pct(r.attacks_guard_on, r.pairs)} | "
            f"{_pct(r.utility_under_attack_on, r.pairs)} |")
    total = SuiteResult("all", sum(r.user_tasks for r in results), sum(r.injection_tasks for r in results))
    for name in ("utility_agentdojo", "utility_guard_off", "utility_guard_on", "pairs", "attacks_guard_off",
                 "attacks_guard_on", "utility_under_attack_on"):
        setattr(total, name, sum(getattr(r, name) for r in results))
    if len(results) > 1:
        lines.append(
            f"| **all** | {total.user_tasks} | {_pct(total.utility_agentdojo, total.user_tasks)} | "
            f"{_pct(total.utility_guard_off, total.user_tasks)} | {_pct(total.utility_guard_on, total.user_tasks)} | "
            f"{_pct(total.attacks_guard_off, total.pairs)} | {_pct(total.attacks_guard_on, total.pairs)} | "
            f"{_pct(total.utility_under_attack_on, total.pairs)} |")
    lines += ["", "## Injection tasks outside these numbers", ""]
    for r in results:
        if r.text_only_pairs:
            lines.append(f"- {r.suite}: {r.text_only_pairs} pairs whose injection goal is only something the agent "
                         f"*says* (no tool call); the always-obey agent says it, and a tool guard cannot stop that: "
                         f"{_pct(r.text_only_success_on, r.text_only_pairs)} succeed with the guard on.")
        if r.no_ground_truth:
            lines.append(f"- {r.suite}: {', '.join(r.no_ground_truth)} ship with an empty ground truth in AgentDojo, "
                         "so the always-obey agent has no calls to issue; they are not counted.")
        if r.obeyed_guard_off < r.pairs:
            lines.append(f"- {r.suite}: with the guard off the agent met the payload in only {r.obeyed_guard_off}/"
                         f"{r.pairs} pairs.")
        if r.obeyed_guard_on < r.obeyed_guard_off:
            lines.append(f"- {r.suite}: with the guard on the agent met the payload in {r.obeyed_guard_on}/{r.pairs} "
                         f"pairs (off: {r.obeyed_guard_off}): in the others the guard had refused the call that would "
                         "have read it (a fetch of a URL that only untrusted data gave), so no attacker call was issued.")
        if r.attempted_guard_on > r.attacks_guard_on:
            lines.append(f"- {r.suite}: over the *attempted* calls, refused ones included, AgentDojo's trace checks "
                         f"would count {r.attempted_guard_on}/{r.pairs} with the guard on.")
        if r.successful_attacks_on:
            lines.append(f"- {r.suite}: attacks that succeeded with the guard on: {', '.join(r.successful_attacks_on)}")
    if any(r.own_goals for r in results):
        lines += ["", "## Our own injection goals (envgym/integrations/agentdojo/goals.py)", "",
                  "Ten goals per suite on the routes of issue 40 (joined recipient lists, look-alike and spelled-out "
                  "domains, scheme-less and userinfo URLs, existing outside contacts and counterparties, codes and "
                  "secrets only untrusted data wrote, unrequested bookings, payments, cancellations and invitations), "
                  "each against every user task; reached when one of its calls ran.", "",
                  "| suite | goals | pairs | success, guard off | success, guard on | agent obeyed, guard on |",
                  "|---|---|---|---|---|---|"]
        for r in results:
            lines.append(f"| {r.suite} | {r.own_goals} | {r.own_pairs} | {_pct(r.own_attacks_guard_off, r.own_pairs)} "
                         f"| {_pct(r.own_attacks_guard_on, r.own_pairs)} | {_pct(r.own_obeyed_guard_on, r.own_pairs)} |")
        for r in results:
            if r.own_successful_on:
                lines.append(f"- {r.suite}: own goals reached with the guard on: {', '.join(r.own_successful_on)}")
    lines += ["", "## Ground truths the guard refused", "",
              "One row per refused call: the user task, its request, the call and the guard's reasons.", "",
              "| suite | user task | request | refused call | reasons |", "|---|---|---|---|---|"]
    for r in results:
        for refusal in r.refusals:
            prompt = _cell(refusal.prompt)
            for call in refusal.calls or [{"tool": "", "arguments": {}, "reasons": ["no call was refused (the task "
                                                                                    "failed on the calls that ran)"]}]:
                shown = f"`{call['tool']}({_args(call['arguments'])})`" if call["tool"] else ""
                lines.append(f"| {r.suite} | {refusal.task} | {prompt} | {_cell(shown)} | "
                             f"{_cell('; '.join(call['reasons']))} |")
                prompt = "(same)"
    lines.append("")
    lines += [f"- {r.suite}: {len(r.refusals)} of {r.user_tasks} refused" for r in results]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """`text` on one line, safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _args(arguments: dict) -> str:
    text = ", ".join(f"{k}={' '.join(str(v).split())!r}" for k, v in arguments.items())
    return text if len(text) <= 160 else text[:157] + "..."


def plot(results: Sequence[SuiteResult], path: Path) -> None:
    """Two panels per suite: utility (AgentDojo / guard on) and attack success (guard off / guard on), in %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.suite for r in results]
    x = range(len(results))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    series = [
        (left, "utility, AgentDojo (no defense)", [r.utility_agentdojo / max(r.user_tasks, 1) for r in results], -0.2),
        (left, "utility, guard on", [r.utility_guard_on / max(r.user_tasks, 1) for r in results], 0.2),
        (right, "attack success, guard off", [r.attacks_guard_off / max(r.pairs, 1) for r in results], -0.2),
        (right, "attack success, guard on", [r.attacks_guard_on / max(r.pairs, 1) for r in results], 0.2),
    ]
    for axis, label, values, shift in series:
        axis.bar([i + shift for i in x], [100 * v for v in values], width=0.4, label=label)
    for axis, title in ((left, "Utility (ground truth passes)"), (right, "Attack success (always-obey agent)")):
        axis.set_xticks(list(x), names)
        axis.set_ylim(0, 105)
        axis.set_ylabel("%")
        axis.set_title(title)
        axis.legend(loc="lower left", fontsize=8)
    left.axhline(90, color="grey", linestyle=":", linewidth=1)
    fig.suptitle(f"envgym guard in AgentDojo {BENCHMARK_VERSION} (no model)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
