"""The learner's passes in bfloat16 autocast against float32, same run, same step.

A GRPO update runs three passes over a step's samples: the reference forward (no gradient), the policy forward
and its backward. With `GRPOConfig.learner_dtype="bfloat16"` the decoder runs them under autocast while the
weights, the output head and the log-probabilities stay float32. This builds a step shaped like the multi-turn
runs' (18 samples, a shared prompt, ~600 tokens each after it, a third of them trained) from this repository's
own documentation text, runs the three passes both ways on SmolLM2-135M, alternating which goes first, and
prints seconds per update, the ratio (float32 / bfloat16: above 1 means bfloat16 is faster), and how far
bfloat16 moves what the update uses: per-token log-probability differences and the cosine between the two
gradients.

Run: python experiments/learner_precision.py [--samples 18] [--tokens 600] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from envgym.train.learner import StepBatches
from envgym.train.policy import load_policy
from envgym.train.tokens import TokenSample


def build_samples(tokenizer: object, count: int, tokens: int, prefix: int) -> list[TokenSample]:
    """`count` samples: the same `prefix` tokens, then `tokens` more, alternating 0-masked and trained spans."""
    root = Path(__file__).resolve().parent.parent
    text = "\n".join(p.read_text() for p in sorted((root / "docs").rglob("*.md")))
    ids: list[int] = tokenizer(text)["input_ids"]  # type: ignore[operator]
    need = prefix + count * tokens
    if len(ids) < need:
        raise SystemExit(f"learner_precision: docs/ hold {len(ids)} tokens, {need} needed")
    samples = []
    for index in range(count):
        sample = TokenSample()
        sample.extend(ids[:prefix], 0)
        body = ids[prefix + index * tokens : prefix + (index + 1) * tokens]
        for start in range(0, tokens, 60):  # 40 env tokens, 20 sampled, as in a tool-calling episode
            sample.extend(body[start : start + 40], 0)
            sample.extend(body[start + 40 : start + 60], 1, [-1.0] * len(body[start + 40 : start + 60]))
        samples.append(sample)
    return samples


def update(model: torch.nn.Module, reference: torch.nn.Module, samples: list[TokenSample], dtype: str,
           micro_batch_size: int) -> tuple[float, list[torch.Tensor], list[torch.Tensor]]:
    """One update's three passes; returns seconds, the policy's log-probabilities and its gradient."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    batches = StepBatches(samples, micro_batch_size, pad_token_id=0, dtype=dtype)
    with torch.no_grad():
        prefix = batches.prefix_forward(reference, grad=False)
        for micro in batches.micro:
            batches.logprobs(reference, micro, 1.0, prefix)
    prefix = batches.prefix_forward(model, grad=True)
    values = []
    for micro in batches.micro:
        logprobs = batches.logprobs(model, micro, 1.0, prefix)
        (logprobs.sum() / 1000).backward()
        values.append(logprobs.detach()[micro.mask])
    prefix.backward()
    seconds = time.perf_counter() - start
    grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    return seconds, values, grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=18)
    parser.add_argument("--tokens", type=int, default=600, help="tokens per sample after the shared prompt")
    parser.add_argument("--prefix", type=int, default=420, help="shared prompt tokens")
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    console = Console()
    model, tokenizer = load_policy("local", 0)
    reference, _ = load_policy("local", 0)
    model.train()
    reference.eval().requires_grad_(False)
    samples = build_samples(tokenizer, args.samples, args.tokens, args.prefix)
    times: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    results = {}
    with console.status("learner passes") as status:
        for repeat in range(args.repeats):
            order = ["float32", "bfloat16"] if repeat % 2 == 0 else ["bfloat16", "float32"]
            for dtype in order:
                status.update(f"repeat {repeat + 1}/{args.repeats}: {dtype}")
                seconds, values, grads = update(model, reference, samples, dtype, args.micro_batch_size)
                times[dtype].append(seconds)
                results[dtype] = (values, grads)
    (v32, g32), (v16, g16) = results["float32"], results["bfloat16"]
    diff = torch.cat([a - b for a, b in zip(v32, v16, strict=True)]).abs()
    flat32 = torch.cat([g.flatten() for g in g32]).double()
    flat16 = torch.cat([g.flatten() for g in g16]).double()
    cosine = float(torch.nn.functional.cosine_similarity(flat32, flat16, dim=0))
    norm_ratio = float(flat16.norm() / flat32.norm())
    table = Table(title=f"one update's three passes, {args.samples} samples x ({args.prefix} shared + "
                        f"{args.tokens}) tokens, {sum(s.trainable_tokens for s in samples)} trained")
    for column in ("learner dtype", "seconds (each repeat)", "median"):
        table.add_column(column)
    for dtype, values in times.items():
        table.add_row(dtype, ", ".join(f"{t:.1f}" for t in values), f"{statistics.median(values):.1f}")
    console.print(table)
    ratio = statistics.median(times["float32"]) / statistics.median(times["bfloat16"])
    console.print(f"ratio float32 / bfloat16: {ratio:.2f}x")
    console.print(f"trained-token log-probability |float32 - bfloat16|: mean {float(diff.mean()):.4f}, "
                  f"p99 {float(diff.quantile(0.99)):.4f}, max {float(diff.max()):.4f}")
    console.print(f"gradient: cosine {cosine:.4f}, norm bfloat16 / float32 {norm_ratio:.4f}")


if __name__ == "__main__":
    main()
