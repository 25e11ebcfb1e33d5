"""Noise guard: was the machine quiet while a figure was measured?

A background thread samples, every ``INTERVAL`` seconds during each measurement:

* ``others_cores``: CPU time used by processes outside this process tree, in cores (system busy
  time from ``/proc/stat`` minus this process and its children, from psutil);
* ``steal_cores``: time the hypervisor gave our virtual CPUs to someone else (``/proc/stat`` steal);
* on GPUs (NVML): compute processes of others on the GPUs and the clock-throttle reasons;

and, before and after each measurement, a speed check (the fingerprint's calibration loops, median
of three runs, about 0.2 s): how fast this CPU runs a fixed integer loop, a float loop and a memory copy
right then. A machine can be slowed where /proc cannot see it (other virtual machines on the same
host sharing its caches and memory bandwidth; no steal is reported for that), and the speed check
is what shows it: :func:`start` takes ``SPREAD_CHECKS`` checks before the first step, and
:func:`finish` warns about steps whose checks ran below what that spread allows (median minus
``SPREAD_Z`` robust SDs, a drop of ``MIN_DROP`` to ``MAX_DROP``; a warning, not a busy flag: a
CPU's clocks also drop with its own load).

Each measurement step keeps its readings (``report["noise"]["steps"]``) and every metric the step
produced gets a summary (``metric["noise"]``) with ``busy: true`` and the reasons when the mean
load of others or the steal time passed the thresholds below, another process used a GPU, or the
GPU slowed down for heat or power. :func:`finish` adds warnings naming busy metrics and metrics
whose repeats disagree beyond the suite's stated CV (``cv`` in the suite, default 3 %).

Processes that are ours but not our children (e.g. Ray workers started by a raylet) count as
"others"; a busy flag on a Ray measurement is therefore expected.

The package by job: :mod:`~appliance.measure.noise.readings` (the sampler, its summary, waiting for a
quiet machine), :mod:`~appliance.measure.noise.gate` (the speed check and the per-sample speed
gate), :mod:`~appliance.measure.noise.guard` (:func:`watch` around each suite step, :func:`finish`
after the last), :mod:`~appliance.measure.noise.table` (the noise table of the Markdown and HTML
reports). What was measured that shaped it: ``docs/lab/noise.md``.
"""

from __future__ import annotations

from appliance.measure.noise.gate import (
    GATE_KEYS,
    GATE_MAX_CPUS,
    MAX_DROP,
    MIN_DROP,
    SLOW_RATIO,
    SLOWED_LOOPS,
    SPREAD_CHECKS,
    SPREAD_Z,
    SpeedGate,
    gate_check,
    gate_text,
    slowed_loops,
    speed_check,
    spread_gate,
    step_slowed,
)
from appliance.measure.noise.guard import finish, flag_slow_steps, start, step_gate, unstable, watch
from appliance.measure.noise.readings import (
    INTERVAL,
    GpuWatch,
    Sampler,
    own_cpu_seconds,
    read_stat,
    summarize,
    thresholds,
    wait_quiet,
)
from appliance.measure.noise.table import NOISE_COLUMNS, NOISE_NOTE, noise_table

__all__ = [
    "GATE_KEYS",
    "GATE_MAX_CPUS",
    "INTERVAL",
    "MAX_DROP",
    "MIN_DROP",
    "NOISE_COLUMNS",
    "NOISE_NOTE",
    "SLOWED_LOOPS",
    "SLOW_RATIO",
    "SPREAD_CHECKS",
    "SPREAD_Z",
    "GpuWatch",
    "Sampler",
    "SpeedGate",
    "finish",
    "flag_slow_steps",
    "gate_check",
    "gate_text",
    "noise_table",
    "own_cpu_seconds",
    "read_stat",
    "slowed_loops",
    "speed_check",
    "spread_gate",
    "start",
    "step_gate",
    "step_slowed",
    "summarize",
    "thresholds",
    "unstable",
    "wait_quiet",
    "watch",
]
