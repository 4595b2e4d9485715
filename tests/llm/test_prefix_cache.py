"""Prefix reuse in the local sampler: a prompt that starts like the last one runs only its new tokens, and samples
what a full recomputation samples (same ids; logprobs to float tolerance)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from envgym.llm.local import TransformersSampler  # noqa: E402
from envgym.llm.prefix import prefix_cache  # noqa: E402


def _tiny_model() -> object:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=101)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_shared_head_is_reused_and_sampling_matches_a_full_recompute(temperature: float) -> None:
    model = _tiny_model()
    tokenizer = SimpleNamespace(eos_token_id=100, pad_token_id=0)
    plain = TransformersSampler(model, tokenizer)
    cached = TransformersSampler(model, tokenizer, reuse_prefix=True)
    head = [(7 * i) % 90 + 1 for i in range(60)]
    first, second = [*head, 5, 6, 7], [*head, 9, 8]
    for prompt in (first, second):
        want = plain.sample([prompt], max_new_tokens=8, temperature=temperature, seed=3)[0]
        got = cached.sample([prompt], max_new_tokens=8, temperature=temperature, seed=3)[0]
        assert got.token_ids == want.token_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert prefix_cache(model).reused_tokens == len(head)
    # Without reuse_prefix nothing is cached.
    other = _tiny_model()
    TransformersSampler(other, tokenizer).sample([first], max_new_tokens=2, temperature=0.0)
    assert prefix_cache(other).cache is None
