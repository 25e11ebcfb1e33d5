"""Calibration: a number for "how fast is this CPU right now", recorded with every fingerprint.

The noise guard (:mod:`appliance.measure.noise`) runs the same loops as its speed check.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

CALIBRATION_RUNS = 5


CALIBRATION_LOOPS = ("int_mops", "float_gflops", "copy_gbs")


def calibrate(runs: int = CALIBRATION_RUNS, loops: tuple[str, ...] = CALIBRATION_LOOPS) -> dict[str, Any]:
    """How fast this CPU is right now: three fixed loops, the median of ``runs`` runs each (~1 s).

    ``int_mops``: a pure-Python integer loop (one core, interpreter-bound; compare at equal Python);
    ``float_gflops``: numpy multiply-add on cache-resident arrays (one core, SIMD and clock);
    ``copy_gbs``: numpy copy of 64 MiB (memory bandwidth of one core). ``cpu_share`` is the
    process CPU time over wall time while calibrating: well below 1 means the process waited for
    a core (a busy or throttled machine) and the figures are low for that reason.
    """
    import numpy as np

    def int_loop() -> float:
        n, x = 200_000, 1
        t = time.perf_counter()
        for _ in range(n):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        return n / (time.perf_counter() - t) / 1e6

    a, b = np.full(8192, 1.0001), np.full(8192, 0.9999)
    c = np.empty_like(a)

    def float_loop() -> float:
        reps = 400
        t = time.perf_counter()
        for _ in range(reps):
            np.multiply(a, b, out=c)
            np.add(c, a, out=c)
        return 2 * reps * a.size / (time.perf_counter() - t) / 1e9

    src = np.ones(64 * 2**20 // 8 if "copy_gbs" in loops else 1)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in before timing

    def copy_loop() -> float:
        reps = 3
        t = time.perf_counter()
        for _ in range(reps):
            np.copyto(dst, src)
        return reps * src.nbytes / (time.perf_counter() - t) / 1e9

    wall0, cpu0 = time.perf_counter(), time.process_time()
    results = {name: [fn() for _ in range(runs)] for name, fn in (
        ("int_mops", int_loop), ("float_gflops", float_loop), ("copy_gbs", copy_loop)) if name in loops}  # fmt: skip
    share = (time.process_time() - cpu0) / max(1e-9, time.perf_counter() - wall0)
    out: dict[str, Any] = {k: statistics.median(v) for k, v in results.items()}
    out["samples"] = results
    out["runs"] = runs
    out["cpu_share"] = round(share, 3)
    return out
