"""The threads a single-process ``train`` uses, chosen from the cores, the load others put on them and
the policy's size, not inherited from torch's default (every core).

torch's intra-op pool (OpenMP) waits for all its threads at the end of every parallel op. When
another process holds one of the cores, each op waits for a thread that is not running: on a 2-core
machine with one busy neighbour, ``train CartPole-v1`` ran 15x slower with torch's default of 2
threads than with ``OMP_NUM_THREADS=1`` (issue 60). So:

* free cores: the physical cores within the affinity and cgroup quota (torch's default, and what
  `auto` meant for env threads), less what other processes used of them
  over a short look (:func:`others_busy`, from ``/proc/stat`` through psutil, this process's own
  time taken out), rounded to the nearest core, at least 1;
* torch intra-op threads: one per :data:`FLOP_PER_THREAD` of work in a minibatch's forward and
  backward (6 x parameters x rows), at most the free cores, at least 1: a small policy gains
  nothing from more threads and pays their waits;
* torch inter-op threads: 1 (the trainer runs no independent ops side by side);
* env threads (``vec.num_threads auto`` on the native backend): the free cores; env workers
  (``vec.num_workers auto`` on the multiprocessing backend): as many as divide the envs, at most
  the free cores.

While the run goes, :class:`Watch` looks again every :data:`RELOOK_S` at what others used of the
CPUs since its last look, and where two looks in a row call for the same other size (a neighbour
that came or went), the trainer's threads take it at their next rollout step or minibatch: within
seconds, not at the epoch's end, since one epoch beside a neighbour with too many threads can take
ten times as long. The env threads and workers stay as made.

``OMP_NUM_THREADS`` (or ``MKL_NUM_THREADS``) set in the environment, and an explicit
``vec.num_threads`` or ``vec.num_workers``, are kept as given (the first: for the whole run)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# one intra-op thread per this many FLOPs of a minibatch's forward and backward: 1 GFLOP is about ten
# milliseconds of one core's work, beside which the pool's per-op waits are small (docs/training.md)
FLOP_PER_THREAD = 1e9
LOOK_S = 0.3  # how long the load is looked at before the run starts
RELOOK_S = 1.0  # while it runs: the time between two looks (each over the time since the last)
CHILDREN_S = 10.0  # how often the run's child processes (env workers) are listed anew
USER_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def load_counters(cpus: list[int] | None = None) -> Callable[[], tuple[float, float, float]]:
    """A function that reads, at each call, (CPU seconds all processes and the hypervisor's steal have
    used of ``cpus`` (default: this process's affinity), of them this process's and its live
    children's (env workers), the monotonic clock): two reads' difference is the load others put on
    the CPUs between them. Raises where psutil cannot read them."""
    import psutil

    if cpus is None:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    me = psutil.Process()
    children: list[Any] = []
    listed = [float("-inf")]  # when the children were last listed (a listing scans /proc: milliseconds)

    def own() -> float:
        if time.monotonic() - listed[0] > CHILDREN_S:
            children[:] = me.children(recursive=True)
            listed[0] = time.monotonic()
        t = me.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system  # children waited for
        for child in children:
            with contextlib.suppress(psutil.Error):  # gone since it was listed
                total += sum(child.cpu_times()[:2])
        return total

    def read() -> tuple[float, float, float]:
        per = psutil.cpu_times(percpu=True)
        rows = [per[i] for i in cpus if i < len(per)] if cpus else per
        busy = sum(t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) for t in rows)
        steal = sum(getattr(t, "steal", 0.0) for t in rows)
        return busy + steal, own(), time.monotonic()

    return read


def busy_between(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """Cores' worth others used between two :func:`load_counters` reads."""
    return max(0.0, ((b[0] - a[0]) - (b[1] - a[1])) / max(b[2] - a[2], 1e-3))


def others_busy(cpus: list[int] | None = None, seconds: float = LOOK_S) -> float | None:
    """Cores' worth of time other processes (and the hypervisor's steal) used of ``cpus`` (default:
    this process's affinity) over ``seconds``; None where psutil cannot tell."""
    try:
        read = load_counters(cpus)
        first = read()
        time.sleep(seconds)
        return busy_between(first, read())
    except Exception:
        return None


@dataclass(frozen=True)
class Threads:
    intra: int
    interop: int
    env: int | None  # env threads or workers set for an auto vec.num_threads/num_workers (None: not set here)
    why: str


def free_cores(cores: int, busy: float | None) -> int:
    """Cores left to this run: ``cores`` less ``busy`` rounded to the nearest core, at least 1."""
    return max(1, cores - int(busy + 0.5)) if busy is not None else cores


def choose(
    cores: int,
    busy: float | None,
    params: int,
    minibatch_rows: int,
    env_threads: tuple[str, int] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Threads:
    """The threads for a run of a policy with ``params`` parameters, minibatches of ``minibatch_rows``,
    on ``cores`` usable cores of which others use ``busy``. ``env_threads``: what
    :func:`apply_env_threads` set (``("num_threads", 1)``), said in the line."""
    environ = os.environ if environ is None else environ
    free = free_cores(cores, busy)
    flop = 6.0 * params * minibatch_rows
    by_size = max(1, int(flop // FLOP_PER_THREAD))
    load = "load not known" if busy is None else f"others using {busy:.1f} of them"
    given = next((v for v in USER_VARS if environ.get(v)), None)
    if given:
        intra = max(1, _int(environ[given], free))
        how = f"{given}={environ[given]} kept"
    else:
        intra = min(free, by_size)
        how = f"{flop / 1e9:.2g} GFLOP per minibatch: 1 per {FLOP_PER_THREAD / 1e9:.0f} GFLOP, at most the free cores"
    env = env_threads[1] if env_threads else None
    what = "native env thread" if env_threads and env_threads[0] == "num_threads" else "env worker"
    envs = f", {env} {what}{'s' * (env != 1)}" if env is not None else ""
    why = (
        f"threads: torch {intra} intra-op, 1 inter-op{envs} ({cores} usable core{'s' * (cores != 1)}, {load}: "
        f"{free} free; {how})"
    )
    return Threads(intra, 1, env, why)


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def apply_env_threads(data: dict[str, dict[str, Any]], cores: int, busy: float | None) -> str | None:
    """Before the vector is made: where ``vec.num_threads`` is ``auto`` on the native backend, set it
    to the free cores; where ``vec.num_workers`` is ``auto`` on the multiprocessing backend, set it to
    the largest divisor of ``vec.num_envs`` within the free cores (its workers spin, yielding, while
    they wait: one more than the free cores takes turns with the neighbour). Returns the key set."""
    vec = data["vec"]
    free = free_cores(cores, busy)
    if vec.get("backend") == "native" and vec.get("num_threads") == "auto":
        vec["num_threads"] = min(free, int(vec["num_envs"]))
        return "num_threads"
    if vec.get("backend") == "multiprocessing" and vec.get("num_workers") == "auto":
        envs = int(vec["num_envs"])
        vec["num_workers"] = max(d for d in range(1, min(free, envs) + 1) if envs % d == 0)
        return "num_workers"
    return None


def apply_torch(threads: Threads) -> str:
    """Set torch's pools and return the line that says so. The inter-op pool can only be sized before
    its first use: where it is in use already, it is left as it is, and the line says that."""
    import torch

    torch.set_num_threads(threads.intra)
    if torch.get_num_interop_threads() != threads.interop:
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(threads.interop)
    interop = torch.get_num_interop_threads()
    if interop == threads.interop:
        return threads.why
    return threads.why.replace(", 1 inter-op", f", inter-op left at {interop} (in use already)", 1)


class Watch:
    """Looks again at the load while a run goes. A thread of its own reads the counters every
    ``every`` seconds (no pause: two reads' difference, :func:`busy_between`); where two looks in a
    row call for the same other intra-op count (:func:`choose`, same cores and policy), that count is
    what :meth:`sync` sets from then on, and :meth:`said` hands over the line that says so. torch's
    count is each thread's own, so the trainer calls :meth:`sync` on its threads between pieces of
    work: each rollout step (the engine's buffer threads included) and each minibatch. Inactive, it
    changes nothing, where ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` is set or psutil cannot read the
    counters. ``read``/``apply`` and ``start=False``: for tests, which call :meth:`look` themselves."""

    def __init__(
        self,
        cores: int,
        params: int,
        minibatch_rows: int,
        intra: int,
        every: float | None = None,
        environ: Mapping[str, str] | None = None,
        read: Callable[[], tuple[float, float, float]] | None = None,
        apply: Callable[[int], None] | None = None,
        start: bool = True,
    ) -> None:
        environ = os.environ if environ is None else environ
        self.cores, self.params, self.rows = cores, params, minibatch_rows
        self.want = intra  # the count the looks call for, set by :meth:`sync` on each thread
        self.every = RELOOK_S if every is None else every
        self._apply = apply
        self._read = read
        # a count one look called for, and the read before that look
        self._pending: tuple[int, tuple[float, float, float]] | None = None
        self._last: tuple[float, float, float] | None = None
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.active = not any(environ.get(v) for v in USER_VARS)
        if self.active:
            try:
                self._read = self._read or load_counters()
                self._last = self._read()
            except Exception:  # psutil cannot read the counters here: the first choice stands
                self.active = False
        if self.active and start:
            self._thread = threading.Thread(target=self._loop, name="threads-watch", daemon=True)
            self._thread.start()

    def look(self) -> None:
        """One look, over the time since the last."""
        assert self._read is not None and self._last is not None
        before, now = self._last, self._read()
        self._last = now
        want = choose(self.cores, busy_between(before, now), self.params, self.rows, environ={}).intra
        if want == self.want:
            self._pending = None
            return
        # one look is not enough: a short job's burst is not a neighbour
        if self._pending is None or self._pending[0] != want:
            self._pending = (want, before)
            return
        since = self._pending[1]
        busy, seconds = busy_between(since, now), now[2] - since[2]
        was, self.want, self._pending = self.want, want, None
        if self._apply is not None:
            self._apply(want)
        with self._lock:
            self._lines.append(
                f"threads: torch {want} intra-op from now, was {was} (others and the hypervisor used {busy:.1f} of "
                f"{self.cores} usable core{'s' * (self.cores != 1)} over the last {seconds:.0f} s)"
            )

    def said(self) -> list[str]:
        """The lines of the changes since the last call."""
        with self._lock:
            lines, self._lines = self._lines, []
        return lines

    def sync(self) -> None:
        """On the calling thread: torch's intra-op count set to the one the looks call for."""
        import torch

        if torch.get_num_threads() != self.want:
            torch.set_num_threads(self.want)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.look()
            except Exception:  # the counters became unreadable: the count stays as it is
                return
