"""Noise guard: readings from /proc/stat arithmetic, the busy flag beside a CPU burner, --wait-quiet."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import yaml
from click.testing import CliRunner

from appliance.bench import report as rpt
from appliance.cli import cli
from appliance.measure import noise
from appliance.sysinfo.load import RunLoad


class Script:
    """Fake clock, /proc/stat and own-CPU counters that advance by a scripted amount per reading."""

    def __init__(self, steps):
        # steps: (dt seconds, machine busy cpu-seconds, steal cpu-seconds, our cpu-seconds) per reading
        self.steps, self.i = steps, -1
        self.t = self.busy = self.steal = self.own = 0.0

    def clock(self):
        self.i += 1
        if 0 < self.i <= len(self.steps):
            dt, busy, steal, own = self.steps[self.i - 1]
            self.t += dt
            self.busy += busy
            self.steal += steal
            self.own += own
        return self.t

    def sampler(self):
        return noise.Sampler(stat=lambda: (self.busy, self.steal), own=lambda: self.own, clock=self.clock)


def test_readings_subtract_our_own_cpu_and_count_steal():
    s = Script([(1.0, 1.9, 0.0, 1.8), (0.01, 0.01, 0.0, 0.0), (0.99, 1.99, 0.3, 1.0)]).sampler()
    assert s.sample() is None  # the first call only sets the baseline
    first = s.sample()
    assert s.sample() is None  # 10 ms is too short to read 10 ms ticks: it joins the next reading
    second = s.sample()
    assert abs(first["others_cores"] - 0.1) < 1e-9 and first["own_cores"] == 1.8
    assert abs(second["others_cores"] - 1.0) < 1e-9 and second["steal_cores"] == 0.3
    summary = noise.summarize(s.readings, cores=2)
    assert summary["others_cores_mean"] == 0.55 and summary["others_cores_max"] == 1.0
    assert summary["busy"] and any("stole" in r for r in summary["reasons"])


def test_a_runs_load_is_read_since_the_last_record_and_over_the_whole_run():
    script = Script([(2.0, 3.0, 0.0, 2.0), (2.0, 4.0, 0.8, 3.0)])
    load = RunLoad(stat=lambda: (script.busy, script.steal), own=lambda: script.own, clock=script.clock)
    assert load.since_last() == {"others_cores": 0.5, "steal_cores": 0.0}
    assert load.since_last() == {"others_cores": 0.5, "steal_cores": 0.4}
    assert load.whole() == {"others_cores": 0.5, "steal_cores": 0.2}  # 4 s: 2 cores' seconds and 0.8

    def unreadable():
        raise OSError("no /proc here")

    assert RunLoad(stat=unreadable).since_last() == {}  # no figure, and never a failed run


def test_a_run_on_a_busy_machine_says_so_in_its_last_line():
    from appliance.train.session import busy_words

    assert busy_words({"others_cores": 0.05, "steal_cores": 0.02}, cores=2) == ""
    said = busy_words({"others_cores": 0.05, "steal_cores": 0.3}, cores=2)
    assert "busy machine" in said and "hypervisor took 0.30 cores" in said
    assert "other processes 1.00" in busy_words({"others_cores": 1.0}, cores=2)
    assert busy_words({}, cores=2) == ""  # the counters could not be read


def test_quiet_readings_are_not_busy_and_gpu_findings_are():
    quiet = [{"t": 1.0, "others_cores": 0.05, "steal_cores": 0.0, "own_cores": 2.0}]
    assert noise.summarize(quiet)["busy"] is False
    daemons = [{**quiet[0], "others_cores": 0.5}]  # half a core of background work
    assert noise.summarize(daemons, cores=2)["busy"] and not noise.summarize(daemons, cores=64)["busy"]
    gpu = [{**quiet[0], "gpu_other_processes": 1, "gpu_slowdown": ["hw_thermal_slowdown"]}]
    summary = noise.summarize(gpu)
    assert summary["busy"] and len(summary["reasons"]) == 2


class FakeGpuNVML:
    """An NVML whose GPU runs one process of ours and one of someone else, thermally throttled."""

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        from types import SimpleNamespace

        return [SimpleNamespace(pid=os.getpid()), SimpleNamespace(pid=1)]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x40


def test_gpu_watch_counts_other_processes_and_slowdown():
    watch = noise.GpuWatch(FakeGpuNVML())
    assert watch.read() == {"gpu_other_processes": 1, "gpu_slowdown": ["hw_thermal_slowdown"]}
    watch.close()


def test_wait_quiet_returns_once_a_window_is_quiet_or_gives_up():
    busy, calm = (3.0, 3.0, 0.0, 0.0), (3.0, 0.1, 0.0, 0.0)
    script = Script([busy, busy, calm])
    waits = []
    result = noise.wait_quiet(60, sampler=script.sampler(), sleep=lambda s: None, on_wait=waits.append)
    assert result["quiet"] and result["waited_s"] == 9.0 and len(waits) == 2
    stuck = noise.wait_quiet(5, sampler=Script([busy] * 5).sampler(), sleep=lambda s: None)
    assert not stuck["quiet"] and stuck["others_cores"] == 1.0


def test_finish_names_busy_and_unstable_metrics():
    r = rpt.Report({"name": "t", "definition": {"cv": 0.05}}, {"name": "cpu"}, {}, {}, seed=0, repeats=3)
    script = Script([(0.5, 1.0, 0.0, 0.0)] * 4)
    with noise.watch(r, "step one", sampler=script.sampler(), speed=None):
        r.add("env_sps/a/threads=1", [100, 101, 99], "agent-steps/s")
    with noise.watch(r, "step two", sampler=Script([(0.5, 0.0, 0.0, 0.0)] * 4).sampler(), speed=None):
        r.add("env_sps/b/threads=1", [100, 150, 60], "agent-steps/s")
        r.add("train_phase/b/env", [0.1, 0.5, 0.9], "share", "info")  # descriptive: never "unstable"
    analysis = noise.finish(r)
    assert analysis == {
        "cv_limit": 0.05,
        "busy": ["env_sps/a/threads=1"],
        "unstable": ["env_sps/b/threads=1"],
    }
    assert r.data["metrics"]["env_sps/a/threads=1"]["noise"]["busy"]
    assert [s["step"] for s in r.data["noise"]["steps"]] == ["step one", "step two"]
    warnings = " ".join(r.data["warnings"])
    assert "busy" in warnings and "env_sps/a/threads=1" in warnings and "CV of 5%" in warnings
    md = rpt.to_markdown(r.data)
    assert "## Noise guard" in md and "`env_sps/a/threads=1` **(busy)**" in md


def test_a_step_whose_speed_check_ran_slow_is_flagged_even_with_a_quiet_proc():
    """Contention /proc cannot see (other VMs on the host: no steal, no other processes) shows as a
    slower speed check; a step whose check is below what the start checks' spread allows is named in
    a warning with the loop that slowed and the gate (not flagged busy: a CPU's clocks also drop with
    its own load)."""
    r = rpt.Report({"name": "t", "definition": {}}, {"name": "cpu"}, {}, {}, seed=0, repeats=3)
    fast = {"int_mops": 10.0, "float_gflops": 3.0, "copy_gbs": 8.0}
    start = iter([fast, {**fast, "copy_gbs": 7.9}, fast, {**fast, "copy_gbs": 8.1}, fast])
    noise.start(r, speed=lambda: next(start))
    quiet = [(0.5, 0.0, 0.0, 0.0)] * 4
    steps_run = (
        ("fast", 8.0, 10.0),
        ("slightly slower", 7.2, 10.0),
        ("one loop dipped", 5.0, 10.0),
        ("slowed", 5.0, 6.0),
    )
    for label, copy, integer in steps_run:
        checks = iter([fast, {**fast, "copy_gbs": copy, "int_mops": integer}])
        with noise.watch(r, label, sampler=Script(quiet).sampler(), speed=lambda c=checks: next(c)):
            r.add(f"env_sps/{label}/threads=1", [100, 100, 100], "agent-steps/s")
    noise.finish(r)
    steps = {s["step"]: s for s in r.data["noise"]["steps"]}
    assert steps["fast"]["speed_ratio"] == {"int_mops": 1.0, "float_gflops": 1.0, "copy_gbs": 1.0}
    assert not steps["slightly slower"].get("slow"), "7.6 of 8 GB/s (95%) is within the 15% least drop"
    assert not steps["one loop dipped"].get("slow"), "one loop below its floor is the check's own scatter"
    assert (
        "memory copy 81% of the median, floor 85%" in steps["slowed"]["slow"] and not steps["slowed"]["busy"]
    )
    assert "integer loop 80% of the median" in steps["slowed"]["slow"]
    assert "memory copy 81%" in r.data["metrics"]["env_sps/slowed/threads=1"]["noise"]["slow"]
    assert "slow" not in r.data["metrics"]["env_sps/fast/threads=1"]["noise"]
    gate = r.data["analysis"]["noise"]["gate"]
    assert "5 speed checks before the first step" in gate and "memory copy 85%" in gate
    assert f"in {noise.SLOWED_LOOPS} or more loops" in gate
    assert any(
        "1 step(s) ran their speed check below the median" in w and "'slowed'" in w
        for w in r.data["warnings"]
    )
    md = rpt.to_markdown(r.data)
    assert "81%" in md and "Step gate: a step counts as slowed" in md
    rpt.validate(r.data, "report")


def _gate_from(rng, n, spread):
    """A step gate from ``n`` start checks scattered with relative SD ``spread`` around 10/3/8."""
    base = {"int_mops": 10.0, "float_gflops": 3.0, "copy_gbs": 8.0}
    return base, noise.spread_gate(
        [{k: v * (1 + spread * rng.standard_normal()) for k, v in base.items()} for _ in range(n)]
    )


def test_the_step_gate_passes_idle_like_checks_and_flags_a_30_percent_slowdown():
    """Synthetic checks: with an idle-like spread (2-6 % relative SD, as the calibration loops scatter
    on a quiet VM) fewer than 1 in 20 idle steps are flagged, and every step 30 % slower is."""
    import numpy as np

    rng = np.random.default_rng(0)
    for spread in (0.02, 0.04, 0.06):
        flagged_idle = flagged_slow = 0
        for _ in range(50):  # 50 runs of 5 start checks and 20 steps each
            base, gate = _gate_from(rng, noise.SPREAD_CHECKS, spread)
            for _ in range(20):
                idle = {k: v * (1 + spread * rng.standard_normal()) for k, v in base.items()}
                flagged_idle += bool(noise.step_slowed(gate, idle))
                slow = {k: v * 0.7 * (1 + spread * rng.standard_normal()) for k, v in base.items()}
                flagged_slow += bool(noise.step_slowed(gate, slow))
        assert flagged_idle / 1000 <= 1 / 20, (spread, flagged_idle)
        assert flagged_slow / 1000 >= 0.9, (spread, flagged_slow)


def test_a_step_is_slowed_by_two_loops_below_their_floors_or_by_its_only_loop():
    """Measured on the 2-core KVM machine (docs/lab/noise.md): under a pinned CPU or memory load every
    flagged step had two or three loops below their floors; idle, half the flags were one loop's dip."""
    gate = noise.spread_gate([{"int_mops": 10.0, "float_gflops": 3.0, "copy_gbs": 8.0}] * 5)
    assert not noise.step_slowed(gate, {"int_mops": 10.0, "float_gflops": 2.0, "copy_gbs": 8.0})
    both = noise.step_slowed(gate, {"int_mops": 7.0, "float_gflops": 3.0, "copy_gbs": 6.0})
    assert both == {"int_mops": 0.7, "copy_gbs": 0.75}
    assert noise.step_slowed(gate, {"int_mops": 7.0}) == {"int_mops": 0.7}  # a check of one loop: it alone
    assert noise.step_slowed(gate, {"int_mops": 7.0}, loops=1) == {"int_mops": 0.7}


def test_the_step_gate_is_set_by_the_spread_not_the_luckiest_check():
    """One lucky start check does not raise the floor (medians and MADs, not the best); a wide spread
    lowers it, down to MAX_DROP and no further; a tight one keeps MIN_DROP."""
    checks = [{"int_mops": v, "float_gflops": 3.0, "copy_gbs": 8.0} for v in (10.0, 10.1, 9.9, 10.0, 14.0)]
    gate = noise.spread_gate(checks)
    assert gate["loops"]["int_mops"]["median"] == 10.0
    assert gate["loops"]["int_mops"]["floor_ratio"] == 1 - noise.MIN_DROP
    assert not noise.slowed_loops(gate, {"int_mops": 9.2, "float_gflops": 3.0, "copy_gbs": 8.0})
    wide = noise.spread_gate([{"int_mops": v} for v in (6.0, 8.0, 10.0, 12.0, 14.0)])
    assert wide["loops"]["int_mops"]["floor_ratio"] == 1 - noise.MAX_DROP
    assert noise.slowed_loops(wide, {"int_mops": 7.0}) == {"int_mops": 0.7}
    assert "integer loop 75%" in noise.gate_text(wide)


def test_without_start_checks_the_steps_own_checks_set_the_gate():
    """Older reports (and runs without start checks) are judged by their steps' own spread."""
    r = rpt.Report({"name": "t", "definition": {}}, {"name": "cpu"}, {}, {}, seed=0, repeats=3)
    fast = {"int_mops": 10.0, "float_gflops": 3.0, "copy_gbs": 8.0}
    for i, ratio in enumerate((1.0, 1.01, 0.99, 1.0, 0.6)):
        speed = {**fast, "int_mops": 10.0 * ratio, "copy_gbs": 8.0 * ratio}  # two loops: the step gate's rule
        with noise.watch(
            r, f"s{i}", sampler=Script([(0.5, 0.0, 0.0, 0.0)] * 2).sampler(), speed=lambda s=speed: s
        ):
            r.add(f"env_sps/s{i}/threads=1", [1, 1, 1], "agent-steps/s")
    analysis = noise.finish(r)
    assert analysis["slow"] == ["s4"] and "5 step checks" in analysis["gate"]


class GateScript:
    """A speed gate with scripted checks (each a list of per-CPU readings), a fake clock and sleep."""

    def __init__(self, checks, **limits):
        self.checks, self.t, self.slept = iter(checks), 0.0, []
        self.gate = noise.SpeedGate(
            reference={"int_mops": 10.0, "float_gflops": 3.0},
            check=lambda: next(self.checks),
            sleep=self.sleep,
            clock=lambda: self.t,
            **limits,
        )

    def sleep(self, s):
        self.slept.append(s)
        self.t += s


FAST = [{"int_mops": 10.0, "float_gflops": 3.0}] * 2  # both CPUs at their best
ONE_SLOW = [{"int_mops": 10.0, "float_gflops": 3.0}, {"int_mops": 5.0, "float_gflops": 3.0}]


def test_speed_gate_retakes_a_sample_whose_checks_ran_slow_and_keeps_the_discarded_value():
    g = GateScript([FAST, ONE_SLOW, FAST, FAST])  # before, after (slow: one CPU at 50%), before, after
    values = iter([50.0, 100.0])
    assert g.gate.take(lambda: next(values)) == 100.0
    record = g.gate.end_step()
    assert record == {
        "samples": 1,
        "retaken": [{"value": 50.0, "speed_ratio": 0.5}],
        "slow_kept": 0,
        "waited_s": 0.0,
        "rule": "best",
    }
    assert g.gate.end_step()["samples"] == 0, "each step starts a fresh record"


def test_speed_gate_waits_for_the_cpu_before_a_sample_within_its_patience():
    g = GateScript([ONE_SLOW, ONE_SLOW, FAST, FAST], patience_s=20.0)
    assert g.gate.take(lambda: 7.0) == 7.0
    assert g.slept == [1.0, 1.0] and g.gate.end_step()["waited_s"] == 2.0
    stuck = GateScript([ONE_SLOW] * 100, patience_s=3.0, retakes=1)  # never fast: bounded waits
    values = iter([1.0, 2.0])
    assert stuck.gate.take(lambda: next(values)) == 2.0, "after the last retake the sample is kept"
    record = stuck.gate.end_step()
    assert record["slow_kept"] == 1 and len(record["retaken"]) == 1 and record["waited_s"] == 6.0
    broke = GateScript([ONE_SLOW] * 100, patience_s=30.0, budget_s=5.0, retakes=0)
    broke.gate.take(lambda: 1.0)
    broke.gate.take(lambda: 1.0)
    assert sum(broke.slept) == 5.0, "the run's waiting budget caps every wait after it"
    costly = GateScript([ONE_SLOW] * 100, patience_s=0.0, budget_s=25.0, retakes=5)

    def ten_seconds():
        costly.t += 10.0  # a sample that takes 10 s on the fake clock
        return 1.0

    costly.gate.take(ten_seconds)
    record = costly.gate.end_step()
    assert len(record["retaken"]) == 2 and record["slow_kept"] == 1, "discarded samples spend the budget too"


def test_speed_gate_with_the_step_gate_judges_by_the_start_spread_not_a_lucky_best():
    """On a host whose speed swings (docs/lab/noise.md: 3.5-9.0 M integer ops/s within 20 s, idle), one
    lucky check set a best that every later check ran below 85 % of, and the gate spent its whole
    budget waiting in the first step. With the start checks' floors a check is slow only where two
    loops on one CPU ran below them, the rule that judges the steps."""
    start = [{"int_mops": v, "float_gflops": 3.0, "copy_gbs": 8.0} for v in (9.8, 10.0, 10.2, 10.0, 10.1)]
    lucky = [{"int_mops": 14.0, "float_gflops": 3.0}] * 2
    usual = [{"int_mops": 9.0, "float_gflops": 2.9}] * 2
    one_loop_low = [{"int_mops": 7.0, "float_gflops": 3.0}, {"int_mops": 10.0, "float_gflops": 3.0}]
    both_low = [{"int_mops": 10.0, "float_gflops": 3.0}, {"int_mops": 7.0, "float_gflops": 2.1}]
    best = GateScript([lucky, usual, usual, usual] + [usual] * 100, patience_s=2.0, retakes=1)
    best.gate.take(lambda: 1.0)  # the lucky check raised the best; then 9.0 is 64 % of it
    best.gate.take(lambda: 1.0)
    assert best.slept, "the best-ratio rule waits for a speed the host only reached once"
    g = GateScript([lucky, usual, usual, one_loop_low, usual, both_low, usual, usual], patience_s=2.0)
    g.gate.use_floors(noise.spread_gate(start))
    values = iter([1.0, 2.0, 3.0, 4.0])
    assert g.gate.take(lambda: next(values)) == 1.0 and not g.slept
    assert g.gate.take(lambda: next(values)) == 2.0, "one loop's dip is not a slowed CPU"
    assert g.gate.take(lambda: next(values)) == 4.0, "two loops below their floors on one CPU: taken again"
    record = g.gate.end_step()
    assert record["rule"] == "floors" and record["samples"] == 3 and not g.slept
    assert record["retaken"] == [{"value": 3.0, "speed_ratio": 0.7}]


def test_gated_steps_are_judged_by_their_samples_and_named_in_the_report():
    r = rpt.Report({"name": "t", "definition": {}}, {"name": "cpu"}, {}, {}, seed=0, repeats=2)
    quiet = [(0.5, 0.0, 0.0, 0.0)] * 4
    g = GateScript([FAST, ONE_SLOW, FAST, FAST, FAST, FAST] + [ONE_SLOW] * 8, patience_s=0.5, retakes=1)
    with noise.watch(r, "retaken", sampler=Script(quiet).sampler(), speed=None, gate=g.gate):
        values = iter([5.0, 9.0, 10.0])
        r.add("env_sps/a/threads=2", [g.gate.take(lambda: next(values)) for _ in range(2)], "agent-steps/s")
    with noise.watch(r, "kept slow", sampler=Script(quiet).sampler(), speed=None, gate=g.gate):
        values = iter([3.0, 4.0])
        r.add("env_sps/b/threads=2", [g.gate.take(lambda: next(values))], "agent-steps/s")
    analysis = noise.finish(r)
    a, b = (r.data["metrics"][f"env_sps/{k}/threads=2"] for k in "ab")
    assert a["samples"] == [9.0, 10.0] and a["noise"]["gate"]["retaken"] == [
        {"value": 5.0, "speed_ratio": 0.5}
    ]
    assert "slow" not in a["noise"] and "1 of 1 sample(s) kept" in b["noise"]["slow"]
    assert analysis["retaken"] == {"retaken": 1, "kept slow": 1} and analysis["slow"] == ["kept slow"]
    assert any("took 2 sample(s) again in 2 step(s)" in w for w in r.data["warnings"])
    assert "2, 1 (5 at 50%), 0, 0 s" in rpt.to_markdown(r.data)


def test_gate_check_visits_every_usable_cpu_and_restores_the_affinity():
    before = os.sched_getaffinity(0)
    readings = noise.gate_check()
    assert len(readings) == min(len(before), noise.GATE_MAX_CPUS)
    assert all(set(c) == set(noise.GATE_KEYS) and min(c.values()) > 0 for c in readings)
    assert os.sched_getaffinity(0) == before


@contextlib.contextmanager
def cpu_burner(count=1):
    """CPU-burning processes that are not our children (the shell that starts each exits at once)."""
    pids = []
    try:
        for _ in range(count):
            out = subprocess.run(
                ["sh", "-c", f'"{sys.executable}" -c "while True: pass" >/dev/null 2>&1 & echo $!'],
                capture_output=True,
                text=True,
                check=True,
            )
            pids.append(int(out.stdout.strip()))
        time.sleep(0.3)
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_measurement_beside_a_cpu_burner_is_flagged_busy(tmp_path):
    spec = {
        "name": "tiny",
        "seconds": 0.4,
        "gate": {"patience_s": 1, "budget_s": 2, "retakes": 1},  # the burner slows the checks too
        "env_sps": {"envs": ["squared"], "threads": [1]},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    with cpu_burner(count=int(noise.thresholds()[0]) + 1):  # enough to pass the busy line on any machine
        result = CliRunner().invoke(
            cli,
            [
                "run",
                "--suite",
                str(path),
                "--gpu",
                "cpu",
                "--repeats",
                "2",
                "--out",
                str(tmp_path),
                "--no-plots",
            ],
        )
    assert result.exit_code == 0, result.output
    assert "measured while the machine was busy" in result.output
    (json_path,) = (tmp_path / "cpu").glob("*.json")
    data = rpt.load(json_path)
    flag = data["metrics"]["env_sps/squared/threads=1"]["noise"]
    assert flag["busy"] and flag["others_cores_mean"] >= noise.thresholds()[0]
    assert data["analysis"]["noise"]["busy"] == ["env_sps/squared/threads=1"]
    assert "busy" in json_path.with_suffix(".html").read_text()


def test_wait_quiet_option_is_checked_and_recorded(tmp_path, monkeypatch):
    spec = {"name": "tiny", "seconds": 0.1, "gate": False, "env_sps": {"envs": ["squared"], "threads": [1]}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    base = [
        "run",
        "--suite",
        str(path),
        "--gpu",
        "cpu",
        "--repeats",
        "1",
        "--out",
        str(tmp_path),
        "--no-plots",
    ]
    bad = CliRunner().invoke(cli, [*base, "--wait-quiet", "-1"])
    assert bad.exit_code == 2 and "--wait-quiet" in bad.output
    monkeypatch.setattr(
        noise,
        "wait_quiet",
        lambda s, **kw: {"quiet": False, "waited_s": s, "others_cores": 1.5, "steal_cores": 0.0},
    )
    ok = CliRunner().invoke(cli, [*base, "--wait-quiet", "5"])
    assert ok.exit_code == 0, ok.output
    (json_path,) = (tmp_path / "cpu").glob("*.json")
    data = rpt.load(json_path)
    assert data["quiet_wait"]["quiet"] is False and "not quiet after waiting 5 s" in " ".join(
        data["warnings"]
    )


def test_a_figure_measured_in_rounds_carries_the_noise_of_all_its_rounds():
    """A suite takes env and vector samples in rounds (one sample of each figure, then the next): the
    figure's noise covers every round, busy judged on the load over all of them (as one step's would
    be), slowed where most of its rounds were, and the speed gate's records add up."""
    r = rpt.Report({"name": "t", "definition": {}}, {"name": "cpu"}, {}, {}, seed=0, repeats=3)
    fast = {"int_mops": 10.0, "float_gflops": 3.0, "copy_gbs": 8.0}
    noise.start(r, speed=lambda: fast)
    quiet, light, loaded = ([(0.5, busy, 0.0, 0.0)] * 4 for busy in (0.0, 0.3, 0.6))  # 0, 0.6, 1.2 cores
    gate = GateScript([FAST] * 20, patience_s=0.5, retakes=1)
    values = {"a": [], "b": []}
    for r_ in range(3):
        for name in "ab":
            load = loaded if name == "b" else light if r_ == 1 else quiet
            slowed = (name, r_) in (("a", 1), ("a", 2), ("b", 0))  # a: two rounds of three; b: one
            checks = iter([fast, {**fast, "int_mops": 5.0, "copy_gbs": 5.0} if slowed else fast])
            with noise.watch(
                r, f"{name} ({r_ + 1}/3)", sampler=Script(load).sampler(), speed=lambda c=checks: next(c),
                gate=gate.gate if name == "b" else None,
            ):  # fmt: skip
                values[name].append(gate.gate.take(lambda: 100.0) if name == "b" else 100.0)
                r.add(f"env_sps/{name}/threads=1", list(values[name]), "agent-steps/s")
    noise.finish(r)
    a, b = (r.data["metrics"][f"env_sps/{k}/threads=1"] for k in "ab")
    assert a["samples"] == [100.0] * 3 and a["noise"]["steps"] == [0, 2, 4] and a["noise"]["step"] == 0
    assert a["noise"]["others_cores_mean"] == 0.2 and a["noise"]["others_cores_max"] == 0.6
    assert not a["noise"]["busy"], "one loaded round of three: 0.2 cores over the figure's time, below 0.25"
    assert a["noise"]["slow"].startswith("in 2 of its 3 rounds: the CPU ran its speed check slower")
    assert "integer loop 75%" in a["noise"]["slow"]
    assert "slow" not in b["noise"], "one slowed round of three: its median is not a slowed sample"
    assert (
        b["noise"]["busy"] and b["noise"]["steps"] == [1, 3, 5] and "1.20 cores" in b["noise"]["reasons"][0]
    )
    windows = [r.data["noise"]["steps"][i]["seconds"] for i in b["noise"]["steps"]]
    assert b["noise"]["gate"]["samples"] == 3 and b["noise"]["seconds"] == sum(windows) > windows[0]
    assert len(r.data["noise"]["steps"]) == 6
    rpt.validate(r.data, "report")


def test_the_speed_gate_rebases_on_the_runs_checks_after_a_lucky_fast_start():
    """Five start checks in two seconds can catch the host in a fast moment; judged against them, a
    run at the machine's usual speed read slowed throughout (results/cpu/selftest/try18-zen3: 26 of
    44 steps). Rebased on every check of the run, the usual speed passes after a few samples, while
    a CPU at half speed is still slow."""
    lucky = [
        {"int_mops": 10.0, "float_gflops": 3.0, "copy_gbs": 8.0}
    ] * 5  # start checks, tight: floors at 85%
    usual = [{"int_mops": 8.0, "float_gflops": 2.4}] * 2  # 80% of the lucky start: below its floors
    half = [{"int_mops": 4.0, "float_gflops": 1.2}] * 2
    gates = {}
    for rebased in (False, True):
        g = GateScript([usual] * 40 + [half] * 2, patience_s=0, budget_s=0, retakes=0)
        g.gate.use_floors(noise.spread_gate(lucky), lucky if rebased else None)
        for _ in range(20):
            g.gate.take(lambda: 1.0)
        gates[rebased] = g.gate.end_step()
        g.gate.take(lambda: 1.0)  # at half speed
        gates[rebased, "half"] = g.gate.end_step()
    assert gates[False]["slow_kept"] == 20 and gates[False]["rule"] == "floors"
    assert gates[True]["slow_kept"] <= 3 and gates[True]["rule"] == "rebased floors"
    assert gates[True]["medians"] == {"int_mops": 8.0, "float_gflops": 2.4}
    assert gates[True, "half"]["slow_kept"] == 1, "half speed is slow against the run's own median too"
    g = GateScript([half] * 60, patience_s=0, budget_s=0, retakes=0)
    g.gate.use_floors(noise.spread_gate(lucky), lucky)
    for _ in range(25):
        g.gate.take(lambda: 1.0)
    assert g.gate.end_step()["slow_kept"] == 25, "the median never falls below 75% of the start's"
