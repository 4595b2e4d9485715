"""The GRPO loss: exact reductions, mask hygiene, extreme inputs, group advantages, a reference loop."""

from __future__ import annotations

import math

import pytest
import torch

from envgym.train.loss import group_advantages, policy_loss, token_logprobs

ART_MASK = torch.tensor([[0, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1]], dtype=torch.bool)


def _unit_ratio_inputs(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logprobs = torch.full(mask.shape, -1.0, requires_grad=True)
    return logprobs, logprobs.detach().clone(), torch.ones(mask.shape[0])


@pytest.mark.parametrize(
    ("loss_type", "kwargs", "expected", "denominator"),
    [
        ("bnpo", {}, -7 / 7, 7),
        ("dapo", {}, -7 / 7, 7),
        ("dapo", {"num_tokens": 14}, -7 / 14, 14),
        ("dr_grpo", {"max_length": 6}, -7 / 12, 12),
        ("dr_grpo", {"max_length": 6, "num_sequences": 4}, -7 / 24, 24),
        ("grpo", {}, (-2 / 2 + -5 / 5) / 2, 2),
        ("grpo", {"num_sequences": 4}, (-1 + -1) / 4, 4),
    ],
)
def test_reduction_denominators(loss_type: str, kwargs: dict, expected: float, denominator: float) -> None:
    # ratio 1 and A = 1 make every active token's loss exactly -1, so the loss is -(active)/denominator.
    logprobs, old, adv = _unit_ratio_inputs(ART_MASK)
    out = policy_loss(logprobs, old, adv, ART_MASK, loss_type=loss_type, **kwargs)  # type: ignore[arg-type]
    assert out.loss.item() == pytest.approx(expected, abs=1e-7)
    assert out.denominator == denominator
    assert out.tokens == 7


def test_grpo_all_masked_row_counts_in_the_batch() -> None:
    mask = torch.tensor([[0, 0, 0], [0, 1, 1]], dtype=torch.bool)
    logprobs, old, adv = _unit_ratio_inputs(mask)
    assert policy_loss(logprobs, old, adv, mask, loss_type="grpo").loss.item() == pytest.approx(-0.5)


def test_dr_grpo_without_max_length_is_an_error() -> None:
    logprobs, old, adv = _unit_ratio_inputs(ART_MASK)
    with pytest.raises(ValueError, match="max_length"):
        policy_loss(logprobs, old, adv, ART_MASK, loss_type="dr_grpo")


def test_empty_mask_gives_a_finite_zero() -> None:
    mask = torch.zeros((2, 4), dtype=torch.bool)
    logprobs, old, adv = _unit_ratio_inputs(mask)
    out = policy_loss(logprobs, old, adv, mask, loss_type="dapo")
    out.loss.backward()
    assert logprobs.grad is not None
    assert out.loss.item() == 0.0 and torch.isfinite(logprobs.grad).all()


def _random_batch(seed: int, batch: int = 4, length: int = 7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, length, generator=g) > 0.4
    mask[:, 0] = True
    return {
        "logprobs": -torch.rand(batch, length, generator=g) * 3,
        "old": -torch.rand(batch, length, generator=g) * 3,
        "ref": -torch.rand(batch, length, generator=g) * 3,
        "behaviour": -torch.rand(batch, length, generator=g) * 3,
        "adv": torch.randn(batch, generator=g),
        "mask": mask,
    }


def _loss_and_grad(b: dict[str, torch.Tensor], loss_type: str = "dapo") -> tuple[torch.Tensor, torch.Tensor]:
    logprobs = b["logprobs"].clone().requires_grad_(True)
    out = policy_loss(
        logprobs,
        b["old"],
        b["adv"],
        b["mask"],
        loss_type=loss_type,  # type: ignore[arg-type]
        beta=0.05,
        ref_logprobs=b["ref"],
        behaviour_logprobs=b["behaviour"],
        tis_cap=2.0,
        max_length=7,
    )
    out.loss.backward()
    assert logprobs.grad is not None
    return out.loss.detach(), logprobs.grad


@pytest.mark.parametrize("poison", [math.inf, -math.inf, math.nan, 1e30])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_masked_positions_cannot_change_loss_or_gradients(poison: float, loss_type: str) -> None:
    clean = _random_batch(0)
    poisoned = {k: v.clone() for k, v in clean.items()}
    for key in ("logprobs", "old", "ref", "behaviour"):
        poisoned[key][~clean["mask"]] = poison
    loss_clean, grad_clean = _loss_and_grad(clean, loss_type)
    loss_poisoned, grad_poisoned = _loss_and_grad(poisoned, loss_type)
    assert torch.equal(loss_clean, loss_poisoned)
    assert torch.equal(grad_clean, grad_poisoned)


def test_gradients_reach_only_policy_tokens() -> None:
    batch = _random_batch(1)
    _, grad = _loss_and_grad(batch)
    assert torch.all(grad[~batch["mask"]] == 0)
    assert torch.all(grad[batch["mask"]] != 0)


@pytest.mark.parametrize("extreme", [-math.inf, -9999.0, math.inf, math.nan])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_with_extreme_old_and_behaviour_logprobs(extreme: float, dtype: torch.dtype) -> None:
    batch = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in _random_batch(2).items()}
    batch["old"][:, 0] = extreme
    batch["behaviour"][:, 1] = extreme
    batch["ref"][:, 2] = extreme
    loss, grad = _loss_and_grad(batch)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()


def _reference_loss(
    b: dict[str, torch.Tensor],
    loss_type: str,
    eps_low: float,
    eps_high: float,
    beta: float,
    cap: float,
    max_length: int,
) -> float:
    """A plain per-token loop written straight from the formulas."""
    rows = []
    total, active = 0.0, 0
    for i in range(b["mask"].shape[0]):
        row_sum, row_tokens = 0.0, 0
        for t in range(b["mask"].shape[1]):
            if not b["mask"][i, t]:
                continue
            lp, old = float(b["logprobs"][i, t]), float(b["old"][i, t])
            ref, beh, a = float(b["ref"][i, t]), float(b["behaviour"][i, t]), float(b["adv"][i])
            rho = math.exp(lp - old)
            pg = -min(rho * a, min(max(rho, 1 - eps_low), 1 + eps_high) * a)
            w = min(math.exp(old - beh), cap)
            kl = math.exp(ref - lp) - (ref - lp) - 1
            token = w * pg + beta * kl
            row_sum += token
            row_tokens += 1
        rows.append(row_sum / max(row_tokens, 1))
        total += row_sum
        active += row_tokens
    if loss_type == "grpo":
        return sum(rows) / len(rows)
    if loss_type in ("bnpo", "dapo"):
        return total / active
    return total / (len(rows) * max_length)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_agrees_with_a_plain_reference_on_random_tensors(seed: int, loss_type: str) -> None:
    b = _random_batch(seed + 10, batch=5, length=9)
    out = policy_loss(
        b["logprobs"],
        b["old"],
        b["adv"],
        b["mask"],
        loss_type=loss_type,  # type: ignore[arg-type]
        epsilon_low=0.2,
        epsilon_high=0.28,
        beta=0.04,
        ref_logprobs=b["ref"],
        behaviour_logprobs=b["behaviour"],
        tis_cap=2.0,
        max_length=9,
    )
    expected = _reference_loss(b, loss_type, 0.2, 0.28, 0.04, 2.0, 9)
    assert out.loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_clip_fraction_counts_only_binding_clips() -> None:
    mask = torch.ones((2, 2), dtype=torch.bool)
    logprobs = torch.log(torch.tensor([[1.5, 1.0], [0.5, 1.0]]))
    old = torch.zeros((2, 2))
    # Row 0: A > 0 and rho 1.5 > 1.28 clips; row 1: A < 0 and rho 0.5 < 0.8 clips; rho 1 never does.
    out = policy_loss(logprobs, old, torch.tensor([1.0, -1.0]), mask, epsilon_low=0.2, epsilon_high=0.28)
    assert out.clip_fraction == pytest.approx(0.5)


def test_zero_variance_groups_are_skipped() -> None:
    rewards = torch.tensor(
        [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0], [0.5, 0.5 + 5e-13, 0.5, 0.5], [0.0, 0.0, 0.0, 2e-3]]
    )
    advantages, keep = group_advantages(rewards, scale=True, std_floor=1e-3, zero_std_tolerance=1e-6)
    assert keep.tolist() == [False, True, False, True]
    assert torch.all(advantages[~keep] == 0)
    assert advantages[1].tolist() == pytest.approx([-1.0, 1.0, -1.0, 1.0])


def test_advantages_formula_with_floor_and_without_scaling() -> None:
    rewards = torch.tensor([[0.0, 2e-4, 0.0, 2e-4], [1.0, 2.0, 3.0, 6.0]])
    scaled, _ = group_advantages(rewards, scale=True, std_floor=1e-3)
    # Group 0 has std 1e-4 < floor 1e-3, so it is divided by the floor, not by its std.
    assert scaled[0].tolist() == pytest.approx([-0.1, 0.1, -0.1, 0.1], rel=1e-5)
    r = rewards[1].double()
    expected = (r - r.mean()) / r.std(unbiased=False)
    assert scaled[1].tolist() == pytest.approx(expected.tolist(), rel=1e-6)
    centred, _ = group_advantages(rewards, scale=False)
    assert centred[1].tolist() == pytest.approx([-2.0, -1.0, 0.0, 3.0])


def test_negative_weight_scales_only_the_advantages_below_the_group_mean() -> None:
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    plain, keep = group_advantages(rewards, scale=True)
    weighted, keep_weighted = group_advantages(rewards, scale=True, negative_weight=0.1)
    assert keep_weighted.tolist() == keep.tolist() == [True, False]
    for a, w in zip(plain[0].tolist(), weighted[0].tolist(), strict=True):
        assert w == pytest.approx(a if a >= 0 else 0.1 * a)
    assert weighted[0, 1] > 0 and weighted[0, 0] < 0
    only_better, _ = group_advantages(rewards, scale=True, negative_weight=0.0)
    assert only_better[0].tolist() == pytest.approx([max(a, 0.0) for a in plain[0].tolist()])
    assert torch.equal(group_advantages(rewards, negative_weight=1.0)[0], plain)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="negative_weight must be in"):
            group_advantages(rewards, negative_weight=bad)


def test_token_logprobs_match_log_softmax() -> None:
    logits = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(3))
    ids = torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(4))
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, ids, 0.7), expected, atol=1e-6)
