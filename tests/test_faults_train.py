"""Faults on the training and results side: kills, signals, damaged checkpoints, busy
folders, unwritable outputs. Each test reproduces a fault that used to lose work or print a traceback."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import conftest
import pytest
import torch
from click.testing import CliRunner

from appliance import vector
from appliance.cli import cli
from appliance.errors import ConfigError
from appliance.train import Trainer, TrainingError, checkpoint, loop, runs

SMALL = (*conftest.SMALL, "--policy.hidden-size", "32")
EPOCH_STEPS = 64  # 8 envs x horizon 8


def small_config(env="squared", *extra, **sections):
    return conftest.small_config(env, "--policy.hidden-size", "32", *extra, **sections)


def make_trainer(run_dir=None, env="squared", *extra):
    cfg = small_config(env, *extra)
    return Trainer(cfg, vector.make_from_config(cfg), run_dir=run_dir)


def cli_run(*args):
    return CliRunner().invoke(cli, list(args))


def weights_of(trainer):
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


def same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def trained_run(tmp_path):
    """A run folder with checkpoints at epochs 1 and 2 (model.pt is epoch 2)."""
    run = tmp_path / "exp" / "r1"
    trainer = make_trainer(run)
    try:
        for _ in range(2):
            trainer.evaluate()
            trainer.train()
            trainer.save_checkpoint()
    finally:
        trainer.close()
    (run / "config.yaml").write_text(small_config().to_yaml())
    return run


# ----------------------------------------------------------------------------- 6: one unit


class Killed(BaseException):
    """Stands for SIGKILL at one file operation: nothing after it runs."""


@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_kill_at_any_rename_leaves_weights_and_counters_of_one_epoch(tmp_path, monkeypatch, kill_at):
    trainer = make_trainer(tmp_path)
    try:
        trainer.evaluate()
        trainer.train()
        trainer.save_checkpoint()
        before = (weights_of(trainer), trainer.epoch, trainer.global_step)
        trainer.evaluate()
        trainer.train()
        after = (weights_of(trainer), trainer.epoch, trainer.global_step)
        calls = [0]
        real_replace, real_link = os.replace, os.link

        def dying(real):
            def op(*args, **kwargs):
                calls[0] += 1
                if calls[0] == kill_at:
                    raise Killed
                return real(*args, **kwargs)

            return op

        monkeypatch.setattr(os, "replace", dying(real_replace))
        monkeypatch.setattr(os, "link", dying(real_link))
        with pytest.raises(Killed):
            trainer.save_checkpoint()
        monkeypatch.undo()
    finally:
        trainer.close()
    resumed = make_trainer(tmp_path)
    try:
        resumed.load_checkpoint(tmp_path, resume=True)
        got = (weights_of(resumed), resumed.epoch, resumed.global_step)
    finally:
        resumed.close()
    matches = [w for w, e, s in (before, after) if (e, s) == got[1:]]
    assert matches, f"counters {got[1:]} belong to no checkpoint"
    assert same(got[0], matches[0]), "weights of one epoch, counters of another"


def test_temporaries_of_a_killed_write_are_removed_when_the_run_folder_is_taken(trained_run):
    stale = trained_run / ".model.pt.k1ll3d.tmp"
    stale.write_bytes(b"\0" * 1000)
    with runs.locked(trained_run):
        assert not stale.exists()
    assert (trained_run / "model.pt").is_file()


def test_a_checkpoint_is_one_file_and_its_snapshot_loads_on_its_own(trained_run):
    assert not (trained_run / "trainer_state.pt").exists()
    trainer = make_trainer(trained_run)
    try:
        trainer.load_checkpoint(trained_run / "model_000001.pt", resume=True)
        assert trainer.epoch == 1 and trainer.global_step == EPOCH_STEPS
    finally:
        trainer.close()


def _state(cfg, seed=0, epoch=0, global_step=0):
    torch.manual_seed(seed)
    policy = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(policy.parameters())
    policy(torch.ones(1, 3)).sum().backward()
    optimizer.step()  # an optimizer with state to save
    generator = torch.Generator().manual_seed(seed)
    return checkpoint.TrainState(policy, optimizer, generator, cfg, torch.device("cpu"), epoch, global_step)


def test_a_checkpoint_saves_and_loads_a_train_state_not_a_trainer(tmp_path):
    cfg = small_config()
    saved = _state(cfg, seed=1, epoch=3, global_step=300)
    path = checkpoint.save(saved, tmp_path / "r1")
    assert path == tmp_path / "r1" / "model.pt" and (tmp_path / "r1" / "model_000003.pt").is_file()
    fresh = _state(cfg, seed=2)
    loaded = checkpoint.load(fresh, tmp_path / "r1", resume=True)
    assert (loaded.path, loaded.epoch, loaded.global_step) == (path, 3, 300)
    assert fresh.epoch == 0 and fresh.global_step == 0  # the counters come back in what load returns
    assert same(fresh.policy.state_dict(), saved.policy.state_dict())
    assert torch.equal(fresh.generator.get_state(), saved.generator.get_state())
    weights_only = _state(cfg, seed=3, epoch=5)
    loaded = checkpoint.load(weights_only, path, resume=False)
    assert (loaded.epoch, loaded.global_step) == (5, 0)  # the state's own counters
    assert same(weights_only.policy.state_dict(), saved.policy.state_dict())


def test_a_file_of_weights_only_loads_but_does_not_resume(tmp_path):
    cfg = small_config()
    saved = _state(cfg, seed=1)
    path = tmp_path / "weights.pt"
    torch.save(saved.policy.state_dict(), path)
    checkpoint.load(_state(cfg, seed=2), path, resume=False)
    with pytest.raises(checkpoint.CheckpointError, match="holds weights only: it cannot be resumed"):
        checkpoint.load(_state(cfg, seed=2), path, resume=True)


# ----------------------------------------------------------------------------- 7: bad checkpoints


def _eval(path):
    return cli_run("eval", "squared", "--load-model-path", str(path), "--episodes", "1", *SMALL)


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (lambda p: p.write_bytes(b""), "is empty"),
        (lambda p: p.write_bytes(p.read_bytes()[:5000]), "is truncated or corrupt"),
        (lambda p: p.write_bytes(b"\x80\x02garbage" * 100), "is not a torch checkpoint"),
    ],
)
def test_a_damaged_checkpoint_is_one_line_naming_it_and_the_intact_snapshot(trained_run, damage, what):
    model = trained_run / "model.pt"
    data = model.read_bytes()
    model.unlink()  # a new file, as a copy would leave it
    model.write_bytes(data)
    damage(model)
    result = _eval(model)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output and "weights_only" not in result.output
    assert f"checkpoint {model} {what}" in lines[0]
    assert f"newest intact snapshot is {trained_run / 'model_000002.pt'}" in lines[0]


def test_damage_in_place_points_past_the_snapshot_that_shares_the_file(trained_run):
    model = trained_run / "model.pt"
    with open(model, "r+b") as f:  # the same file as model_000002.pt
        f.truncate(3000)
    result = _eval(model)
    assert result.exit_code == 2 and f"is {trained_run / 'model_000001.pt'}" in result.output, result.output


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["pong"], "is a run of squared, not pong"),
        (["squared", "--policy.hidden-size", "64"], "policy.hidden-size 32"),
        (["squared", "--train.optimizer", "adam"], "train.optimizer 'muon'"),
    ],
)
def test_resuming_with_another_shape_names_what_mismatched(trained_run, args, key):
    data = trained_run.parent
    result = cli_run(
        "train",
        *args[:1],
        "--resume",
        "r1",
        "--no-dashboard",
        *SMALL,
        *args[1:],
        "--train.data-dir",
        str(data),
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert key in result.output and str(trained_run / "model.pt") in result.output


# ----------------------------------------------------------------------------- 8: latest and locks


def _train(data, *extra):
    return cli_run(
        "train",
        "squared",
        "--no-dashboard",
        "--train.total-timesteps",
        "128",
        *SMALL,
        "--train.data-dir",
        str(data),
        *extra,
    )


def test_a_run_that_fails_before_its_first_checkpoint_leaves_latest_alone(tmp_path, monkeypatch):
    data = tmp_path / "exp"
    assert _train(data, "--run-id", "good").exit_code == 0
    assert (data / "latest").read_text() == "good"

    def broken(self):
        raise RuntimeError("env exploded in epoch 0")

    monkeypatch.setattr(Trainer, "evaluate", broken)
    result = _train(data, "--run-id", "bad")
    assert result.exit_code != 0
    monkeypatch.undo()
    assert (data / "latest").read_text() == "good"
    assert cli_run("eval", "squared", "--episodes", "1", *SMALL, "--train.data-dir", str(data)).exit_code == 0


def test_a_run_folder_in_use_is_refused_naming_the_holder(tmp_path):
    data = tmp_path / "exp"
    assert _train(data, "--run-id", "r1").exit_code == 0
    with runs.locked(data / "r1"):
        result = _train(data, "--resume", "latest", "--train.total-timesteps", "256")
    assert result.exit_code == 2, result.output
    assert f"run folder {data / 'r1'} is in use by process {os.getpid()}" in result.output


# ----------------------------------------------------------------------------- 2 and 11: signals, counts


@pytest.fixture
def no_default_stop():
    """A stop signal nobody handles fails the test instead of killing pytest."""

    def unhandled(signum, frame):
        raise AssertionError(f"{signal.Signals(signum).name} was not handled")

    previous = {s: signal.signal(s, unhandled) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for s, handler in previous.items():
        signal.signal(s, handler)


def test_sighup_during_training_saves_a_checkpoint_and_ends_like_ctrl_c(tmp_path, no_default_stop):
    trainer = make_trainer(tmp_path)

    def hang_up(t):
        if t.epoch == 2:
            os.kill(os.getpid(), signal.SIGHUP)

    try:
        result = loop.run(
            trainer, loop.Stop(epochs=50), checkpoint_interval=100, on_epoch=[hang_up], interruptible=True
        )
    finally:
        trainer.close()
    assert (result.reason, result.signal) == ("interrupted", "SIGHUP")
    saved = torch.load(result.checkpoint, weights_only=True)
    assert saved["epoch"] == 2 and saved["global_step"] == 2 * EPOCH_STEPS


def test_a_signal_during_the_update_lets_it_finish(tmp_path, no_default_stop, monkeypatch):
    trainer = make_trainer(tmp_path)
    real_train = Trainer.train

    def train_and_get_terminated(self):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_train(self)

    monkeypatch.setattr(Trainer, "train", train_and_get_terminated)
    try:
        result = loop.run(trainer, loop.Stop(epochs=5), interruptible=True)
    finally:
        trainer.close()
    assert result.signal == "SIGTERM" and trainer.epoch == 1 and trainer.global_step == EPOCH_STEPS
    assert result.epochs == 1 and result.steps == EPOCH_STEPS


@pytest.mark.parametrize("engine", ["off", "on"])
def test_an_interrupted_rollout_is_not_counted(tmp_path, engine):
    trainer = make_trainer(tmp_path, "squared", "--train.engine", engine)
    real_act, calls = trainer.act, [0]

    def act(*args, **kwargs):  # the plain loop calls it in the main thread, the engine in a buffer's
        calls[0] += 1
        if calls[0] == 12:  # inside the second rollout (8 steps each)
            raise KeyboardInterrupt
        return real_act(*args, **kwargs)

    trainer.act = act
    try:
        result = loop.run(trainer, loop.Stop(epochs=5), interruptible=True)
    finally:
        trainer.close()
    assert result.reason == "interrupted" and trainer.epoch == 1
    assert trainer.global_step == result.steps == EPOCH_STEPS
    assert torch.load(result.checkpoint, weights_only=True)["global_step"] == EPOCH_STEPS


@pytest.mark.slow
def test_sigterm_during_train_saves_and_leaks_no_shared_memory(tmp_path):
    data = tmp_path / "exp"
    cmd = [
        sys.executable, "-c", "from appliance.cli import cli; cli()", "train", "squared", "--no-dashboard", "--run-id", "r1",
        *SMALL, "--vec.backend", "multiprocessing", "--vec.num-workers", "2",
        "--train.data-dir", str(data), "--train.total-timesteps", "1e9",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while (
            not (data / "r1" / "metrics.jsonl").is_file() and time.time() < deadline and proc.poll() is None
        ):
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "interrupted (SIGTERM): saved a checkpoint" in err
    assert "leaked" not in err and "Traceback" not in err, err
    assert torch.load(data / "r1" / "model.pt", weights_only=True)["epoch"] >= 1
    assert (data / "latest").read_text() == "r1"


def test_after_a_resume_the_final_line_counts_this_session(tmp_path):
    data = tmp_path / "exp"
    assert _train(data, "--run-id", "r1").exit_code == 0
    result = _train(data, "--resume", "latest", "--train.total-timesteps", "256")
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("128 steps in ") and "256 in all" in last, last


def test_checkpoints_get_the_same_mode_as_metrics(tmp_path):
    old = os.umask(0o022)
    try:
        assert _train(tmp_path / "exp", "--run-id", "r1").exit_code == 0
    finally:
        os.umask(old)
    run = tmp_path / "exp" / "r1"
    modes = {p.name: p.stat().st_mode & 0o777 for p in run.iterdir() if not p.name.startswith(".")}
    assert set(modes.values()) == {0o644}, modes


def test_eval_with_zero_episodes_is_a_usage_error():
    result = cli_run("eval", "squared", "--episodes", "0")
    assert result.exit_code == 2 and "--episodes" in result.output and "Traceback" not in result.output


# ----------------------------------------------------------------------------- 10: disk, NaN


def test_a_full_disk_is_one_line_and_the_last_checkpoint_stays(tmp_path, monkeypatch):
    data = tmp_path / "exp"
    assert _train(data, "--run-id", "r1").exit_code == 0
    good = (data / "r1" / "model.pt").read_bytes()
    real_fsync = os.fsync

    def full(fd):
        if "model" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    result = _train(data, "--resume", "latest", "--train.total-timesteps", "256")
    monkeypatch.undo()
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"cannot write a checkpoint into {data / 'r1'}: No space left on device" in result.output
    assert (data / "r1" / "model.pt").read_bytes() == good
    assert not list((data / "r1").glob(".*.tmp"))


@pytest.mark.parametrize("engine", ["off", "on"])
def test_nan_observations_stop_with_the_epoch_not_a_sampler_traceback(tmp_path, engine):
    trainer = make_trainer(tmp_path, "pong", "--train.engine", engine)
    if engine == "off":
        real_recv = trainer.vec.recv

        def recv():
            obs, *rest = real_recv()
            if trainer.epoch == 1:
                obs = obs.astype("float32").copy()
                obs[3] = float("nan")
            return (obs, *rest)

        trainer.vec.recv = recv
    else:  # the engine's buffers read the vector's observation rows the C envs write
        real_step = trainer.engine._step

        def step(b, t):
            if trainer.epoch == 1:
                trainer.vec.observations[3] = float("nan")
            real_step(b, t)

        trainer.engine._step = step
    try:
        trainer.evaluate()
        trainer.train()
        with pytest.raises(TrainingError, match=r"NaN or Inf observations in epoch 1 .*agents \[3\]"):
            trainer.evaluate()
    finally:
        trainer.close()


# ----------------------------------------------------------------------------- 9: results


def test_unwritable_outputs_are_refused_before_any_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = _train(tmp_path / "exp", "--report", str(blocker / "r.json"))
    assert (
        result.exit_code == 2
        and f"--report {blocker / 'r.json'}: cannot write into {blocker}" in result.output
    )
    assert not (tmp_path / "exp").exists(), "nothing trained"
    result = _train(tmp_path / "exp", "--profile-trace", str(blocker / "t.json"))  # once said "wrote a trace"
    assert result.exit_code == 2 and f"--profile-trace {blocker / 't.json'}: cannot write" in result.output
    assert not (tmp_path / "exp").exists(), "nothing trained"
    start = time.perf_counter()
    result = cli_run("envs", "sps", "squared", "--seconds", "5", "--json", str(blocker / "s.json"))
    assert result.exit_code == 2 and "cannot write into" in result.output
    assert time.perf_counter() - start < 3, "refused before measuring"


def test_exclusive_report_names(tmp_path):
    from appliance.report_io import write_bytes_exclusive

    taken = write_bytes_exclusive(tmp_path / "a.json", b"first")
    with pytest.raises(FileExistsError):
        write_bytes_exclusive(taken, b"second")
    assert taken.read_bytes() == b"first" and not list(tmp_path.glob(".*.tmp"))


def test_unknown_run_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no run or checkpoint 'nope'"):
        runs.find_checkpoint(tmp_path, "nope")


TINY_SUITE = "name: tiny\nseconds: 0.05\ngate: false\nenv_sps:\n  envs: [squared, pong]\n  threads: [1]\n"


@pytest.fixture
def tiny_suite(tmp_path, monkeypatch):
    from appliance.bench.suite import session as bench_run

    monkeypatch.setattr(bench_run, "SUITES_DIR", tmp_path / "suites")
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_SUITE)
    return str(path)


def _run_suite(suite, out, **kw):
    from appliance.bench.suite.session import run_suite

    return run_suite(suite, "cpu", repeats=1, out_dir=out, plots=False, **kw)


def test_an_unwritable_out_is_refused_before_measuring(tmp_path, tiny_suite, monkeypatch):
    from appliance.bench import envsps

    monkeypatch.setattr(envsps, "measure", lambda *a, **k: pytest.fail("measured before checking --out"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=f"--out {blocker}: cannot write into {blocker / 'cpu'}"):
        _run_suite(tiny_suite, blocker)


def _interrupt_second_measurement(monkeypatch, fault):
    from appliance.bench import envsps

    real, calls = envsps.measure, [0]

    def measure(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:
            fault()
        return real(*args, **kwargs)

    monkeypatch.setattr(envsps, "measure", measure)


def test_sigterm_during_a_suite_keeps_the_measurements_taken(
    tmp_path, tiny_suite, monkeypatch, no_default_stop
):
    _interrupt_second_measurement(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    _, paths = _run_suite(tiny_suite, tmp_path / "results")
    saved = json.loads(paths[0].read_text())
    assert saved["partial"]["reason"] == "interrupted by SIGTERM" and saved["partial"]["completed"] == 1
    assert list(saved["metrics"]) == ["env_sps/squared/threads=1"]
    assert any(w.startswith("partial report") for w in saved["warnings"])
    assert paths[1].suffix == ".md" and "partial report" in paths[1].read_text()


def test_a_failing_measurement_still_writes_what_came_before(tmp_path, tiny_suite, monkeypatch):
    def boom():
        raise RuntimeError("env crashed")

    _interrupt_second_measurement(monkeypatch, boom)
    with pytest.raises(RuntimeError, match="env crashed"):
        _run_suite(tiny_suite, tmp_path / "results")
    (report,) = (tmp_path / "results" / "cpu").glob("*.json")
    saved = json.loads(report.read_text())
    assert "env crashed" in saved["partial"]["reason"] and len(saved["metrics"]) == 1


def test_two_reports_that_pick_one_name_at_once_both_survive(tmp_path, monkeypatch):
    from appliance.bench import report as rpt
    from appliance.bench.report import writing

    report = rpt.Report({"name": "t"}, {"name": "cpu"}, {"host_hash": "h"}, {}, seed=1, repeats=1)
    first = rpt.write_new(report.data, tmp_path, "cpu", plots=False)[0]
    real, calls = rpt.output_stem, [0]

    def racing(*args):  # the other run wrote `first` between our check and our write
        calls[0] += 1
        return first.with_suffix("") if calls[0] == 1 else real(*args)

    monkeypatch.setattr(writing, "output_stem", racing)
    report.data["seed"] = 2
    second = rpt.write_new(report.data, tmp_path, "cpu", plots=False)[0]
    assert second != first
    assert json.loads(first.read_text())["seed"] == 1 and json.loads(second.read_text())["seed"] == 2


def test_a_suite_warns_when_another_suite_runs_beside_it(tmp_path, tiny_suite):
    from appliance.bench.suite import session as bench_run

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from appliance.bench.suite import session as run\n"
            f"run.SUITES_DIR = Path({str(bench_run.SUITES_DIR)!r})\n"
            "with run.registered_suite():\n"
            "    print('ready', flush=True)\n"
            "    time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        data, _ = _run_suite(tiny_suite, tmp_path / "results")
    finally:
        holder.kill()
        holder.wait()
    assert any(f"process {holder.pid}" in w and "another puffer-bench suite" in w for w in data["warnings"])
    data, _ = _run_suite(tiny_suite, tmp_path / "results")  # the dead one's file is ignored
    assert not any("another puffer-bench suite" in w for w in data["warnings"])
