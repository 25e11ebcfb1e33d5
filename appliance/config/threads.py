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

``OMP_NUM_THREADS`` (or ``MKL_NUM_THREADS``) set in the environment, and an explicit
``vec.num_threads`` or ``vec.num_workers``, are kept as given."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# one intra-op thread per this many FLOPs of a minibatch's forward and backward: 1 GFLOP is about ten
# milliseconds of one core's work, beside which the pool's per-op waits are small (docs/training.md)
FLOP_PER_THREAD = 1e9
LOOK_S = 0.3  # how long the load is looked at before the run starts
USER_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def others_busy(cpus: list[int] | None = None, seconds: float = LOOK_S) -> float | None:
    """Cores' worth of time other processes (and the hypervisor's steal) used of ``cpus`` (default:
    this process's affinity) over ``seconds``; None where psutil cannot tell."""
    try:
        import psutil

        if cpus is None:
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        me = psutil.Process()

        def sample() -> tuple[float, float, float]:
            per = psutil.cpu_times(percpu=True)
            rows = [per[i] for i in cpus if i < len(per)] if cpus else per
            busy = sum(
                t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) for t in rows
            )
            steal = sum(getattr(t, "steal", 0.0) for t in rows)
            own = sum(me.cpu_times()[:2])
            return busy + steal, own, time.monotonic()

        busy0, own0, t0 = sample()
        time.sleep(seconds)
        busy1, own1, t1 = sample()
    except Exception:
        return None
    return max(0.0, ((busy1 - busy0) - (own1 - own0)) / max(t1 - t0, 1e-3))


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
