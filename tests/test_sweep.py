"""Sweeps (appliance.bench.sweep): a tiny study end to end, resume, pruning, the best config."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from appliance.bench import sweep as sw
from appliance.cli import cli
from appliance.config import resolve
from appliance.errors import ConfigError

# a few thousand steps of a small squared per trial
TINY = [
    "--train.device", "cpu", "--policy.core", "mlp", "--train.optimizer", "adam", "--env.size", "5",
    "--vec.num-envs", "32", "--vec.num-threads", "1", "--train.bptt-horizon", "16",
    "--train.minibatch-size", "512", "--train.total-timesteps", "3072", "--train.prio-alpha", "0",
    "--policy.hidden-size", "32",
]  # fmt: skip
SPACE = {
    "objective": {"metric": "perf", "target": 0.95, "window": 2},
    "space": {
        "train.learning_rate": {"low": 0.001, "high": 0.05, "log": True},
        "policy.hidden_size": {"choices": [16, 32]},
        "train.minibatch_size": {"choices": [256, 512, 4096]},
    },
}


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE))
    return str(path)


def _sweep(out, space, trials, *extra):
    result = CliRunner().invoke(
        cli, ["sweep", "squared", "--trials", str(trials), "--out", str(out), "--space", space, *extra, *TINY]
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


@pytest.mark.slow
def test_a_tiny_sweep_writes_table_plot_and_a_config_train_accepts(tmp_path, space):
    out = tmp_path / "sweep"
    text = _sweep(out, space, 3)
    assert text.count("trial ") >= 3 and "Pareto front:" in text
    study = sw.open_study(out)
    rows = sw.rows(study)
    assert len(rows) == 3 and rows[0]["baseline"]  # trial 0 is the config as given
    assert all(r["state"] in ("complete", "pruned") for r in rows), rows
    assert all(r["seconds"] > 0 for r in rows)
    table = (out / "trials.md").read_text()
    assert table.count("\n| ") == 4  # header and 3 trials
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = yaml.safe_load((out / "best.yaml").read_text())
    front = {t.number: t for t in study.best_trials}
    chosen = sw.best_trade_off(study, 0.95)
    assert chosen.number in front
    assert best["train"]["total_timesteps"] == 3072 and best["env"]["size"] == 5  # typed, as swept
    # best.yaml holds what differs from the env's defaults (the baseline's learning rate may not), so
    # check the config it gives, not its keys
    cfg = resolve(env="squared", config_file=out / "best.yaml")
    assert cfg.train.learning_rate == pytest.approx(chosen.params["train.learning_rate"])
    assert cfg.policy.hidden_size == chosen.params["policy.hidden_size"]
    result = CliRunner().invoke(
        cli,
        ["train", "squared", "--config", str(out / "best.yaml"), "--no-dashboard",
         "--train.data-dir", str(tmp_path / "runs"), "--train.total-timesteps", "1024"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "latest").is_file()


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_and_reruns_the_trial_that_was_running(tmp_path, space):
    out = tmp_path / "sweep"
    assert _sweep(out, space, 2, "--parallel", "2").count("trial ") >= 2  # two processes at once
    study = sw.open_study(out)
    crashed = study.ask(sw.load_space("squared", space).distributions())  # running when killed
    text = _sweep(out, space, 3)
    assert "2 trials done, 1 interrupted ones run again" in text
    rows = sw.rows(sw.open_study(out))
    assert len(rows) == 3 and sum(r["baseline"] for r in rows) == 1
    assert rows[-1]["params"] == crashed.params  # the interrupted settings ran again
    assert "no more trials" not in _sweep(out, space, 3)  # all done: nothing runs, outputs rewritten
    assert len(sw.rows(sw.open_study(out))) == 3


def test_a_trial_below_the_finished_curves_is_pruned():
    cfg = resolve(env="squared", overrides=[*TINY, "--train.total-timesteps", "100000"])
    spec = {
        "cfg": cfg, "metric": "perf", "target": None, "window": 1, "seconds": None, "threads": 1,
        "reference": [[[0.0, 1.0]], [[0.0, 0.99], [5000.0, 1.0]]], "warmup": 0.0, "margin": 0.05,
        "min_trials": 2,
    }  # fmt: skip
    result = sw.run_trial(spec)
    assert result["state"] == "pruned" and "median" in result["error"], result
    assert result["steps"] < 100000


def test_median_at_takes_each_curve_at_its_last_point_before_the_step():
    curves = [[[0, 0.1], [100, 0.5]], [[0, 0.3]], [[200, 0.9]]]
    assert sw.median_at(curves, 100) == pytest.approx(0.4)
    assert sw.median_at(curves, 50) == pytest.approx(0.2)
    assert sw.median_at([], 10) is None


def test_space_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"space": {"learning_rate": {"low": 1, "high": 2}}}))
    with pytest.raises(ConfigError, match="section.key"):
        sw.load_space("squared", bad)
    bad.write_text(yaml.safe_dump({"space": {"train.gamma": {"low": 0.9, "high": 0.8}}}))
    with pytest.raises(ConfigError, match="low < high"):
        sw.load_space("squared", bad)
    bad.write_text(yaml.safe_dump({"space": {"train.no_such_key": {"low": 0.1, "high": 0.8}}}))
    with pytest.raises(ConfigError):
        sw.load_space("squared", bad)
    space = sw.load_space("squared")  # the shipped space, with squared's objective
    assert space.metric == "perf" and space.target == 0.95 and "train.learning_rate" in space.params
    with pytest.raises(ConfigError, match="outside the space"):
        sw._baseline(resolve(env="squared"), space)  # squared's 4096 envs are not among the choices


def test_a_minibatch_larger_than_the_batch_is_cut_to_it():
    cfg = resolve(env="squared", overrides=TINY)
    params = {"train.minibatch_size": 8192, "vec.num_envs": 64, "train.bptt_horizon": 32}
    assert sw.trial_overrides(cfg, params)["train"]["minibatch_size"] == 64 * 32
