"""The vector size rules (envs, workers, batches, zero-copy blocks), with errors that propose valid values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from appliance.errors import ConfigError


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _nearest_multiples(value: int, step: int, limit: int | None = None) -> list[int]:
    below = max(step, (value // step) * step)
    above = below + step if below < value or below == value else below
    options = sorted({below, above} - {value})
    return [o for o in options if limit is None or o <= limit] or [step]


def usable_cores() -> int:
    """Logical CPUs this process may run on at once: its affinity mask, capped by a cgroup CPU quota."""
    import math
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    from appliance.sysinfo import cgroup

    limit = cgroup()["quota_cores"]  # CPUs the cgroup quota allows (docker --cpus), None if unlimited
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)


def warn_oversubscribed(name: str, num_threads: int, cores: int | None = None) -> None:
    """Warn (RuntimeWarning) when native threads exceed the usable cores: they then take turns on the
    cores, each step waits for the slowest, and speed drops instead of rising."""
    import warnings

    cores = usable_cores() if cores is None else cores
    if num_threads > cores:
        warnings.warn(
            f"{name}: {num_threads} native threads > {cores} usable cores (affinity and cgroup quota): "
            f"threads will take turns on the cores; use num_threads <= {cores}",
            RuntimeWarning,
            stacklevel=3,
        )


def default_workers(num_envs: int, cores: int) -> int:
    """The largest divisor of num_envs that is at most the core count (one worker per core)."""
    return max(d for d in _divisors(num_envs) if d <= max(1, cores))


@dataclass(frozen=True)
class Sizes:
    num_envs: int
    num_workers: int
    envs_per_worker: int
    batch_size: int  # envs per recv
    workers_per_batch: int


def check_sizes(
    num_envs: Any, num_workers: Any, batch_size: Any, zero_copy: bool, overwork: bool, cores: int
) -> Sizes:
    """Check the vector size rules; each broken rule is a ConfigError naming valid alternatives."""
    if not isinstance(num_envs, int | np.integer) or isinstance(num_envs, bool) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive int, got {num_envs!r}")
    num_envs = int(num_envs)
    if num_workers in (None, "auto"):
        num_workers = default_workers(num_envs, cores)
    if not isinstance(num_workers, int | np.integer) or isinstance(num_workers, bool) or num_workers < 1:
        raise ConfigError(f"num_workers must be a positive int or 'auto', got {num_workers!r}")
    num_workers = int(num_workers)
    if num_workers > num_envs:
        raise ConfigError(
            f"num_workers ({num_workers}) > num_envs ({num_envs}): every worker needs an env; use num_workers <= {num_envs}"
        )
    if num_envs % num_workers:
        envs_options = _nearest_multiples(num_envs, num_workers)
        worker_options = [d for d in _divisors(num_envs) if abs(d - num_workers) <= max(2, num_workers)][:4]
        raise ConfigError(
            f"num_envs ({num_envs}) must be divisible by num_workers ({num_workers}) so every worker steps the same "
            f"number of envs; nearest valid: num_envs={' or '.join(map(str, envs_options))}, "
            f"or num_workers={' or '.join(map(str, worker_options))}"
        )
    if num_workers > cores and not overwork:
        raise ConfigError(
            f"num_workers ({num_workers}) > physical cores ({cores}): workers would compete for cores; "
            f"use num_workers <= {cores}, or pass overwork=True if you mean it"
        )
    envs_per_worker = num_envs // num_workers
    if batch_size in (None, "auto"):
        batch_size = num_envs
    if not isinstance(batch_size, int | np.integer) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive int or 'auto', got {batch_size!r}")
    batch_size = int(batch_size)
    if batch_size > num_envs:
        raise ConfigError(f"batch_size ({batch_size}) > num_envs ({num_envs}); use batch_size <= {num_envs}")
    if batch_size % envs_per_worker:
        options = _nearest_multiples(batch_size, envs_per_worker, limit=num_envs)
        raise ConfigError(
            f"batch_size ({batch_size}) must be a multiple of envs_per_worker ({envs_per_worker} = num_envs {num_envs} "
            f"/ num_workers {num_workers}): a batch is whole workers; nearest valid: batch_size={' or '.join(map(str, options))}"
        )
    workers_per_batch = batch_size // envs_per_worker
    if zero_copy and num_workers % workers_per_batch:
        options = [d * envs_per_worker for d in _divisors(num_workers)]
        raise ConfigError(
            f"zero_copy needs num_workers ({num_workers}) divisible by workers per batch ({workers_per_batch} = batch_size "
            f"{batch_size} / envs_per_worker {envs_per_worker}) so batches are contiguous blocks; "
            f"valid batch_size values: {', '.join(map(str, options))}; or zero_copy=False"
        )
    return Sizes(num_envs, num_workers, envs_per_worker, batch_size, workers_per_batch)
