"""Supervised warm start: oracle calculator conversations, a tiny random Llama, SmolLM2's real tokenizer."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import pytest
import torch

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.train.policy import tiny_random_policy
from envgym.train.sft import conversation_samples, sft_backward, sft_loss, supervised_fine_tune
from envgym.train.tokens import TokenSample


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_random_policy(seed=0)


@pytest.fixture(scope="module")
def oracle_samples(tiny: tuple[Any, Any]) -> list[TokenSample]:
    _, tokenizer = tiny
    env = gym.make("envgym/calculator-v0")
    samples = []
    for task_id in ["mul_000", "mul_001"]:
        trajectory = run_episode(env, OraclePolicy(), seed=0, options={"task_id": task_id})
        assert trajectory.reward == 1.0
        samples += conversation_samples(
            tokenizer, trajectory.messages, trajectory.tools, tokenizer.eos_token_id
        )
    return samples


def test_targets_are_exactly_the_assistant_turns(
    tiny: tuple[Any, Any], oracle_samples: list[TokenSample]
) -> None:
    _, tokenizer = tiny
    sample = oracle_samples[0]
    targets = [t for t, m in zip(sample.token_ids, sample.mask, strict=True) if m]
    text = tokenizer.decode(targets, skip_special_tokens=False)
    end = tokenizer.decode([tokenizer.eos_token_id])
    call = '<tool_call>{"name": "calculate", "arguments": {"expression": "4867 * 5969"}}</tool_call>'
    assert text == f"{call}{end}4867 * 5969 = 29051123{end}"
    context = tokenizer.decode([t for t, m in zip(sample.token_ids, sample.mask, strict=True) if not m])
    assert "What is 4867 * 5969?" in context and "29051123" in context  # the tool result is context
    assert "###STOP###" not in tokenizer.decode(sample.token_ids)  # nothing after the last assistant turn


def test_only_target_tokens_contribute(tiny: tuple[Any, Any], oracle_samples: list[TokenSample]) -> None:
    model, tokenizer = tiny
    pad = tokenizer.eos_token_id
    base = oracle_samples[0]
    extra = [101, 202, 303, 404]
    as_context = copy.deepcopy(base)
    as_context.extend(extra, 0)
    as_target = copy.deepcopy(base)
    as_target.extend(extra, 1)
    with torch.no_grad():
        reference = sft_loss(model, [base], pad)
        ignored = sft_loss(model, [as_context], pad)
        counted = sft_loss(model, [as_target], pad)
        # Independent per-token computation over the mask-1 positions only.
        ids = torch.tensor([base.token_ids])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
        nll = [-logp[t - 1, base.token_ids[t]] for t in range(1, len(base.token_ids)) if base.mask[t]]
    assert torch.allclose(reference, torch.stack(nll).mean(), atol=1e-5)
    assert torch.allclose(ignored, reference, atol=1e-6)
    assert not torch.allclose(counted, reference, atol=1e-3)


def test_shared_prefix_backward_gives_the_full_pass_gradient(
    tiny: tuple[Any, Any], oracle_samples: list[TokenSample]
) -> None:
    """sft_backward runs the shared system prompt once: its loss and every parameter's gradient equal those of
    backpropagating sft_loss over whole, padded samples (three samples of different lengths, micro-batches of 2)."""
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    pad = tokenizer.eos_token_id
    batch = oracle_samples[:3]
    model.zero_grad(set_to_none=True)
    full = sft_loss(model, batch, pad)
    full.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    shared = sft_backward(model, batch, pad, micro_batch_size=2)
    assert abs(shared - float(full.detach())) < 1e-5
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        assert torch.allclose(got[name], grad, atol=1e-6, rtol=1e-4), name


def test_loss_decreases_on_a_fixed_batch(tiny: tuple[Any, Any], oracle_samples: list[TokenSample]) -> None:
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    losses = supervised_fine_tune(
        model,
        oracle_samples[:1],
        steps=8,
        batch_size=1,
        learning_rate=3e-3,
        pad_token_id=tokenizer.eos_token_id,
    )
    assert len(losses) == 8
    assert losses[-1] < 0.8 * losses[0]


def test_rejects_a_conversation_without_assistant_turns(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    with pytest.raises(ValueError, match="no assistant message"):
        conversation_samples(tokenizer, [{"role": "user", "content": "hi"}], None, tokenizer.eos_token_id)
