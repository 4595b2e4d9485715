"""The diversity report of a synthesized suite: `synth_stats.md` (the numbers, and the signature curve as a
table) and `signature_curve.png` (distinct masked tool signatures against the number of domains)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADLINE = ("environments", "tools", "distinct_tool_signatures", "tasks", "task_program_shapes",
            "instruction_near_duplicate_rate", "mean_tool_calls", "mechanisms_in_use", "mechanisms_per_world",
            "tools_that_are_code", "tools_that_are_code_share", "tools_writing_several_records",
            "tools_writing_several_records_share", "dependent_calls_per_task_median", "sentence_skeletons")


def markdown(stats: dict[str, Any], title: str) -> str:
    curve = sorted((int(n), v) for n, v in stats["signature_curve"].items())
    lines = [f"# {title}", "", "| metric | value |", "|---|---|",
             *(f"| {k} | {stats[k]} |" for k in HEADLINE if k in stats), "",
             "## Distinct masked tool signatures by number of domains", "",
             "| domains | distinct signatures | new since previous |", "|---|---|---|"]
    previous = 0
    for n, v in curve:
        lines.append(f"| {n} | {v} | {v - previous} |")
        previous = v
    for key in ("tools_by_operator", "tools_by_mutation", "domains_by_structural_operator", "tasks_rejected_by",
                "worlds_by_mechanism", "dependent_calls_per_task"):
        if stats.get(key):
            lines += ["", f"## {key.replace('_', ' ')}", "", "| name | count |", "|---|---|",
                      *(f"| {k} | {v} |" for k, v in stats[key].items())]
    return "\n".join(lines) + "\n"


def plot_curve(stats: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = sorted((int(n), v) for n, v in stats["signature_curve"].items())
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([n for n, _ in curve], [v for _, v in curve], marker="o")
    ax.set(xlabel="domains", ylabel="distinct masked tool signatures", title=title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(stats: dict[str, Any], out_dir: str | Path, title: str = "Synthesized suite") -> dict[str, str]:
    """Write synth_stats.md, synth_stats.json and signature_curve.png into `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "synth_stats.md", "json": out / "synth_stats.json", "png": out / "signature_curve.png"}
    paths["markdown"].write_text(markdown(stats, title))
    paths["json"].write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n")
    plot_curve(stats, paths["png"], title)
    return {k: str(v) for k, v in paths.items()}
