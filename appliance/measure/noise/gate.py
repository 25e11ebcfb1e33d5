"""The speed check and the per-sample speed gate: is the CPU running at its speed right now?

A machine can be slowed where /proc cannot see it (other virtual machines on the same host sharing
its caches and memory bandwidth; no steal is reported for that). The speed check runs the
fingerprint's calibration loops (:func:`appliance.sysinfo.calibrate`) and compares them with the
best seen in the run; :class:`SpeedGate` takes each CPU-bound sample while the check says the CPU
runs at its speed. What was measured that led to this design: ``docs/lab/noise.md``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

SLOW_RATIO = 0.85  # the speed gate's samples: a check below this share of the run's best is slow
SPEED_KEYS = ("int_mops", "float_gflops", "copy_gbs")
SPEED_RUNS = 3  # medians of 3 runs (about 0.2 s): single runs scatter too much to flag a step

# The step gate (which steps a report calls slowed) is set by the check's own spread: SPREAD_CHECKS
# speed checks before the first step give, per loop, a median and a robust SD (1.4826 x the median
# absolute deviation); a step is slowed when a loop's check ran below median x (1 - drop), where
# drop = SPREAD_Z robust SDs, at least MIN_DROP (a tight spread must not flag a few % of wobble) and
# at most MAX_DROP (a noisy start must not hide a 30 % slowdown). docs/lab/noise.md has the method and
# tools/noise_guard_rates.py measures its false- and true-positive rates.
# A step is slowed when at least SLOWED_LOOPS of its loops ran below their floors (all of them where
# a check has fewer): a competing process or a throttled core slows more than one loop, while a single
# loop's dip is the short check's own scatter (docs/lab/noise.md: the measured rates, both rules).
SLOWED_LOOPS = 2
SPREAD_CHECKS = 5
SPREAD_Z = 4.0
MIN_DROP = 0.15
MAX_DROP = 0.25
MAD_TO_SD = 1.4826  # the MAD of a normal distribution times this is its SD
LOOP_NAMES = {"int_mops": "integer loop", "float_gflops": "float loop", "copy_gbs": "memory copy"}


def speed_check() -> dict[str, float]:
    """The fingerprint's calibration loops (sysinfo.calibrate), median of SPEED_RUNS: this CPU's speed now."""
    from appliance.sysinfo import calibrate

    result = calibrate(runs=SPEED_RUNS)
    return {k: float(result[k]) for k in SPEED_KEYS}


def spread_gate(
    checks: list[dict[str, float]],
    z: float = SPREAD_Z,
    min_drop: float = MIN_DROP,
    max_drop: float = MAX_DROP,
    source: str = "start",
) -> dict[str, Any]:
    """The step gate from speed checks of the same machine (``source``: "start", checks before the
    first step; "steps", the steps' own checks where a run has no start checks): per loop the
    median, the robust SD and the ``floor`` below which a step's check counts as slowed."""
    loops: dict[str, dict[str, float]] = {}
    for k in SPEED_KEYS:
        values = [float(c[k]) for c in checks if isinstance(c.get(k), int | float) and c[k] > 0]
        if not values:
            continue
        median = statistics.median(values)
        sd = MAD_TO_SD * statistics.median(abs(v - median) for v in values)
        drop = min(max_drop, max(min_drop, z * sd / median))
        loops[k] = {
            "median": round(median, 4),
            "robust_sd": round(sd, 4),
            "floor": round(median * (1 - drop), 4),
            "floor_ratio": round(1 - drop, 3),
        }
    return {
        "source": source,
        "checks": len(checks),
        "z": z,
        "min_drop": min_drop,
        "max_drop": max_drop,
        "loops": loops,
    }


def slowed_loops(gate: dict[str, Any], speed: dict[str, float]) -> dict[str, float]:
    """Loop -> the check's ratio to the gate's median, for each loop whose check ran below its floor."""
    return {
        k: speed[k] / loop["median"]
        for k, loop in gate["loops"].items()
        if isinstance(speed.get(k), int | float) and loop["median"] > 0 and speed[k] < loop["floor"]
    }


def step_slowed(gate: dict[str, Any], speed: dict[str, float], loops: int = SLOWED_LOOPS) -> dict[str, float]:
    """:func:`slowed_loops` when at least ``loops`` of the loops judged ran below their floors (all of
    them when fewer were judged), else nothing: the loops that make a step slowed."""
    low = slowed_loops(gate, speed)
    judged = sum(1 for k in gate["loops"] if isinstance(speed.get(k), int | float))
    return low if low and len(low) >= min(loops, judged) else {}


def gate_text(gate: dict[str, Any]) -> str:
    """The gate in words: 'below median - 4 robust SDs of 5 start checks (at least 10%, at most 25%):
    integer loop 88%, ...'."""
    where = f"{gate['checks']} speed checks before the first step" if gate["source"] == "start" else (
        f"the run's {gate['checks']} step checks (no start checks recorded)"
    )  # fmt: skip
    floors = ", ".join(
        f"{LOOP_NAMES.get(k, k)} {100 * loop['floor_ratio']:.0f}%" for k, loop in gate["loops"].items()
    )
    return (
        f"below the median of {where} by more than {gate['z']:g} robust SDs (MAD x {MAD_TO_SD}), "
        f"at least {100 * gate['min_drop']:.0f}% and at most {100 * gate['max_drop']:.0f}%, in "
        f"{SLOWED_LOOPS} or more loops: {floors} of the median"
    )


GATE_KEYS = ("int_mops", "float_gflops")  # the check between samples: no 64 MiB copy (~70 ms)
GATE_RETAKES = 2  # a sample whose checks ran slow is taken again at most this often
GATE_PATIENCE_S = 20.0  # before a sample, wait at most this long for the CPU to get its speed back
GATE_BUDGET_S = 120.0  # waits and discarded samples over a whole run (a suite stays within its time)
GATE_POLL_S = 1.0
GATE_MAX_CPUS = 8  # the check visits at most this many of the usable CPUs (evenly spaced)


def gate_check() -> list[dict[str, float]]:
    """The integer and float calibration loops, median of SPEED_RUNS (about 70 ms), on each usable CPU
    in turn (pinned): a host can slow one virtual CPU and not the other, and a 2-thread figure waits
    for the slower."""
    from appliance.sysinfo import calibrate

    def once() -> dict[str, float]:
        result = calibrate(runs=SPEED_RUNS, loops=GATE_KEYS)
        return {k: float(result[k]) for k in GATE_KEYS}

    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [once()]
    stride = max(1, -(-len(allowed) // GATE_MAX_CPUS))
    out = []
    try:
        for cpu in allowed[::stride]:
            os.sched_setaffinity(0, {cpu})
            out.append(once())
    finally:
        os.sched_setaffinity(0, allowed)
    return out


class SpeedGate:
    """Takes each sample of a CPU-bound measurement while the CPU runs at its speed.

    On a shared host the CPU can lose half its speed for seconds or minutes where /proc shows
    nothing (``docs/lab/noise.md``). Before each sample the gate runs :func:`gate_check` and, while it
    says slow, waits (``patience_s`` per sample); after the sample it checks again, and a sample with
    a slow check on either side is taken again, ``retakes`` times at most. Slow: once
    :meth:`use_floors` has the step gate (:func:`spread_gate` of the run's start checks), a CPU whose
    loops ran below their floors by :func:`step_slowed`'s rule, the rule that judges the steps;
    before that, a loop below ``ratio`` of the best seen in this run. ``budget_s`` bounds what the gate adds to
    a run, its waits and the samples it discarded together: once spent, samples are kept as they
    come (and marked slow when their checks were). Every discarded value is kept in the report with
    its speed ratio (``metric.noise.gate.retaken``), and a sample kept although slow (retakes or
    budget spent) marks its metric ``slow``.
    """

    def __init__(
        self,
        reference: dict[str, Any] | None = None,
        ratio: float = SLOW_RATIO,
        retakes: int = GATE_RETAKES,
        patience_s: float = GATE_PATIENCE_S,
        budget_s: float = GATE_BUDGET_S,
        check: Callable[[], list[dict[str, float]]] = gate_check,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ratio, self.retakes, self.patience_s, self.budget_s = ratio, retakes, patience_s, budget_s
        self.check, self.sleep, self.clock = check, sleep, clock
        self.best = {k: float(reference[k]) for k in GATE_KEYS if reference and reference.get(k)}
        self.floors: dict[str, Any] | None = None  # the step gate, once use_floors has it
        self.pool: dict[str, list[float]] | None = None  # every check's loops this run, when it rebases
        self.spent_s = 0.0  # waits and discarded samples over the run (bounded by budget_s)
        self.step: dict[str, Any] = self._fresh()

    def use_floors(self, gate: dict[str, Any], checks: list[dict[str, float]] | None = None) -> None:
        """Judge checks by ``gate`` (:func:`spread_gate`: per loop a median and a floor) from now on,
        for the loops this gate checks; a gate without them leaves the best-ratio rule. With the
        ``checks`` it came from, the gate rebases: its median per loop becomes the median of those
        and of every check it has run since (:meth:`floors_now`)."""
        loops = {k: v for k, v in gate.get("loops", {}).items() if k in GATE_KEYS and v.get("median", 0) > 0}
        self.floors = {**gate, "loops": loops} if loops else None
        if self.floors is not None and checks:
            self.pool = {k: [float(c[k]) for c in checks if c.get(k)] for k in loops}

    def floors_now(self) -> dict[str, Any] | None:
        """The floors that judge the next check. Without rebasing, the step gate's. Rebasing: per loop
        the median of the start checks and of every check since, never below (1 - MAX_DROP) of the
        start checks' median, times the step gate's floor ratio: five checks in two seconds can
        catch the host in a fast moment, and a run judged against that reads slowed throughout
        (docs/lab/noise.md), while a slowdown deeper than MAX_DROP is still one."""
        if self.floors is None or self.pool is None:
            return self.floors
        loops = {}
        for k, start in self.floors["loops"].items():
            median = max(statistics.median(self.pool[k]), (1 - MAX_DROP) * start["median"])
            loops[k] = {**start, "median": round(median, 4), "floor": round(median * start["floor_ratio"], 4)}
        return {**self.floors, "loops": loops}

    @staticmethod
    def _fresh() -> dict[str, Any]:
        return {"samples": 0, "retaken": [], "slow_kept": 0, "waited_s": 0.0}

    def judge(self) -> tuple[float, bool]:
        """One check: (the lowest ratio of a loop on a CPU to the reference, whether it counts as slow);
        the reference is the step gate's median once :meth:`use_floors` has one, else the best seen
        in this run."""
        got = self.check()
        for per_cpu in got:
            for k, v in per_cpu.items():
                self.best[k] = max(self.best.get(k, 0.0), v)
                if self.pool is not None and k in self.pool:
                    self.pool[k].append(float(v))
        floors = self.floors_now()
        if floors is not None:
            loops = floors["loops"]
            ratio = min((c[k] / loops[k]["median"] for c in got for k in c if k in loops), default=1.0)
            return ratio, any(step_slowed(floors, c) for c in got)
        ratio = min((c[k] / self.best[k] for c in got for k in c if self.best.get(k)), default=1.0)
        return ratio, ratio < self.ratio

    def _await_speed(self) -> tuple[float, bool]:
        start = self.clock()
        speed, slow = self.judge()
        while slow:
            left = min(self.patience_s - (self.clock() - start), self.budget_s - self.spent_s)
            if left <= 0:
                break
            pause = min(GATE_POLL_S, left)
            self.sleep(pause)
            self.spent_s += pause
            self.step["waited_s"] += pause
            speed, slow = self.judge()
        return speed, slow

    def take(self, sample: Callable[[], Any], figure: Callable[[Any], float] | None = None) -> Any:
        """``sample()``'s value, taken while the CPU ran at its speed (or the last try, marked slow);
        ``figure`` reads the number to keep of a discarded value (default: the value itself)."""
        for attempt in range(self.retakes + 1):
            before, slow_before = self._await_speed()
            started = self.clock()
            value = sample()
            took = self.clock() - started
            after, slow_after = self.judge()
            speed = min(before, after)
            if not (slow_before or slow_after):
                break
            if attempt == self.retakes or self.spent_s + took > self.budget_s:
                self.step["slow_kept"] += 1
                break
            kept = figure(value) if figure else value
            self.step["retaken"].append({"value": kept, "speed_ratio": round(speed, 3)})
            self.spent_s += took
        self.step["samples"] += 1
        return value

    def end_step(self) -> dict[str, Any]:
        """This step's record (samples, retaken values with their ratio to the reference, slow samples
        kept, seconds waited, the rule that judged them); starts the next."""
        record, self.step = self.step, self._fresh()
        record["waited_s"] = round(record["waited_s"], 1)
        floors = self.floors_now()
        rebased = self.pool is not None and floors is not None
        record["rule"] = (
            "rebased floors" if rebased else "floors" if floors is not None else "best"
        )  # what "slow" meant
        if rebased:  # the medians it judged by at the step's end
            record["medians"] = {k: loop["median"] for k, loop in floors["loops"].items()}
        return record
