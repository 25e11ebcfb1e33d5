"""The probe fits the machine it runs on: with a budget per section (the quick suite's
``probe.budget_s``) a figure keeps at least MIN_RUNS samples and takes more only while they fit, and a
size sweep skips the sizes predicted to overrun; each section shows its progress. Without a budget
(the full suite) nothing changes. The training step builds and warms up one trainer for all its
timed windows, and quick's speed gate adds at most its own small budget."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from appliance.bench import probe
from appliance.bench import report as rpt
from appliance.bench.suite.definition import validate
from appliance.cli import cli
from appliance.errors import ConfigError


class Clock:
    """A fake clock that samples advance by their cost."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def costly(clock: Clock, seconds: float):
    def sample(i: int) -> float:
        clock.now += seconds
        return float(i)

    return sample


def direct(sample):
    return sample()


@pytest.mark.parametrize(
    "each_s, budget_s, taken",
    [
        (1.0, None, 5),  # the full suite: every run
        (1.0, 10.0, 5),  # a fast machine: every run fits
        (1.0, 4.5, 4),  # the 4th fits in 1.5 s left, the 5th not
        (10.0, 8.0, probe.MIN_RUNS),  # a slow machine (or a waiting gate): the minimum, no more
    ],
)
def test_samples_scale_to_what_fits_the_section(each_s, budget_s, taken):
    clock = Clock()
    budget = probe.Budget(budget_s, clock)
    samples = probe.sampled(costly(clock, each_s), 5, budget, direct)
    assert samples == [float(i) for i in range(taken)]


def test_a_retaken_sample_is_taken_again_with_its_own_index():
    """The speed gate may call a sample several times: each call measures the same sample (seed)."""
    calls = []

    def retake(sample):
        calls.extend([sample(), sample()])
        return calls[-1]

    assert probe.sampled(lambda i: float(i), 3, probe.Budget(None), retake) == [0.0, 1.0, 2.0]
    assert calls == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]


def test_timed_runs_fit_the_budget_left():
    assert probe.timed_cost(0.001, 5, 0.02) == pytest.approx(4 * 0.001 + 5 * 0.02)
    assert probe.timed_cost(0.5, 5, 0.02) == pytest.approx(4 * 0.5 + 5 * 0.5)  # a call longer than a run
    assert probe.runs_that_fit(0.001, 5, 0.02, float("inf")) == 5
    assert probe.runs_that_fit(0.001, 5, 0.02, 0.1) == 4  # (0.1 - 4 ms) // 20 ms
    assert probe.runs_that_fit(0.5, 5, 0.02, 0.0) == probe.MIN_RUNS
    assert probe.runs_that_fit(0.5, 2, 0.02, 0.0) == 2  # never more than asked


def test_a_copy_size_predicted_to_overrun_its_section_is_skipped_on_a_slow_machine():
    """The rule the GPU copy sweep applies between sizes, on two machines: the H100 machine's 16 MiB
    per-call times (results/h100, 2026-11-23: pinned 54.7 GB/s, pageable 17.2 and 12.3 GB/s) predict
    its 256 MiB size at well under a second; a machine whose pageable copies and pinning crawl (0.2 GB/s,
    1 s to pin 16 MiB) is predicted far beyond an 8 s section."""
    mib16 = 16 << 20
    h100 = [mib16 / 54.7e9, mib16 / 17.2e9, mib16 / 54.9e9, mib16 / 12.3e9, 2 * mib16 / 3886e9]
    assert probe.copy_seconds(h100, 0.01, 16) < 1.0
    slow = [mib16 / 5e9, mib16 / 0.2e9, mib16 / 5e9, mib16 / 0.2e9, 2 * mib16 / 100e9]
    assert probe.copy_seconds(slow, 1.0, 16) > 8.0
    assert probe.Budget(8.0, Clock()).fits(probe.copy_seconds(h100, 0.01, 16))


def test_sections_show_progress_and_keep_their_seconds():
    clock, shown = Clock(), []
    sections = probe.Sections(5.0, shown.append, clock)
    with sections("CPU memory bandwidth") as budget:
        clock.now += 2.0
        assert budget.left() == pytest.approx(3.0)
    with sections("GPU matmul") as budget:
        clock.now += 0.5
    assert shown == ["CPU memory bandwidth", "GPU matmul"]
    assert sections.seconds == {"CPU memory bandwidth": 2.0, "GPU matmul": 0.5}


def test_a_bad_probe_budget_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"probe.budget_s: must be a positive number, got -1"):
        validate({"name": "x", "probe": {"envs": ["squared"], "budget_s": -1}})
    with pytest.raises(ConfigError, match=r"probe.budget_s: must be a positive number, got 'fast'"):
        validate({"name": "x", "probe": {"envs": ["squared"], "budget_s": "fast"}})


def test_the_suites_probe_has_a_budget_in_quick_and_none_in_full():
    from appliance.bench.suite.definition import load

    assert load("quick")[0]["probe"]["budget_s"] > 0
    assert "budget_s" not in load("full")[0]["probe"]


def test_quick_bounds_what_its_speed_gate_adds_and_full_keeps_the_default():
    """On a host whose speed swings, the gate spent its whole default budget (120 s) waiting in
    quick's first step (docs/lab/noise.md), a third of the 5 minutes quick has on 2 cores."""
    from appliance.bench.suite.definition import load
    from appliance.measure.noise.gate import GATE_BUDGET_S

    quick = load("quick")[0]["gate"]
    assert 0 < quick["budget_s"] <= 30 and quick["patience_s"] <= quick["budget_s"]
    assert load("full")[0].get("gate", True) is True and quick["budget_s"] < GATE_BUDGET_S


def test_the_training_step_times_its_windows_on_one_warmed_up_trainer(monkeypatch):
    """Each repeat of the training step is a window of at least one whole epoch on the same trainer:
    building a fresh one and warming it up for each repeat took two thirds of the step's time on a
    2-core CPU (docs/benchmarks.md). A window the gate takes again runs on that trainer too."""
    from conftest import small_config

    from appliance import train
    from appliance.bench.suite import training

    built = []
    real = train.Trainer

    def counting(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(train, "Trainer", counting)
    taken = []

    def take_twice(window):  # the speed gate retaking every window once
        taken.append(window())
        taken.append(window())
        return taken[-1]

    runs = training.training_speed(small_config("squared"), 0.01, repeats=3, take=take_twice)
    assert len(built) == 1 and len(runs) == 3 and len(taken) == 6
    assert all(r["epochs"] >= 1 and r["sps"] > 0 and r["shares"] for r in taken)
    assert (
        built[0].global_step == (1 + sum(r["epochs"] for r in taken)) * built[0].batch_size
    )  # warm-up and windows


def test_a_suite_probe_prints_each_section_and_records_its_seconds(tmp_path):
    spec = {
        "name": "probe-budget",
        "seconds": 0.1,
        "gate": False,
        "probe": {"envs": ["squared"], "runs": 5, "budget_s": 0.3},
    }
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "results"
    result = CliRunner().invoke(
        cli,
        ["run", "--suite", str(path), "--gpu", "cpu", "--out", str(out), "--no-plots", "--envs", "squared"],
    )
    assert result.exit_code == 0, result.output
    for section in ("CPU memory bandwidth", "single-core squared steps", "squared policy forward on the CPU"):
        assert f"    {section}\n" in result.output, result.output
    (json_path,) = (out / "cpu").glob("*.json")
    data = rpt.load(json_path)
    sections = data["analysis"]["probe_sections"]["squared"]
    assert sections["budget_s"] == 0.3 and set(sections["seconds"]) >= {"CPU memory bandwidth"}
    steps = data["metrics"]["probe/cpu/env_step/squared"]["samples"]
    assert len(steps) == probe.MIN_RUNS, "0.1 s samples: the third spends the 0.3 s section"
    assert json.loads(json_path.read_text())["suite"]["definition"]["probe"]["budget_s"] == 0.3


def test_the_policy_forward_is_probed_at_twice_the_batch_where_the_section_has_room():
    """The bottleneck advice's evidence for "more envs": the same forward at twice the batch, under
    its own name; a section whose budget is spent keeps the run's batch alone."""
    from conftest import small_config

    cfg = small_config("squared")
    rows = int(cfg.vec.num_envs)
    first, double = probe.policy_forward_scaling(cfg, "cpu", 3)
    assert first.name == "probe/cpu/policy_forward/squared" and first.labels["batch"] == rows
    assert double.name == "probe/cpu/policy_forward_2x/squared" and double.labels["batch"] == 2 * rows
    assert len(double.samples) == 3 and min(double.samples) > 0
    clock = Clock()
    spent = probe.Budget(1.0, clock)
    clock.now += 1.0
    (alone,) = probe.policy_forward_scaling(cfg, "cpu", 3, budget=spent)
    assert alone.name == first.name and len(alone.samples) == probe.MIN_RUNS


def test_the_cpu_probe_takes_every_sample_through_the_speed_gate_the_policy_forward_too():
    """A forward's samples taken back to back within a fraction of a second agreed with each other
    more than with the same probe seconds later (docs/lab/noise.md), so a selftest called runs of one
    machine different: the forward's samples go one by one through the gate, as the other sections'."""
    from conftest import small_config

    taken = []

    def take(sample):
        taken.append(1)
        return sample()

    figures = probe.cpu_probe(small_config("squared"), 3, 0.05, take=take)
    names = {f.name for f in figures}
    assert {"probe/cpu/policy_forward/squared", "probe/cpu/policy_forward_2x/squared"} <= names
    assert len(taken) == sum(len(f.samples) for f in figures)
