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
is what shows it: :func:`finish` warns about steps whose checks ran below ``SLOW_RATIO`` of the run's
best (a warning, not a busy flag: a CPU's clocks also drop with its own load).

Each measurement step keeps its readings (``report["noise"]["steps"]``) and every metric the step
produced gets a summary (``metric["noise"]``) with ``busy: true`` and the reasons when the mean
load of others or the steal time passed the thresholds below, another process used a GPU, or the
GPU slowed down for heat or power. :func:`finish` adds warnings naming busy metrics and metrics
whose repeats disagree beyond the suite's stated CV (``cv`` in the suite, default 3 %).

Processes that are ours but not our children (e.g. Ray workers started by a raylet) count as
"others"; a busy flag on a Ray measurement is therefore expected.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

INTERVAL = 0.5  # seconds between readings
# A measurement is "busy" when, on average over it, other processes used at least
# max(0.25 cores, 5% of the machine's cores) or the hypervisor stole max(0.1 cores, 2% of them):
# on 2 cores a quarter core of someone else's work moves figures by several %, on 64 cores it does not.
OTHERS_BUSY_CORES, OTHERS_BUSY_SHARE = 0.25, 0.05
STEAL_BUSY_CORES, STEAL_BUSY_SHARE = 0.10, 0.02


def thresholds(cores: int | None = None) -> tuple[float, float]:
    """(others, steal) mean loads in cores from which a measurement counts as busy on this machine."""
    cores = cores or psutil.cpu_count() or 1
    return max(OTHERS_BUSY_CORES, OTHERS_BUSY_SHARE * cores), max(STEAL_BUSY_CORES, STEAL_BUSY_SHARE * cores)


SLOW_RATIO = 0.85  # a step whose speed check ran below this share of the run's best counts as slowed
SLOWED_BY = "something slowed the CPU (other processes, or, where /proc shows none, other virtual machines on its host)"
DEFAULT_CV = 0.03  # repeats of a headline figure should agree within this CV unless the suite says otherwise
QUIET_WINDOW = 3.0  # seconds of quiet that --wait-quiet asks for


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
        reading = {
            "t": round(now - self._t0, 3),
            "others_cores": round(max(0.0, (busy - last[1]) - (own - last[3])) / dt, 3),
            "steal_cores": round(max(0.0, steal - last[2]) / dt, 3),
            "own_cores": round(max(0.0, own - last[3]) / dt, 3),
        }
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
    reasons = []
    if out["others_cores_mean"] >= others_limit:
        reasons.append(f"other processes used {out['others_cores_mean']:.2f} cores on average")
    if out["steal_cores_mean"] >= steal_limit:
        reasons.append(f"the hypervisor stole {out['steal_cores_mean']:.2f} cores on average")
    gpu_others = max((r.get("gpu_other_processes") or 0) for r in readings)
    slowdown = sorted({s for r in readings for s in r.get("gpu_slowdown") or []})
    if any("gpu_other_processes" in r for r in readings):
        out["gpu_other_processes_max"] = gpu_others
        out["gpu_slowdown"] = slowdown
    if gpu_others:
        reasons.append(f"{gpu_others} other process(es) ran on the GPU")
    if slowdown:
        reasons.append(f"the GPU slowed its clocks ({', '.join(slowdown)})")
    out["busy"] = bool(reasons)
    out["reasons"] = reasons
    return out


SPEED_KEYS = ("int_mops", "float_gflops", "copy_gbs")


SPEED_RUNS = 3  # medians of 3 runs (about 0.2 s): single runs scatter too much to flag a step


def speed_check() -> dict[str, float]:
    """The fingerprint's calibration loops (sysinfo.calibrate), median of SPEED_RUNS: this CPU's speed now."""
    from appliance.sysinfo import calibrate

    result = calibrate(runs=SPEED_RUNS)
    return {k: float(result[k]) for k in SPEED_KEYS}


@contextlib.contextmanager
def watch(
    report: Any,
    label: str,
    sampler: Sampler | None = None,
    speed: Callable[[], dict[str, float]] | None = speed_check,
    gate: SpeedGate | None = None,
) -> Iterator[Sampler]:
    """Sample noise while a suite step runs, with a speed check before and after (``speed``; None:
    none); attach the summary to every metric the step added (:func:`finish` adds the slow flags),
    with the ``gate``'s record of the step's samples when the step took them through it."""
    metrics = report.data["metrics"]
    before = set(metrics)
    sampler = sampler or Sampler(gpu=_gpu_watch())
    checks = [speed()] if speed else []
    with sampler:
        yield sampler
    if speed:
        checks.append(speed())
    summary = summarize(sampler.readings)
    steps = report.data.setdefault("noise", {"interval_s": sampler.interval, "steps": []})["steps"]
    step = {"step": label, **summary, "readings": sampler.readings}
    if checks:  # the mean of the checks before and after, loop by loop
        step["speed"] = {k: round(sum(c[k] for c in checks) / len(checks), 4) for k in SPEED_KEYS}
    gated = gate.end_step() if gate is not None else None
    if gated and gated["samples"]:
        step["gate"] = gated
    steps.append(step)
    for name in set(metrics) - before:
        metrics[name]["noise"] = {"step": len(steps) - 1, **summary}
        if gated and gated["samples"]:
            metrics[name]["noise"]["gate"] = gated


def flag_slow_steps(data: dict[str, Any], ratio: float = SLOW_RATIO) -> list[dict[str, Any]]:
    """Mark the steps whose speed check ran below ``ratio`` of the run's best (over the steps and
    the fingerprint's calibration) ``slow``, with the reason, on the step and on its metrics. Not
    ``busy``: on a many-core GPU machine a CPU's clocks drop with its own load too (measured on an
    H100 machine: checks at 48-98% of the idle start while training figures repeated within 3%), so a
    slow check is a reason to look, said in a warning, not a verdict on the figures."""
    steps = (data.get("noise") or {}).get("steps", [])
    calibration = (data.get("fingerprint") or {}).get("calibration") or {}
    best = {
        k: max(
            [s["speed"][k] for s in steps if "speed" in s] + ([calibration[k]] if calibration.get(k) else [])
        )
        for k in SPEED_KEYS
        if any("speed" in s for s in steps)
    }
    slowed = []
    for index, s in enumerate(steps):
        gate = s.get("gate")
        if "speed" in s and best:
            ratios = {k: s["speed"][k] / best[k] for k in best if best[k] > 0}
            s["speed_ratio"] = {k: round(v, 3) for k, v in ratios.items()}
        if gate:  # the samples went through the speed gate: it judged each one, not the step's checks
            if not gate.get("slow_kept"):
                continue
            reason = (
                f"{gate['slow_kept']} of {gate['samples']} sample(s) kept although the CPU's speed check "
                f"ran below {100 * ratio:.0f}% of its best after {gate.get('waited_s', 0)} s of waiting and "
                f"every retake: {SLOWED_BY}"
            )
        else:
            if "speed" not in s or not best:
                continue
            low = {k: v for k, v in s["speed_ratio"].items() if v < ratio}
            if not low:
                continue
            names = {"int_mops": "integer loop", "float_gflops": "float loop", "copy_gbs": "memory copy"}
            reason = (
                "the CPU ran its speed check slower than at its best in this run ("
                + ", ".join(f"{names[k]} {100 * v:.0f}%" for k, v in sorted(low.items()))
                + f"): {SLOWED_BY}"
            )
        s["slow"] = reason
        slowed.append(s)
        for m in data["metrics"].values():
            noise = m.get("noise")
            if noise and noise.get("step") == index:
                noise["slow"] = reason
    return slowed


# ---------------------------------------------------------------------- per-sample speed gate

GATE_KEYS = ("int_mops", "float_gflops")  # the check between samples: no 64 MiB copy (~70 ms)
GATE_RETAKES = 2  # a sample whose checks ran slow is taken again at most this often
GATE_PATIENCE_S = 20.0  # before a sample, wait at most this long for the CPU to get its speed back
GATE_BUDGET_S = 120.0  # waits and discarded samples over a whole run (a suite stays within its time)
GATE_POLL_S = 1.0
GATE_MAX_CPUS = 8  # the check visits at most this many of the usable CPUs (evenly spaced)


def gate_check() -> list[dict[str, float]]:
    """The integer and float calibration loops, median of SPEED_RUNS (about 70 ms), on each usable CPU
    in turn (pinned): a host can slow one virtual CPU and not the other (measured here: 8.3 vs 4.8 M
    integer ops/s on the two CPUs of one 2-core machine), and a 2-thread figure waits for the slower."""
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
    nothing (measured here: the calibration's integer loop at 53% of its best for three suite steps
    in a row, and an env's samples at 5.1 M beside 9.3 M agent-steps/s). Before each sample the gate
    runs :func:`gate_check` and, while it is below ``ratio`` of the best seen in this run, waits
    (``patience_s`` per sample); after the sample it checks again, and a sample with a slow check on
    either side is taken again, ``retakes`` times at most. ``budget_s`` bounds what the gate adds to
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
        self.spent_s = 0.0  # waits and discarded samples over the run (bounded by budget_s)
        self.step: dict[str, Any] = self._fresh()

    @staticmethod
    def _fresh() -> dict[str, Any]:
        return {"samples": 0, "retaken": [], "slow_kept": 0, "waited_s": 0.0}

    def speed(self) -> float:
        """One check, as the lowest ratio of a loop on a CPU to the best seen in this run (1.0: at its best)."""
        got = self.check()
        for per_cpu in got:
            for k, v in per_cpu.items():
                self.best[k] = max(self.best.get(k, 0.0), v)
        return min(
            (c[k] / self.best[k] for c in got for k in c if self.best.get(k)),
            default=1.0,
        )

    def _await_speed(self) -> float:
        start = self.clock()
        speed = self.speed()
        while speed < self.ratio:
            left = min(self.patience_s - (self.clock() - start), self.budget_s - self.spent_s)
            if left <= 0:
                break
            pause = min(GATE_POLL_S, left)
            self.sleep(pause)
            self.spent_s += pause
            self.step["waited_s"] += pause
            speed = self.speed()
        return speed

    def take(self, sample: Callable[[], Any], figure: Callable[[Any], float] | None = None) -> Any:
        """``sample()``'s value, taken while the CPU ran at its speed (or the last try, marked slow);
        ``figure`` reads the number to keep of a discarded value (default: the value itself)."""
        for attempt in range(self.retakes + 1):
            before = self._await_speed()
            started = self.clock()
            value = sample()
            took = self.clock() - started
            speed = min(before, self.speed())
            if speed >= self.ratio:
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
        """This step's record (samples, retaken values, slow samples kept, seconds waited); starts the next."""
        record, self.step = self.step, self._fresh()
        record["waited_s"] = round(record["waited_s"], 1)
        return record


_GPU: GpuWatch | None = None


def _gpu_watch() -> GpuWatch | None:
    """One NVML session for the process (None without GPUs)."""
    global _GPU
    if _GPU is None:
        _GPU = GpuWatch()
    return _GPU if _GPU.handles else None


def unstable(report: dict[str, Any], cv_limit: float) -> list[tuple[str, float]]:
    """(metric, cv) for every higher/lower-is-better figure whose repeats disagree beyond cv_limit."""
    return [
        (name, m["cv"])
        for name, m in report["metrics"].items()
        if m.get("better") != "info" and m.get("cv") is not None and m["cv"] > cv_limit
    ]


def finish(report: Any, cv_limit: float | None = None) -> dict[str, Any]:
    """Name busy and unstable metrics in the report's analysis and warnings; return that analysis."""
    data = report.data
    cv_limit = float(cv_limit or (data.get("suite") or {}).get("definition", {}).get("cv") or DEFAULT_CV)
    slow = flag_slow_steps(data)
    busy = {
        n: m["noise"]["reasons"] for n, m in data["metrics"].items() if (m.get("noise") or {}).get("busy")
    }
    spread = unstable(data, cv_limit)
    analysis = {"cv_limit": cv_limit, "busy": sorted(busy), "unstable": [n for n, _ in spread]}
    data["analysis"]["noise"] = analysis
    if busy:
        steps = [s for s in (data.get("noise") or {}).get("steps", []) if s.get("busy")]
        worst = max(steps, key=lambda s: s.get("others_cores_mean", 0), default=None)
        why = f"; worst step '{worst['step']}': {'; '.join(worst['reasons'])}" if worst else ""
        headline = sorted(n for n in busy if data["metrics"][n].get("better") != "info")
        report.warn(
            f"{len(busy)} metric(s) measured while the machine was busy{why}: "
            f"{', '.join(headline or sorted(busy))}{' (and their phase shares)' if len(headline) < len(busy) and headline else ''}; "
            "re-run on a quiet machine (puffer-bench run --wait-quiet 600)"
        )
    gated = [s for s in (data.get("noise") or {}).get("steps", []) if s.get("gate")]
    retaken = {s["step"]: len(s["gate"]["retaken"]) for s in gated if s["gate"]["retaken"]}
    if retaken:
        analysis["retaken"] = retaken
        waited = sum(s["gate"].get("waited_s", 0) for s in gated)
        report.warn(
            f"the speed gate took {sum(retaken.values())} sample(s) again in {len(retaken)} step(s) "
            f"({', '.join(repr(k) for k in list(retaken)[:4])}{', ...' if len(retaken) > 4 else ''}) and waited "
            f"{waited:.0f} s for the CPU to get its speed back: it ran slowed where /proc shows nothing "
            "(the discarded values are in each metric's noise.gate)"
        )
    if slow:
        analysis["slow"] = [st["step"] for st in slow]
        report.warn(
            f"{len(slow)} step(s) ran their speed check below {100 * SLOW_RATIO:.0f}% of this run's best "
            f"({', '.join(repr(st['step']) for st in slow[:4])}{', ...' if len(slow) > 4 else ''}): the CPU ran "
            "slower then, from contention /proc cannot show (other virtual machines on the host) or its own "
            "clocks; compare such figures with care"
        )
    if spread:
        listed = ", ".join(f"{n} ({100 * cv:.1f}%)" for n, cv in spread)
        report.warn(f"repeats disagree beyond the suite's CV of {100 * cv_limit:.0f}%: {listed}")
    return analysis


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
