"""Supervised warm start (SFT) before GRPO: cross-entropy on the assistant tokens of finished conversations.

A small model that never emits a tool call gives GRPO groups with zero reward variance, so nothing is
learned; a few SFT steps on reference (oracle) trajectories of *training* tasks make it partly competent
first (the DeepSeek-R1 "cold start"). Conversations are tokenized with `envgym.train.tokens`, exactly as
the rollouts are: assistant turns as the raw text the policy would sample (tool calls in Hermes
`<tool_call>` form) plus the end-of-turn token, mask 1; everything else mask 0.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envgym.llm.chat_template import hermes_tool_call_text
from envgym.train.learner import StepBatches
from envgym.train.tokens import TokenSample, TrajectoryTokens


def assistant_text(message: dict[str, Any]) -> str:
    """The raw text a policy emits for an assistant message: its content, then its tool calls as
    `<tool_call>` blocks (the form the env parses from sampled text)."""
    content = message.get("content") or ""
    if not isinstance(content, str):
        raise ValueError(f"assistant message: expected string content, got {type(content).__name__}")
    calls = message.get("tool_calls")
    if not calls:
        return content
    calls_text = hermes_tool_call_text(calls)
    return f"{content}\n{calls_text}" if content else calls_text


def conversation_samples(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    end_of_turn_id: int,
) -> list[TokenSample]:
    """Token samples of a finished conversation in which every assistant turn is a target (mask 1).

    Each assistant turn is its text's canonical tokens followed by `end_of_turn_id` (what a sampler that
    stops at end of turn returns). Messages after the last assistant turn are dropped: nothing is learned
    from them. Raises ValueError when the conversation has no assistant turn.
    """
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
    if first is None:
        raise ValueError("conversation_samples: the conversation has no assistant message to learn from")
    trajectory = TrajectoryTokens(tokenizer, messages[:first], tools)
    pending: list[dict[str, Any]] = []
    for message in messages[first:]:
        if message.get("role") != "assistant":
            pending.append(message)
            continue
        if pending:
            trajectory.add_messages(pending)
            pending = []
        text = assistant_text(message)
        ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], end_of_turn_id]
        trajectory.add_completion(ids, [0.0] * len(ids), text)
    return trajectory.trainable_samples()


def collate(
    samples: Sequence[TokenSample], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention, target mask) right-padded; `mask[:, t]` says whether token t + 1 is a target."""
    width = max(len(s.token_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.bool)
    for row, sample in enumerate(samples):
        n = len(sample.token_ids)
        ids[row, :n] = torch.tensor(sample.token_ids)
        attention[row, :n] = 1
        mask[row, :n] = torch.tensor(sample.mask, dtype=torch.bool)
    return ids, attention, mask[:, 1:]


def sft_loss(model: Any, samples: Sequence[TokenSample], pad_token_id: int) -> torch.Tensor:
    """Mean cross-entropy over the target (mask 1) tokens of `samples`; prompt/env tokens contribute nothing."""
    ids, attention, mask = collate(samples, pad_token_id)
    if not bool(mask.any()):
        raise ValueError("sft_loss: the batch has no target (mask 1) token")
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    losses = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view(mask.shape)
    return (losses * mask).sum() / mask.sum()


def sft_backward(model: Any, samples: Sequence[TokenSample], pad_token_id: int, micro_batch_size: int = 2) -> float:
    """Accumulate the gradient of `sft_loss(model, samples)` and return that loss, running the prompt prefix
    every sample shares once (`envgym.train.learner.StepBatches`) and the output head only at target tokens.
    The gradient is the same as a full pass; with a long system prompt and tool schemas it costs a fraction."""
    batches = StepBatches(list(samples), micro_batch_size, pad_token_id)
    targets = sum(int(m.mask.sum()) for m in batches.micro)
    if not targets:
        raise ValueError("sft_backward: the batch has no target (mask 1) token")
    prefix = batches.prefix_forward(model, grad=True)
    total = 0.0
    for micro in batches.micro:
        loss = -batches.logprobs(model, micro, 1.0, prefix).sum() / targets
        loss.backward()
        total += float(loss.detach())
    prefix.backward()
    return total


def supervised_fine_tune(
    model: Any,
    samples: Sequence[TokenSample],
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    pad_token_id: int,
    seed: int = 0,
    max_grad_norm: float = 1.0,
    micro_batch_size: int = 2,
    console: Console | None = None,
) -> list[float]:
    """Train `model` in place for `steps` AdamW steps on batches of `batch_size` samples drawn in a seeded
    order (reshuffled each pass); returns the loss of each step. Each batch runs in micro-batches of
    `micro_batch_size` on top of the prompt prefix its samples share (`sft_backward`). Its optimizer is private
    and discarded."""
    if steps < 0 or batch_size < 1:
        raise ValueError(
            f"supervised_fine_tune: need steps >= 0 and batch_size >= 1, got {steps}, {batch_size}"
        )
    if steps and not samples:
        raise ValueError("supervised_fine_tune: no samples to train on")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    rng = random.Random(seed)
    order: list[int] = []
    losses: list[float] = []
    was_training = model.training
    model.train()
    columns = (
        TextColumn("[bold]SFT"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    try:
        with Progress(*columns, console=console or Console(stderr=True), transient=False) as progress:
            bar = progress.add_task("", total=steps)
            for _ in range(steps):
                batch: list[TokenSample] = []
                while len(batch) < batch_size:
                    if not order:
                        order = list(range(len(samples)))
                        rng.shuffle(order)
                    batch.append(samples[order.pop()])
                optimizer.zero_grad(set_to_none=True)
                loss = sft_backward(model, batch, pad_token_id, micro_batch_size)
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                optimizer.step()
                losses.append(loss)
                progress.update(bar, advance=1, description=f"loss {losses[-1]:.4f}")
    finally:
        model.train(was_training)
    return losses
