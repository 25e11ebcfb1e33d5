"""The machine's load beside a run: CPU time other processes used and the hypervisor's steal, from
``/proc/stat`` and this process tree's CPU times (psutil).

:func:`read_stat` and :func:`own_cpu_seconds` are the counters; :func:`thresholds` the mean loads
from which a measurement counts as busy; :class:`RunLoad` reads them when a training run asks (each
metrics record, and the run as a whole). The noise guard (appliance/measure/noise) samples the same
counters in a thread of its own while a figure is measured.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import psutil

# A measurement is "busy" when, on average over it, other processes used at least
# max(0.25 cores, 5% of the machine's cores) or the hypervisor stole max(0.1 cores, 2% of them):
# on 2 cores a quarter core of someone else's work moves figures by several %, on 64 cores it does not.
OTHERS_BUSY_CORES, OTHERS_BUSY_SHARE = 0.25, 0.05
STEAL_BUSY_CORES, STEAL_BUSY_SHARE = 0.10, 0.02


def thresholds(cores: int | None = None) -> tuple[float, float]:
    """(others, steal) mean loads in cores from which a measurement counts as busy on this machine."""
    cores = cores or psutil.cpu_count() or 1
    return max(OTHERS_BUSY_CORES, OTHERS_BUSY_SHARE * cores), max(STEAL_BUSY_CORES, STEAL_BUSY_SHARE * cores)


def read_stat(proc: Path = Path("/proc")) -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, from the ``cpu`` line of /proc/stat."""
    line = (proc / "stat").read_text().splitlines()[0].split()
    values = [int(v) for v in line[1:9]] + [0] * max(0, 9 - len(line))
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return (user + nice + system + irq + softirq) / hz, steal / hz


def _descendants(pid: int) -> list[int] | None:
    """Live descendants from /proc/PID/task/*/children (cheap); None where the kernel lacks that file."""
    out: list[int] = []
    stack = [pid]
    while stack:
        tasks = Path(f"/proc/{stack.pop()}/task")
        try:
            files = [t / "children" for t in tasks.iterdir()]
        except OSError:
            continue  # exited meanwhile
        if files and not files[0].exists():
            return None
        for f in files:
            with contextlib.suppress(OSError, ValueError):
                kids = [int(x) for x in f.read_text().split()]
                out += kids
                stack += kids
    return out


def own_cpu_seconds(process: psutil.Process | None = None) -> float:
    """CPU seconds used by this process, its finished children and its live descendants.

    Live descendants come from /proc's children lists (about 0.1 ms a reading) rather than
    psutil's scan of every process on the machine (a few ms), so the guard itself costs little."""
    process = process or psutil.Process()
    t = process.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    pids = _descendants(process.pid)
    children = [psutil.Process(p) for p in pids] if pids is not None else process.children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            c = child.cpu_times()
            total += c.user + c.system
    return total


def load_between(a: tuple[float, ...], b: tuple[float, ...]) -> dict[str, float]:
    """Cores' worth of the whole machine between two readings ``(time, busy, steal, own)``: others'
    load (the machine's busy time less this process tree's), the hypervisor's steal and this tree's
    own. ``b`` must come after ``a``."""
    dt = b[0] - a[0]
    return {
        "others_cores": round(max(0.0, (b[1] - a[1]) - (b[3] - a[3])) / dt, 3),
        "steal_cores": round(max(0.0, b[2] - a[2]) / dt, 3),
        "own_cores": round(max(0.0, b[3] - a[3]) / dt, 3),
    }


class RunLoad:
    """Others' load and the hypervisor's steal over a training run, read when asked (no thread of
    its own; each read is a line of /proc/stat and this process tree's CPU times): :meth:`since_last`
    over the time since the read before, :meth:`whole` since the start. Cores' worth of the whole
    machine, as :class:`Sampler`'s readings. Where the counters cannot be read (no /proc), both
    return {}."""

    def __init__(
        self,
        stat: Callable[[], tuple[float, float]] = read_stat,
        own: Callable[[], float] = own_cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stat, self.own, self.clock = stat, own, clock
        self._start = self._last = self._read()

    def _read(self) -> tuple[float, float, float, float] | None:
        try:
            now = self.clock()
            busy, steal = self.stat()
            return now, busy, steal, self.own()
        except Exception:  # psutil or /proc unreadable here: no figure, never a failed run
            return None

    @staticmethod
    def _between(a: tuple[float, ...] | None, b: tuple[float, ...] | None) -> dict[str, float]:
        if a is None or b is None or b[0] - a[0] <= 0:
            return {}
        reading = load_between(a, b)
        return {key: reading[key] for key in ("others_cores", "steal_cores")}

    def since_last(self) -> dict[str, float]:
        now = self._read()
        reading = self._between(self._last, now)
        if now is not None:
            self._last = now
        return reading

    def whole(self) -> dict[str, float]:
        return self._between(self._start, self._read())
