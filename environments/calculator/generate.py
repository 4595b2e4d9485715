"""Deterministic task generator for calculator: 200 four-digit multiplications."""

from __future__ import annotations

import random

from envgym.world import Answer, LoadedEnvironment, TaskSpec, ToolCall

SEED = 4
COUNT = 200


def generate_tasks(data: LoadedEnvironment) -> list[TaskSpec]:
    rng = random.Random(SEED)
    tasks = []
    for i in range(COUNT):
        a, b = rng.randint(1000, 9999), rng.randint(1000, 9999)
        tasks.append(TaskSpec(
            id=f"mul_{i:03d}",
            instruction=f"Get the exact product of {a} and {b}.",
            opening=f"What is {a} * {b}? Please give me the exact number.",
            solution=[ToolCall(name="calculate", arguments={"expression": f"{a} * {b}"})],
            final_reply=f"{a} * {b} = {a * b}",
            answers=[Answer(value=str(a * b), type="number")],
            rubric=["The final answer is the exact product."],
            max_steps=4,
            tags=["arithmetic"],
            meta={"a": a, "b": b},
        ))
    return tasks
