"""Rollout generation that reuses key/value caches across turns and drops finished rows from the batch.

A `CachedSampler.session()` keeps the keys and values of every sequence it has seen (prompt plus the sampled
tokens fed back), so the next turn of an episode, whose prompt extends its previous sequence, prefills only
the new env tokens; the prompt prefix all rows of a call share (the system prompt and task of a GRPO group)
is prefilled once, and a row whose new tokens far outnumber the others' is prefilled alone rather than padding
every row to it. Rows leave the decode batch as soon as they sample an end token. The prefix every row of a
call has cached (a lockstep rollout's system prompt and tool schemas) is held once, not once a row: each row's
queries attend to it in one batched pass and to the row's own past in another, merged exactly by their
log-sum-exps (`envgym.train.attention`), so a decode step reads those keys and values once instead of once a
row. Token ids and logprobs are those of the distribution each token was sampled from,
`log_softmax(logits / temperature)` over the full vocabulary (greedy at temperature 0), as
`envgym.llm.local.TransformersSampler` returns them.

A session holds keys and values computed with the weights of the moment: open a new one after each update.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from envgym.llm.local import TokenSample
from envgym.train.attention import KeyValues, holds_shared_prefix

# A batched prefill whose padded positions exceed this many times its real ones runs row by row instead.
PADDING_BEFORE_ROWS = 1.5
# A prefix every row of a call has cached is held once when at least this long (shorter ones are not worth a second
# attention pass per layer).
SHARED_PREFIX_MIN = 64


@dataclass
class _Entry:
    """A cached sequence: `kv` holds its positions from `start` on; the first `start` positions are `prefix`, the
    prefix held once by the call that made the entry (shared with that call's other rows, not copied)."""

    token_ids: list[int]
    kv: KeyValues
    prefix: KeyValues | None = None  # per layer (1, kv_heads, start, head_dim)

    @property
    def start(self) -> int:
        return self.prefix[0][0].shape[2] if self.prefix else 0

    def span(self, layer: int, begin: int, end: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Views of positions [begin, end) of `layer`'s keys and values, (kv_heads, n, head_dim) each: one piece, or
        two when the span crosses from the prefix into the entry's own positions."""
        pieces = []
        if self.prefix and begin < self.start:
            keys, values = self.prefix[layer]
            pieces.append((keys[0, :, begin : min(end, self.start)], values[0, :, begin : min(end, self.start)]))
        if end > self.start:
            keys, values = self.kv[layer]
            own = slice(max(begin, self.start) - self.start, end - self.start)
            pieces.append((keys[:, own], values[:, own]))
        return pieces


class _BufferLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of buffers sized once per call (cached prefix, prompt
    suffix and every token the call may sample): a decode step writes its one position in place, where
    `DynamicLayer.update` concatenates, copying the whole cache at every step of every row."""

    def __init__(self, capacity: int, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.capacity = capacity
        self.dtype = dtype  # what the layer stores: the sampler's autocast dtype, or what the states come in
        self.length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self.dtype is not None:  # under autocast, rotated keys come out float32: attention casts them anyway
            key_states, value_states = key_states.to(self.dtype), value_states.to(self.dtype)
        end = self.length + key_states.shape[-2]
        if not self.is_initialized:
            self.device, self.is_initialized = key_states.device, True
            keys, values = _room_behind(key_states, self.capacity), _room_behind(value_states, self.capacity)
            if keys is not None and values is not None:  # already in place: adopt the buffers, copy nothing
                self._keys, self._values, self.length = keys, values, end
                self.keys, self.values = key_states, value_states
                return self.keys, self.values
            self._keys, self._values = self._buffer(key_states, end), self._buffer(value_states, end)
        elif end > self._keys.shape[-2]:  # more than the call planned for: move to larger buffers
            self._keys = torch.cat([self._keys[:, :, : self.length], self._buffer(key_states, end - self.length)], -2)
            self._values = torch.cat([self._values[:, :, : self.length],
                                      self._buffer(value_states, end - self.length)], -2)
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def _buffer(self, like: torch.Tensor, length: int) -> torch.Tensor:
        return like.new_empty((like.shape[0], like.shape[1], max(length, self.capacity), like.shape[3]))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys, self.values = self._keys[:, :, : self.length], self._values[:, :, : self.length]


def _room_behind(states: torch.Tensor, capacity: int) -> torch.Tensor | None:
    """The buffer `states` is the first positions of, when it is one with room for `capacity` positions (the past
    `SamplerSession._padded_past` lays out in the call's buffers); None for any other tensor."""
    base = states._base
    if (base is None or base.dim() != 4 or not base.is_contiguous() or base.data_ptr() != states.data_ptr()
            or base.shape[-2] < capacity or states.stride() != base.stride()
            or (base.shape[0], base.shape[1], base.shape[3]) != (states.shape[0], states.shape[1], states.shape[3])):
        return None
    return base


class _BufferCache(DynamicCache):
    """A `DynamicCache` of `_BufferLayer`s, one per decoder layer, each holding up to `capacity` positions."""

    def __init__(self, layers: int, capacity: int, past: KeyValues | None = None,
                 dtype: torch.dtype | None = None) -> None:
        buffers = [_BufferLayer(capacity, dtype) for _ in range(layers)]
        Cache.__init__(self, layers=list(buffers))
        for layer, (keys, values) in zip(buffers, past or [], strict=False):
            layer.update(keys, values)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for index in range(n):
        if a[index] != b[index]:
            return index
    return n


def causal_lm(model: Any) -> Any:
    """The transformers causal LM inside `model` (a peft wrapper's base model, adapters still active)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


class CachedSampler:
    """Token ids in, sampled ids and their logprobs out, with prefix caching inside a `session()`."""

    def __init__(self, model: Any, tokenizer: Any, dtype: str = "float32") -> None:
        if dtype not in ("float32", "bfloat16"):
            raise ValueError(f"CachedSampler: dtype {dtype!r} is not 'float32' or 'bfloat16'")
        self.model = model
        self.tokenizer = tokenizer
        self.autocast = torch.bfloat16 if dtype == "bfloat16" else None
        eos = tokenizer.eos_token_id
        self.eos_token_ids: set[int] = set(eos if isinstance(eos, list) else [eos])
        self.pad_token_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        self.stats = {"prefill_tokens": 0, "decode_row_steps": 0, "rows_prefilled_alone": 0, "shared_prefix_rows": 0}

    def new_cache(self, lm: Any, capacity: int, past: KeyValues | None) -> DynamicCache:
        """The cache of one call, holding `past` (rows padded to one length) and room for `capacity` positions, in
        the autocast dtype under bfloat16 (the dtype attention casts keys and values to, at every step otherwise:
        rotated keys come out of autocast in float32)."""
        return _BufferCache(lm.config.num_hidden_layers, capacity, past, self.autocast)

    def precision(self) -> Any:
        """The context the sampler's forwards run in: bfloat16 autocast, or nothing (float32)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(next(self.model.parameters()).device.type, dtype=self.autocast)

    @contextlib.contextmanager
    def float32(self) -> Iterator[CachedSampler]:
        """The sampler's forwards in float32 inside the block, whatever its dtype: evaluations run so, and compare
        across runs whose rollouts sampled in either."""
        saved, self.autocast = self.autocast, None
        try:
            yield self
        finally:
            self.autocast = saved

    def session(self) -> SamplerSession:
        """A sampler whose calls share one prefix cache (one rollout group, weights unchanged)."""
        return SamplerSession(self)

    def sample(
        self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int | None = None
    ) -> list[TokenSample]:
        """One continuation per prompt, caching only within this call."""
        return self.session().sample(prompts, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)


def float32(sampler: Any) -> contextlib.AbstractContextManager[Any]:
    """`CachedSampler.float32` for an in-process sampler; nothing for one that is not (an inference server's)."""
    return sampler.float32() if isinstance(sampler, CachedSampler) else contextlib.nullcontext(sampler)


class SamplerSession:
    """The prefix cache of one group of episodes; `sample` has the `Sampler` signature."""

    def __init__(self, owner: CachedSampler) -> None:
        self.owner = owner
        self.tokenizer = owner.tokenizer
        self.eos_token_ids = owner.eos_token_ids
        self.entries: list[_Entry] = []

    def _best(self, prompt: list[int]) -> tuple[_Entry | None, int]:
        best, length = None, 0
        for entry in self.entries:
            common = min(_common_prefix(entry.token_ids, prompt), len(prompt) - 1)
            if common > length:
                best, length = entry, common
        return best, length

    def _add(self, entry: _Entry) -> None:
        # An entry whose ids start another's is redundant: the longer one holds the same keys and values.
        n = len(entry.token_ids)
        self.entries = [e for e in self.entries
                        if not (len(e.token_ids) <= n and entry.token_ids[: len(e.token_ids)] == e.token_ids)]
        self.entries.append(entry)

    def _share_prefix(self, prompts: list[list[int]]) -> None:
        """Prefill the prefix all prompts share once, when no cached entry covers it yet."""
        shared = min(len(p) - 1 for p in prompts)
        for prompt in prompts[1:]:
            shared = min(shared, _common_prefix(prompts[0], prompt))
        if len(prompts) < 2 or shared <= self._best(prompts[0])[1]:
            return
        entry = self._run([prompts[0][:shared]], max_new_tokens=0, temperature=0.0, generator=None)[1][0]
        self._add(entry)

    def _prefill_rows(self, prompts: list[list[int]]) -> None:
        """Prefill each row's uncached tokens but its last one row by row, when one batched prefill would be
        mostly padding: a batch pads every row's new tokens to the longest row's (in a lockstep rollout one row's
        tool result of 300 tokens beside 23 short user replies), and a GRPO rollout's turns padded 3.2x the
        positions they filled (5x the attention; docs/results/grpo_step_profile.md). The batched call that
        follows then prefills one token a row. Same keys and values, computed without the padding."""
        uncached = [len(p) - self._best(p)[1] for p in prompts]
        if len(prompts) < 2 or len(prompts) * max(uncached) <= PADDING_BEFORE_ROWS * sum(uncached):
            return
        for prompt in prompts:
            if len(prompt) - self._best(prompt)[1] > 1:  # rows with one prompt share what the first one prefilled
                self._add(self._run([prompt[:-1]], max_new_tokens=0, temperature=0.0, generator=None)[1][0])
                self.owner.stats["rows_prefilled_alone"] += 1

    def sample(
        self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int | None = None
    ) -> list[TokenSample]:
        if not prompts:
            return []
        if any(not p for p in prompts):
            raise ValueError("CachedSampler.sample: every prompt needs at least one token")
        generator = torch.Generator()
        generator.manual_seed(seed if seed is not None else 0)
        was_training = self.owner.model.training
        self.owner.model.eval()
        try:
            with torch.no_grad(), self.owner.precision():
                self._share_prefix(prompts)
                self._prefill_rows(prompts)
                samples, entries = self._run(prompts, max_new_tokens, temperature, generator)
        finally:
            self.owner.model.train(was_training)
        for entry in entries:
            self._add(entry)
        return samples

    def _run(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float, generator: torch.Generator | None
    ) -> tuple[list[TokenSample], list[_Entry]]:
        """Prefill each prompt's uncached suffix, then decode; returns the samples and each row's cache entry."""
        lm = causal_lm(self.owner.model)
        matches = [self._best(p) for p in prompts]
        past = [length for _, length in matches]
        shared = self._shared_length(prompts, matches) if holds_shared_prefix(lm) else 0
        held = self._held_prefix(matches, shared)
        width_past = max(past) - shared  # each row's own cached past, after the prefix held once
        suffixes = [p[length:] for p, length in zip(prompts, past, strict=True)]
        width = max(len(s) for s in suffixes)
        rows = len(prompts)
        # Row layout: [pad, cached past, pad, uncached suffix]; the last column is every row's last prompt token.
        ids = torch.full((rows, width), self.owner.pad_token_id, dtype=torch.long)
        attention = torch.zeros((rows, width_past + width), dtype=torch.long)
        positions = torch.zeros((rows, width), dtype=torch.long)
        for row, (suffix, length) in enumerate(zip(suffixes, past, strict=True)):
            ids[row, width - len(suffix):] = torch.tensor(suffix)
            attention[row, width_past - (length - shared): width_past] = 1
            attention[row, width_past + width - len(suffix):] = 1
            positions[row, width - len(suffix):] = torch.arange(length, length + len(suffix))
        capacity = width_past + width + max_new_tokens
        cache = self.owner.new_cache(lm, capacity, self._padded_past(matches, width_past, capacity, shared)
                                     if width_past else None)
        extra = {"envgym_shared_prefix": held} if held else {}
        self.owner.stats["prefill_tokens"] += sum(len(s) for s in suffixes)
        self.owner.stats["shared_prefix_rows"] += rows if held else 0
        logits = lm(input_ids=ids, attention_mask=attention, position_ids=positions, cache=cache,
                    use_cache=True, logits_to_keep=1, **extra).logits[:, -1].float()
        fed = [list(p) for p in prompts]
        sampled: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        finished = [False] * rows
        entries: list[_Entry | None] = [None] * rows
        live = list(range(rows))  # batch row -> prompt index
        next_position = positions[:, -1] + 1
        for step in range(max_new_tokens):
            scores = torch.log_softmax(logits if temperature <= 0 else logits / temperature, dim=-1)
            if temperature <= 0:
                chosen = scores.argmax(dim=-1)
            else:
                chosen = torch.multinomial(scores.exp(), 1, generator=generator).squeeze(1)
            picked = scores.gather(-1, chosen.unsqueeze(1)).squeeze(1)
            keep = []
            for batch_row, index in enumerate(live):
                token = int(chosen[batch_row])
                sampled[index].append(token)
                logprobs[index].append(float(picked[batch_row]))
                if token in self.eos_token_ids:
                    finished[index] = True
                elif step + 1 < max_new_tokens:
                    keep.append(batch_row)
                    continue
                entries[index] = self._entry(fed[index], cache, attention, batch_row, held)
            if not keep:
                live = []
                break
            self.owner.stats["decode_row_steps"] += len(keep)
            index_tensor = torch.tensor(keep)
            if len(keep) < len(live):
                cache.batch_select_indices(index_tensor)
                attention, next_position, chosen = attention[index_tensor], next_position[index_tensor], chosen[index_tensor]
            live = [live[r] for r in keep]
            for index in live:
                fed[index].append(sampled[index][-1])
            attention = torch.cat([attention, torch.ones((len(live), 1), dtype=torch.long)], dim=1)
            logits = lm(input_ids=chosen.unsqueeze(1), attention_mask=attention,
                        position_ids=next_position.unsqueeze(1), cache=cache, use_cache=True,
                        **extra).logits[:, -1].float()
            next_position = next_position + 1
        for batch_row, index in enumerate(live):  # max_new_tokens == 0: the prompts themselves are cached
            entries[index] = self._entry(fed[index], cache, attention, batch_row, held)
        samples = [TokenSample(sampled[i], logprobs[i], finished[i]) for i in range(rows)]
        return samples, [e for e in entries if e is not None]

    @staticmethod
    def _shared_length(prompts: list[list[int]], matches: list[tuple[_Entry | None, int]]) -> int:
        """The prefix held once in this call, when at least `SHARED_PREFIX_MIN` long (else 0): with several rows, the
        prefix every row has cached and every prompt shares; a row alone keeps pointing at the prefix its entry holds
        (rather than copying it into its cache and its new entry)."""
        if len(prompts) < 2:
            entry, length = matches[0]
            shared = min(entry.start, length) if entry is not None else 0
        else:
            shared = min(length for _, length in matches)
            for prompt in prompts[1:]:
                shared = min(shared, _common_prefix(prompts[0], prompt))
        return shared if shared >= SHARED_PREFIX_MIN else 0

    @staticmethod
    def _held_prefix(matches: list[tuple[_Entry | None, int]], shared: int) -> KeyValues:
        """The keys and values of the first `shared` positions, once for all rows: (1, kv_heads, shared, dim); views
        of the prefix an earlier call held, when it covers them."""
        if not shared:
            return []
        entry = next(e for e, _ in matches if e is not None)
        if entry.prefix and entry.start >= shared:
            return [(keys[:, :, :shared], values[:, :, :shared]) for keys, values in entry.prefix]
        out = []
        for layer in range(len(entry.kv)):
            pieces = entry.span(layer, 0, shared)
            out.append((torch.cat([k for k, _ in pieces], dim=1).unsqueeze(0),
                        torch.cat([v for _, v in pieces], dim=1).unsqueeze(0)))
        return out

    @staticmethod
    def _padded_past(matches: list[tuple[_Entry | None, int]], width: int, capacity: int,
                     start: int = 0) -> KeyValues:
        """Every row's cached keys and values from position `start` (after a prefix held once), right-aligned in
        `width` positions behind zeros: views of buffers with room for `capacity` positions, which the call's
        `_BufferCache` adopts as they are (one copy of each row's past a call, where padding, stacking and the
        cache's first update made three)."""
        reference = next(e for e, _ in matches if e is not None).kv
        out: KeyValues = []
        for layer_keys, layer_values in reference:
            heads, dim = layer_keys.shape[0], layer_keys.shape[2]
            keys = layer_keys.new_empty((len(matches), heads, capacity, dim))
            values = layer_values.new_empty(keys.shape)
            out.append((keys, values))
        for row, (entry, length) in enumerate(matches):
            own = max(length - start, 0)
            pad = width - own
            for layer, (keys, values) in enumerate(out if entry is not None and own else []):
                at = pad
                for key, value in entry.span(layer, start, length):  # type: ignore[union-attr]
                    keys[row, :, at : at + key.shape[1]] = key
                    values[row, :, at : at + key.shape[1]] = value
                    at += key.shape[1]
            if pad:
                for keys, values in out:
                    keys[row, :, :pad] = 0
                    values[row, :, :pad] = 0
        return [(keys[:, :, :width], values[:, :, :width]) for keys, values in out]

    @staticmethod
    def _entry(fed: list[int], cache: DynamicCache, attention: torch.Tensor, batch_row: int,
               held: KeyValues) -> _Entry:
        real = attention[batch_row, : cache.get_seq_length()].bool()
        layers: list[Any] = list(cache.layers)
        kv = [(layer.keys[batch_row][:, real], layer.values[batch_row][:, real]) for layer in layers]
        entry = _Entry(list(fed), kv, held or None)  # the row's whole sequence: the held prefix, then its own positions
        if entry.start + int(real.sum()) != len(fed):
            raise RuntimeError(f"CachedSampler: {entry.start + int(real.sum())} cached positions for {len(fed)} tokens")
        return entry
