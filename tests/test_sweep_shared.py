"""Sweeps beyond one folder: a study shared by workers (--storage: PostgreSQL, a journal file), and
trials spread over the GPUs of one machine (--gpus).

The PostgreSQL tests need a server: ``PUFFER_TEST_POSTGRES_URL`` (``.ci/run`` starts one on
loopback and sets it); without it they skip, saying so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import warnings

import pytest
import yaml
from click.testing import CliRunner

from appliance import sweep as sw
from appliance.cli import cli
from appliance.errors import ConfigError
from appliance.sweep import storage as st
from appliance.sweep.trials import check_gpus, gpu_slots
from appliance.testing import tiny_sweep_args

# squared at a small size: a trial of 20,000 steps takes a few seconds on one core
TINY = tiny_sweep_args(20000)
SPACE = {
    "objective": {"metric": "perf", "window": 2},  # no target: a trial runs its steps out
    "space": {
        "train.learning_rate": {"low": 0.001, "high": 0.05, "log": True},
        "policy.hidden_size": {"choices": [16, 32]},
    },
}
POSTGRES = os.environ.get("PUFFER_TEST_POSTGRES_URL")


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE))
    return str(path)


@pytest.fixture
def postgres():
    """A fresh database on the test server, dropped afterwards: its URL."""
    if not POSTGRES:
        pytest.skip("no PostgreSQL server: set PUFFER_TEST_POSTGRES_URL (.ci/run starts one)")
    psycopg = pytest.importorskip(
        "psycopg", reason="the PostgreSQL driver: pip install 'puffer-bench[postgres]'"
    )
    import sqlalchemy.engine

    url = sqlalchemy.engine.make_url(POSTGRES)
    plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        admin = psycopg.connect(plain, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        pytest.skip(
            f"the PostgreSQL server of PUFFER_TEST_POSTGRES_URL is not reachable: {str(e).strip()[:120]}"
        )
    name = f"puffer_test_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _worker(out, space, storage, trials, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "appliance.cli", "sweep", "squared", "--gpu", "cpu", "--trials", str(trials),
         "--out", str(out), "--space", space, "--storage", storage, "--heartbeat", "1", *extra, *TINY],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def _states(storage_url):
    from optuna.trial import TrialState

    study = sw.open_study("unused", st.parse(storage_url), sw.STUDY)
    return study, [t.state for t in study.get_trials(deepcopy=False)], TrialState


def _two_workers_one_killed(tmp_path, space, storage_url):
    """Two workers at once on one study; one SIGKILLed mid-trial. The other ends the study: every
    trial finished (the dead worker's trial failed by its missed heartbeats and run again), and its
    best.yaml is the best trial's config."""
    trials = 4
    a = _worker(tmp_path / "a", space, storage_url, trials)
    b = _worker(tmp_path / "b", space, storage_url, trials)
    deadline = time.time() + 150
    try:
        while True:  # both training: two trials RUNNING
            assert a.poll() is None and b.poll() is None, (a.communicate()[0], b.communicate()[0])
            assert time.time() < deadline, "the two workers never ran two trials at once"
            try:
                _, states, TrialState = _states(storage_url)
            except ConfigError:  # the study is not created yet
                states, TrialState = [], None
            if TrialState is not None and states.count(TrialState.RUNNING) == 2:
                break
            time.sleep(0.3)
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        output = b.communicate(timeout=240)[0]
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert b.returncode == 0 and "Traceback" not in output, output
    study, states, TrialState = _states(storage_url)
    assert set(states) <= {TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL}, states
    dead = [t for t in study.trials if f"stale:{t.number}" in study.user_attrs]
    assert len(dead) == 1 and dead[0].state == TrialState.FAIL, study.user_attrs
    assert study.user_attrs[f"stale:{dead[0].number}"].startswith("its worker stopped sending heartbeats")
    assert any(t.user_attrs.get("rerun_of") == dead[0].number for t in study.trials)  # run again
    assert len(sw.rows(study)) == trials  # the interrupted one is not counted
    best = sw.best_trade_off(study, None)
    assert yaml.safe_load((tmp_path / "b" / "best.yaml").read_text()) == sw.best_config(
        "squared", study, best
    )
    assert f"trial {best.number}" in (tmp_path / "b" / "best.yaml").read_text()


@pytest.mark.slow
def test_two_journal_workers_share_a_study_and_a_killed_ones_trial_runs_again(tmp_path, space):
    _two_workers_one_killed(tmp_path, space, f"journal://{tmp_path / 'study.log'}")


@pytest.mark.slow
def test_two_postgres_workers_share_a_study_and_a_killed_ones_trial_runs_again(tmp_path, space, postgres):
    _two_workers_one_killed(tmp_path, space, postgres)


@pytest.mark.parametrize("kind", ["journal", "postgresql"])
def test_a_trial_whose_worker_died_before_its_first_heartbeat_runs_again(tmp_path, space, kind, request):
    """A worker killed between asking for a trial and recording its first heartbeat leaves it
    RUNNING with no beat at all. Optuna's RDBStorage never calls such a trial stale, so the other
    workers waited for it for ever (CI: a 240 s timeout). Another worker fails it and runs it again."""
    url = f"journal://{tmp_path / 'study.log'}" if kind == "journal" else request.getfixturevalue("postgres")
    first = _worker(tmp_path / "a", space, url, 1)  # makes the study, as a real worker does
    assert first.wait(120) == 0, first.communicate()[0]
    study = sw.open_study("unused", st.parse(url), sw.STUDY)
    with warnings.catch_warnings():  # Optuna: a heartbeat is meant for Study.optimize
        warnings.simplefilter("ignore", UserWarning)
        orphan = study.ask()  # asked, never beaten: its worker is gone
    worker = _worker(tmp_path / "b", space, url, 3)
    try:
        output = worker.communicate(timeout=120)[0]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0 and "Traceback" not in output, output
    study, states, TrialState = _states(url)
    assert study.trials[orphan.number].state == TrialState.FAIL, states
    assert study.user_attrs[f"stale:{orphan.number}"].startswith("its worker stopped sending heartbeats")
    assert any(t.user_attrs.get("rerun_of") == orphan.number for t in study.trials)
    assert TrialState.RUNNING not in states and len(sw.rows(study)) == 3


def _cli(*args):
    return CliRunner().invoke(cli, ["sweep", "squared", "--gpu", "cpu", *args])


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("nonsense", "--storage: not a storage URL (give postgresql://"),
        ("sqlite:///x.db", "a SQLite study is the default: drop --storage and pass --out FOLDER"),
        ("mysql://u:secret@host/db", "--storage mysql://u:***@host/db: not a shared study URL"),
        ("postgresql://u:secret@/db", "no server named"),
        ("postgresql://u:secret@host", "no database named"),
        ("journal://relative/study.log", "a journal needs an absolute path"),
        ("journal:///no/such/folder/study.log", "the folder /no/such/folder does not exist"),
        ("postgresql+nosuch://u:secret@host/db", "SQLAlchemy has no such driver"),
        # port 9 (discard) on loopback: nothing listens; the password is not shown
        ("postgresql://u:secret@127.0.0.1:9/db", "--storage postgresql://u:***@127.0.0.1:9/db: cannot connect (is the server running"),
    ],
)  # fmt: skip
def test_a_bad_storage_is_one_line_saying_what_to_fix_without_the_password(tmp_path, url, says):
    if "cannot connect" in says:  # the driver first (the image ships without the postgres extra)
        pytest.importorskip("psycopg", reason="the PostgreSQL driver: pip install 'puffer-bench[postgres]'")
    result = _cli("--storage", url, "--out", str(tmp_path / "s"), "--trials", "1")
    assert result.exit_code != 0 and says in result.output, result.output
    assert "secret" not in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_missing_driver_is_one_line_naming_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_psycopg(name, *args, **kwargs):
        if name.split(".")[0] == "psycopg":
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(ConfigError, match=r"the PostgreSQL driver is missing \(psycopg\): pip install"):
        st.open_storage(st.parse("postgresql://u:secret@127.0.0.1:9/db"), lambda s, t: None)


def instant(spec):
    """A trial that 'trains' for a second, its result naming the GPU its process saw and when it ran."""
    start = time.time()
    time.sleep(1.0)
    seen = f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'none')} {start} {time.time()}"
    return {"state": "complete", "score": 0.5, "seconds": 1.0, "steps": 64, "curve": [[64.0, 0.5]],
            "reason": seen, "error": None}  # fmt: skip


def test_joining_a_shared_study_with_other_overrides_is_refused(tmp_path, space):
    journal = f"journal://{tmp_path / 'study.log'}"
    shared = st.parse(journal)

    def run(out, overrides):
        options = sw.Options(trials=1, shared=shared)
        return list(
            sw.sweep("squared", out, options, space, overrides=overrides, profile="cpu", trial=instant)
        )

    assert any(line.startswith("wrote") for line in run(tmp_path / "a", TINY))
    with pytest.raises(
        ConfigError, match=r"study 'sweep' in journal://.* was swept from another config: env.size"
    ):
        run(tmp_path / "b", [*TINY, "--env.size", "6"])


def test_gpus_run_one_trial_per_gpu_each_with_its_own_cuda_visible_devices(tmp_path, space, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert gpu_slots("auto") == ["3", "5", "7"] and gpu_slots("2") == ["3", "5"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    options = sw.Options(trials=4, parallel=2, gpus=gpu_slots("2"))
    out = tmp_path / "sweep"
    list(sw.sweep("squared", out, options, space, overrides=TINY, profile="cpu", trial=instant))
    runs = [t.user_attrs["reason"].split() for t in sw.open_study(out).trials]
    assert len(runs) == 4 and {gpu for gpu, _, _ in runs} == {"0", "1"}, runs
    for i, (gpu, start, end) in enumerate(runs):  # two trials at once never share a GPU
        for other, start2, end2 in runs[i + 1 :]:
            overlap = float(start) < float(end2) and float(start2) < float(end)
            assert not (overlap and gpu == other), runs
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # the driver's own environment as it was


def test_gpus_contradictions_are_one_line(monkeypatch):
    import torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError, match="--gpus auto: torch sees no CUDA device here"):
        gpu_slots("auto")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match="--gpus 3: torch sees 2 CUDA devices here; pass --gpus 2 or fewer"):
        gpu_slots("3")
    with pytest.raises(ConfigError, match="give a number of GPUs or 'auto'"):
        gpu_slots("many")
    with pytest.raises(ConfigError, match="--parallel 3 with --gpus 2: one trial per GPU at once"):
        check_gpus(sw.Options(trials=1, parallel=3, gpus=["0", "1"]))
    with pytest.raises(ConfigError, match="with --ray-address Ray places them"):
        check_gpus(sw.Options(trials=1, gpus=["0"], ray_address="local"))
    result = _cli("--gpus", "3", "--trials", "1")
    assert (
        result.exit_code != 0
        and "pass --gpus 2 or fewer" in result.output
        and "Traceback" not in result.output
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--study-name", "other"], "--study-name names a study in --storage"),
        (["--heartbeat", "5"], "--heartbeat is for"),
    ],
)
def test_shared_study_options_without_storage_are_refused(tmp_path, args, says):
    result = _cli(*args, "--out", str(tmp_path / "s"))
    assert result.exit_code != 0 and says in result.output, result.output
