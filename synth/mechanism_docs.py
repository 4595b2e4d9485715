"""Writes docs/mechanisms.md: one line per mechanism of the catalogue (its rule, its tools) under a fixed header.

Run: python -m synth.mechanism_docs [PATH]. tests/synth/test_v3_defects.py checks the page matches the catalogue.
"""

from __future__ import annotations

import sys
from pathlib import Path

from envgym.world.mechanisms import CATALOGUE
from envgym.world.mechanisms.check import mechanism_world

HEADER = "# Mechanisms\n\nA synthesized world's behaviour is composed from these business mechanisms (`envgym/world/mechanisms/`, layer 1 of\nenvgym, importable without synth). A world file lists the mechanisms it uses (`mechanisms:` with bindings of the\nmechanism's roles and fields to the world's tables and parameters) and its tools name one of them\n(`mechanism: {use, role}`): the world stays pure data, with no `python:` reference, and every such tool runs the\ncatalogue's code. Each mechanism has its rule, the tables and fields it owns, its tools, an invariant over the\nstate, a `prepare` that makes seeded data satisfy the invariant, and flows (tool orders a task chains).\n\nEvery mechanism is tested by `tests/synth/test_mechanisms.py::test_invariant_holds_under_random_calls[<name>]`:\n300 random calls (arguments drawn from each tool's typed arguments, 8% unknown ids) on its world; the invariant\nis checked on the seeded state and after every call, read-only tools must leave the state unchanged, every tool must\ngo through at least once and the rule must refuse at least one call. `test_a_mechanism_that_breaks_its_rule_is_caught`\nshows the check fails on a capacity mechanism whose cancellation keeps the quantity.\n\n"


def render() -> str:
    rows = ["| mechanism | module | rule (what the invariant checks) | tools |", "|---|---|---|---|"]
    for name, m in CATALOGUE.items():
        module = (m.tools[0].run if m.tools else m.invariant).__module__.rsplit(".", 1)[1]
        tools = ", ".join(f"`{t.name}`" for t in mechanism_world(name).tools)
        rows.append(f"| `{name}` | {module} | {m.rule} | {tools} |")
    return HEADER + "\n".join(rows) + "\n"


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/mechanisms.md")
    path.write_text(render())
    print(f"wrote {path} ({len(CATALOGUE)} mechanisms)")


if __name__ == "__main__":
    main()
