"""How often the noise guard's step gate flags a step: on an idle machine (false positives) and under
a known load (true positives).

The step gate (``appliance.measure.noise.spread_gate``) judges each suite step's speed check against
the spread of the checks taken before the first step. This tool plays suites without their
measurements: per run and condition it takes the start checks on the idle machine, derives the
gate, starts the condition's load, then takes ``--steps`` step checks (each the mean of two speed
checks back to back, as a suite step's check before and after it) and counts the steps the gate
flags, and judges a check of the per-sample speed gate (``noise.gate_check``) taken after each by
the same floors, as a suite's gate judges its samples. Conditions:

* ``idle``: no load; every flagged step is a false positive (target: at most 1 in 20);
* ``cpu``: a busy loop (``python -c 'while True: pass'``) pinned with ``taskset`` to the CPU the
  checks run on; every step is affected (target: at least 9 in 10 flagged);
* ``membw``: ``--membw-procs`` processes copying 256 MiB arrays in a loop, pinned with ``taskset``
  to the other usable CPUs (to ``--core`` where there is no other), contending for memory
  bandwidth and cache, not for the core; every step is affected (same target).

The tool pins itself to ``--core`` (default: the last usable CPU) through all conditions, start
checks included, so the loads are the only difference. Meanwhile it samples others' load and steal
(``appliance.measure.noise.Sampler``; its own loads are its children and do not count): an "idle"
figure from a busy machine says so. It prints the rates with the machine's fingerprint and writes
a JSON record (``--out``). The full measurement, on a quiet machine (about 10 minutes on 2 cores)::

    nice -n 0 .venv/bin/python tools/noise_guard_rates.py --runs 5 --steps 20 \\
        --out results/cpu/noise/guard-rates.json

A smoke run (a few seconds; the rates mean nothing): ``--runs 1 --steps 2 --conditions idle,cpu``.

``--rescore RATES.json`` measures nothing: it counts a record's flags again with the step gate as it
is now (its start checks, :func:`appliance.measure.noise.step_slowed`).

``--rejudge REPORT.json ...`` measures nothing: it prints how many steps of committed suite reports
the gate at the time flagged and how many the step gate flags now (judged by the spread of the
report's own step checks where it has no start checks, as older reports do not).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package

ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("appliance") is None:  # the installed package first (it has the extension)
    sys.path.append(str(ROOT))

from appliance.measure import noise  # noqa: E402

CONDITIONS = ("idle", "cpu", "membw")
TARGETS = {"idle": ("at most", 1 / 20), "cpu": ("at least", 9 / 10), "membw": ("at least", 9 / 10)}
HOGS = {
    "cpu": "while True: pass",
    "membw": (
        "import numpy as np\n"
        "a = np.ones(2**25); b = np.empty_like(a)\n"  # 256 MiB each: far beyond any cache
        "while True: np.copyto(b, a)"
    ),
}
SETTLE_S = 1.0  # after starting a load, before the first step check


def usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [0]


@contextlib.contextmanager
def load(condition: str, core: int, membw_procs: int) -> Iterator[list[int]]:
    """Start the condition's load processes (pinned with taskset), yield their pids, stop them."""
    if condition == "idle":
        yield []
        return
    taskset = shutil.which("taskset")
    if taskset is None:
        raise tool_cli.ToolError("taskset is not installed (util-linux); the loads are pinned with it")
    if condition == "cpu":
        cores = [core]
    else:
        others = [c for c in usable_cpus() if c != core] or [core]
        cores = [others[i % len(others)] for i in range(membw_procs)]
    procs = [subprocess.Popen([taskset, "-c", str(c), sys.executable, "-c", HOGS[condition]]) for c in cores]
    try:
        time.sleep(SETTLE_S)
        for p in procs:
            if p.poll() is not None:
                raise tool_cli.ToolError(f"the {condition} load (pid {p.pid}) exited with {p.returncode}")
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def step_check() -> dict[str, float]:
    """A step's check as a suite takes it: the mean of a check before and one after (here back to back)."""
    a, b = noise.speed_check(), noise.speed_check()
    return {k: (a[k] + b[k]) / 2 for k in a}


def sample_flags(gate: dict[str, Any], readings: list[list[dict[str, float]]]) -> list[bool]:
    """The speed gate's verdict on each of its checks (per CPU readings), judged by the step gate's
    floors as a suite's gate judges them (``SpeedGate.use_floors``)."""
    replay = iter(readings)
    judge = noise.SpeedGate(check=lambda: next(replay))
    judge.use_floors(gate)
    return [judge.judge()[1] for _ in readings]


def one_run(condition: str, steps: int, core: int, membw_procs: int) -> dict[str, Any]:
    start = [noise.speed_check() for _ in range(noise.SPREAD_CHECKS)]
    gate = noise.spread_gate(start)
    sampler = noise.Sampler()
    checks, gate_checks = [], []
    with load(condition, core, membw_procs) as pids, sampler:
        for _ in range(steps):
            checks.append(step_check())
            gate_checks.append(noise.gate_check())  # the speed gate's check between samples, on this CPU
    flagged = [noise.step_slowed(gate, c) for c in checks]
    summary = noise.summarize(sampler.readings)
    return {
        "load_pids": pids,
        "start_checks": start,
        "gate": gate,
        "step_checks": checks,
        "flagged": [sorted(f) for f in flagged],
        "gate_checks": gate_checks,
        "gate_flagged": sample_flags(gate, gate_checks),
        "others_cores_mean": summary.get("others_cores_mean"),
        "steal_cores_mean": summary.get("steal_cores_mean"),
    }


def machine() -> dict[str, Any]:
    from appliance.bench.report import machine_line
    from appliance.sysinfo import fingerprint, machine_facts

    fp = fingerprint(calibration=False)
    facts = machine_facts(fp)
    return {
        "line": machine_line(fp),
        "cpu": facts.get("CPU"),
        "family/model/stepping": facts.get("CPU family/model/stepping"),
        "host": socket.gethostname(),
    }


def tally(condition: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A condition's flagged steps, rate and verdict over its runs."""
    total = sum(len(run["flagged"]) for run in runs)
    flagged = sum(bool(f) for run in runs for f in run["flagged"])
    how, target = TARGETS[condition]
    rate = flagged / max(1, total)
    others = [run["others_cores_mean"] for run in runs if run["others_cores_mean"] is not None]
    judged = [f for run in runs for f in run.get("gate_flagged", [])]
    gate_rate = sum(judged) / max(1, len(judged))
    return {
        "steps": total,
        "flagged": flagged,
        "rate": rate,
        "target": f"{how} {target:g}",
        "met": rate <= target if how == "at most" else rate >= target,
        "gate_checks": len(judged),  # the per-sample speed gate's checks, by the same floors
        "gate_flagged": sum(judged),
        "gate_rate": gate_rate,
        "gate_met": gate_rate <= target if how == "at most" else gate_rate >= target,
        "others_cores_mean": max(others) if others else None,
        "runs": runs,
    }


def print_rates(record: dict[str, Any]) -> None:
    print(f"{'condition':<10}{'flagged':>14}{'rate':>8}  target          others' load (cores)")
    for condition, c in record["conditions"].items():
        others = "-" if c["others_cores_mean"] is None else f"{c['others_cores_mean']:.2f}"
        print(
            f"{condition:<10}{c['flagged']:>6} of {c['steps']:<6}{c['rate']:>8.3f}  "
            f"{c['target']:<10} {'met' if c['met'] else 'MISSED':<6}{others:>8}"
        )
    gated = {k: c for k, c in record["conditions"].items() if c.get("gate_checks")}
    if gated:  # records before the speed gate was judged by the floors have none
        print("the per-sample speed gate's checks (integer and float loops, this CPU), by the same floors:")
        for condition, c in gated.items():
            print(
                f"{condition:<10}{c['gate_flagged']:>6} of {c['gate_checks']:<6}{c['gate_rate']:>8.3f}  "
                f"{c['target']:<10} {'met' if c['gate_met'] else 'MISSED'}"
            )


def rescore(path: Path) -> int:
    """A rates record's checks judged again by today's step gate (its start checks, ``step_slowed``)."""
    try:
        record = json.loads(path.read_text())
        conditions = record["conditions"]
        for condition, c in conditions.items():
            for run in c["runs"]:
                gate = noise.spread_gate(run["start_checks"])
                run["flagged"] = [sorted(noise.step_slowed(gate, check)) for check in run["step_checks"]]
                if "gate_checks" in run:
                    run["gate_flagged"] = sample_flags(gate, run["gate_checks"])
            conditions[condition] = tally(condition, c["runs"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise tool_cli.ToolError(f"{path} is not a record of this tool: {e}") from None
    print(f"{path} ({record.get('machine', {}).get('line')}), judged by the step gate now:")
    print_rates(record)
    return 0


def rejudge(paths: list[Path]) -> int:
    """Per report: its steps, the steps flagged when it was written, the steps the step gate flags now."""
    from appliance.bench import report as rpt
    from appliance.errors import ApplianceError

    for p in paths:
        try:
            data = rpt.load(p)
        except ApplianceError as e:
            raise tool_cli.ToolError(str(e)) from None
        steps = (data.get("noise") or {}).get("steps") or []
        before = sum(1 for s in steps if s.get("slow"))
        for s in steps:
            s.pop("slow", None)
        for m in data["metrics"].values():
            (m.get("noise") or {}).pop("slow", None)
        now = noise.flag_slow_steps(data)
        gate = (data.get("noise") or {}).get("gate")
        print(
            f"{p}: {len(steps)} steps, {sum('speed' in s for s in steps)} with a speed check; flagged then "
            f"{before}, now {len(now)}" + (f" ({noise.gate_text(gate)})" if gate else "")
        )
    return 0


def body(a: Any) -> int:
    if a.rejudge:
        return rejudge(a.rejudge)
    if a.rescore:
        return rescore(a.rescore)
    cpus = usable_cpus()
    core = cpus[-1] if a.core is None else a.core
    if core not in cpus:
        raise tool_cli.ToolError(f"--core {core} is not a usable CPU (usable: {cpus})")
    out = a.out or ROOT / "results" / "noise-guard" / f"{dt.date.today()}-{socket.gethostname()}.json"
    tool_cli.check_output(out, ours=tool_cli.written_by("noise_guard_rates.py"))
    facts = machine()  # before pinning: the machine's usable cores, not the one the checks run on
    os.sched_setaffinity(0, {core})
    try:
        record: dict[str, Any] = {
            "command": "python tools/noise_guard_rates.py " + " ".join(sys.argv[1:]),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": facts,
            "core": core,
            "settings": {
                "runs": a.runs,
                "steps": a.steps,
                "start_checks": noise.SPREAD_CHECKS,
                "z": noise.SPREAD_Z,
                "min_drop": noise.MIN_DROP,
                "max_drop": noise.MAX_DROP,
                "slowed_loops": noise.SLOWED_LOOPS,
                "membw_procs": a.membw_procs,
            },
            "conditions": {},
        }
        print(
            f"machine: {record['machine']['line']}; {record['machine']['family/model/stepping']}", flush=True
        )
        for condition in a.conditions:
            runs = []
            for r in range(a.runs):
                runs.append(one_run(condition, a.steps, core, a.membw_procs))
                flagged = sum(bool(f) for f in runs[-1]["flagged"])
                print(f"  {condition} run {r + 1}/{a.runs}: {flagged} of {a.steps} steps flagged", flush=True)
            record["conditions"][condition] = tally(condition, runs)
    finally:
        os.sched_setaffinity(0, cpus)
    print_rates(record)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=tool_cli.number(1, 1000, integer=True), default=5,
                    help="runs per condition, each with its own start checks (default 5)")  # fmt: skip
    ap.add_argument("--steps", type=tool_cli.number(1, 10_000, integer=True), default=20,
                    help="step checks per run (default 20)")  # fmt: skip
    ap.add_argument("--conditions", type=tool_cli.names, default=list(CONDITIONS),
                    help=f"comma-separated, of {', '.join(CONDITIONS)} (default: all)")  # fmt: skip
    ap.add_argument("--core", type=tool_cli.number(0, 4096, integer=True), default=None,
                    help="the CPU the checks and the cpu load run on (default: the last usable)")  # fmt: skip
    ap.add_argument("--membw-procs", type=tool_cli.number(1, 256, integer=True), default=1,
                    help="memory-bandwidth load processes, on the other CPUs (default 1)")  # fmt: skip
    ap.add_argument("--out", type=tool_cli.path, default=None,
                    help="the JSON record (default results/noise-guard/<date>-<host>.json)")  # fmt: skip
    ap.add_argument("--rejudge", type=tool_cli.path, nargs="+", metavar="REPORT",
                    help="measure nothing: re-judge these suite reports' steps with the step gate")  # fmt: skip
    ap.add_argument("--rescore", type=tool_cli.path, metavar="RATES.json",
                    help="measure nothing: count this record's flags again with the step gate as it is now")  # fmt: skip
    a = ap.parse_args(argv)
    unknown = [c for c in a.conditions if c not in CONDITIONS]
    if unknown:
        ap.error(f"--conditions: unknown {', '.join(unknown)}; choose from {', '.join(CONDITIONS)}")
    return tool_cli.guarded(lambda: body(a))


if __name__ == "__main__":
    sys.exit(main())
