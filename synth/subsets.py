"""Training suites cut from a synthesized environment: one kind of task, a tool subset, a held-out split by user.

A synthesized domain's tasks start by verifying the user over turns and then run one or two segments
(`synth.segments`). `kind_subset` writes the tasks of one kind (say `lookup`: find one of my records, read a field
of it or of the record it refers to, which takes two or three tool calls and a user turn) as an environment of
its own: the world with only the tools those tasks use (an agent in the synthesizer's sense: a system prompt and
a tool subset), the training tasks first and the held-out tasks last (the trainer holds out the last N), and no
held-out user in any training task, so held-out tasks are the same shapes over new people and records.
`fair_demonstrations` plays tasks with `synth.planner.FairPlanner(open_first=True)`: it asks what the user needs,
takes every value from the conversation (checked with `synth.rollouts.unseen_values`) and never reads the
reference solution, so its conversations are fair warm-start data.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import yaml

from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from synth.planner import FairPlanner
from synth.program import Program
from synth.rollouts import unseen_values


def _user(task: dict[str, Any]) -> str:
    """Who the task's user is: the arguments of its first call (every synthesized task starts by verifying them)."""
    return json.dumps(task["solution"][0]["arguments"], sort_keys=True)


def kind_subset(source: Path, out: Path, *, kinds: tuple[str, ...], heldout: int, seed: int
                ) -> tuple[Path, dict[str, Any]]:
    """Write the tasks of `kinds` of the environment folder `source` to `out/<name>_<kind>` with the split described in
    the module docstring (held-out users drawn in a `seed`-shuffled order). Returns the folder and a summary:
    tasks, users and tools on each side. Raises ValueError when the tasks cannot fill `heldout` and a training set."""
    rows = [json.loads(line) for line in (source / "tasks.jsonl").read_text().splitlines() if line.strip()]
    chosen = [r for r in rows if r.get("meta", {}).get("kind") in kinds]
    users = sorted({_user(r) for r in chosen})
    random.Random(seed).shuffle(users)
    held_users: list[str] = []
    for user in users:  # whole users go to the held-out side until it has enough tasks
        if sum(_user(r) in held_users for r in chosen) >= heldout:
            break
        held_users.append(user)
    held = [r for r in chosen if _user(r) in held_users][:heldout]
    train = [r for r in chosen if _user(r) not in held_users]
    if len(held) < heldout or not train:
        raise ValueError(f"kind_subset: {len(chosen)} tasks of kinds {kinds} over {len(users)} users in {source} cannot give "
                         f"{heldout} held-out tasks and a training set; synthesize more tasks")
    used = sorted({call["name"] for r in chosen for call in r["solution"]})
    world = yaml.safe_load((source / "world.yaml").read_text())
    world["name"] = f"{world['name']}_{'_'.join(kinds)}"
    world["tools"] = [t for t in world["tools"] if t["name"] in used]
    world["rules"] = {k: [t for t in v if t in used] if isinstance(v, list) else v for k, v in world["rules"].items()}
    folder = out / world["name"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "world.yaml").write_text(yaml.safe_dump(world, sort_keys=False, allow_unicode=True))
    dropped = sorted(t["name"] for t in yaml.safe_load((source / "world.yaml").read_text())["tools"]
                     if t["name"] not in used)
    policy = [line for line in (source / "policy.md").read_text().splitlines()
              if not any(name in line for name in dropped)]
    (folder / "policy.md").write_text("\n".join(policy) + "\n")
    (folder / "tasks.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in [*train, *held]))
    shapes = sorted({r["meta"]["shape"] for r in chosen})
    summary = {"source": source.name, "kinds": list(kinds), "tasks_in_source": len(rows), "kind_tasks": len(chosen),
               "train_tasks": len(train), "heldout_tasks": len(held), "train_users": len(users) - len(held_users),
               "heldout_users": len(held_users), "tools": used, "tools_dropped": dropped, "shapes": shapes}
    return folder, summary


def fair_demonstrations(folder: Path, task_ids: list[str]) -> list[dict[str, Any]]:
    """Fair-planner conversations of `task_ids`; raises if one fails or uses a value it was never shown."""
    data = load_environment(str(folder.resolve()))
    env = ToolWorldEnv(data=data)
    out = []
    for index, task_id in enumerate(task_ids):
        task = data.task(task_id)
        planner = FairPlanner(Program.model_validate(task.meta["program"]), open_first=True)
        trajectory = run_episode(env, planner, seed=index, options={"task_id": task_id})
        if trajectory.reward < 1.0:
            raise RuntimeError(f"fair_demonstrations: the fair planner failed {task_id} (reward {trajectory.reward})")
        unseen = unseen_values(trajectory.messages)
        if unseen:
            raise RuntimeError(f"fair_demonstrations: {task_id} used values never shown in the conversation: {unseen}")
        out.append({"task_id": task_id, "messages": trajectory.messages, "tools": trajectory.tools})
    return out
