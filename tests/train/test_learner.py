"""The learner's passes (shared prefix once, trained positions only) against plain whole-sequence forwards."""

from __future__ import annotations

import contextlib

import pytest
import torch

from envgym.train import attention, learner
from envgym.train.learner import StepBatches
from envgym.train.loss import token_logprobs
from envgym.train.policy import tiny_random_policy
from envgym.train.tokens import TokenSample


def _sample(prompt: list[int], turns: list[tuple[list[int], int]]) -> TokenSample:
    sample = TokenSample()
    sample.extend(prompt, 0)
    for ids, bit in turns:
        sample.extend(ids, bit, [-1.0] * len(ids) if bit else None)
    return sample


SAMPLES = [
    _sample([1, 5, 9, 13, 17, 21], [([30, 31, 32], 1), ([40, 41], 0), ([50, 51, 52, 53], 1)]),
    _sample([1, 5, 9, 13, 17, 21], [([33, 34], 1)]),
    _sample([1, 5, 9, 13, 17, 21, 25], [([60, 61, 62, 63, 64], 1)]),  # a longer prompt, e.g. a split sample
]


def _plain_weighted_sum(model: torch.nn.Module, samples: list[TokenSample]) -> torch.Tensor:
    total = torch.zeros(())
    for index, sample in enumerate(samples):
        ids = torch.tensor([sample.token_ids])
        logits = model(input_ids=ids).logits[:, :-1]
        logprobs = token_logprobs(logits, ids[:, 1:], 0.7)[0]
        mask = torch.tensor(sample.mask[1:], dtype=torch.bool)
        total = total + (index + 1) * logprobs[mask].sum()
    return total


@pytest.mark.parametrize("micro_batch_size", [1, 2])
def test_prefix_once_and_trained_positions_only_give_the_plain_values_and_gradients(micro_batch_size: int) -> None:
    model, _ = tiny_random_policy(seed=7)
    model.train()
    _plain_weighted_sum(model, SAMPLES).backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    batches = StepBatches(SAMPLES, micro_batch_size, pad_token_id=0)
    assert batches.prefix_length == 5  # the shared prompt, less its last token (it scores the first trained one)
    prefix = batches.prefix_forward(model, grad=True)
    values = {}
    for micro in batches.micro:
        logprobs = batches.logprobs(model, micro, 0.7, prefix)
        weights = torch.tensor([row + 1.0 for row in micro.rows]).unsqueeze(1)
        (logprobs * micro.mask * weights).sum().backward()
        for row, r in enumerate(micro.rows):
            values[r] = logprobs[row][micro.mask[row]].detach()
    prefix.backward()

    with torch.no_grad():
        for r, sample in enumerate(SAMPLES):
            ids = torch.tensor([sample.token_ids])
            plain = token_logprobs(model(input_ids=ids).logits[:, :-1], ids[:, 1:], 0.7)[0]
            assert torch.allclose(values[r], plain[torch.tensor(sample.mask[1:], dtype=torch.bool)], atol=1e-5)
    got = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    for name, grad in expected.items():  # equal up to float32 summation order
        assert (got[name] - grad).abs().max() <= 1e-5 * grad.abs().max(), name


# Two samples that share only their first token: not worth a prefix when each micro-batch is one row.
MIXED = [
    _sample([1, 5, 9, 13, 17, 21, 25, 29], [([30, 31, 32], 1), ([40, 41], 0), ([50, 51, 52], 1)]),
    _sample([1, 6, 10, 14, 18, 22, 26], [([33, 34, 35, 36], 1)]),
]


@pytest.mark.parametrize(("micro_batch_size", "prefix"), [(1, 0), (2, 1)])
def test_a_short_shared_prefix_is_run_whole_on_one_row_micro_batches(micro_batch_size: int, prefix: int) -> None:
    """Sharing 1 token of 16 and 11 would put both one-row micro-batches on the masked attention path to save
    one position: they run whole (no mask, the fused causal kernel) and give the plain values and gradients. A
    padded micro-batch needs the mask anyway, so there the prefix is kept."""
    model, _ = tiny_random_policy(seed=3)
    model.train()
    _plain_weighted_sum(model, MIXED).backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    batches = StepBatches(MIXED, micro_batch_size, pad_token_id=0)
    assert batches.prefix_length == prefix
    state = batches.prefix_forward(model, grad=True)
    for micro in batches.micro:
        weights = torch.tensor([row + 1.0 for row in micro.rows]).unsqueeze(1)
        (batches.logprobs(model, micro, 0.7, state) * micro.mask * weights).sum().backward()
    state.backward()
    for name, grad in expected.items():
        got = dict(model.named_parameters())[name].grad
        assert got is not None and (got - grad).abs().max() <= 1e-5 * grad.abs().max(), name


def _values_and_grads(model: torch.nn.Module, dtype: str, transformers_mask: bool) -> tuple[list[torch.Tensor],
                                                                                          list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    batches = StepBatches(SAMPLES, 2, pad_token_id=0, dtype=dtype)
    if transformers_mask:  # the 2D mask: transformers builds its boolean 4D mask from it
        batches._additive_mask = lambda micro, dtype: micro.attention  # type: ignore[method-assign]
    prefix = batches.prefix_forward(model, grad=True)
    values = []
    for micro in batches.micro:
        logprobs = batches.logprobs(model, micro, 0.7, prefix)
        (logprobs * micro.mask).sum().backward()
        values.append(logprobs.detach())
    prefix.backward()
    return values, [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_additive_mask_gives_exactly_what_the_boolean_mask_gives(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an attention that cannot take the prefix apart (the masked path), the mask made once per micro-batch
    (0 / -inf, in the attention's dtype) is the one SDPA would make from transformers' boolean mask in every layer:
    the same values and gradients, bit for bit, with a padded row."""
    monkeypatch.setattr(learner, "holds_shared_prefix", lambda lm: False)
    model, _ = tiny_random_policy(seed=11)
    model.train()
    batches = StepBatches(SAMPLES, 2, pad_token_id=0)
    assert any(micro.padding for micro in batches.micro)  # the mask has padding to hide, not only causality
    values, grads = _values_and_grads(model, dtype, transformers_mask=False)
    expected_values, expected_grads = _values_and_grads(model, dtype, transformers_mask=True)
    assert all(torch.equal(a, b) for a, b in zip(values, expected_values, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(grads, expected_grads, strict=True))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_on_a_shared_prefix_the_rows_attend_it_once_and_their_own_tokens_causally_without_a_mask(
    dtype: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With transformers' sdpa (the wrapper in `envgym.train.attention`), a micro-batch on top of the prefix runs
    the prefix pass and a causal pass over its own tokens, no mask, padded rows included; it gives the masked
    path's values and gradients (float32 to 1e-5; in bfloat16 no farther from float32's than the masked path)."""
    model, _ = tiny_random_policy(seed=11)
    model.train()
    calls: list[bool] = []
    original = attention._SharedPrefixAttention.apply

    def spy(*args: object) -> torch.Tensor:
        calls.append(args[5] is None and bool(args[7]))  # no mask, causal
        return original(*args)

    monkeypatch.setattr(attention._SharedPrefixAttention, "apply", spy)
    values, grads = _values_and_grads(model, dtype, transformers_mask=False)
    layers = model.config.num_hidden_layers
    assert calls == [True] * layers * 2  # two micro-batches, one of them padded, every layer
    monkeypatch.setattr(learner, "holds_shared_prefix", lambda lm: False)
    masked = _values_and_grads(model, dtype, transformers_mask=False)
    exact = _values_and_grads(model, "float32", transformers_mask=False)
    assert len(calls) == layers * 2
    for mine, theirs, truth in zip([*values, *grads], [*masked[0], *masked[1]], [*exact[0], *exact[1]], strict=True):
        if dtype == "float32":
            assert (mine - theirs).abs().max() <= 1e-5 * max(float(theirs.abs().max()), 1.0)
        else:
            masked_error = max(float((theirs - truth).abs().max()), 1e-3 * float(truth.abs().max()))
            assert (mine - truth).abs().max() <= 2 * masked_error


def test_the_additive_mask_hides_padding_and_the_future_but_never_the_prefix() -> None:
    batches = StepBatches(SAMPLES, 2, pad_token_id=0)
    micro = batches.micro[0]  # two rows, the shorter one padded
    mask = batches._additive_mask(micro, torch.float32)
    start, width = batches.prefix_length, micro.ids.shape[1]
    assert mask.shape == (2, 1, width, start + width)
    for row in range(2):
        for query in range(width):
            for key in range(start + width):
                attends = key < start or (key <= start + query and bool(micro.attention[row, key]))
                assert float(mask[row, 0, query, key]) == (0.0 if attends else float("-inf"))


def test_micro_batches_are_length_sorted_and_pad_little() -> None:
    batches = StepBatches(SAMPLES, 2, pad_token_id=0)
    lengths = [[len(SAMPLES[r].token_ids) for r in micro.rows] for micro in batches.micro]
    assert lengths == [[15, 12], [8]]
    assert batches.padding_tokens == 3  # 10 - 7 after the 5-token prefix
    assert batches.forwarded_tokens == 5 + 2 * 10 + 3


def _passes(model: torch.nn.Module, dtype: str) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """Trained-position log-probabilities per sample and the flattened gradient of their weighted sum."""
    model.zero_grad(set_to_none=True)
    batches = StepBatches(SAMPLES, 2, pad_token_id=0, dtype=dtype)
    prefix = batches.prefix_forward(model, grad=True)
    values = {}
    for micro in batches.micro:
        logprobs = batches.logprobs(model, micro, 0.7, prefix)
        assert logprobs.dtype == torch.float32
        weights = torch.tensor([row + 1.0 for row in micro.rows]).unsqueeze(1)
        (logprobs * micro.mask * weights).sum().backward()
        for row, r in enumerate(micro.rows):
            values[r] = logprobs[row][micro.mask[row]].detach()
    prefix.backward()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32
               for p in model.parameters() if p.grad is not None)
    return values, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).double()


def test_bfloat16_passes_run_under_autocast_and_stay_close_to_float32() -> None:
    model, _ = tiny_random_policy(seed=7)
    model.train()
    exact, exact_grad = _passes(model, "float32")
    low, low_grad = _passes(model, "bfloat16")
    differences = torch.cat([(exact[r] - low[r]).abs() for r in exact])
    assert differences.max() > 0  # the decoder really ran in bfloat16
    assert differences.max() < 0.05, differences.max()
    cosine = torch.nn.functional.cosine_similarity(exact_grad, low_grad, dim=0)
    assert cosine > 0.99, cosine
    assert 0.95 < float(low_grad.norm() / exact_grad.norm()) < 1.05


def test_an_unknown_learner_dtype_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'float16'"):
        StepBatches(SAMPLES, 2, pad_token_id=0, dtype="float16")


def test_a_tied_embedding_takes_a_sparse_lookup_gradient_and_keeps_a_dense_grad(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookups of an embedding tied to the output head backpropagate sparse rows (no zeroed vocabulary-sized
    matrix per micro-batch); the weight's `.grad` is dense and the same as with dense lookups."""
    model, _ = tiny_random_policy(seed=5)
    model.train()
    embedding = model.get_input_embeddings()
    seen: list[bool] = []
    original = torch.nn.functional.embedding

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append(bool(kwargs.get("sparse", args[6] if len(args) > 6 else False)))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.nn.functional, "embedding", spy)
    _, sparse_grads = _values_and_grads(model, "float32", transformers_mask=False)
    assert seen and all(seen) and embedding.sparse is False  # every lookup sparse while the pass ran, then restored
    assert embedding.weight.grad is not None and embedding.weight.grad.layout == torch.strided
    monkeypatch.setattr(learner, "_sparse_embedding_gradient", lambda lm: contextlib.nullcontext())
    seen.clear()
    _, dense_grads = _values_and_grads(model, "float32", transformers_mask=False)
    assert seen and not any(seen)
    for sparse, dense in zip(sparse_grads, dense_grads, strict=True):
        assert (sparse - dense).abs().max() <= 1e-6 * dense.abs().max()
