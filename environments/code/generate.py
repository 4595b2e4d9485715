"""Deterministic task generator for code: one task per problem in problems.py, with visible and hidden tests.

Expected values come from running each problem's reference solution here, at generation time; the reference is
also the oracle's `write_file` call, so the oracle passes every hidden test by construction.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from types import ModuleType
from typing import Any

from envgym.world import LoadedEnvironment, TaskSpec, ToolCall, load_module

SEED = 5
GENERATED_CASES = 10  # hidden cases drawn per problem, on top of its fixed edge cases
VISIBLE_CASES = 2
SOLUTION_FILE = "solution.py"


def _problems_module() -> ModuleType:
    return load_module(Path(__file__).parent, "problems")


def _reference(source: str, function: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<reference {function}>", "exec"), namespace)  # our own reference code
    return namespace[function]


def _case(fn: Any, args: list[Any]) -> dict[str, Any]:
    # JSON round trip: what the grader compares is what the sandbox runner can report (tuples become lists).
    return {"args": args, "expected": json.loads(json.dumps(fn(*copy.deepcopy(args))))}


def _opening(problem: Any, visible: list[dict[str, Any]]) -> str:
    examples = "\n".join(
        f"    {problem.function}({', '.join(repr(a) for a in c['args'])}) == {c['expected']!r}" for c in visible
    )
    return (
        f"Please write `{SOLUTION_FILE}` with a function `{problem.signature}`.\n"
        f"{problem.spec}\nExamples:\n{examples}\n"
        "These examples are in test_solution.py (run them with run_tests); more hidden tests will check "
        f"{SOLUTION_FILE} after you finish."
    )


def generate_tasks(data: LoadedEnvironment) -> list[TaskSpec]:
    tasks = []
    for problem in _problems_module().PROBLEMS:
        rng = random.Random(f"{SEED}:{problem.function}")
        fn = _reference(problem.solution, problem.function)
        fixed = [_case(fn, args) for args in problem.cases]
        drawn = [_case(fn, problem.generate(rng)) for _ in range(GENERATED_CASES)]
        visible, hidden = fixed[:VISIBLE_CASES], fixed[VISIBLE_CASES:] + drawn
        tasks.append(TaskSpec(
            id=f"code_{problem.function}",
            instruction=f"Get a correct implementation of `{problem.signature}` in {SOLUTION_FILE}. {problem.spec}",
            opening=_opening(problem, visible),
            solution=[ToolCall(name="write_file", arguments={"path": SOLUTION_FILE, "content": problem.solution})],
            final_reply=f"I wrote {SOLUTION_FILE} with {problem.function}.",
            rubric=[f"{SOLUTION_FILE} defines {problem.function} as specified."],
            max_steps=20,
            tags=["python", "coding"],
            meta={"function": problem.function, "visible_tests": visible, "hidden_tests": hidden},
        ))
    return tasks
