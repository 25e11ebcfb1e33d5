"""Sweeps (appliance.sweep): a tiny study end to end, resume, pruning, the best config."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml
from click.testing import CliRunner
from procs import children, command_line

from appliance import sweep as sw
from appliance.cli import cli
from appliance.config import resolve
from appliance.errors import ConfigError
from appliance.testing import tiny_sweep_args

# a few thousand steps of a small squared per trial
TINY = tiny_sweep_args(3072)
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
    bad.write_text(yaml.safe_dump({"space": {"vec.num_envs": {"choices": [64, 128]}}}))
    with pytest.raises(ConfigError, match="outside the space"):  # your own space is taken as written
        sw.driver._baseline(resolve(env="squared"), sw.load_space("squared", bad))


def test_a_minibatch_larger_than_the_batch_is_cut_to_it():
    cfg = resolve(env="squared", overrides=TINY)
    params = {"train.minibatch_size": 8192, "vec.num_envs": 64, "train.bptt_horizon": 32}
    assert sw.trial_overrides(cfg, params)["train"]["minibatch_size"] == 64 * 32


# ----------------------------------------------------------------------------- the
# profile and the shipped space, the whole space checked first, the study file, the folder lock,
# changed settings on resume, crashed and stopped trials. The trial functions below stand in for
# training where only the sweep's bookkeeping is under test (module level: trial processes import them).


def instant(spec):
    """A trial that 'trains' at once: score 0.5 in 1 s."""
    return {"state": "complete", "score": 0.5, "seconds": 1.0, "steps": 64, "curve": [[64.0, 0.5]],
            "reason": "timesteps", "error": None}  # fmt: skip


def segfault_trial_1(spec):
    if spec["trial"] == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    return instant(spec)


def sigterm_trial_1(spec):
    if spec["trial"] == 1:
        os.kill(os.getpid(), signal.SIGTERM)  # the driver (in-process trials) is told to stop
        time.sleep(5)
    return instant(spec)


@pytest.fixture
def no_default_stop():
    """A stop signal nobody handles fails the test instead of killing pytest."""

    def unhandled(signum, frame):
        raise AssertionError(f"{signal.Signals(signum).name} was not handled")

    previous = {s: signal.signal(s, unhandled) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for s, handler in previous.items():
        signal.signal(s, handler)


def _quick(out, space, trials=2, trial=instant, overrides=TINY, **kw):
    options = sw.Options(trials=trials, parallel=kw.pop("parallel", 1), **kw)
    return list(
        sw.sweep("squared", out, options, space, overrides=list(overrides), profile="cpu", trial=trial)
    )


def test_the_shipped_space_holds_the_config_of_every_env_on_its_profile():
    """Trial 0 is the config as given: the shipped space must hold it on every profile (breakout's
    8,192 envs and gae_lambda 0.75, squared's 256 envs on a CPU and 8,192 on an H100)."""
    from appliance.config import env_names

    for env, profile in [*((e, "cpu") for e in env_names()), ("breakout", "h100"), ("squared", "h100")]:
        base = sw.Base(env, profile)
        space = sw.load_space(env, None, base)
        baseline = sw.driver._baseline(base.resolve(), space)  # raised "outside the space" before
        assert baseline["vec.num_envs"] == base.resolve().vec.num_envs, (env, profile)
    space = sw.load_space("breakout", None, sw.Base("breakout", "cpu"))
    assert space.params["vec.num_envs"]["choices"] == [1024, 2048, 4096, 8192]  # the ladder, moved
    assert space.params["train.gae_lambda"]["low"] == pytest.approx(0.74765, abs=1e-5)
    assert any("vec.num_envs" in n for n in space.notes)


def test_sweep_takes_gpu_and_picks_the_profile_like_train(tmp_path, monkeypatch):
    result = CliRunner().invoke(cli, ["sweep", "squared", "--gpu", "nosuch", "--out", str(tmp_path / "s")])
    assert result.exit_code == 2 and "hardware profile" in result.output, result.output
    seen = {}

    def fake_sweep(env, folder, options, space_file, config_file, overrides, profile):
        seen["profile"] = profile
        raise ConfigError("stop here")

    monkeypatch.setattr(sw, "sweep", fake_sweep)
    CliRunner().invoke(cli, ["sweep", "squared", "--out", str(tmp_path / "s")])
    assert seen["profile"] == "cpu"  # detected: this machine has no GPU the profiles name


@pytest.mark.slow
def test_sweep_with_no_flags_runs_on_a_cpu_machine_and_writes_best_yaml(tmp_path):
    """The issue's command as it is (the budget bounds the trials too: trial 0 stops at 20 s)."""
    out = tmp_path / "sweep-squared"
    result = CliRunner().invoke(
        cli, ["sweep", "squared", "--trials", "3", "--budget-seconds", "20", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "trial 0: score" in result.output and (out / "best.yaml").is_file(), result.output
    cfg = resolve(env="squared", profile="cpu", config_file=out / "best.yaml")
    assert cfg.vec.num_envs == 256  # the cpu profile's, as train would use


MALFORMED = [
    ("not a mapping", "[1, 2]"),
    ("unknown top key", "spaces: {}"),
    ("space not a mapping", "space: [train.gamma]"),
    ("entry not a mapping", "space: {train.gamma: 0.9}"),
    ("unknown entry key", "space: {train.gamma: {lo: 0.8, high: 0.9}}"),
    ("low is text", "space: {train.gamma: {low: abc, high: 0.9}}"),
    ("high is a bool", "space: {train.gamma: {low: 0.8, high: true}}"),
    ("low is NaN", "space: {train.gamma: {low: .nan, high: 0.9}}"),
    ("high is infinite", "space: {train.learning_rate: {low: 0.001, high: .inf}}"),
    ("log from zero", "space: {train.learning_rate: {low: 0, high: 0.1, log: true}}"),
    ("log is text", "space: {train.learning_rate: {low: 0.001, high: 0.1, log: maybe}}"),
    ("int with a fraction", "space: {train.bptt_horizon: {low: 8.5, high: 64, int: true}}"),
    ("choices not a list", "space: {policy.hidden_size: {choices: 64}}"),
    ("choices empty", "space: {policy.hidden_size: {choices: []}}"),
    ("choice a mapping", "space: {policy.hidden_size: {choices: [32, {a: 1}]}}"),
    ("choice repeated", "space: {policy.hidden_size: {choices: [32, 32]}}"),
    ("a bad second choice", "space: {policy.hidden_size: {choices: [32, -4]}}"),
    ("a choice of the wrong type", "space: {train.bptt_horizon: {choices: [16, sixteen]}}"),
    ("a bound out of range", "space: {train.gamma: {low: 0.5, high: 1.5}}"),
    ("window 0", "space: {train.gamma: {low: 0.8, high: 0.9}}\nobjective: {window: 0}"),
    ("margin NaN", "space: {train.gamma: {low: 0.8, high: 0.9}}\nprune: {margin: .nan}"),
    ("warmup above 1", "space: {train.gamma: {low: 0.8, high: 0.9}}\nprune: {warmup: 2}"),
    ("metric not text", "space: {train.gamma: {low: 0.8, high: 0.9}}\nobjective: {metric: [perf]}"),
    ("target NaN", "space: {train.gamma: {low: 0.8, high: 0.9}}\nobjective: {target: .nan}"),
    ("envs entry a list", "space: {train.gamma: {low: 0.8, high: 0.9}}\nenvs: {squared: [1]}"),
]


@pytest.mark.parametrize("text", [t for _, t in MALFORMED], ids=[n for n, _ in MALFORMED])
def test_a_malformed_space_is_one_line_naming_the_file_before_any_trial(tmp_path, text):
    path = tmp_path / "space.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as caught:
        sw.load_space("squared", path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_bad_choice_stops_the_sweep_before_its_first_trial(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("space: {policy.hidden_size: {choices: [32, -4]}}\n")
    result = CliRunner().invoke(
        cli, ["sweep", "squared", "--out", str(tmp_path / "s"), "--space", str(path), *TINY]
    )
    assert result.exit_code == 2 and "choice -4 is not valid here" in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "s" / sw.DB).exists()


def _damaged(kind, db):
    import sqlite3

    if kind == "garbage":
        db.write_bytes(b"this is not a database at all\n" * 40)
    elif kind == "truncated":
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 3])
    elif kind == "foreign":
        db.unlink()
        with sqlite3.connect(db) as con:
            con.execute("CREATE TABLE invoices (id INTEGER, total REAL)")
    elif kind == "other study":
        with sqlite3.connect(db) as con:
            con.execute("UPDATE studies SET study_name = 'my-study'")
    elif kind in ("old schema", "newer schema"):
        version = "v3.0.0.a" if kind == "old schema" else "v99.0.0"
        with sqlite3.connect(db) as con:
            con.execute("UPDATE alembic_version SET version_num = ?", (version,))
            con.execute(
                "UPDATE version_info SET library_version = ?", ("3.0.0" if kind == "old schema" else "99.0",)
            )


@pytest.mark.parametrize(
    "kind, says",
    [
        ("garbage", "is not an SQLite database"),
        ("truncated", "is damaged or truncated"),
        ("foreign", "another program's database (tables invoices)"),
        ("other study", "holds Optuna studies my-study, not a puffer-bench sweep"),
        ("old schema", "optuna storage upgrade --storage sqlite:///"),
        ("newer schema", "pip install -U optuna"),
    ],
)
def test_a_damaged_or_foreign_study_db_is_one_line_saying_what_to_do(tmp_path, space, kind, says):
    import optuna

    out = tmp_path / "sweep"
    out.mkdir()
    db = out / sw.DB
    optuna.create_study(study_name=sw.STUDY, storage=f"sqlite:///{db}", directions=["maximize", "minimize"])
    _damaged(kind, db)
    before = db.read_bytes()
    result = CliRunner().invoke(
        cli, ["sweep", "squared", "--trials", "2", "--out", str(out), "--space", space, *TINY]
    )
    assert result.exit_code == 2, result.output + repr(result.exception)
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line and str(db) in line and says in line, line
    assert "another --out" in line
    assert db.read_bytes() == before, "the file was left as it was"


def test_a_second_sweep_on_one_folder_is_refused_naming_the_first(tmp_path, space):
    out = tmp_path / "sweep"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from appliance import sweep as sw\n"
         "with sw.locked(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)", str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"in use by process {holder.pid} "):
            _quick(out, space)
    finally:
        holder.kill()
        holder.wait()
    assert len(_quick(out, space)) > 2  # free again once the first has gone, however it went


def test_resuming_with_other_overrides_is_refused_and_best_yaml_is_the_trials_config(tmp_path, space):
    out = tmp_path / "sweep"
    _quick(out, space, trials=1, overrides=[*TINY, "--env.size", "5"])
    with pytest.raises(ConfigError, match="env.size was 5, now 9"):
        _quick(out, space, trials=2, overrides=[*TINY, "--env.size", "9"])
    assert len(sw.rows(sw.open_study(out))) == 1
    cfg = resolve(env="squared", profile="cpu", config_file=out / "best.yaml")
    assert cfg.env.size == 5 and cfg.vec.num_envs == 32 and cfg.train.total_timesteps == 3072


@pytest.mark.parametrize(
    "change, says",
    [
        ({"objective": {"metric": "score", "target": 0.95, "window": 2}}, "objective.metric was 'perf', now 'score'"),
        ({"objective": {"metric": "perf", "target": 0.5, "window": 2}}, "objective.target was 0.95, now 0.5"),
        ({"prune": {"margin": 0.5}}, "prune.margin was 0.05, now 0.5"),
        ({"space": {"train.learning_rate": {"low": 0.001, "high": 0.05, "log": True}}}, "space.policy.hidden_size was swept"),
    ],
)  # fmt: skip
def test_resuming_with_another_space_or_objective_is_refused_before_a_trial(tmp_path, space, change, says):
    """The new trial would be pruned on one metric against the median of another, and best.yaml would
    label the score with the new metric."""
    out = tmp_path / "sweep"
    _quick(out, space, trials=1)
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**SPACE, **change}))
    with pytest.raises(ConfigError, match=f"was swept over another space: {re.escape(says)}"):
        _quick(out, str(other), trials=2)
    assert len(sw.rows(sw.open_study(out))) == 1
    copy = tmp_path / "copy.yaml"  # the same space from another file resumes
    copy.write_text(yaml.safe_dump(SPACE))
    assert len(_quick(out, str(copy), trials=2)) > 1 and len(sw.rows(sw.open_study(out))) == 2


def test_a_study_that_kept_only_its_metric_is_refused_another_one(tmp_path, space):
    """A study made before the space was kept holds its metric: that much is still checked."""
    out = tmp_path / "sweep"
    _quick(out, space, trials=1)
    study = sw.open_study(out)
    study._storage.set_study_user_attr(study._study_id, "space", None)
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**SPACE, "objective": {"metric": "score"}}))
    with pytest.raises(ConfigError, match="objective.metric was 'perf', now 'score'"):
        _quick(out, str(other), trials=2)


def test_best_yaml_holds_the_swept_values_on_the_sweeps_profile(tmp_path):
    """vec.num_envs 4096 is squared's own default, but the cpu profile's is 256: best.yaml must say 4096."""
    path = tmp_path / "space.yaml"
    path.write_text("space: {vec.num_envs: {choices: [4096]}}\nobjective: {metric: perf}\n")
    out = tmp_path / "sweep"
    _quick(out, str(path), trials=1, overrides=["--train.device", "cpu"], baseline=False)
    assert resolve(env="squared", profile="cpu", config_file=out / "best.yaml").vec.num_envs == 4096


@pytest.mark.slow
def test_a_trial_that_segfaults_fails_with_its_signal_and_the_sweep_goes_on(tmp_path, space):
    out = tmp_path / "sweep"
    lines = _quick(out, space, trials=3, trial=segfault_trial_1, parallel=2)
    assert "trial 1: failed: its process was killed by SIGSEGV" in lines, lines
    rows = {r["trial"]: r for r in sw.rows(sw.open_study(out))}
    assert rows[1]["state"] == "fail" and rows[0]["state"] == rows[2]["state"] == "complete"
    assert (out / "best.yaml").is_file()


def test_a_stop_signal_puts_the_running_trial_back_and_is_one_line(tmp_path, space, no_default_stop):
    out = tmp_path / "sweep"
    with pytest.raises(sw.Stopped) as caught:
        _quick(out, space, trials=3, trial=sigterm_trial_1)
    assert caught.value.exit_code == 128 + signal.SIGTERM
    assert (
        str(caught.value)
        == "interrupted (SIGTERM): 1 trials done; 1 that were running run again when you run the same command"
    )
    lines = _quick(out, space, trials=3)
    assert lines[0] == f"resuming {out / sw.DB}: 1 trials done, 1 interrupted ones run again"
    rows = sw.rows(sw.open_study(out))
    assert [r["trial"] for r in rows] == [0, 2, 3] and rows[1]["params"] == sw.open_study(out).trials[
        1
    ].params


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_trial_processes_die_with_the_driver_and_leave_nothing_behind(tmp_path, sig):
    import psutil

    # no score target: squared at TINY settings reaches perf 0.95 within seconds, and a trial that
    # meets its target ends as complete before the signal comes
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**SPACE, "objective": {"metric": "perf", "window": 2}}))
    space = str(space)
    out = tmp_path / "sweep"
    shm = set(os.listdir("/dev/shm"))
    driver = subprocess.Popen(
        [sys.executable, "-m", "appliance.cli", "sweep", "squared", "--trials", "4", "--parallel", "2",
         "--out", str(out), "--space", space, *TINY, "--train.total-timesteps", "1e9"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.time() + 120
    while len([p for p in children(driver.pid) if "spawn_main" in command_line(p)]) < 2:
        assert driver.poll() is None and time.time() < deadline, driver.stdout.read()
        time.sleep(0.5)
    trials = [p for p in children(driver.pid) if "spawn_main" in command_line(p)]
    time.sleep(5)  # training by now (or still importing torch: either way they must go)
    driver.send_signal(sig)
    output = driver.communicate(timeout=60)[0]
    _, alive = psutil.wait_procs(trials, timeout=5)
    assert not alive, f"trial processes still running 5 s after {sig.name} to the driver"
    assert not {n for n in set(os.listdir("/dev/shm")) - shm if n.startswith("sem.")}
    if sig == signal.SIGTERM:
        assert driver.returncode == 128 + sig and "Traceback" not in output, output
        assert (
            output.strip()
            .splitlines()[-1]
            .startswith("interrupted (SIGTERM): 0 trials done; 2 that were running")
        )
    lines = _quick(out, space, trials=4, overrides=[*TINY, "--train.total-timesteps", "1e9"])  # resume
    assert lines[0] == f"resuming {out / sw.DB}: 0 trials done, 2 interrupted ones run again", lines
    assert len(sw.rows(sw.open_study(out))) == 4


def test_a_combination_of_choices_the_config_refuses_fails_that_trial_only(tmp_path):
    """Each choice is checked alone up front; 40 envs in 16 buffers only fails together."""
    path = tmp_path / "space.yaml"
    path.write_text(
        "space: {vec.num_envs: {choices: [40]}, train.buffers: {choices: [16]}}\nobjective: {metric: perf}\n"
    )
    lines = _quick(tmp_path / "sweep", str(path), trials=2, baseline=False)
    assert lines[0].startswith(
        "trial 0: failed: config refused: train.buffers (16) must divide vec.num_envs (40)"
    )
    assert (
        lines[1].startswith("trial 1: failed: config refused") and "no trial completed: no best.yaml" in lines
    )


def test_settings_that_were_running_when_the_sweep_died_twice_are_not_run_a_third_time(tmp_path, space):
    out = tmp_path / "sweep"
    _quick(out, space, trials=1)
    study = sw.open_study(out)
    study.enqueue_trial({"train.learning_rate": 0.01, "policy.hidden_size": 16, "train.minibatch_size": 256},
                        user_attrs={"rerun_of": 0})  # fmt: skip
    dying = study.ask(sw.load_space("squared", space).distributions())  # a rerun, running when killed again
    lines = _quick(out, space, trials=2)
    assert lines[0].startswith(f"resuming {out / sw.DB}: 2 trials done, 0 interrupted ones run again"), lines
    row = {r["trial"]: r for r in sw.rows(sw.open_study(out))}[dying.number]
    assert row["state"] == "fail" and "died twice" in row["error"]
