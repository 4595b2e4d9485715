"""The buffered key/value cache of `CachedSampler` holds what transformers' concatenating `DynamicCache` holds."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from envgym.train.generation import SamplerSession, _BufferCache, _Entry


def _kv(rows: int, length: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(rows, 3, length, 4, generator=generator), torch.randn(rows, 3, length, 4, generator=generator)


def test_buffered_cache_matches_concatenating_cache_through_drops_and_growth() -> None:
    generator = torch.Generator().manual_seed(0)
    past = [_kv(4, 5, generator) for _ in range(2)]
    # Room for 3 more positions: the 4 written below outgrow it, so the buffers must move without losing a value.
    buffered, plain = _BufferCache(2, capacity=8, past=past), DynamicCache(ddp_cache_data=past)
    for step in range(4):
        for layer in range(2):
            keys, values = _kv(len(buffered.layers[0].keys), 1, generator)
            got = buffered.update(keys, values, layer)
            expected = plain.update(keys, values, layer)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
        if step == 1:  # rows 1 and 3 finished: both caches keep rows 0 and 2
            buffered.batch_select_indices(torch.tensor([0, 2]))
            plain.batch_select_indices(torch.tensor([0, 2]))
    assert buffered.get_seq_length() == plain.get_seq_length() == 9
    for mine, theirs in zip(buffered.layers, plain.layers, strict=True):
        assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)


def test_a_fresh_buffered_cache_starts_at_its_first_update() -> None:
    generator = torch.Generator().manual_seed(1)
    cache = _BufferCache(1, capacity=6)
    assert cache.get_seq_length() == 0
    keys, values = _kv(2, 4, generator)
    cache.update(keys, values, 0)
    more = _kv(2, 2, generator)
    got_keys, got_values = cache.update(*more, 0)
    assert torch.equal(got_keys, torch.cat([keys, more[0]], dim=-2))
    assert torch.equal(got_values, torch.cat([values, more[1]], dim=-2))
    assert cache.get_seq_length() == 6


def test_the_padded_past_is_laid_out_in_the_calls_buffers_and_adopted_without_a_copy() -> None:
    generator = torch.Generator().manual_seed(2)
    layers, width, capacity = 2, 6, 9
    entries = [_Entry(list(range(n)), [tuple(t[0] for t in _kv(1, n, generator)) for _ in range(layers)])  # type: ignore[misc]
               for n in (6, 4, 7)]
    matches = [(entries[0], 6), (entries[1], 3), (None, 0), (entries[2], 5)]  # a row may use a prefix of its entry
    past = SamplerSession._padded_past(matches, width, capacity)
    for layer, (keys, values) in enumerate(past):
        for tensor, part in ((keys, 0), (values, 1)):
            expected = torch.stack([
                torch.nn.functional.pad(e.kv[layer][part][:, :n] if e is not None else tensor.new_zeros(3, 0, 4),
                                        (0, 0, width - n, 0))
                for e, n in matches])
            assert torch.equal(tensor, expected)
    cache, plain = _BufferCache(layers, capacity, past), DynamicCache(ddp_cache_data=past)
    assert cache.layers[0].keys.data_ptr() == past[0][0].data_ptr()  # adopted, not copied
    for _ in range(capacity - width + 1):  # through the planned room and one position past it
        for layer in range(layers):
            step = _kv(4, 1, generator)
            got, expected = cache.update(*step, layer), plain.update(*step, layer)
            assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_a_past_that_is_a_view_without_room_is_copied_not_adopted() -> None:
    generator = torch.Generator().manual_seed(3)
    keys, values = _kv(2, 8, generator)
    past = [(keys[:, :, :5], values[:, :, :5])]  # the first positions of a tensor with room for 8, not 10
    cache = _BufferCache(1, capacity=10, past=past)
    assert cache.layers[0].keys.data_ptr() != keys.data_ptr()
    cache.update(*_kv(2, 1, generator), 0)
    assert torch.equal(keys[:, :, 5:6], _kv(2, 8, torch.Generator().manual_seed(3))[0][:, :, 5:6])  # untouched
