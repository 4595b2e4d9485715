"""`python -m envgym.integrations.agentdojo`: score envgym's guard on AgentDojo's suites; write JSON, Markdown, PNG.

Run it with the AgentDojo venv's Python (`~/.cache/envgym/agentdojo/bin/python`, made by `scripts/install.sh --dev`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from envgym.integrations.agentdojo.evaluate import SUITES, Refusal, SuiteResult, evaluate_suite
from envgym.integrations.agentdojo.report import markdown, plot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envgym.integrations.agentdojo", description=__doc__)
    parser.add_argument("--suite", action="append", choices=SUITES, help="a suite (repeat; default: all four)")
    parser.add_argument("--task", action="append", help="only these user tasks (e.g. user_task_0; repeat)")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    parser.add_argument("--report", type=Path, help="write Markdown here, and a PNG beside it")
    parser.add_argument("--base", default="this checkout", help="what the report says the numbers were run on")
    parser.add_argument("--from-json", type=Path, help="write the report from a --json file of an earlier run")
    args = parser.parse_args(argv)
    suites = args.suite or list(SUITES)
    results: list[SuiteResult] = []
    if args.from_json is not None:
        for item in json.loads(args.from_json.read_text()):
            item["refusals"] = [Refusal(**r) for r in item["refusals"]]
            results.append(SuiteResult(**item))
        suites = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True, disable=not sys.stderr.isatty()) as progress:
        for suite in suites:
            bar = progress.add_task(suite, total=None)

            def advance(_task: str, bar: TaskID = bar) -> None:
                progress.advance(bar)

            results.append(evaluate_suite(suite, args.task, advance))
    data = [r.as_dict() for r in results]
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    if args.report is not None:
        command = "python -m envgym.integrations.agentdojo " + " ".join(argv if argv is not None else sys.argv[1:])
        args.report.write_text(markdown(results, command.strip(), args.base) + "\n")
        plot(results, args.report.with_suffix(".png"))
    for r in results:
        print(f"{r.suite}: utility {r.utility_guard_on}/{r.user_tasks} with the guard "
              f"(AgentDojo {r.utility_agentdojo}/{r.user_tasks}); attack success {r.attacks_guard_on}/{r.pairs} "
              f"with, {r.attacks_guard_off}/{r.pairs} without")
    return 0


if __name__ == "__main__":
    sys.exit(main())
