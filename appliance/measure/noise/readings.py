"""The noise guard's readings: the load of others, steal time and the GPUs, sampled while a figure is measured.

A background thread (:class:`Sampler`) samples, every ``INTERVAL`` seconds:

* ``others_cores``: CPU time used by processes outside this process tree, in cores (system busy
  time from ``/proc/stat`` minus this process and its children, from psutil);
* ``steal_cores``: time the hypervisor gave our virtual CPUs to someone else (``/proc/stat`` steal);
* on GPUs (NVML): compute processes of others on the GPUs and the clock-throttle reasons.

:func:`summarize` turns a measurement's readings into its summary and busy flag;
:func:`wait_quiet` waits for a quiet machine before a run.

Processes that are ours but not our children (e.g. Ray workers started by a raylet) count as
"others"; a busy flag on a Ray measurement is therefore expected.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

# the counters and the busy limits, shared with training runs (sysinfo sits below train and measure)
from appliance.sysinfo.load import load_between, own_cpu_seconds, read_stat, thresholds

INTERVAL = 0.5  # seconds between readings
QUIET_WINDOW = 3.0  # seconds of quiet that --wait-quiet asks for


def _own_pids() -> set[int]:
    me = psutil.Process()
    pids = {me.pid}
    with contextlib.suppress(psutil.Error):
        pids |= {c.pid for c in me.children(recursive=True)}
    return pids


class GpuWatch:
    """Other processes on the GPUs and throttle reasons, via NVML (``nvml`` may be a fake)."""

    def __init__(self, nvml: Any | None = None) -> None:
        self.nvml, self.handles = nvml, []
        try:
            if self.nvml is None:
                import pynvml

                self.nvml = pynvml
            self.nvml.nvmlInit()
            self.handles = [
                self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.nvml.nvmlDeviceGetCount())
            ]
        except Exception:
            self.handles = []

    def read(self) -> dict[str, Any] | None:
        if not self.handles:
            return None
        from appliance.sysinfo import SLOWDOWN_REASONS, gpu_throttle

        ours, others, reasons = _own_pids(), 0, set()
        for h in self.handles:
            with contextlib.suppress(Exception):
                pids = [getattr(p, "pid", None) for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h)]
                # in a container NVML may report host PIDs, ours among them: count only PIDs we can see
                others += sum(1 for pid in pids if pid not in ours and pid and psutil.pid_exists(pid))
            reasons |= set(gpu_throttle(self.nvml, h) or [])
        return {"gpu_other_processes": others, "gpu_slowdown": sorted(reasons & SLOWDOWN_REASONS)}

    def close(self) -> None:
        if self.handles:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.handles = []


class Sampler:
    """Readings every ``interval`` seconds in a background thread while the ``with`` block runs."""

    def __init__(
        self,
        interval: float = INTERVAL,
        stat: Callable[[], tuple[float, float]] = read_stat,
        own: Callable[[], float] = own_cpu_seconds,
        gpu: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval, self.stat, self.own, self.gpu, self.clock = interval, stat, own, gpu, clock
        self.readings: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[float, float, float, float] | None = None
        self._t0 = 0.0

    def sample(self) -> dict[str, Any] | None:
        """One reading: load of others and steal since the previous call (None on the first call)."""
        now = self.clock()
        busy, steal = self.stat()
        own = self.own()
        last = self._last
        if last is None:
            self._last, self._t0 = (now, busy, steal, own), now
            return None
        dt = now - last[0]
        if dt < self.interval / 4:
            return None  # too short for /proc/stat's 10 ms ticks: wait for more time to pass
        self._last = (now, busy, steal, own)
        reading = {"t": round(now - self._t0, 3), **load_between(last, self._last)}
        if self.gpu is not None and (g := self.gpu.read()) is not None:
            reading.update(g)
        self.readings.append(reading)
        return reading

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # a failed reading must never break a measurement
                self.sample()

    def __enter__(self) -> Sampler:
        with contextlib.suppress(Exception):
            self.sample()
        self._thread = threading.Thread(target=self._loop, name="noise-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(Exception):
            self.sample()  # the tail since the last tick


def summarize(readings: list[dict[str, Any]], cores: int | None = None) -> dict[str, Any]:
    """Mean and max load of others and steal, GPU findings, and whether that makes the figure busy."""
    if not readings:
        return {"n": 0, "busy": False, "reasons": []}
    weights = []
    prev = 0.0
    for r in readings:
        weights.append(max(1e-9, r["t"] - prev))
        prev = r["t"]
    total = sum(weights)

    def mean(key: str) -> float:
        return sum(r[key] * w for r, w in zip(readings, weights, strict=True)) / total

    out: dict[str, Any] = {
        "n": len(readings),
        "seconds": round(readings[-1]["t"], 3),
        "others_cores_mean": round(mean("others_cores"), 3),
        "others_cores_max": max(r["others_cores"] for r in readings),
        "steal_cores_mean": round(mean("steal_cores"), 3),
        "steal_cores_max": max(r["steal_cores"] for r in readings),
    }
    others_limit, steal_limit = thresholds(cores)
    out["busy_from_cores"] = {"others": others_limit, "steal": steal_limit}
    if any("gpu_other_processes" in r for r in readings):
        out["gpu_other_processes_max"] = max((r.get("gpu_other_processes") or 0) for r in readings)
        out["gpu_slowdown"] = sorted({s for r in readings for s in r.get("gpu_slowdown") or []})
    return judged(out)


def judged(out: dict[str, Any]) -> dict[str, Any]:
    """``out`` (a summary's means, maxima and limits) with ``busy`` and its ``reasons``."""
    reasons = []
    limits = out["busy_from_cores"]
    if out["others_cores_mean"] >= limits["others"]:
        reasons.append(f"other processes used {out['others_cores_mean']:.2f} cores on average")
    if out["steal_cores_mean"] >= limits["steal"]:
        reasons.append(f"the hypervisor stole {out['steal_cores_mean']:.2f} cores on average")
    if out.get("gpu_other_processes_max"):
        reasons.append(f"{out['gpu_other_processes_max']} other process(es) ran on the GPU")
    if out.get("gpu_slowdown"):
        reasons.append(f"the GPU slowed its clocks ({', '.join(out['gpu_slowdown'])})")
    out["busy"] = bool(reasons)
    out["reasons"] = reasons
    return out


def combined(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """The summary of two sampled windows as one (a figure measured in rounds): load and steal
    averaged over both by their seconds, the maxima of both, busy judged again on that."""
    if not earlier.get("n") or "busy_from_cores" not in earlier:
        return dict(later)
    if not later.get("n") or "busy_from_cores" not in later:
        return dict(earlier)
    a, b = max(1e-9, earlier["seconds"]), max(1e-9, later["seconds"])
    out: dict[str, Any] = {
        "n": earlier["n"] + later["n"],
        "seconds": round(earlier["seconds"] + later["seconds"], 3),
        "busy_from_cores": later["busy_from_cores"],
    }
    for key in ("others_cores", "steal_cores"):
        out[f"{key}_mean"] = round((earlier[f"{key}_mean"] * a + later[f"{key}_mean"] * b) / (a + b), 3)
        out[f"{key}_max"] = max(earlier[f"{key}_max"], later[f"{key}_max"])
    if "gpu_other_processes_max" in earlier or "gpu_other_processes_max" in later:
        out["gpu_other_processes_max"] = max(
            earlier.get("gpu_other_processes_max", 0), later.get("gpu_other_processes_max", 0)
        )
        out["gpu_slowdown"] = sorted({*earlier.get("gpu_slowdown", []), *later.get("gpu_slowdown", [])})
    return judged(out)


_GPU: GpuWatch | None = None


def gpu_watch() -> GpuWatch | None:
    """One NVML session for the process (None without GPUs)."""
    global _GPU
    if _GPU is None:
        _GPU = GpuWatch()
    return _GPU if _GPU.handles else None


def wait_quiet(
    seconds: float,
    window: float = QUIET_WINDOW,
    sampler: Sampler | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_wait: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Wait up to ``seconds`` for ``window`` seconds in which others' load and steal stay below the
    busy thresholds. Returns {quiet, waited_s, others_cores, steal_cores} of the last window."""
    sampler = sampler or Sampler()
    sampler.sample()
    last: dict[str, Any] = {}
    while True:
        sleep(window)
        reading = sampler.sample() or {"t": window, "others_cores": 0.0, "steal_cores": 0.0}
        waited = reading["t"]  # seconds since the first sample
        last = {
            "waited_s": round(waited, 1),
            "others_cores": reading["others_cores"],
            "steal_cores": reading["steal_cores"],
        }
        others_limit, steal_limit = thresholds()
        quiet = reading["others_cores"] < others_limit and reading["steal_cores"] < steal_limit
        if quiet or waited >= seconds:
            return {"quiet": quiet, **last}
        if on_wait:
            on_wait(last)
