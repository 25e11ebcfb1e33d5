"""The noise guard around each suite step, and its verdicts once the suite has run.

:func:`watch` samples the load while a step runs (:mod:`~appliance.measure.noise.readings`), with a
speed check before and after it (:mod:`~appliance.measure.noise.gate`), and attaches the summary to
every metric the step added. :func:`finish` then names, in the report's analysis and warnings, the
busy metrics, the steps whose speed check ran below what the check's own spread allows (the step
gate, :func:`~appliance.measure.noise.gate.spread_gate`, from the checks :func:`start` takes before the
first step; a warning, not a busy flag: a CPU's clocks also drop with its own load), the samples the speed gate took
again, and the metrics whose repeats disagree beyond the suite's stated CV (``cv`` in the suite,
default 3 %).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from appliance.measure.noise.gate import (
    LOOP_NAMES,
    SLOW_RATIO,
    SPEED_KEYS,
    SPREAD_CHECKS,
    SpeedGate,
    gate_text,
    speed_check,
    spread_gate,
    step_slowed,
)
from appliance.measure.noise.readings import Sampler, combined, gpu_watch, summarize

SLOWED_BY = "something slowed the CPU (other processes, or, where /proc shows none, other virtual machines on its host)"
DEFAULT_CV = 0.03  # repeats of a headline figure should agree within this CV unless the suite says otherwise


def start(
    report: Any, speed: Callable[[], dict[str, float]] = speed_check, n: int = SPREAD_CHECKS
) -> list[dict[str, float]]:
    """Before the first step: ``n`` speed checks back to back, kept in ``report["noise"]["start"]``;
    their spread sets the step gate (:func:`flag_slow_steps`)."""
    checks = [{k: round(float(c[k]), 4) for k in SPEED_KEYS} for c in (speed() for _ in range(n))]
    report.noise()["start"] = checks
    return checks


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
    before = dict(metrics)
    sampler = sampler or Sampler(gpu=gpu_watch())
    checks = [speed()] if speed else []
    with sampler:
        yield sampler
    if speed:
        checks.append(speed())
    summary = summarize(sampler.readings)
    noise_data = report.noise()
    noise_data.setdefault("interval_s", sampler.interval)
    steps = noise_data.setdefault("steps", [])
    step = {"step": label, **summary, "readings": sampler.readings}
    if checks:  # the mean of the checks before and after, loop by loop
        step["speed"] = {k: round(sum(c[k] for c in checks) / len(checks), 4) for k in SPEED_KEYS}
    gated = gate.end_step() if gate is not None else None
    if gated and gated["samples"]:
        step["gate"] = gated
    steps.append(step)
    for name, metric in metrics.items():
        if before.get(name) is metric:
            continue  # not recorded by this step
        noise = {"step": len(steps) - 1, **summary}
        if gated and gated["samples"]:
            noise["gate"] = gated
        earlier = (before[name].get("noise") or {}) if name in before else {}
        report.set_metric_noise(name, merged(earlier, noise) if earlier else noise)


def merged(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """The noise summary of a metric measured over several steps (in rounds): its steps' indexes,
    the load over all of them (busy judged on that, :func:`~appliance.measure.noise.readings.combined`)
    and the speed gate's records added up."""
    steps = [*(earlier.get("steps") or [earlier["step"]]), later["step"]]
    out = {**combined(earlier, later), "step": steps[0], "steps": steps}
    gates = [g for g in (earlier.get("gate"), later.get("gate")) if g]
    if len(gates) == 2:
        a, b = gates
        out["gate"] = {
            **b,
            "samples": a["samples"] + b["samples"],
            "retaken": [*a.get("retaken", []), *b.get("retaken", [])],
            "slow_kept": a.get("slow_kept", 0) + b.get("slow_kept", 0),
            "waited_s": round(a.get("waited_s", 0) + b.get("waited_s", 0), 1),
        }
    elif gates:
        out["gate"] = gates[0]
    return out


def step_gate(data: dict[str, Any]) -> dict[str, Any] | None:
    """The step gate of a report: from its start checks, else (older reports, runs without them)
    from its steps' own checks; None without any check."""
    noise_data = data.get("noise") or {}
    start_checks = noise_data.get("start") or []
    if start_checks:
        return spread_gate(start_checks, source="start")
    checks = [s["speed"] for s in noise_data.get("steps", []) if "speed" in s]
    return spread_gate(checks, source="steps") if checks else None


def flag_slow_steps(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Mark the steps whose speed check ran below the step gate (:func:`step_gate`: what the check's
    own spread allows) ``slow``, with the reason, on the step and on its metrics; the gate goes to
    ``data["noise"]["gate"]``. Not ``busy``: on a many-core GPU machine a CPU's clocks drop with its
    own load too (``docs/lab/noise.md``), so a slow check is a reason to look, said in a warning, not a
    verdict on the figures. Steps whose samples went through the speed gate are judged by it. A
    figure measured in rounds is slowed when most of its rounds were (its median is then a slowed
    sample); one slow round of three only widens its interval."""
    steps = (data.get("noise") or {}).get("steps", [])
    gate = step_gate(data)
    if gate:
        data["noise"]["gate"] = gate
    slowed, reasons = [], {}
    for index, s in enumerate(steps):
        speed_gate = s.get("gate")
        if "speed" in s and gate:
            s["speed_ratio"] = {
                k: round(s["speed"][k] / loop["median"], 3)
                for k, loop in gate["loops"].items()
                if loop["median"] > 0 and k in s["speed"]
            }
        if speed_gate:  # the samples went through the speed gate: it judged each one, not the step's checks
            if not speed_gate.get("slow_kept"):
                continue
            below = {
                "floors": "below its floors (the step gate's)",
                "rebased floors": "below its floors (the step gate's ratios of the run's median check)",
            }.get(speed_gate.get("rule"), f"below {100 * SLOW_RATIO:.0f}% of its best")
            reason = (
                f"{speed_gate['slow_kept']} of {speed_gate['samples']} sample(s) kept although the CPU's speed "
                f"check ran {below} after {speed_gate.get('waited_s', 0)} s of waiting and every retake "
                f"or the gate's budget: {SLOWED_BY}"
            )
        else:
            if "speed" not in s or not gate:
                continue
            low = step_slowed(gate, s["speed"])
            if not low:
                continue
            reason = (
                "the CPU ran its speed check slower than its spread allows ("
                + ", ".join(
                    f"{LOOP_NAMES[k]} {100 * v:.0f}% of the median, floor {100 * gate['loops'][k]['floor_ratio']:.0f}%"
                    for k, v in sorted(low.items())
                )
                + f"): {SLOWED_BY}"
            )
        s["slow"] = reasons[index] = reason
        slowed.append(s)
    for m in data["metrics"].values():
        noise = m.get("noise")
        if not noise:
            continue
        own = noise.get("steps") or [noise.get("step")]
        slow = [i for i in own if i in reasons]
        if 2 * len(slow) > len(own):  # its median came from slowed samples (in rounds: most of them)
            rounds = f"in {len(slow)} of its {len(own)} rounds: " if len(own) > 1 else ""
            noise["slow"] = rounds + reasons[slow[0]]
    return slowed


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
    report.analyse("noise", analysis)
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
    gate = (data.get("noise") or {}).get("gate")
    if gate:
        analysis["gate"] = gate_text(gate)
    if slow:
        analysis["slow"] = [st["step"] for st in slow]
        report.warn(
            f"{len(slow)} step(s) ran their speed check {analysis.get('gate', 'slower than its spread allows')} "
            f"({', '.join(repr(st['step']) for st in slow[:4])}{', ...' if len(slow) > 4 else ''}): the CPU ran "
            "slower then, from contention /proc cannot show (other virtual machines on the host) or its own "
            "clocks; compare such figures with care"
        )
    if spread:
        listed = ", ".join(f"{n} ({100 * cv:.1f}%)" for n, cv in spread)
        report.warn(f"repeats disagree beyond the suite's CV of {100 * cv_limit:.0f}%: {listed}")
    return analysis
