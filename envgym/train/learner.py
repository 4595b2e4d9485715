"""The learner's forward passes: length-sorted micro-batches, the shared prompt prefix computed once per step,
and logits and logsumexp only at the positions that are trained.

Every sample of a step starts with the same tokens (the system prompt, and with one task per step the user's
request too). `StepBatches.prefix_forward` runs that prefix once; each micro-batch then runs only its samples'
remaining tokens on top of the prefix's keys and values. Gradients flowing into those keys and values are
summed over the micro-batches and pushed through the prefix in one backward (`PrefixState.backward`),
so the gradient is exactly that of running every sample whole. Samples that share only a few tokens (an SFT
batch mixing domains) skip the prefix and run whole, which lets one-row micro-batches use the fused causal
attention kernel (`_worth_sharing`). Only positions whose next token has mask 1 go
through the output head (`token_logprobs` on an (N, V) matrix instead of (B, T, V)).

With `dtype="bfloat16"` the decoder's passes run under autocast (bfloat16 matmuls, about 2.5x faster
on a CPU with AVX512-BF16, but 3.5-3.8x slower on one without it: docs/results/grpo_step_profile.md); the
output head and the log-probabilities stay float32, as do the weights, their gradients and the optimizer state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from envgym.train.attention import KeyValues, holds_shared_prefix
from envgym.train.generation import causal_lm
from envgym.train.loss import token_logprobs
from envgym.train.tokens import TokenSample


@dataclass
class MicroBatch:
    """Samples' tokens after the shared prefix, right-padded. Position t of `mask`/`behaviour` scores token
    t + 1 of `ids` (the first of `ids` is scored from the prefix's last position, never trained)."""

    rows: list[int]  # indices into the step's sample list
    ids: torch.Tensor  # (B, R)
    attention: torch.Tensor  # (B, P + R)
    mask: torch.Tensor  # (B, R - 1) bool
    behaviour: torch.Tensor  # (B, R - 1)
    padding: int


def _shared_prefix(samples: list[TokenSample]) -> int:
    """Tokens every sample shares, stopping one before the first trained token's predecessor."""
    first = samples[0].token_ids
    shared = min(len(s.token_ids) for s in samples) - 1
    for sample in samples[1:]:
        ids = sample.token_ids
        limit = min(shared, len(ids))
        index = 0
        while index < limit and ids[index] == first[index]:
            index += 1
        shared = index
    for sample in samples:
        shared = min(shared, sample.mask.index(1) - 1)
    return max(shared, 0)


def _worth_sharing(samples: list[TokenSample], chunks: list[list[int]], shared: int) -> bool:
    """Whether running the `shared` prefix once costs less than running every sample whole.

    Sharing saves (n - 1) * shared token positions. Its price: a micro-batch on top of a cached prefix needs
    an explicit attention mask (the fused causal kernel cannot offset its diagonal), and on CPU that path's
    attention is about 2x slower than the fused kernel's at 6k tokens (fused 0.7-0.9 s, masked 1.5-2.0 s per layer,
    forward and backward, 2 threads), about half a position's cost per token. Only one-row micro-batches pay
    it: a padded batch needs the mask either way. So with samples that share only a few tokens (SFT batches
    mixing domains: 11 of ~6,000) every sample runs whole on the fused kernel; GRPO groups sharing a long
    prompt keep the prefix."""
    if shared == 0:
        return False
    single = sum(len(samples[rows[0]].token_ids) - shared for rows in chunks if len(rows) == 1)
    return (len(samples) - 1) * shared >= single / 2


class StepBatches:
    """The micro-batches of one optimizer step and the forward passes over them."""

    def __init__(
        self, samples: list[TokenSample], micro_batch_size: int, pad_token_id: int,
        dtype: str = "float32",
    ) -> None:
        if not samples:
            raise ValueError("StepBatches: no samples")
        if dtype not in ("float32", "bfloat16"):
            raise ValueError(f"StepBatches: dtype {dtype!r} is not 'float32' or 'bfloat16'")
        self.samples = samples
        self.autocast = torch.bfloat16 if dtype == "bfloat16" else None
        order = sorted(range(len(samples)), key=lambda i: (-len(samples[i].token_ids), i))
        chunks = [order[i : i + micro_batch_size] for i in range(0, len(order), micro_batch_size)]
        shared = _shared_prefix(samples)
        self.prefix_ids = samples[0].token_ids[: shared if _worth_sharing(samples, chunks, shared) else 0]
        self.micro = [self._micro(rows, pad_token_id) for rows in chunks]

    @property
    def prefix_length(self) -> int:
        return len(self.prefix_ids)

    def _micro(self, rows: list[int], pad: int) -> MicroBatch:
        start = self.prefix_length
        rests = [self.samples[r] for r in rows]
        width = max(len(s.token_ids) - start for s in rests)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        attention = torch.zeros((len(rows), start + width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.bool)
        behaviour = torch.zeros((len(rows), width))
        for row, sample in enumerate(rests):
            n = len(sample.token_ids) - start
            ids[row, :n] = torch.tensor(sample.token_ids[start:])
            attention[row, : start + n] = 1
            mask[row, :n] = torch.tensor(sample.mask[start:], dtype=torch.bool)
            behaviour[row, :n] = torch.tensor(sample.logprobs[start:])
        padding = int(width * len(rows) - sum(len(s.token_ids) - start for s in rests))
        return MicroBatch(rows, ids, attention, mask[:, 1:], behaviour[:, 1:], padding)

    @property
    def forwarded_tokens(self) -> int:
        """Token positions the learner runs per pass over the step (prefix once, padding included)."""
        return self.prefix_length + sum(m.ids.numel() for m in self.micro)

    @property
    def padding_tokens(self) -> int:
        return sum(m.padding for m in self.micro)

    def _autocast(self, model: Any) -> Any:
        if self.autocast is None:
            return contextlib.nullcontext()
        device = next(model.parameters()).device.type
        return torch.autocast(device, dtype=self.autocast)

    def prefix_forward(self, model: Any, *, grad: bool) -> PrefixState:
        """Run the shared prefix once with `model` (see `PrefixState`)."""
        if not self.prefix_ids:
            return PrefixState([], [])
        ids = torch.tensor([self.prefix_ids])
        lm = causal_lm(model)
        with torch.set_grad_enabled(grad), self._autocast(model), _sparse_embedding_gradient(lm):
            cache = lm.get_decoder()(input_ids=ids, use_cache=True).cache
        outputs = [(layer.keys, layer.values) for layer in cache.layers]
        leaves = [(k.detach().requires_grad_(grad), v.detach().requires_grad_(grad)) for k, v in outputs]
        return PrefixState(outputs, leaves)

    def _additive_mask(self, micro: MicroBatch, dtype: torch.dtype) -> torch.Tensor:
        """The (B, 1, R, P + R) attention mask of `micro` on top of the prefix, as SDPA adds it: 0 where a token
        attends (the prefix, and its own row's tokens up to itself), -inf elsewhere. The mask transformers builds
        from the 2D one is boolean, and SDPA's CPU kernels turn a boolean mask into this one in every layer of every
        pass (30 times a forward, again in the backward); made once, it is the same numbers for less work."""
        width, start = micro.ids.shape[1], self.prefix_length
        causal = torch.ones((width, width), dtype=torch.bool).tril()
        allowed = torch.cat([torch.ones((width, start), dtype=torch.bool), causal], dim=1)
        allowed = allowed.unsqueeze(0) & micro.attention.bool().unsqueeze(1)  # (B, R, P + R)
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, float("-inf"))
        return mask.unsqueeze(1)

    def logprobs(self, model: Any, micro: MicroBatch, temperature: float, prefix: PrefixState) -> torch.Tensor:
        """(B, R - 1) log-probabilities of the micro-batch's tokens, computed at mask-1 positions only
        (0 elsewhere: the loss never reads them), on top of `prefix` computed with the same model."""
        lm = causal_lm(model)
        rows = micro.ids.shape[0]
        positions = torch.arange(self.prefix_length, self.prefix_length + micro.ids.shape[1]).unsqueeze(0)
        with self._autocast(model), _sparse_embedding_gradient(lm):
            if prefix.leaves and holds_shared_prefix(lm):
                # The prefix once for all rows, the rows' own tokens causally: no mask (right padding is never
                # attended by a real token, and a padded position's output is never read).
                hidden = lm.get_decoder()(
                    input_ids=micro.ids, position_ids=positions, use_cache=False,
                    envgym_shared_prefix=prefix.leaves,
                ).last_hidden_state[:, :-1]
            else:
                cache = None
                if prefix.leaves:
                    cache = DynamicCache(
                        ddp_cache_data=[(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1))
                                        for k, v in prefix.leaves]
                    )
                # Rows with no prefix and no padding need no mask: attention takes the fused causal kernel.
                whole = cache is None and bool(micro.attention.all())
                mask = None if whole else self._additive_mask(micro, torch.bfloat16 if self.autocast else lm.dtype)
                hidden = lm.get_decoder()(
                    input_ids=micro.ids, attention_mask=mask, position_ids=positions,
                    cache=cache,
                    use_cache=cache is not None,
                ).last_hidden_state[:, :-1]
        head = lm.get_output_embeddings()
        logits = head(hidden[micro.mask].to(head.weight.dtype))
        picked = token_logprobs(logits, micro.ids[:, 1:][micro.mask], temperature)
        return torch.zeros(micro.mask.shape, dtype=picked.dtype).masked_scatter(micro.mask, picked)


@contextlib.contextmanager
def _sparse_embedding_gradient(lm: Any) -> Iterator[None]:
    """While open, the input embedding's lookups give a sparse gradient (the rows of the tokens looked up) when the
    embedding is tied to the output head, whose dense gradient arrives in the same backward: what reaches the
    weight's `.grad` is dense as before, the same sums. A dense lookup gradient is a zeroed vocabulary x hidden
    matrix per micro-batch (113 MB for SmolLM2) added to the head's: about 3.5 s of a GRPO update of run 13's
    batch (docs/results/grpo_step_profile.md). Untied, the embedding is left as it is (its `.grad` would be sparse,
    which AdamW refuses)."""
    embedding, head = lm.get_input_embeddings(), lm.get_output_embeddings()
    tied = isinstance(embedding, torch.nn.Embedding) and head is not None and head.weight is embedding.weight
    if not (tied and torch.is_grad_enabled() and embedding.weight.requires_grad) or embedding.sparse:
        yield
        return
    embedding.sparse = True
    try:
        yield
    finally:
        embedding.sparse = False


@dataclass
class PrefixState:
    """The shared prefix's keys and values per layer: `outputs` as computed, `leaves` detached copies the
    micro-batches attend to. With gradients on, the leaves collect the micro-batches' gradients and
    `backward` pushes their sum through the prefix once."""

    outputs: KeyValues
    leaves: KeyValues

    def backward(self) -> None:
        outputs, grads = [], []
        for pair, leaf_pair in zip(self.outputs, self.leaves, strict=True):
            for out, leaf in zip(pair, leaf_pair, strict=True):
                if leaf.grad is not None and out.requires_grad:
                    outputs.append(out)
                    grads.append(leaf.grad)
        if outputs:
            torch.autograd.backward(outputs, grads)
