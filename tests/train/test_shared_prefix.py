"""The prefix all rows of a sampler call share, held once: the attention it computes is SDPA's over the prefix and
each row's own past laid end to end, and the sampler samples what it samples without it."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from envgym.llm.local import TransformersSampler
from envgym.train import generation
from envgym.train.attention import shared_prefix_attention
from envgym.train.generation import CachedSampler
from envgym.train.policy import tiny_random_policy

BATCH, KV_HEADS, GROUPS, DIM, SHARED, OWN = 3, 2, 3, 8, 5, 7
# Each row's own past is left-padded by this many positions. Row 2's first new query has no own key to attend (a
# padded query of a row whose whole past is the prefix): it attends to the prefix alone.
PADS = (2, 0, 4)


def _case(length: int, seed: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    keys, values = rand(BATCH, KV_HEADS, OWN, DIM), rand(BATCH, KV_HEADS, OWN, DIM)
    shared = [(rand(1, KV_HEADS, SHARED, DIM), rand(1, KV_HEADS, SHARED, DIM))]
    query = rand(BATCH, KV_HEADS * GROUPS, length, DIM)
    # transformers' boolean mask for the own part: the row's real past, and its new tokens causally.
    mask = torch.ones(BATCH, 1, length, OWN, dtype=torch.bool)
    for row, pad in enumerate(PADS):
        mask[row, :, :, :pad] = False
    mask[:, :, :, OWN - length:] &= torch.ones(length, length, dtype=torch.bool).tril()
    return {"query": query, "keys": keys, "values": values, "shared": shared, "mask": mask}


def _sdpa_over_both(case: dict[str, Any], scale: float) -> torch.Tensor:
    """What transformers' sdpa attention computes with the shared prefix copied into every row's past."""
    (shared_keys, shared_values), = case["shared"]
    keys = torch.cat([shared_keys.expand(BATCH, -1, -1, -1), case["keys"]], dim=2)
    values = torch.cat([shared_values.expand(BATCH, -1, -1, -1), case["values"]], dim=2)
    mask = case["mask"]
    if mask is not None:
        mask = torch.cat([torch.ones(*mask.shape[:3], SHARED, dtype=torch.bool), mask], dim=-1)
    else:  # no own past and no padding: the prefix, then the rows' own tokens causally
        length = case["query"].shape[2]
        mask = torch.cat([torch.ones(length, SHARED, dtype=torch.bool),
                          torch.ones(length, length, dtype=torch.bool).tril()], dim=-1)
    out = F.scaled_dot_product_attention(case["query"], keys.repeat_interleave(GROUPS, dim=1),
                                         values.repeat_interleave(GROUPS, dim=1), attn_mask=mask, scale=scale)
    return out.transpose(1, 2)


@pytest.mark.parametrize("length", [1, 4])
def test_attention_over_a_prefix_held_once_is_sdpa_over_the_prefix_and_each_rows_past(length: int) -> None:
    layer = types.SimpleNamespace(layer_idx=0)
    case = _case(length, seed=length)
    got, weights = shared_prefix_attention(layer, case["query"], case["keys"], case["values"], case["mask"],
                                           case["shared"], scaling=0.3)
    expected = _sdpa_over_both(case, scale=0.3)
    assert weights is None and got.shape == (BATCH, length, KV_HEADS * GROUPS, DIM)
    assert (got - expected).abs().max() < 1e-5
    # Under bfloat16 autocast it is as close to float32 as SDPA's own bfloat16 pass is.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, _ = shared_prefix_attention(layer, case["query"], case["keys"], case["values"], case["mask"],
                                         case["shared"], scaling=0.3)
        theirs = _sdpa_over_both(case, scale=0.3)
    assert low.dtype == theirs.dtype == torch.bfloat16
    assert (low.float() - expected).abs().max() < 3 * max(float((theirs.float() - expected).abs().max()), 1e-3)


def test_without_a_mask_the_rows_own_tokens_attend_causally() -> None:
    layer = types.SimpleNamespace(layer_idx=0)
    case = _case(OWN, seed=7)
    case["mask"] = None
    got, _ = shared_prefix_attention(layer, case["query"], case["keys"], case["values"], None, case["shared"],
                                     scaling=0.3)
    assert (got - _sdpa_over_both(case, scale=0.3)).abs().max() < 1e-5
    with pytest.raises(ValueError, match="as many keys as queries"):
        shared_prefix_attention(layer, case["query"][:, :, :3], case["keys"], case["values"], None, case["shared"])


def _gradients(case: dict[str, Any], attend: Any) -> list[torch.Tensor]:
    """Gradients of a fixed weighting of `attend(case)`'s output in the queries, both sets of keys and values."""
    leaves = {name: case[name].detach().clone().requires_grad_(True) for name in ("query", "keys", "values")}
    (shared_keys, shared_values), = case["shared"]
    shared = [(shared_keys.detach().clone().requires_grad_(True), shared_values.detach().clone().requires_grad_(True))]
    out = attend({**case, **leaves, "shared": shared})
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    (out.float() * weights).sum().backward()
    return [leaves["query"].grad, leaves["keys"].grad, leaves["values"].grad, shared[0][0].grad, shared[0][1].grad]


@pytest.mark.parametrize("length", [1, 3, OWN])
def test_its_gradients_are_those_of_sdpa_over_the_prefix_and_each_rows_past(length: int) -> None:
    """The backward runs the kernel's own backward on each pass with the merged output and log-sum-exp: the query
    gradients of the two passes add, the prefix's keys and values get the gradient of every row that attends them.
    Decode (one query, the key/value head's query heads as its length), masked prefill with padded rows and a query
    with no own key, and the causal prefill the learner runs (no mask)."""
    layer = types.SimpleNamespace(layer_idx=0)
    case = _case(length, seed=20 + length)
    if length == OWN:
        case["mask"] = None

    def ours(c: dict[str, Any]) -> torch.Tensor:
        return shared_prefix_attention(layer, c["query"], c["keys"], c["values"], c["mask"], c["shared"],
                                       scaling=0.3)[0]

    got, expected = _gradients(case, ours), _gradients(case, lambda c: _sdpa_over_both(c, scale=0.3))
    for name, a, b in zip(("query", "keys", "values", "shared keys", "shared values"), got, expected, strict=True):
        assert a.shape == b.shape and (a - b).abs().max() <= 1e-5 * b.abs().max(), name
    # Under bfloat16 autocast each gradient is as close to float32's as SDPA's own bfloat16 backward is.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = _gradients(case, ours)
        theirs = _gradients(case, lambda c: _sdpa_over_both(c, scale=0.3))
    for name, a, b, exact in zip(("query", "keys", "values", "shared keys", "shared values"), low, theirs, expected,
                                 strict=True):
        assert (a - exact).abs().max() <= 3 * max(float((b - exact).abs().max()), 1e-2 * float(exact.abs().max())), name


# ---------------------------------------------------------------------------------------------------- the sampler

SYSTEM = "<|im_start|>system\n" + "Use the calculator and answer with the exact value it returns. " * 8 + "<|im_end|>\n"


def _prompts(tokenizer: Any) -> list[list[int]]:
    return [tokenizer(f"{SYSTEM}<|im_start|>user\nWhat is {a} * 4?<|im_end|>\n<|im_start|>assistant\n",
                      add_special_tokens=False)["input_ids"] for a in (3, 5, 7)]


def _turns(session: Any, tokenizer: Any, temperature: float) -> list[list[Any]]:
    """Three turns of three rows, each prompt extended by its answer and a user reply."""
    reply = tokenizer("<|im_end|>\n<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n",
                      add_special_tokens=False)["input_ids"]
    prompts, turns = _prompts(tokenizer), []
    for turn in range(3):
        samples = session.sample(prompts, max_new_tokens=6, temperature=temperature, seed=turn)
        turns.append(samples)
        prompts = [p + s.token_ids + reply for p, s in zip(prompts, samples, strict=True)]
    return turns


@pytest.mark.slow
def test_a_sampler_holding_the_shared_prefix_once_samples_what_a_plain_forward_does() -> None:
    model, tokenizer = tiny_random_policy(seed=11)
    assert model.config._attn_implementation == "sdpa"
    cached = CachedSampler(model, tokenizer)
    prompts = _prompts(tokenizer)
    shared = generation._common_prefix(prompts[0], prompts[1])
    assert shared >= generation.SHARED_PREFIX_MIN
    plain = TransformersSampler(model, tokenizer)
    session = cached.session()
    for turn, samples in enumerate(_turns(session, tokenizer, 0.0)):
        # Greedy on the whole sequences, uncached, gives the same tokens and logprobs.
        if turn == 0:
            expected = plain.sample(prompts, max_new_tokens=6, temperature=0.0)
            assert [s.token_ids for s in samples] == [s.token_ids for s in expected]
            for mine, theirs in zip(samples, expected, strict=True):
                assert max(abs(a - b) for a, b in zip(mine.logprobs, theirs.logprobs, strict=True)) < 1e-4
    assert cached.stats["shared_prefix_rows"] == 9  # every call of the three turns held the prefix once
    # Every cached entry is its row's whole sequence: the prefix held once, shared by the rows, then its own positions.
    assert len(session.entries) == 3 and all(e.start >= shared for e in session.entries)
    assert all(e.start + e.kv[0][0].shape[1] == len(e.token_ids) for e in session.entries)
    assert len({e.prefix[0][0].data_ptr() for e in session.entries if e.prefix}) == 1


@pytest.mark.slow
def test_sampled_turns_are_those_of_the_sampler_with_every_row_keeping_its_own_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, tokenizer = tiny_random_policy(seed=11)
    held = CachedSampler(model, tokenizer)
    with_prefix = _turns(held.session(), tokenizer, 1.0)
    monkeypatch.setattr(generation, "SHARED_PREFIX_MIN", 10**9)
    whole = CachedSampler(model, tokenizer)
    without = _turns(whole.session(), tokenizer, 1.0)
    assert held.stats["shared_prefix_rows"] == 9 and whole.stats["shared_prefix_rows"] == 0
    assert [[s.token_ids for s in t] for t in with_prefix] == [[s.token_ids for s in t] for t in without]
    for mine, theirs in zip(with_prefix, without, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


@pytest.mark.slow
def test_rows_prefilled_alone_point_at_the_held_prefix_and_sample_what_a_plain_forward_does() -> None:
    # A turn where one row's reply is long: rows are prefilled one by one (`_prefill_rows`), each on top of the prefix
    # the first call held, which its new entry keeps pointing at instead of copying.
    model, tokenizer = tiny_random_policy(seed=11)
    cached, plain = CachedSampler(model, tokenizer), TransformersSampler(model, tokenizer)
    session = cached.session()
    prompts = [_prompts(tokenizer)[0]] * 4
    first = session.sample(prompts, max_new_tokens=5, temperature=0.0)
    held = {e.prefix[0][0].data_ptr() for e in session.entries if e.prefix}
    assert len(held) == 1
    replies = ["<|im_start|>tool\n" + "12, " * 40, "<|im_start|>user\nOk.", "<|im_start|>user\nGo on.",
               "<|im_start|>user\nYes, please."]
    prompts = [p + s.token_ids + tokenizer(f"<|im_end|>\n{r}<|im_end|>\n<|im_start|>assistant\n",
                                            add_special_tokens=False)["input_ids"]
               for p, s, r in zip(prompts, first, replies, strict=True)]
    before = dict(cached.stats)
    got = session.sample(prompts, max_new_tokens=6, temperature=0.0)
    assert cached.stats["rows_prefilled_alone"] - before["rows_prefilled_alone"] == 4
    # The prefix the four rows now share prefilled once, each row alone, then the four together: all on the held one.
    assert cached.stats["shared_prefix_rows"] - before["shared_prefix_rows"] == 1 + 4 + 4
    expected = plain.sample(prompts, max_new_tokens=6, temperature=0.0)
    assert [s.token_ids for s in got] == [s.token_ids for s in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert max(abs(a - b) for a, b in zip(mine.logprobs, theirs.logprobs, strict=True)) < 1e-4


@pytest.mark.slow
def test_a_model_on_another_attention_keeps_every_rows_prefix() -> None:
    # The prefix is passed to transformers' sdpa attention, which this module wraps; eager attention would ignore it.
    model, tokenizer = tiny_random_policy(seed=11)
    model.set_attn_implementation("eager")
    cached = CachedSampler(model, tokenizer)
    samples = cached.sample(_prompts(tokenizer), max_new_tokens=4, temperature=0.0)
    expected = TransformersSampler(model, tokenizer).sample(_prompts(tokenizer), max_new_tokens=4, temperature=0.0)
    assert cached.stats["shared_prefix_rows"] == 0
    assert [s.token_ids for s in samples] == [s.token_ids for s in expected]
