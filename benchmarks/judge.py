"""Judge prompt tokens with and without prefix de-duplication, for groups of 4 and 8 retail trajectories.

Each group is one retail task played by the oracle, a refusal and seeded random agents. The same group is
rendered, with the task's rubric, into the judge prompt twice: once with the shared prefix (system prompt, first user message and any
common turns) sent once, once with every trajectory sent whole (the baseline). Tokens are counted with the
SmolLM2 tokenizer through its chat template. Run: python benchmarks/judge.py [--tasks N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os

import gymnasium as gym
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import envgym  # noqa: F401  (registers the environments)
from envgym.llm.chat_template import encode_chat
from envgym.llm.local import default_gguf_path
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.play.make import make_policy
from envgym.registry import find_env_dir
from envgym.rewards.judge_prompt import DEFAULT_RUBRIC, build_judge_prompt, rubric_text, shared_prefix_length

GROUP_SIZES = (4, 8)


def group_policies(size: int) -> list[tuple[str, int]]:
    """The oracle, a refusal and size - 2 random agents with distinct seeds."""
    return [("oracle", 0), ("refuse", 0), *[("random", seed) for seed in range(1, size - 1)]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=6, help="retail tasks per group size (env seeds 0..N-1)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    gguf = default_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    env = gym.make("envgym/retail-v0")
    data = load_environment(str(find_env_dir("retail")))
    rows = []
    with Progress(disable=args.json) as progress:
        job = progress.add_task("judge prompts", total=len(GROUP_SIZES) * args.tasks)
        for size in GROUP_SIZES:
            deduplicated = whole = prefix_messages = 0
            for task_seed in range(args.tasks):
                group = [
                    run_episode(env, make_policy(name, seed=s), seed=task_seed)
                    for name, s in group_policies(size)
                ]
                messages = [t.messages for t in group]
                rubric = rubric_text(data.task(group[0].task_id).rubric) or DEFAULT_RUBRIC
                for dedup in (True, False):
                    prompt = build_judge_prompt(messages, group[0].tools, rubric, deduplicate_prefix=dedup)
                    tokens = len(encode_chat(tokenizer, prompt, None, add_generation_prompt=True))
                    if dedup:
                        deduplicated += tokens
                    else:
                        whole += tokens
                prefix_messages += shared_prefix_length(messages)
                progress.advance(job)
            rows.append(
                {
                    "group_size": size,
                    "tasks": args.tasks,
                    "mean_prompt_tokens_deduplicated": round(deduplicated / args.tasks),
                    "mean_prompt_tokens_whole": round(whole / args.tasks),
                    "ratio_whole_over_deduplicated": round(whole / deduplicated, 3),
                    "mean_shared_prefix_messages": round(prefix_messages / args.tasks, 2),
                }
            )
    env.close()
    if args.json:
        print(json.dumps({"benchmark": "judge_prompt_tokens", "tokenizer": gguf.name, "groups": rows}))
        return
    table = Table(title=f"judge prompt tokens ({gguf.name} tokenizer, mean over {args.tasks} retail tasks)")
    for column in ("group size", "deduplicated", "whole", "whole / dedup", "shared prefix msgs"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*(str(v) for k, v in row.items() if k != "tasks"))
    Console().print(table)


if __name__ == "__main__":
    main()
