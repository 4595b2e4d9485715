"""Attention over a prefix every row shares, held once, and each row's own keys: the sampler's decode and prefill,
and the learner's micro-batches on top of the step's shared prompt.

softmax(q [Ks; K]^T) [Vs; V] is computed as two passes of the flash kernel SDPA runs on CPU, one over the shared
keys Ks (all rows' queries of a key/value head as one matrix against one copy), one over the row's own keys K
(under its mask, or causally), merged exactly by their log-sum-exps:

    out = a1 * o1 + a2 * o2,   a_i = exp(lse_i - lse),   lse = logaddexp(lse1, lse2)

The backward needs no log-sum-exp gradient: flash attention's backward over any block of keys reads only the
final output and the final log-sum-exp (P = exp(s - lse), D = rowsum(dout * out)), so each pass's backward is the
kernel's own, called with the merged `out` and `lse`, and the two query gradients add. Against SDPA over the keys
laid end to end, the learner skips the explicit (rows x prefix + rows) mask and the blocks above the diagonal, which
the kernel computes whenever it is given a mask (docs/results/grpo_step_profile.md).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

KeyValues = list[tuple[torch.Tensor, torch.Tensor]]  # per layer, each (kv_heads, length, head_dim)

_FORWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """SDPA's own conversion of a mask: 0 where attended, -inf elsewhere, in the attention's dtype."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype).masked_fill_(~mask, float("-inf"))
    return mask.to(dtype)


def _flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
           scale: float | None, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and per-query log-sum-exp of the scaled scores (the kernel SDPA runs on CPU)."""
    if causal and key.shape[2] != query.shape[2]:
        raise ValueError("shared_prefix_attention: a causal pass needs as many keys as queries")
    output, lse = _FORWARD(query, key, value, 0.0, causal, attn_mask=mask, scale=scale)
    return output, lse


class _Layout:
    """How the rows' (batch, heads, length, ...) queries are laid out for each of the two passes.

    A decode step (length 1) puts all rows' queries of a key/value head in one (1, kv_heads, batch * groups) matrix
    against the one copy of the prefix (read once a step), and in the own pass a key/value head's query heads in the
    length dimension (the row's keys read once). A longer pass (prefill, the learner) keeps one task per row and
    key/value head, (batch, kv_heads, groups * length), against the prefix broadcast to every row (a view: the kernel
    reads the same copy), since the kernel's backward splits its work by those tasks only: as one matrix the 3
    key/value heads of the learner's model kept one of 2 threads idle a third of the time (42-47 against 31-35 ms a
    layer); in the own pass the keys are repeated per query head, as transformers' sdpa attention does."""

    def __init__(self, query: torch.Tensor, kv_heads: int) -> None:
        self.batch, self.heads, self.length, self.dim = query.shape
        self.kv_heads = kv_heads
        self.groups = self.heads // kv_heads
        self.decode = self.length == 1

    def to_shared(self, x: torch.Tensor) -> torch.Tensor:
        rest = x.shape[3:]
        x = x.reshape(self.batch, self.kv_heads, self.groups * self.length, *rest)
        if not self.decode:
            return x
        return x.transpose(0, 1).reshape(1, self.kv_heads, self.batch * self.groups * self.length, *rest)

    def from_shared(self, x: torch.Tensor) -> torch.Tensor:
        rest = x.shape[3:]
        if self.decode:
            x = x.reshape(self.kv_heads, self.batch, self.groups * self.length, *rest).transpose(0, 1)
        return x.reshape(self.batch, self.heads, self.length, *rest)

    def shared_keys(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.decode else x.expand(self.batch, -1, -1, -1)

    def shared_key_grad(self, grad: torch.Tensor) -> torch.Tensor:
        return grad if self.decode else grad.sum(0, keepdim=True)

    def to_own(self, x: torch.Tensor) -> torch.Tensor:
        if self.decode:
            return x.reshape(self.batch, self.kv_heads, self.groups, *x.shape[3:])
        return x

    def from_own(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.batch, self.heads, self.length, *x.shape[3:])

    def own_keys(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.decode else repeat_kv(x, self.groups)

    def own_key_grad(self, grad: torch.Tensor) -> torch.Tensor:
        if self.decode:
            return grad
        return grad.reshape(self.batch, self.kv_heads, self.groups, *grad.shape[2:]).sum(2)


class _SharedPrefixAttention(torch.autograd.Function):
    """The two passes and their merge, with the backward described in the module docstring."""

    @staticmethod
    def forward(ctx: Any, query: torch.Tensor, shared_keys: torch.Tensor, shared_values: torch.Tensor,
                key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float | None,
                causal: bool) -> torch.Tensor:
        layout = _Layout(query, key.shape[1])
        out_shared, lse_shared = _flash(layout.to_shared(query), layout.shared_keys(shared_keys),
                                        layout.shared_keys(shared_values), None, scale, False)
        out_shared, lse_shared = layout.from_shared(out_shared), layout.from_shared(lse_shared.unsqueeze(-1))
        own_keys, own_values = layout.own_keys(key), layout.own_keys(value)
        out_own, lse_own = _flash(layout.to_own(query), own_keys, own_values, mask, scale, causal)
        out_own, lse_own = layout.from_own(out_own), layout.from_own(lse_own.unsqueeze(-1))
        if mask is not None:  # a query with no own key to attend (a padded one) has only the prefix's mass
            none = ~(mask > float("-inf")).any(-1)  # (batch, 1 or heads, queries), as the mask broadcasts
            lse_own = lse_own.masked_fill(none.unsqueeze(-1), float("-inf"))  # the kernel reports 0 for such a row
        total = torch.logaddexp(lse_shared, lse_own)
        # a1 = exp(lse1 - lse) = sigmoid(lse1 - lse2): one fused pass, computed in float32 (its weight in the
        # outputs' dtype), in the own output's (batch, length, heads) layout, which transformers wants back.
        out = torch.lerp(out_own, out_shared, torch.sigmoid(lse_shared - lse_own).to(query.dtype))
        ctx.save_for_backward(query, shared_keys, shared_values, own_keys, own_values, mask, out, total.squeeze(-1))
        ctx.scale, ctx.causal, ctx.kv_heads = scale, causal, key.shape[1]
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        query, shared_keys, shared_values, own_keys, own_values, mask, out, total = ctx.saved_tensors
        layout = _Layout(query, ctx.kv_heads)
        grad_out = grad_out.contiguous()
        grad_query_own, grad_key, grad_value = _BACKWARD(
            layout.to_own(grad_out), layout.to_own(query), own_keys, own_values, layout.to_own(out),
            layout.to_own(total), 0.0, ctx.causal, attn_mask=mask, scale=ctx.scale)
        grad_query_shared, grad_shared_keys, grad_shared_values = _BACKWARD(
            layout.to_shared(grad_out), layout.to_shared(query), layout.shared_keys(shared_keys),
            layout.shared_keys(shared_values), layout.to_shared(out), layout.to_shared(total), 0.0, False,
            scale=ctx.scale)
        grad_query = layout.from_own(grad_query_own) + layout.from_shared(grad_query_shared)
        return (grad_query, layout.shared_key_grad(grad_shared_keys), layout.shared_key_grad(grad_shared_values),
                layout.own_key_grad(grad_key),
                layout.own_key_grad(grad_value), None, None, None)


def shared_prefix_attention(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
    shared: KeyValues, scaling: float | None = None,
) -> tuple[torch.Tensor, None]:
    """Attention of every row's queries over `shared[module.layer_idx]` (keys and values of a prefix all rows
    have, held once: (1, kv_heads, C, head_dim)) followed by the row's own `key`/`value` under `attention_mask`
    (causally when it is None), as SDPA computes it over the two laid end to end; differentiable in the queries, both
    sets of keys and values. Returns (batch, length, heads, head_dim), as transformers' attention functions do."""
    shared_keys, shared_values = shared[module.layer_idx]
    autocast = torch.is_autocast_enabled(query.device.type)
    dtype = torch.get_autocast_dtype(query.device.type) if autocast else query.dtype
    mask = _additive(attention_mask, dtype)
    causal = attention_mask is None and query.shape[2] > 1
    out = _SharedPrefixAttention.apply(query.to(dtype), shared_keys.to(dtype), shared_values.to(dtype),
                                       key.to(dtype), value.to(dtype), mask, scaling, causal)
    return out.transpose(1, 2).contiguous(), None


def _attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, envgym_shared_prefix: KeyValues | None = None,
               **kwargs: Any) -> tuple[torch.Tensor, Any]:
    """transformers' "sdpa" attention, unchanged unless a caller passes its shared prefix."""
    if envgym_shared_prefix is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    return shared_prefix_attention(module, query, key, value, attention_mask, envgym_shared_prefix,
                                   kwargs.get("scaling"))


AttentionInterface.register("sdpa", _attention)


def holds_shared_prefix(lm: Any) -> bool:
    """Whether `lm`'s attention takes a shared prefix: transformers' sdpa (CPU) with this module's wrapper in place
    (any other attention would ignore the prefix passed to it)."""
    return (getattr(lm.config, "_attn_implementation", None) == "sdpa"
            and ALL_ATTENTION_FUNCTIONS["sdpa"] is _attention and lm.device.type == "cpu")
