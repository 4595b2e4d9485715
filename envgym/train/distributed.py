"""Data-parallel GRPO on `torch.distributed`: ranks from torchrun's environment, each step's groups sharded
across ranks for rollouts and learning (`GroupShard`: whole groups, fixed by rank and rank count), the loss
denominators and the gradients summed across ranks, small collectives for metrics and agreement checks.

Why a manual all-reduce and not DDP: the learner runs the shared prefix once and pushes the micro-batches'
gradients through it by hand (`envgym.train.learner.PrefixState`), bypassing the module's forward that DDP
hooks into. Summing gradients by hand after that backward is one collective per step, and its exactness is
short to prove:

    Each rank r holds a disjoint share of the step's samples (whole groups, so whole episodes) and computes
    L_r, the loss of its share with the GLOBAL denominators D (`GlobalCounts`, equal on every rank):

        grpo     L_r = sum_{episodes i on r} mean_t l[i, t] / N          N = sequences on all ranks
        dapo     L_r = sum_{tokens on r} l / M                           M = trained tokens on all ranks
        dr_grpo  L_r = sum_{tokens on r} l / (N * max_length)
        bnpo     L_r = sum_{micro-batches b on r} (sum_b l / tokens_b) / K   K = micro-batches on all ranks

    The one-process loss is L = sum_r L_r (the shares partition its sum's terms; for bnpo, when the
    micro-batches are the same sets), D being constants, grad L = sum_r grad L_r: an all-reduce SUM of the
    local gradients (not DDP's mean) gives every rank grad L. Parameters start equal (`broadcast_parameters`)
    and every rank then clips the same gradient and takes the same optimizer step, so they stay equal.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def active() -> bool:
    """True when a process group with more than one rank is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    """Rank 0 (or the only process): the one that writes metrics, plots and checkpoints."""
    return rank() == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"distributed: environment variable {name}={raw!r} is not an integer") from None


def init_from_env(backend: str | None = None) -> bool:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); gloo on CPU,
    nccl with CUDA. Returns whether this process is one of several ranks. No-op outside torchrun."""
    world = _env_int("WORLD_SIZE", 1)
    if world <= 1 or (dist.is_available() and dist.is_initialized()):
        return active()
    if not dist.is_available():
        raise RuntimeError("distributed: WORLD_SIZE > 1 but this torch build has no torch.distributed")
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise ValueError(f"distributed: WORLD_SIZE={world} but {name} is not set (launch with torchrun)")
    chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(chosen, rank=_env_int("RANK", 0), world_size=world)
    return active()


def share_bounds(count: int, rank_index: int, ranks: int) -> tuple[int, int]:
    """[start, stop) of rank `rank_index`'s contiguous share of `count` items among `ranks` ranks.

    The rule for uneven counts: every rank gets `count // ranks` items and the first `count % ranks` ranks one
    more, so shares differ by at most one, concatenate in rank order to the whole, and a rank gets none when
    there are fewer items than ranks."""
    if ranks < 1:
        raise ValueError(f"distributed.share_bounds: {ranks} ranks; need at least 1")
    if not 0 <= rank_index < ranks:
        raise ValueError(f"distributed.shard: rank {rank_index} outside [0, {ranks})")
    if count < 0:
        raise ValueError(f"distributed.share_bounds: negative count {count}")
    base, extra = divmod(count, ranks)
    start = rank_index * base + min(rank_index, extra)
    return start, start + base + (1 if rank_index < extra else 0)


def shard(items: Sequence[T], rank_index: int | None = None, ranks: int | None = None) -> list[T]:
    """This rank's contiguous share of `items` (whole items: a group never straddles ranks; see
    `share_bounds` for the rule)."""
    start, stop = share_bounds(
        len(items), rank() if rank_index is None else rank_index, world_size() if ranks is None else ranks
    )
    return list(items[start:stop])


@dataclass(frozen=True)
class GroupShard:
    """The groups one rank rolls out: the block [start, stop) of every step's `per_step` groups.

    Group k of step s has the global index s * per_step + k, which alone fixes its task and seeds, so the
    ranks' shards partition each step's groups exactly as one process would roll them out, whatever the rank
    count (a run resumed with another count continues the same sequence of groups)."""

    per_step: int
    start: int
    stop: int

    @classmethod
    def for_rank(cls, per_step: int, rank_index: int | None = None, ranks: int | None = None) -> GroupShard:
        r = rank() if rank_index is None else rank_index
        n = world_size() if ranks is None else ranks
        return cls(per_step, *share_bounds(per_step, r, n))

    @property
    def size(self) -> int:
        """Groups this rank rolls out per step (0 when there are fewer groups per step than ranks)."""
        return self.stop - self.start

    def step_indices(self, step: int) -> list[int]:
        """Global indices of this rank's groups in step `step`."""
        return [step * self.per_step + k for k in range(self.start, self.stop)]


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sum over ranks (float64; the values themselves when not distributed)."""
    if not active():
        return [float(v) for v in values]
    tensor = torch.tensor([float(v) for v in values], dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def all_gather(value: T) -> list[T]:
    """Every rank's `value` (picklable), in rank order; `[value]` when not distributed."""
    if not active():
        return [value]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, value)
    return out


def check_same(label: str, values: Sequence[int]) -> None:
    """Raise on every rank unless every rank passed the same integers (e.g. the step and policy version the
    staleness bound is measured against)."""
    if not active():
        return
    local = torch.tensor([int(v) for v in values], dtype=torch.int64)
    highest, lowest = local.clone(), -local
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    dist.all_reduce(lowest, op=dist.ReduceOp.MAX)
    if not torch.equal(highest, -lowest):
        raise RuntimeError(
            f"distributed: ranks disagree on {label}: rank {rank()} has {local.tolist()}, "
            f"ranks range from {(-lowest).tolist()} to {highest.tolist()}"
        )


@dataclass(frozen=True)
class GlobalCounts:
    """The step's loss denominators over all ranks: sequences (episodes) N, trained tokens M, micro-batches K."""

    sequences: int
    tokens: int
    micro_batches: int

    @classmethod
    def gather(cls, sequences: int, tokens: int, micro_batches: int) -> GlobalCounts:
        n, m, k = all_reduce_sum([sequences, tokens, micro_batches])
        return cls(round(n), round(m), round(k))


def all_reduce_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over ranks in one flat collective (a missing gradient counts as 0 and
    is filled in, so ranks with no samples still take part)."""
    if not active():
        return
    params = list(params)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if not params:
        return
    flat = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in params:
        assert p.grad is not None
        n = p.grad.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n


def broadcast_parameters(model: torch.nn.Module) -> None:
    """Make every rank's weights (and buffers) rank 0's."""
    if not active():
        return
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor.data, src=0)
