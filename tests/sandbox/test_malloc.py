"""keep_large_blocks_mapped: once set, a large block freed never turns later large blocks into heap blocks (which
stay in the process after a burst of them is freed: the soak's RSS ratchet).

Each check runs in a fresh process: the threshold is process-wide and glibc raises it only once.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.sandbox.serving import child_env

# How many of 64 one-MiB blocks glibc gave mappings of their own after an 8 MiB block was freed (mallinfo2's
# hblks counts mapped blocks). A raised threshold serves them all from the heap.
SCRIPT = """
import ctypes, json, sys
from envgym.sandbox.malloc import keep_large_blocks_mapped

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
set_ = keep_large_blocks_mapped() if sys.argv[1] == "set" else False
big = bytearray(8 << 20)
del big  # a mapped block freed: glibc would now raise its threshold to 8 MiB
before = libc.mallinfo2().hblks
blocks = [bytearray(1 << 20) for _ in range(64)]
print(json.dumps({"set": set_, "mapped": libc.mallinfo2().hblks - before}))
"""


def _run(script: str, mode: str) -> dict[str, object]:
    """`script`'s JSON line, run in a fresh process with `mode` ("set" or "unset") as its argument."""
    out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=60,
                         env=child_env(), check=True)
    return json.loads(out.stdout)


def _mapped(mode: str) -> dict[str, object]:
    return _run(SCRIPT, mode)


def test_large_blocks_stay_mapped_after_a_large_block_is_freed() -> None:
    result = _mapped("set")
    assert result == {"set": True, "mapped": 64}


def test_without_it_glibc_serves_large_blocks_from_the_heap() -> None:
    """The control: what the setting prevents does happen without it (else the test above proves nothing)."""
    assert _mapped("unset")["mapped"] == 0


# Page faults of a 256 MiB block allocated and filled again after an equal block was freed: glibc's default maps it
# anew (65,536 fresh pages); with keep_freed_memory the heap keeps the freed pages and hands the same ones back.
REUSE = """
import json, resource, sys
from envgym.sandbox.malloc import keep_freed_memory

set_ = keep_freed_memory() if sys.argv[1] == "set" else False
size = 256 << 20
block = bytearray(size)  # zero-filled: every page touched
del block
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(size)
print(json.dumps({"set": set_, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}))
"""


def _refaults(mode: str) -> dict[str, object]:
    return _run(REUSE, mode)


def test_keep_freed_memory_reuses_freed_pages() -> None:
    result = _refaults("set")
    assert result["set"] is True
    assert result["faults"] < 1_000, result  # 65,536 pages of 4 KiB in the block


def test_without_keep_freed_memory_a_freed_block_is_faulted_in_again() -> None:
    """The control: glibc's default gives the block back and the next one faults every page in."""
    assert _refaults("unset")["faults"] > 60_000
