"""Benchmark suites, reports and compare: schema round-trip, statistics, validation and the CPU probe."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import fake_cpu_bf16

from appliance.bench import report as rpt
from appliance.bench.bottleneck import diagnose_training, roofline
from appliance.bench.suite import definition as suite
from appliance.bench.suite.session import bench_profile
from appliance.cli import cli
from appliance.compare import compare as cmp
from appliance.config import detect_profile
from appliance.docs import readme
from appliance.errors import ConfigError, ReportError
from appliance.measure.stats import holm, ratio_interval, ratio_p_value, summarize
from appliance.sysinfo import fingerprint

FP = fingerprint(calibration=False)  # the calibration loops take a second; these tests need none


def make_report(metrics, fp=None, name="quick"):
    fp = json.loads(json.dumps(fp or FP))  # a copy: tests change one report's machine
    r = rpt.Report({"name": name}, {"name": "cpu"}, fp, {"train": {"seed": 0}}, seed=0, repeats=3)
    for metric, (samples, better) in metrics.items():
        r.add(metric, samples, "agent-steps/s", better, env=metric.split("/")[1])
    return r.data


def noisy(center, n=10, spread=0.02, seed=0):
    return list(center * (1 + spread * np.random.default_rng(seed).standard_normal(n)))


# ---------------------------------------------------------------------- statistics


def test_summary_has_median_range_cv_and_interval():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median"] == 3.0 and s["min"] == 1.0 and s["max"] == 100.0 and s["n"] == 5
    assert s["ci"][0] <= 3.0 <= s["ci"][1] and s["cv"] > 1
    assert summarize([])["median"] is None and summarize([5.0])["ci"] is None


def test_ratio_interval_covers_the_true_ratio():
    ratio, ci = ratio_interval(noisy(100, seed=1), noisy(90, seed=2))
    assert 0.85 < ratio < 0.95 and ci[0] < 0.9 < ci[1] and ci[1] < 1


def test_ratio_interval_holds_95_percent_at_three_samples_a_side():
    """A suite's figures have 3 samples a side. The percentile bootstrap of medians this replaced
    covered the true ratio 90 % of the time there (it excludes 1 whenever all of one side's samples
    lie beyond the other's: 2 of the 20 equally likely orders), so a machine compared with itself
    read "significant" on 1 metric in 10. Welch's t on the logarithms holds its 95 %; its p-value
    says the same as its interval."""
    rng = np.random.default_rng(7)
    trials = 2000
    covered = agree = 0
    for _ in range(trials):
        a, b = np.exp(rng.normal(0, 0.05, 3)), 0.9 * np.exp(rng.normal(0, 0.05, 3))
        _, ci = ratio_interval(a, b)
        covered += ci[0] <= 0.9 <= ci[1]
        agree += (ci[0] > 1 or ci[1] < 1) == (ratio_p_value(a, b) < 0.05)
    assert covered / trials > 0.93, covered / trials  # the bootstrap: 0.90
    assert agree == trials
    # one sample on a side borrows the other's spread; none anywhere, no interval
    assert (
        ratio_interval([100.0], [99.0, 101.0, 100.0])[1][0] < 1 < ratio_interval([100.0], [99.0, 101.0])[1][1]
    )
    assert ratio_interval([100.0], [90.0])[1] is None and ratio_p_value([100.0], [90.0]) is None
    # samples that are not all positive (a share of 0) keep the bootstrap
    assert ratio_interval([0.0, 0.2, 0.1], [0.1, 0.3, 0.2])[1] is not None


def test_holm_adjusts_each_p_value_for_the_others():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5] and holm([]) == []


# ---------------------------------------------------------------------- reports


def test_report_round_trip_writes_json_markdown_and_plots(tmp_path):
    data = make_report(
        {
            "env_sps/breakout/threads=1": (noisy(1e6, 3), "higher"),
            "env_sps/breakout/threads=2": (noisy(1.9e6, 3), "higher"),
        }
    )
    data["metrics"]["env_sps/breakout/threads=1"]["labels"]["threads"] = 1
    data["metrics"]["env_sps/breakout/threads=2"]["labels"]["threads"] = 2
    stem = rpt.output_stem(tmp_path, "cpu", data["fingerprint"], data["created_utc"])
    paths = rpt.write(data, stem)
    loaded = rpt.load(stem.with_suffix(".json"))
    assert loaded == json.loads(json.dumps(data)) and loaded["schema"] == rpt.SCHEMA
    md = stem.with_suffix(".md").read_text()
    assert "env_sps/breakout/threads=2" in md and "1.9 M" in md
    pngs = [p for p in paths if p.suffix == ".png"]
    assert {p.name.rsplit("-", 1)[1] for p in pngs} == {"sps.png", "scaling.png"}
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    # a second report on the same machine and day does not overwrite the first
    assert rpt.output_stem(tmp_path, "cpu", data["fingerprint"], data["created_utc"]) != stem


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema="puffer-bench/report/0"), "report/0"),
        (lambda d: d.pop("schema"), "no 'schema'"),
        (lambda d: d.pop("fingerprint"), "lacks fingerprint"),
        (lambda d: d["metrics"]["env_sps/x/t"].pop("samples"), "lacks samples"),
    ],
)
def test_invalid_reports_are_refused(tmp_path, mutate, message):
    data = make_report({"env_sps/x/t": ([1.0, 2.0], "higher")})
    mutate(data)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=message):
        rpt.load(path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ReportError, match="cannot read"):
        rpt.load(tmp_path / "bad.json")


# ---------------------------------------------------------------------- compare


def test_compare_flags_a_real_regression_and_not_noise():
    base = make_report(
        {"train_sps/a": (noisy(1e5, seed=1), "higher"), "probe/gpu/launch": (noisy(5, seed=2), "lower")}
    )
    same = make_report(
        {"train_sps/a": (noisy(1e5, seed=3), "higher"), "probe/gpu/launch": (noisy(5, seed=4), "lower")}
    )
    worse = make_report(
        {"train_sps/a": (noisy(0.9e5, seed=5), "higher"), "probe/gpu/launch": (noisy(5.5, seed=6), "lower")}
    )
    quiet = cmp.compare([base, same], threshold=0.05)
    assert quiet["regressions"] == []
    loud = cmp.compare([base, worse], threshold=0.05)
    assert set(loud["regressions"]) == {"train_sps/a", "probe/gpu/launch"}  # slower and higher latency
    better = cmp.compare([worse, base], threshold=0.05)
    assert better["regressions"] == [] and {x["ratios"][0]["verdict"] for x in better["rows"]} == {
        "improvement"
    }
    assert "**regression**" in cmp.to_markdown(loud)


def test_compare_judges_a_suites_metrics_together():
    """30 metrics of one machine: one differs beyond 5 % by its own interval (p about 0.03), as one
    in 30 does by chance: "possible regression", not a regression (exit 0). A metric that halved is a
    regression among 30 as well."""

    def suite(shift, halve):
        metrics = {f"env_sps/e{i}/threads=1": (noisy(1e6, 3, 0.01, seed=i), "higher") for i in range(28)}
        metrics["env_sps/chance/threads=1"] = ([100 * shift, 104 * shift, 96 * shift], "higher")
        metrics["env_sps/half/threads=1"] = ([100 * halve, 100.5 * halve, 99.5 * halve], "higher")
        return make_report(metrics)

    result = cmp.compare([suite(1, 1), suite(0.9, 1)], threshold=0.05)
    verdicts = {row["metric"]: row["ratios"][0] for row in result["rows"]}
    chance = verdicts["env_sps/chance/threads=1"]
    assert chance["significant"] and chance["p"] < 0.05 and chance["verdict"] == "possible regression"
    assert result["regressions"] == [] and result["judged_together"] == [30]
    assert any("not once all 30 judged metrics are tested together" in n for n in result["notes"])
    assert "possible regression" in cmp.to_markdown(result) and "**regression**" not in cmp.to_markdown(
        result
    )
    halved = cmp.compare([suite(1, 1), suite(1, 0.5)], threshold=0.05)
    assert halved["regressions"] == ["env_sps/half/threads=1"]


def test_compare_never_flags_descriptive_figures_and_lists_differences():
    a = make_report({"train_phase/a/env": (noisy(0.2, seed=1), "info")})
    b = make_report({"train_phase/a/env": (noisy(0.4, seed=2), "info")})
    b["fingerprint"]["cpu"]["physical_cores"] = 999
    b["config"] = {"train": {"seed": 1}}
    result = cmp.compare([a, b])
    assert result["regressions"] == [] and result["rows"][0]["ratios"][0]["verdict"] == "changed"
    what = dict(result["differences"])
    assert what["physical cores"][1] == 999 and "config train.seed" in what


def test_compare_refuses_reports_with_nothing_in_common():
    with pytest.raises(ReportError, match="no metric in common"):
        cmp.compare([make_report({"a/x": ([1.0], "higher")}), make_report({"b/x": ([1.0], "higher")})])


def test_compare_cli_exit_codes(tmp_path):
    paths = {}
    for key, center in (("base", 1e5), ("same", 1e5), ("slow", 0.85e5)):
        paths[key] = tmp_path / f"{key}.json"
        seed = {"base": 1, "same": 2, "slow": 3}[key]
        paths[key].write_text(json.dumps(make_report({"train_sps/a": (noisy(center, seed=seed), "higher")})))
    runner = CliRunner()
    ok = runner.invoke(cli, ["compare", str(paths["base"]), str(paths["same"])])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(cli, ["compare", str(paths["base"]), str(paths["slow"]), "--markdown"])
    assert bad.exit_code == 1 and "regression" in bad.output
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "puffer-bench/report/2"}))
    refused = runner.invoke(cli, ["compare", str(paths["base"]), str(other)])
    assert refused.exit_code == 2 and "report/2" in refused.output and "Traceback" not in refused.output


# ---------------------------------------------------------------------- suites and profiles


@pytest.mark.parametrize(
    "change, message",
    [
        ({"bogus": 1}, "unknown keys"),
        ({"env_sps": {"envs": ["breakuot"]}}, "unknown env 'breakuot'"),
        ({"env_sps": {"envs": ["breakout"], "threads": [0]}}, "positive integer"),
        ({"vector_sps": [{"env": "breakout", "backends": ["fork"]}]}, "backends"),
        ({"train_sps": {"envs": ["squared"], "seconds": -1}}, "positive number"),
        ({"time_to_score": [{"env": "squared", "metric": "perf"}]}, "needs"),
        ({"name": 3}, "'name'"),
        ({"gate": {"retakes": -1}}, "gate.retakes: must be an integer >= 0"),
        ({"gate": {"patience": 5}}, "unknown keys"),
        ({"gate": "yes"}, "gate: must be a mapping"),
    ],
)
def test_suite_validation_names_the_problem(change, message):
    with pytest.raises(ConfigError, match=message):
        suite.validate({"name": "t", **change})


def test_shipped_suites_are_valid_and_unknown_names_list_them():
    assert {"quick", "full"} <= set(suite.suite_names())
    for name in suite.suite_names():
        suite.load(name)
    with pytest.raises(ConfigError, match="did you mean 'quick'.*valid suites"):
        suite.load("quik")


def test_profile_detection_and_mismatch_warning():
    assert detect_profile([{"name": "NVIDIA H100 80GB HBM3"}]) == "h100"
    assert detect_profile([{"name": "NVIDIA GeForce RTX 4090"}]) == "4090"
    assert detect_profile([]) == "cpu"
    fp = {"gpus": [{"name": "NVIDIA GeForce RTX 2080"}]}
    name, entry, warnings = bench_profile("4090", fp)
    assert name == "4090" and entry["expected_gpu"] == "RTX 4090" and "RTX 2080" in entry["detected_gpu"]
    assert warnings and "written for a RTX 4090" in warnings[0]
    assert bench_profile(None, fp)[2] == []  # detected: the 2080 profile
    with pytest.raises(ConfigError, match="valid profiles"):
        bench_profile("4080", fp)


# ---------------------------------------------------------------------- analysis


def test_roofline_names_the_smallest_limit():
    r = roofline(
        "breakout", 482, {"PCIe": (5e7, "x"), "env threads": (1e7, "y"), "policy forward": (2e6, "z")}
    )
    assert r["bottleneck"] == "policy forward" and "482 B/agent-step" in r["summary"]


@pytest.mark.parametrize(
    "shares, top, knob",
    [
        ({"evaluate.env": 0.6, "train.learn": 0.2}, "env", "vec.num_threads"),
        ({"evaluate.forward": 0.4, "train.forward": 0.2, "train.learn": 0.3}, "forward", "bfloat16"),
        ({"evaluate.copy": 0.5, "train.learn": 0.2}, "copy", "zero_copy"),
        ({"train.learn": 0.7}, "learn", "update_epochs"),
    ],
)
def test_training_diagnosis_suggests_the_knob(shares, top, knob):
    """(tests/test_bottleneck.py: every branch on a CPU and a GPU, and the committed reports.)"""
    d = diagnose_training(
        "breakout",
        shares,
        1e6,
        {"vec": {"num_threads": 2, "zero_copy": False}, "train": {"device": "cuda"}},
        {"env_sps_single": 5e6},
    )
    assert d["bottleneck"] == top and knob in d["suggestions"][0]
    if top in ("forward", "learn"):  # bf16 is no knob where the run already has it (or auto chose)
        cfg = {"vec": {}, "train": {"precision": "auto"}}
        assert "precision" not in diagnose_training("breakout", shares, 1e6, cfg, {})["suggestions"][0]
    memory = diagnose_training("b", shares, 1e6, {}, {"memory_peak": 79 * 2**30, "memory_total": 80 * 2**30})
    assert memory["bottleneck"] == "memory" and "cpu_offload" in memory["suggestions"][0]


@pytest.mark.parametrize("has_bf16", [True, False])
def test_the_policy_forward_probe_steps_in_the_precision_the_rollout_would(monkeypatch, has_bf16):
    """The roofline's policy-forward limit is the trainer's rollout step: breakout's cpu profile says
    precision auto, bf16 on a CPU with AVX512-BF16/AMX; the probe measured float32 there."""
    from appliance.bench.probe import policy_forward
    from appliance.config import resolve

    fake_cpu_bf16(monkeypatch, has_bf16)
    cfg = resolve(env="breakout", profile="cpu")
    figure = policy_forward(cfg, "cpu", runs=2, batch=64)
    assert figure.labels["precision"] == ("bfloat16" if has_bf16 else "float32")
    assert all(s > 0 for s in figure.samples)


# ---------------------------------------------------------------------- end to end on the CPU


def test_profile_cli_probes_the_cpu_and_skips_the_gpu(tmp_path):
    out = tmp_path / "probe.json"
    result = CliRunner().invoke(
        cli, ["profile", "--env", "squared", "--runs", "2", "--seconds", "0.2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = rpt.load(out)
    assert data["metrics"]["probe/cpu/memory_bandwidth"]["median"] > 0
    assert data["metrics"]["probe/cpu/env_step/squared"]["median"] > 0
    assert data["metrics"]["probe/cpu/policy_forward/squared"]["median"] > 0
    assert "roofline: squared" in result.output and data["analysis"]["roofline"][0]["bottleneck"]
    import torch

    if not torch.cuda.is_available():
        assert any(s["what"] == "GPU probe" for s in data["skipped"])


def test_cpu_probe_samples_go_through_the_given_gate():
    from appliance.bench import probe

    taken = []

    def take(sample):
        taken.append(sample())
        return taken[-1]

    bandwidth = probe.cpu_memory_bandwidth(runs=3, size=1 << 20, take=take)
    steps = probe.env_single_core("squared", 16, 2, 0.05, {}, take=take)
    assert taken == bandwidth.samples + steps.samples and len(taken) == 5


def test_run_cli_writes_a_report_and_the_readme_table(tmp_path):
    spec = {
        "name": "tiny",
        "seconds": 0.2,
        "gate": {"patience_s": 1, "budget_s": 2},  # bounded waits for a slowed CPU
        "env_sps": {"envs": ["squared"], "threads": [1]},
        "vector_sps": [{"env": "squared", "backends": ["native", "serial"], "num_envs": 16}],
        "train_sps": {"envs": ["squared"], "seconds": 0.3},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "results"
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
            str(out),
            "--no-plots",
            "--envs",
            "squared",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "    env_sps/squared/threads=1: " in result.output, "each step prints its figures as they come"
    (json_path,) = (out / "cpu").glob("*.json")
    data = rpt.load(json_path)
    assert data["profile"]["name"] == "cpu" and data["suite"]["definition"] == spec
    for name in ("env_sps/squared/threads=1", "vector_sps/squared/native", "train_sps/squared"):
        assert len(data["metrics"][name]["samples"]) == 2 and data["metrics"][name]["median"] > 0
        gate = data["metrics"][name]["noise"]["gate"]  # every CPU-bound sample went through the speed gate
        assert gate["samples"] == 2 and gate["waited_s"] <= 2 and len(gate["retaken"]) <= 2 * 2
        assert gate["rule"] == "rebased floors", (
            "the start checks' spread, rebased on the run's checks, judges them"
        )
        assert set(gate["medians"]) == {"int_mops", "float_gflops"}
    assert data["analysis"]["training"]["squared"]["bottleneck"] in (
        "env",
        "forward",
        "copy",
        "learn",
        "overhead",
    )
    assert data["config"]["envs"]["squared"]["env_name"] == "squared"
    assert json_path.with_suffix(".md").exists()
    if platform.libc_ver()[0] == "glibc":  # samples in the memory regime a long run reaches
        assert data["allocator"] == {
            "libc": "glibc", "mmap_threshold": 32 << 20, "trim_threshold": 1 << 30, "set": True
        }  # fmt: skip

    readme_path = tmp_path / "README.md"
    readme_path.write_text(f"intro\n{readme.BEGIN}\nold\n{readme.END}\nrest\n")
    written = readme.update_readme(readme_path, readme.latest_reports(out), out)
    text = readme_path.read_text()
    assert "old" not in text and "`train_sps/squared`" in text and text.endswith("rest\n")
    assert written[1].read_bytes().startswith(b"\x89PNG")


def test_run_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    bad_profile = runner.invoke(cli, ["run", "--gpu", "4080", "--out", str(tmp_path)])
    assert bad_profile.exit_code == 2 and "valid profiles" in bad_profile.output
    bad_suite = runner.invoke(cli, ["run", "--suite", "nope", "--out", str(tmp_path)])
    assert bad_suite.exit_code == 2 and "valid suites" in bad_suite.output
    typo = runner.invoke(cli, ["run", "--envs", "breakuot", "--out", str(tmp_path)])
    assert typo.exit_code == 2 and "unknown env 'breakuot'" in typo.output
    only = tmp_path / "only.yaml"
    only.write_text(yaml.safe_dump({"name": "only", "env_sps": {"envs": ["pong"]}}))
    nothing = runner.invoke(cli, ["run", "--suite", str(only), "--envs", "squared", "--out", str(tmp_path)])
    assert nothing.exit_code == 2 and "nothing to measure" in nothing.output


def test_readme_skips_partial_reports(tmp_path):
    """An interrupted suite's partial report must never become the README's figure."""
    committed = make_report({"env_sps/a/threads=1": (noisy(1e6), "higher")})
    folder = tmp_path / "cpu"
    folder.mkdir()
    complete = folder / "complete.json"
    complete.write_text(json.dumps(committed))
    partial = folder / "partial.json"
    partial.write_text(json.dumps({**committed, "created_utc": "2099-01-01T00:00:00Z", "partial": True}))
    assert readme.latest_reports(tmp_path) == [complete]


def peer_speed_report(ours, theirs, flags, created="2026-11-24T21:00:00Z", ours_config=None):
    """A report as ``tools/pufferlib_peer.py speed`` writes it: both trainers' rounds and their ratios."""
    definition = {
        "env": "breakout",
        "ours_set": flags,
        **({"ours_config": ours_config} if ours_config else {}),
    }
    suite = {"name": "parity-speed-breakout", "definition": definition}
    r = rpt.Report(suite, {"name": "cpu"}, json.loads(json.dumps(FP)), {}, seed=0, repeats=len(ours))
    r.add("train_sps/breakout/puffer-bench", ours, "agent-steps/s", "higher", env="breakout")
    r.add("train_sps/breakout/pufferlib-3.0.0", theirs, "agent-steps/s", "higher", env="breakout")
    ratios = [b / a for a, b in zip(theirs, ours, strict=True)]
    r.add("train_sps_ratio/breakout/puffer-bench_over_pufferlib-3.0.0", ratios, "x", "higher", env="breakout")
    r.data["created_utc"] = created
    return r.data


def test_readme_puts_the_newest_peer_speed_report_beside_the_results(tmp_path):
    results = tmp_path / "results"
    (results / "cpu" / "parity").mkdir(parents=True)
    (results / "cpu" / "quick.json").write_text(
        json.dumps(make_report({"train_sps/breakout": (noisy(1e5), "higher")}))
    )
    parity = results / "cpu" / "parity"
    older = peer_speed_report([90e3, 91e3, 92e3], [80e3, 80e3, 80e3], [], created="2026-11-01T00:00:00Z")
    (parity / "old.json").write_text(json.dumps(older))
    newest = peer_speed_report(
        [150e3, 120e3, 126e3], [75e3, 80e3, 60e3], ["--train.precision", "<b>bf16|</b>"]
    )
    (parity / "speed.json").write_text(json.dumps(newest))
    # a learning report in the same folder (no ratio metric) is not a speed comparison
    learning = make_report({"learn/breakout": (noisy(0.5), "higher")}, name="parity-learn")
    learning["created_utc"] = "2099-01-01T00:00:00Z"
    (parity / "learning.json").write_text(json.dumps(learning))
    readme_path = tmp_path / "README.md"
    readme_path.write_text(f"# x\n{readme.BEGIN}\n{readme.END}\n")

    assert readme.latest_peer_reports(results) == [parity / "speed.json"]
    readme.update_readme(readme_path, readme.latest_reports(results), results)
    text = readme_path.read_text()
    row = next(line for line in text.splitlines() if "`pufferlib-3.0.0`" in line)
    cells = [c.strip() for c in row.split(" | ")]
    # ours' median 126 K, the peer's 75 K; the rounds' ratios 2.0, 1.5 and 2.1: median 2 (range 1.5-2.1)
    assert cells[2:7] == ["126 K", "`pufferlib-3.0.0`", "75 K", "2x (1.5-2.1)", "3"], row
    assert "<b>" not in text and "&lt;b>bf16\\|&lt;/b>" in row, "a report's flags cannot add HTML or cells"
    assert "(results/cpu/parity/speed.json)" in row
    assert "the peer's, extra flags: --train.precision" in row, "ours ran the peer's settings"
    # a speed report of our defaults against the peer's: the row says the work was not the same
    (parity / "speed.json").write_text(
        json.dumps(
            peer_speed_report([150e3], [75e3], [], created="2026-11-25T00:00:00Z", ours_config="defaults")
        )
    )
    readme.update_readme(readme_path, readme.latest_reports(results), results)
    row = next(line for line in readme_path.read_text().splitlines() if "`pufferlib-3.0.0`" in line)
    assert "its own defaults, extra flags: none" in row

    (parity / "speed.json").unlink()
    (parity / "old.json").unlink()
    readme.update_readme(readme_path, readme.latest_reports(results), results)
    assert "pufferlib" not in readme_path.read_text(), "no peer report: no peer table"


# ---------------------------------------------------------------------- compare explains


def with_machine(data, calibration, cpu=None, busy=()):
    """A report on a CPU that ran the calibration loops at `calibration` (int, float, copy)."""
    fp = data["fingerprint"]
    fp["calibration"] = dict(zip(("int_mops", "float_gflops", "copy_gbs"), calibration, strict=True))
    fp["calibration"]["cpu_share"] = 1.0
    fp["cpu"].update(cpu or {})
    for name in busy:
        data["metrics"][name]["noise"] = {"busy": True, "reasons": ["other processes used 1.00 cores"]}
    return data


def cpu_reports(fp):
    slow = make_report(
        {
            "env_sps/a/threads=1": (noisy(1e6, seed=1), "higher"),
            "probe/gpu/launch": (noisy(5, seed=2), "lower"),
        },
        fp=json.loads(json.dumps(fp)),
    )
    fast = make_report(
        {
            "env_sps/a/threads=1": (noisy(2e6, seed=3), "higher"),
            "probe/gpu/launch": (noisy(5, seed=4), "lower"),
        },
        fp=json.loads(json.dumps(fp)),
    )
    return slow, fast


def test_compare_names_cpu_differences_and_normalizes_by_calibration():
    fp = fingerprint(calibration=False)
    slow, fast = cpu_reports(fp)
    with_machine(
        slow, (5.0, 2.0, 10.0), {"family": 23, "model_number": 49, "isa": {"avx2": True, "avx512": False}}
    )
    with_machine(
        fast, (10.0, 4.0, 20.0), {"family": 25, "model_number": 17, "isa": {"avx2": True, "avx512": True}}
    )
    plain = cmp.compare([slow, fast])
    fast["fingerprint"]["gpus"] = [{"name": "NVIDIA H100", "sm_clock_max_mhz": 1980}]
    fast["fingerprint"]["versions"]["cudnn"] = 91000
    plain = cmp.compare([slow, fast])
    what = dict(plain["differences"])
    assert what["AVX-512"] == ["no", "yes"] and "CPU family/model/stepping" in what
    assert what["GPU"] == ["none", "NVIDIA H100"] and what["cuDNN"] == ["none", 91000]
    assert not any(k.startswith("GPU ") for k in plain["unrecorded"].get(1, []))
    assert any("2.00x as fast" in n for n in plain["notes"])
    assert plain["rows"][0]["ratios"][0]["verdict"] == "faster" and plain["normalized"] == []  # another CPU
    norm = cmp.compare([slow, fast], normalize=True)
    env, launch = norm["rows"]
    assert 0.9 < env["ratios"][0]["ratio"] < 1.1 and env["ratios"][0]["verdict"] != "improvement"
    assert norm["normalized"] == ["env_sps/a/threads=1"]  # the GPU launch latency is left alone
    assert launch["medians"][1] == fast["metrics"]["probe/gpu/launch"]["median"]
    text = cmp.to_markdown(norm)
    assert "normalized: 1 CPU-bound metric" in text and "`env_sps/a/threads=1` (normalized)" in text


def test_compare_marks_busy_metrics_unreliable_instead_of_regressions(tmp_path):
    fp = fingerprint(calibration=False)
    fast, slow = cpu_reports(fp)[::-1]
    with_machine(fast, (5, 2, 10))
    with_machine(slow, (5, 2, 10), busy=["env_sps/a/threads=1"])
    result = cmp.compare([fast, slow])
    assert result["regressions"] == [] and result["rows"][0]["ratios"][0]["verdict"] == cmp.UNRELIABLE
    assert dict(result["differences"])["busy metrics (noise guard)"] == [0, 1]
    paths = []
    for i, r in enumerate((fast, slow)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(r))
    out = CliRunner().invoke(cli, ["compare", *map(str, paths)])
    assert out.exit_code == 0 and "unreliable" in out.output
    # samples the speed gate kept although the CPU stayed slow: not a regression either
    fast, slow = cpu_reports(fp)[::-1]
    with_machine(fast, (5, 2, 10))
    with_machine(slow, (5, 2, 10))
    slow["metrics"]["env_sps/a/threads=1"]["noise"] = {"busy": False, "gate": {"samples": 3, "slow_kept": 2}}
    result = cmp.compare([fast, slow])
    assert result["regressions"] == [] and result["rows"][0]["ratios"][0]["verdict"] == cmp.SLOWED
    assert any("kept although the CPU ran slow" in n for n in result["notes"])


def test_compare_reads_the_committed_report_and_normalize_needs_calibrations(tmp_path):

    old = Path(__file__).parent.parent / "results/cpu/2026-11-22-5bce98f73f3e.json"
    if not old.is_file():  # the Docker image's build context leaves results/ out
        pytest.skip(f"the committed report {old.name} is not in this tree (results/ not shipped)")
    new = json.loads(old.read_text())
    new["fingerprint"] = fingerprint(calibration=False)
    path = tmp_path / "new.json"
    path.write_text(json.dumps(new))
    runner = CliRunner()
    ok = runner.invoke(cli, ["compare", str(old), str(path), "--markdown"])
    assert ok.exit_code == 0, ok.output
    assert "Not recorded in report 1" in ok.output and "AVX2" in ok.output
    refused = runner.invoke(cli, ["compare", str(old), str(path), "--normalize"])
    assert refused.exit_code == 2 and "needs a calibration" in refused.output


def test_report_renders_self_contained_html(tmp_path):
    data = make_report({"env_sps/a/threads=1": (noisy(1e6, 3), "higher")}, fp=fingerprint(calibration=False))
    data["metrics"]["env_sps/a/threads=1"]["labels"]["threads"] = 1
    written = rpt.write(data, tmp_path / "r")
    html = (tmp_path / "r.html").read_text()
    assert tmp_path / "r.html" in written and html.startswith("<!doctype html>")
    assert "data:image/png;base64," in html and "env_sps/a/threads=1" in html and "src='r-" not in html
    assert "Machine fingerprint" in html
    (tmp_path / "r.html").unlink()
    out = CliRunner().invoke(cli, ["report", "--render", str(tmp_path / "r.json")])
    assert out.exit_code == 0 and (tmp_path / "r.html").exists() and (tmp_path / "r.md").exists()
