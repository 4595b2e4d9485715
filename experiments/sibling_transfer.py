"""How far training on one hand-written service world carries to its sibling (issue 39, part 4: a ceiling).

    python experiments/sibling_transfer.py --source travel --out runs/sibling_travel [--passes 3] [--batch 8]
    python experiments/transfer_checkpoints.py --out runs/transfer_behaviour \
        --policy from_travel=runs/sibling_travel/warm_start.pt

Every synthesized warm start so far left the embedded model at 0/60 on the bundled retail and travel tasks. This asks
the question from the other side: train on every task of one bundled world (`--source`, travel or retail), whose tasks
have the other's exact shapes (authenticate by email, a record the user names in the first message, a reason or a
value asked for, a yes before the write, the write), and play the other world's 30 evaluation tasks. If that moves
little, a synthesized world, however close, cannot be expected to move more with this model and this budget; the
gap is the model's, not the worlds'.

The demonstrations are fair: `FairScript` asks the user for every fact of the task the first message does not hold
(the email, the reason, the new value) before the reference solution's calls, then plays those calls with the world's
confirmations, as `OraclePolicy` does. Each conversation must reach reward 1; one that uses a value the conversation
had not shown (`synth.rollouts.unseen_values`: a value the task derives) is left out and reported. Retail's tools
share names with BFCL functions (`get_order_details`, `place_order`), which `benchmarks.transfer_leak` finds: such a
run needs `--allow-bfcl-names`, counts the leaks in its report, and its policy says nothing about BFCL. Writes
`--out`/warm_start.pt, demos.jsonl and report.json (tasks, samples, target and all tokens, steps, losses, wall time,
load).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.transfer_leak import bfcl_vocabulary, find_leaks  # noqa: E402
from envgym.play.policies import OraclePolicy  # noqa: E402
from envgym.play.scripted import scripted_turns  # noqa: E402
from envgym.world.spec import TaskSpec  # noqa: E402
from synth.stages.tasks import question  # noqa: E402

SIBLINGS = {"retail": "travel", "travel": "retail"}


def facts_to_ask(task: TaskSpec) -> list[str]:
    """The user's facts the reference solution uses and the first message does not hold, in the task's order."""
    used = json.dumps([c.arguments for c in task.solution])
    opening = task.opening or ""
    return [key for key, value in task.user_known.items()
            if not re.search(rf"(?<!\w){re.escape(str(value))}(?!\w)", opening) and json.dumps(value)[1:-1] in used]


class FairScript(OraclePolicy):
    """The oracle's turns after one question per fact the user holds and has not said (`facts_to_ask`)."""

    def act(self, obs: str, info: dict[str, Any]) -> str:
        key = (info["env_name"], info["task_id"])
        if key not in self._scripts:
            data = self._data(info)
            task = data.task(info["task_id"])
            self._scripts[key] = [question(k) for k in facts_to_ask(task)] + scripted_turns(data.world, task)
        return super().act(obs, info)


def fair_sibling_demos(source: str) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """One fair conversation per task of bundled world `source`, and the tasks left out with the values their
    conversation never showed (a value the task derives, as "one more bag" is 1). Raises on a failed one."""
    import gymnasium as gym

    from envgym.play.episode import run_episode
    from synth.rollouts import unseen_values

    env = gym.make(f"envgym/{source}-v0")
    world: Any = env.unwrapped  # envgym.env.ToolWorldEnv
    demos, unfair = [], {}
    for index, task in enumerate(world.data.tasks):
        episode = run_episode(env, FairScript(), seed=index, options={"task_id": task.id})
        if episode.reward < 1.0:
            raise RuntimeError(f"{source}:{task.id}: the fair script failed (reward {episode.reward})")
        unseen = unseen_values(episode.messages)
        if unseen:
            unfair[task.id] = unseen
            continue
        demos.append({"task_id": task.id, "messages": episode.messages, "tools": episode.tools})
    return demos, unfair


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=sorted(SIBLINGS), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--passes", type=int, default=3, help="passes over the samples")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--allow-bfcl-names", action="store_true",
                        help="train although the demonstrations name BFCL functions (retail's tools do); the leaks "
                             "are counted in the report, and such a policy says nothing about BFCL")
    args = parser.parse_args(argv)

    import torch

    from envgym.train.policy import load_policy
    from envgym.train.sft import conversation_samples, supervised_fine_tune

    console = Console(stderr=True)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    demos, unfair = fair_sibling_demos(args.source)
    if unfair:
        console.print(f"left out (a value the conversation never showed): {unfair}")
    leaks = find_leaks(demos, bfcl_vocabulary())
    if leaks and not args.allow_bfcl_names:
        raise SystemExit("BFCL data in the demonstrations (--allow-bfcl-names to train anyway, never to evaluate on "
                         "BFCL): " + "; ".join(leaks[:5]))
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "demos.jsonl").open("w") as f:
        for demo in demos:
            f.write(json.dumps(demo, sort_keys=True) + "\n")
    model, tokenizer = load_policy("local", 0)
    eos = tokenizer.eos_token_id
    samples = [s for d in demos for s in conversation_samples(tokenizer, d["messages"], d["tools"], eos)]
    steps = max(1, args.passes * len(samples) // args.batch)
    console.print(f"{args.source}: {len(demos)} conversations, {len(samples)} samples, {steps} steps of {args.batch}")
    clock = time.perf_counter()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    losses = supervised_fine_tune(model, samples, steps=steps, batch_size=args.batch, learning_rate=args.learning_rate,
                                  pad_token_id=pad, seed=args.seed, console=console)
    torch.save(model.state_dict(), args.out / "warm_start.pt")
    report = {"source": args.source, "evaluate_on": SIBLINGS[args.source], "conversations": len(demos),
              "left_out": unfair,
              "samples": len(samples), "passes": args.passes, "steps": steps, "batch": args.batch,
              "learning_rate": args.learning_rate, "seed": args.seed, "bfcl_leaks": len(leaks),
              "target_tokens": sum(s.trainable_tokens for s in samples),
              "all_tokens": sum(len(s.token_ids) for s in samples),
              "losses": [round(x, 4) for x in losses], "sft_s": round(time.perf_counter() - clock, 1),
              "wall_s": round(time.perf_counter() - started, 1), "load_end": list(os.getloadavg())}
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    console.print({k: v for k, v in report.items() if k != "losses"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
