"""The GRPO loss as pure functions of tensors.

Notation: B sequences, T positions, mask m[i, t] = 1 where token t of sequence i was sampled by the policy
(the one mask used for the loss, the KL, the ratios and every metric), A[i] the sequence's advantage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

LossType = Literal["grpo", "bnpo", "dapo", "dr_grpo"]
LOG_RATIO_LIMIT = (
    20.0  # exp(20) ~ 5e8: large enough to never bind on sane ratios, small enough to stay finite
)


def group_advantages(
    rewards: Tensor, *, scale: bool = True, std_floor: float = 1e-3, zero_std_tolerance: float = 1e-6,
    negative_weight: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Advantages of a (groups, G) reward matrix and the mask of groups to keep.

        A[g, j] = r[g, j] - mean_j r[g, :]                       (scale=False, Dr. GRPO)
        A[g, j] = (r[g, j] - mean_j r[g, :]) / max(std_g, floor)  (scale=True)

    std_g is the population std (divisor G). A group with std_g <= zero_std_tolerance carries no signal:
    `keep[g]` is False and its advantages are 0; the caller leaves its samples out of the loss (they would
    otherwise still count in the denominators). The floor stops a near-constant group (std 1e-5 from float
    residue) from blowing its advantages up by 1e5.

    `negative_weight` (lambda in [0, 1]) multiplies the negative advantages only, A <- lambda * A where A < 0:
    1 is plain GRPO, 0 learns from each group's better-than-average episodes alone (positive-sample
    reinforcement, which Zhu et al. 2025 found raises greedy accuracy while narrowing what the policy explores).
    """
    if not 0.0 <= negative_weight <= 1.0:
        raise ValueError(f"group_advantages: negative_weight must be in [0, 1], got {negative_weight!r}")
    if rewards.dim() != 2:
        raise ValueError(f"group_advantages: rewards must be (groups, G), got shape {tuple(rewards.shape)}")
    rewards = rewards.double()
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, unbiased=False, keepdim=True)
    keep = std.squeeze(1) > zero_std_tolerance
    advantages = centred / std.clamp_min(std_floor) if scale else centred
    if negative_weight != 1.0:
        advantages = torch.where(advantages < 0, advantages * negative_weight, advantages)
    advantages = torch.where(keep.unsqueeze(1), advantages, torch.zeros_like(advantages))
    return advantages.float(), keep


@dataclass
class LossOutput:
    """The scalar loss and its diagnostics (all over masked tokens only)."""

    loss: Tensor
    kl: float
    clip_fraction: float
    is_weight_mean: float
    tokens: int
    denominator: float


def _masked(x: Tensor, mask: Tensor) -> Tensor:
    # torch.where (not x * mask) so inf/nan at masked positions reach neither the value nor the gradient.
    return torch.where(mask, x, torch.zeros_like(x))


def _safe_log_ratio(a: Tensor, b: Tensor) -> Tensor:
    return torch.nan_to_num(a - b, nan=0.0).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_type: LossType = "dapo",
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.28,
    beta: float = 0.0,
    ref_logprobs: Tensor | None = None,
    behaviour_logprobs: Tensor | None = None,
    tis_cap: float | None = None,
    max_length: int | None = None,
    num_sequences: int | None = None,
    num_tokens: int | None = None,
    sequence_tokens: Tensor | None = None,
) -> LossOutput:
    """Clipped GRPO surrogate with optional k3 KL and truncated importance sampling.

    Per token (only where m = 1):

        rho   = exp(logp - logp_old)                    (log ratio clamped to [-20, 20], nan -> 0)
        pg    = -min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)
        w     = min(exp(logp_old - logp_behaviour), C)  (TIS, no gradient; 1 without behaviour logprobs)
        kl    = exp(logp_ref - logp) - (logp_ref - logp) - 1            (k3)
        l     = w * pg + beta * kl

    Reduction over the batch (`num_sequences` N and `num_tokens` M default to this batch's B and sum m;
    pass the optimizer step's totals when gradients accumulate over micro-batches):

        grpo     sum_i [ sum_t l m / max(n_i, 1) ] / N        (an all-masked row adds 0 but counts in N)
        bnpo     sum l m / max(sum m, 1)                     (this batch's tokens)
        dapo     sum l m / max(M, 1)                         (the step's tokens)
        dr_grpo  sum l m / (N * max_length)

    n_i (`sequence_tokens`, (B,)) defaults to sum_t m[i, t]; when one sequence (an episode) spans several
    rows, each of its rows passes the sequence's total so the rows together add its one mean.

    `mask` is boolean (B, T); `advantages` is (B,). Values at masked positions are never read. The
    loss is computed in float32.
    """
    mask = mask.bool()
    batch = logprobs.shape[0]
    n_seq = batch if num_sequences is None else num_sequences
    n_tok = int(mask.sum()) if num_tokens is None else num_tokens
    # Computed in float32 whatever the inputs: exp(20) overflows float16.
    adv = advantages.float().unsqueeze(1).expand_as(logprobs)
    logp = _masked(logprobs.float(), mask)
    old = _masked(old_logprobs.float(), mask)
    ratio = torch.exp(_safe_log_ratio(logp, old))
    clipped = ratio.clamp(1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    is_weight = torch.ones_like(logp)
    if tis_cap is not None and behaviour_logprobs is not None:
        behaviour = _masked(behaviour_logprobs.float(), mask)
        is_weight = torch.exp(_safe_log_ratio(old, behaviour)).clamp(max=tis_cap).detach()
        per_token = per_token * is_weight
    kl_token = torch.zeros_like(logp)
    if beta != 0.0:
        if ref_logprobs is None:
            raise ValueError("policy_loss: beta != 0 needs ref_logprobs")
        delta = _safe_log_ratio(_masked(ref_logprobs.float(), mask), logp)
        kl_token = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl_token
    per_token = _masked(per_token, mask)

    if loss_type == "grpo":
        counts = mask.sum(dim=1) if sequence_tokens is None else sequence_tokens.to(per_token.dtype)
        per_sequence = per_token.sum(dim=1) / counts.clamp_min(1)
        denominator = float(n_seq)
        loss = per_sequence.sum() / max(n_seq, 1)
    elif loss_type == "bnpo":
        denominator = float(max(int(mask.sum()), 1))
        loss = per_token.sum() / denominator
    elif loss_type == "dapo":
        denominator = float(max(n_tok, 1))
        loss = per_token.sum() / denominator
    elif loss_type == "dr_grpo":
        if max_length is None or max_length <= 0:
            raise ValueError(f"policy_loss: dr_grpo needs max_length > 0, got {max_length!r}")
        denominator = float(n_seq * max_length)
        loss = per_token.sum() / denominator
    else:
        raise ValueError(
            f"policy_loss: unknown loss_type {loss_type!r}; expected grpo, bnpo, dapo or dr_grpo"
        )

    with torch.no_grad():
        active = max(int(mask.sum()), 1)
        was_clipped = ((ratio < 1 - epsilon_low) & (adv < 0)) | ((ratio > 1 + epsilon_high) & (adv > 0))
        clip_fraction = float((was_clipped & mask).sum()) / active
        kl = float(_masked(kl_token, mask).sum()) / active
        is_mean = float(_masked(is_weight, mask).sum()) / active
    return LossOutput(loss, kl, clip_fraction, is_mean, int(mask.sum()), denominator)


def token_logprobs(logits: Tensor, token_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """log p(token_ids[:, t] | prefix) from next-token logits aligned with them, (B, T, V) -> (B, T).

    Computed as logit - logsumexp, which avoids materialising a second (B, T, V) tensor. At temperature 1 the
    division is skipped: x / 1 is x, and the pass over the logits (and its backward) cost about a fifth of this.
    """
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
    picked = scaled.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scaled, dim=-1)
