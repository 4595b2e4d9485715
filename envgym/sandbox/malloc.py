"""The C allocator's settings, chosen per kind of process: a long-running server gives freed large blocks back to
the system (`keep_large_blocks_mapped`), a training process keeps every page it has touched (`keep_freed_memory`).

A server (`envgym serve` and its workers) must stay flat under traffic that mixes megabyte requests with small ones.

glibc serves a block of at least `M_MMAP_THRESHOLD` (128 KiB at start) with a mapping of its own, given back on
free. But the first time such a block is freed it raises the threshold to that block's size (up to 32 MiB): from
then on megabyte request bodies, actions and answers are carved from the heap arenas, and what a burst of them
leaves free between live blocks stays in the process. Under the soak (benchmarks/soak.py: 1 MiB actions beside
small steps) a worker's arenas grew from 24 to 43 MB while what was in use stayed at 25 to 32 MB, and RSS
ratcheted up with every burst. Setting the threshold explicitly turns the raising off (and keeps the trim
threshold at its default), so every large block is mapped and unmapped on its own. The price is a mapping and
its page faults per large block: tens of microseconds for a megabyte, small beside reading a megabyte request.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4  # mallopt's parameter numbers (malloc.h)
LARGE_BLOCK_BYTES = 128 << 10  # glibc's own starting threshold, kept for good


def keep_large_blocks_mapped(threshold: int = LARGE_BLOCK_BYTES) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes for this process. Returns whether it was set: False where
    the C library is not glibc (macOS, musl), whose allocators are left as they are."""
    libc = _glibc()
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold)) if libc is not None else False


def keep_freed_memory() -> bool:
    """Keep every page this process frees for its own next allocations: no block gets a mapping of its own
    (`M_MMAP_MAX` 0) and the heap's top is never trimmed (`M_TRIM_THRESHOLD` at its maximum). Returns whether it was
    set: False where the C library is not glibc. For a process that does one job in waves of the same size, as a
    trainer does (each rollout and each update allocates and frees gigabytes of activations, logits and caches):
    its memory stays at the peak of one wave, and no wave after the first touches a fresh page.

    Why it matters: a fresh page costs a fault, and on a virtual machine whose balloon reports free pages to the
    host (virtio-balloon free page reporting, as on the 2-core machines these runs use) a page the process gave
    back is returned to the host within seconds, so touching it again costs a fault on the host as well: 0.7 s per
    100 MB measured there, 40x a fault on a page the guest still holds. glibc's default maps every block above its
    mmap threshold (at most 32 MiB; a step's logits are about 100 MB) and unmaps it on free, so each micro-batch
    of an update and each call of the sampler paid those faults anew: the same GRPO update took 86 s with the
    default and 66-73 s with this (docs/results/grpo_step_profile.md).
    """
    libc = _glibc()
    if libc is None:
        return False
    # A negative int is read as a size_t: -1 is the largest threshold there is.
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, -1))


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has `mallopt` and `malloc_trim`), with their signatures; else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def release_free_memory() -> bool:
    """Give the free pages inside glibc's heap arenas back to the system (`malloc_trim(0)`). Returns whether any
    was given back; False where the C library is not glibc.

    Blocks under the mmap threshold (dicts, strings and lists of a few kilobytes: sessions, bodies, answers) are
    carved from arenas that only ever shrink from their top; pages freed in their middle stay resident. Under the
    soak a worker's arenas crept up by about 2.5 MB a minute while what they held stayed at 25 to 32 MB. Called
    by `HeapKeeper` on a thread of its own each time many sessions have closed: measured 1 to 90 ms, run without
    the GIL (a request waiting on it would wait that long).
    """
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
