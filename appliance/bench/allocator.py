"""Measure in the memory regime a long run settles into, whatever ran before in the process.

glibc's malloc serves a large block (above its mmap threshold, 128 KiB at first) with a fresh
mapping and returns the top of its heap to the system past its trim threshold, so each such
allocation faults its pages in again. Once the process frees a mapped block, glibc raises both
thresholds (the mmap one to that block's size, up to 32 MiB), and from then on those allocations
reuse memory the process holds. A trainer gets there in its first epoch. A short benchmark sample
does not, unless something larger happened to be freed before it: on the 2-core Zen 3 machine the
LSTM policy forward at 8,192 rows ran 1.33-1.70x faster after a forward at twice that batch than
before it, in four fresh processes, and 0.95-1.30x with the thresholds held from the start
(results/cpu/allocator/forward_order.txt). :func:`hold_freed_memory` sets the thresholds a long
run reaches, so every sample of a suite is taken in that regime.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from typing import Any

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for the threshold it raises (64-bit)
TRIM_THRESHOLD = 1 << 30  # freed memory stays in the process up to this much at the heap's top


def hold_freed_memory() -> dict[str, Any] | None:
    """Set glibc's mmap and trim thresholds to what a long run reaches; the settings as recorded in
    a report, or None where the C library is not glibc (nothing is changed there)."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    except (OSError, AttributeError):
        return None
    return {"libc": "glibc", "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD, "set": ok}
