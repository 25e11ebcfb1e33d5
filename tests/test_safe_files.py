"""Files and folders that are not what they seem, and outputs checked before the work.

A run or sweep folder from elsewhere is hostile as filesystem objects: a lock or ``metrics.jsonl``
that is a symbolic link (or a FIFO, or a hard link to another file) is refused in one line and its
target is untouched; a ``latest`` pointer or a run name that leads out of the data folder is refused
as ``--run-id`` refuses it; a last line cut short is set aside, never glued onto; every reader of
JSON lines skips a damaged line and says so. Every output of every command is checked before the
work (a link, a folder, one of the inputs, an unwritable folder), and one that fails late (a full disk)
keeps what was measured where the one-line error says. Each test reproduces a case that used to
write through a link, train outside the data folder, glue records together, or lose the figures.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import conftest
import pytest
import yaml
from click.testing import CliRunner

from appliance import safe_files, vector
from appliance.cli import cli
from appliance.errors import ApplianceError, ConfigError
from appliance.train import Trainer, runs

SMALL = (*conftest.SMALL, "--policy.hidden-size", "32")
SECRET = "the user's own file\n"
REPO = Path(__file__).resolve().parent.parent


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line(result, code, *fragments):
    """The command exited ``code`` with one line holding every fragment (no traceback)."""
    out = result.output.strip()
    assert result.exit_code == code, out + repr(result.exception)
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    for fragment in fragments:
        assert fragment in out, out
    return out


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """A run folder with a checkpoint at epoch 1 and one metrics record, made once."""
    run = tmp_path_factory.mktemp("made") / "r1"
    cfg = conftest.small_config("squared", "--policy.hidden-size", "32")
    trainer = Trainer(cfg, vector.make_from_config(cfg), run_dir=run)
    try:
        trainer.evaluate()
        trainer.train()
        trainer.log_metrics()
        trainer.save_checkpoint()
    finally:
        trainer.close()
    (run / "config.yaml").write_text(cfg.to_yaml())
    return run


@pytest.fixture
def data(tmp_path, one_run):
    """A data folder holding a copy of the run as ``r1``, with ``latest`` naming it."""
    folder = tmp_path / "exp"
    shutil.copytree(one_run, folder / "r1")
    (folder / "latest").write_text("r1")
    return folder


def resume(data_dir, which="r1", *extra):
    return run_cli("train", "squared", "--no-dashboard", "--train.data-dir", data_dir, "--resume", which,
                   *SMALL, "--train.total-timesteps", "256", *extra)  # fmt: skip


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text(SECRET)
    return path


# ----------------------------------------------------------------------------- links, FIFOs, hard links


def test_a_run_lock_that_is_a_link_is_refused_and_its_target_kept(data, secret):
    (data / "r1" / runs.LOCK).unlink(missing_ok=True)
    (data / "r1" / runs.LOCK).symlink_to(secret)
    one_line(resume(data), 2, f"the run lock {data / 'r1' / '.lock'} is a symbolic link (to {secret})")
    assert secret.read_text() == SECRET  # was emptied, then held the trainer's pid


def test_a_metrics_file_that_is_a_link_is_refused_and_its_target_kept(data, secret):
    (data / "r1" / runs.METRICS).unlink()
    (data / "r1" / runs.METRICS).symlink_to(secret)
    out = resume(data).output
    assert f"the run's metrics {data / 'r1' / 'metrics.jsonl'} is a symbolic link" in out, out
    assert "Traceback" not in out
    assert secret.read_text() == SECRET  # training records were appended to it


def test_a_metrics_file_with_another_hard_link_or_a_fifo_is_refused(tmp_path, secret):
    os.link(secret, tmp_path / "metrics.jsonl")
    with pytest.raises(safe_files.UnsafeFileError, match="has 1 other hard link"):
        runs.append_metrics(tmp_path, '{"epoch": 1}\n')
    assert secret.read_text() == SECRET
    (tmp_path / "metrics.jsonl").unlink()
    os.mkfifo(tmp_path / "metrics.jsonl")  # an open for appending would wait for a reader forever
    with pytest.raises(safe_files.UnsafeFileError, match="is not a regular file"):
        runs.append_metrics(tmp_path, '{"epoch": 1}\n')


def test_a_sweep_lock_or_study_that_is_a_link_is_refused_and_its_target_kept(tmp_path, secret):
    from test_sweep import TINY, instant

    from appliance import sweep as sw

    def quick(out):
        return list(
            sw.sweep("squared", out, sw.Options(trials=1), overrides=TINY, profile="cpu", trial=instant)
        )

    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.lock").symlink_to(secret)
    with pytest.raises(ConfigError, match=r"the sweep lock .*sweep.lock is a symbolic link"):
        quick(out)
    assert secret.read_text() == SECRET  # was emptied
    (out / "sweep.lock").unlink()
    other = tmp_path / "other"
    quick(other)  # a sweep's study elsewhere
    before = (other / "study.db").read_bytes()
    (out / "study.db").symlink_to(other / "study.db")
    with pytest.raises(ConfigError, match=r"the sweep's study .*study.db is a symbolic link"):
        quick(out)
    assert (other / "study.db").read_bytes() == before


# ----------------------------------------------------------------------------- names that lead out


@pytest.mark.parametrize("where", ["../outside/r1", "absolute", "a link out"])
def test_a_latest_pointer_leading_out_of_the_data_folder_is_refused(data, tmp_path, where):
    outside = tmp_path / "outside" / "r1"
    shutil.copytree(data / "r1", outside)
    if where == "a link out":
        (data / "out").symlink_to(outside)
        (data / "latest").write_text("out")
    else:
        (data / "latest").write_text(str(outside) if where == "absolute" else where)
    before = sorted(p.name for p in outside.iterdir())
    one_line(resume(data, "latest"), 2, f"the 'latest' pointer {data / 'latest'} names", "refused")
    eval_ = run_cli("eval", "squared", "--train.data-dir", data, "--episodes", "1", *SMALL)
    one_line(eval_, 2, "the 'latest' pointer")
    assert sorted(p.name for p in outside.iterdir()) == before  # no checkpoints, no metrics out there


def test_a_run_name_leading_out_of_the_data_folder_is_refused_like_run_id(data, tmp_path, monkeypatch):
    outside = tmp_path / "outside" / "r1"
    shutil.copytree(data / "r1", outside)
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")  # ../outside/r1 is no path from here, only from exp/
    one_line(resume(data, "../outside/r1"), 2, "'../outside/r1' is not a run folder name", "--run-id")
    (data / "r2").symlink_to(outside)
    one_line(resume(data, "r2"), 2, "'r2' leads out of the data folder", "is a symbolic link")
    new = run_cli("train", "squared", "--no-dashboard", "--train.data-dir", data, "--run-id", "r2", *SMALL)
    one_line(new, 2, "--run-id r2 leads out of the data folder")
    monkeypatch.chdir(tmp_path)
    assert resume(data, str(outside)).exit_code == 0  # a path typed by the user is taken as given
    assert (data / "latest").read_text() == "r1"  # and latest only ever names a run in the data folder


# ----------------------------------------------------------------------------- lines cut short


def test_a_cut_short_metrics_line_is_set_aside_on_resume_not_glued_onto(data):
    metrics = data / "r1" / runs.METRICS
    whole = metrics.read_bytes()
    metrics.write_bytes(whole + b'{"epoch": 2, "global_st')  # killed mid-append
    result = resume(data)
    assert result.exit_code == 0, result.output
    aside = data / "r1" / "metrics.jsonl.damaged"
    assert f"warning: {metrics} ended in a cut-short line (23 bytes" in result.output
    assert f"set aside in {aside}" in result.output
    assert aside.read_bytes() == b'{"epoch": 2, "global_st\n'
    records, skipped = safe_files.read_json_lines(metrics, "metrics")
    assert skipped == 0 and len(records) >= 2 and records[0] == json.loads(whole)


def test_an_append_after_a_cut_short_line_starts_on_a_line_boundary(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2')
    note = safe_files.append_line(path, '{"a": 3}\n', "metrics")
    assert (
        note
        == f"{path} ended in a cut-short line (7 bytes, a write was interrupted): set aside in {path}.damaged"
    )
    assert path.read_bytes() == b'{"a": 1}\n{"a": 3}\n'
    assert safe_files.append_line(path, '{"a": 4}\n', "metrics") is None
    path.write_bytes(b"x" * (safe_files.MAX_LINE + 10))  # no line at all: not JSON lines
    with pytest.raises(safe_files.UnsafeFileError, match="not a JSON-lines file"):
        safe_files.append_line(path, "{}\n", "metrics")


def test_readers_of_json_lines_skip_damaged_lines_and_say_how_many(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2{"a": 3}\n\n[1]\n' + b"[" * 100_000 + b'\n{"a": 4}\n{"a": 5')
    records, skipped = safe_files.read_json_lines(path, "metrics")
    assert records == [{"a": 1}, {"a": 4}] and skipped == 4
    assert safe_files.skipped_note(path, skipped) == (
        f"skipped 4 damaged lines in {path} (not JSON: cut short or edited)"
    )


def test_the_tools_read_a_damaged_curve_and_say_so(tmp_path):
    sys.path.insert(0, str(REPO / "tools"))
    import pufferlib_peer as peer

    run = tmp_path / "r1"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"global_step": 64, "uptime": 1.0, "env/perf": 0.1}\n{"global_step": 12{"global_step": 128, '
        '"uptime": 2.0, "env/perf": 0.2}\n{"global_step": 192, "uptime": 3.0, "env/pe'
    )
    rows, _ = peer.our_rows(run)
    assert [r["steps"] for r in rows] == [64.0]
    seeds = tmp_path / "seeds.jsonl"  # learning_seeds.py --out, cut short twice
    seeds.write_text('{"case": "squared", "se\n{"case": "squ')
    table = subprocess.run(
        [sys.executable, "tools/learning_seeds.py", "table", str(seeds)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert table.returncode == 0 and "skipped 2 damaged lines" in table.stderr, table.stderr


# ----------------------------------------------------------------------------- outputs checked first


def _not_measured(monkeypatch):
    """Fail the test if a command starts its work (any vector is made) before refusing its output."""
    monkeypatch.setattr(vector, "make", lambda *a, **k: pytest.fail("worked before checking the output"))


def test_every_output_is_checked_before_the_work(tmp_path, secret, monkeypatch):
    from appliance.bench import envsps, vectorbench
    from appliance.bench.suite import session
    from appliance.tune import autotune

    monkeypatch.setattr(session, "probe", lambda *a: pytest.fail("probed before checking --out"))
    monkeypatch.setattr(autotune, "tune", lambda *a, **k: pytest.fail("tuned before checking --save"))
    monkeypatch.setattr(envsps, "scaling", lambda *a, **k: pytest.fail("measured before checking --json"))
    monkeypatch.setattr(vectorbench, "run", lambda *a, **k: pytest.fail("measured before checking --json"))
    _not_measured(monkeypatch)
    link = tmp_path / "link.json"
    link.symlink_to(secret)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # writing into it would wait for a reader forever
    for args, said in (
        (["profile", "--out", link], f"--out {link}: {link} is a symbolic link (to {secret})"),
        (["autotune", "squared", "--save", link], f"--save {link}: {link} is a symbolic link"),
        (["envs", "sps", "squared", "--json", link], f"--json {link}: {link} is a symbolic link"),
        (["vector-bench", "--json", link], f"--json {link}: {link} is a symbolic link"),
        (["envs", "show", "squared", "--gif", link], f"--gif {link}: {link} is a symbolic link"),
        (["eval", "squared", "--gif", link, "--train.data-dir", tmp_path], f"--gif {link}: "),
        (["train", "squared", "--no-dashboard", "--report", link, "--train.data-dir", tmp_path / "e", *SMALL],
         f"--report {link}: {link} is a symbolic link"),
        (["train", "squared", "--no-dashboard", "--profile-trace", fifo, "--train.data-dir", tmp_path / "e"],
         f"--profile-trace {fifo}: {fifo} is not a regular file"),
        (["sweep", "squared", "--out", secret, *SMALL], f"sweep folder {secret}: not a folder"),
    ):  # fmt: skip
        one_line(run_cli(*args), 2, said)
    assert secret.read_text() == SECRET and not (tmp_path / "e").exists()


def test_an_output_that_is_an_input_or_writes_beside_a_link_is_refused(tmp_path, secret):
    from test_shared_files import good_report

    base, new = tmp_path / "base.json", tmp_path / "new.json"
    for p in (base, new):
        p.write_text(json.dumps(good_report()))
    kept = base.read_bytes()
    one_line(run_cli("compare", base, new, "--out", base), 2, f"--out {base}: {base} is one of the inputs")
    one_line(run_cli("report", base, "--markdown", base), 2, "is one of the inputs")
    assert base.read_bytes() == kept
    (tmp_path / "ab.md").symlink_to(secret)  # ab writes ab.json and ab.md
    one_line(
        run_cli("ab", "base", "vec.num_envs=4", "--out", tmp_path / "ab.json"), 2, "ab.md is a symbolic link"
    )
    assert secret.read_text() == SECRET


def test_the_output_check_names_an_unwritable_folder(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match=r"--out .*/a-file/x.json: cannot write into .*a-file"):
        safe_files.check_output(tmp_path / "a-file" / "x.json", "--out")
    with pytest.raises(ConfigError, match=r"--json /proc/x/y.json: cannot write into /proc/x"):
        safe_files.check_output("/proc/x/y.json", "--json")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder: chmod cannot block it")
def test_a_read_only_folder_is_refused_before_the_work(tmp_path, monkeypatch):
    _not_measured(monkeypatch)
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        one_line(run_cli("envs", "sps", "squared", "--json", folder / "x.json"), 2, "Permission denied")
    finally:
        folder.chmod(0o755)


# ----------------------------------------------------------------------------- late failures keep the figures


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def full_disk(tmp_path, monkeypatch):
    """Atomic writes outside the temp folder fail with ENOSPC; the temp folder is ``tmp_path/spare``."""
    import tempfile

    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    monkeypatch.setattr(safe_files, "write_bytes_atomic", _enospc)
    return spare


def test_a_write_that_fails_late_keeps_the_figures_in_the_temp_folder(tmp_path, full_disk, monkeypatch):
    from appliance.bench import envsps

    monkeypatch.setattr(
        envsps,
        "scaling",
        lambda n, t, **k: [{"env": n, "threads": 1, "sps": 5.0, "num_agents": 1, "efficiency": None}],
    )
    out = tmp_path / "sps.json"
    result = run_cli("envs", "sps", "squared", "--threads", "1", "--json", out)
    line = result.output.strip().splitlines()[-1]
    (spare,) = full_disk.glob("puffer-bench-*-sps.json")
    assert result.exit_code == 1 and line == (
        f"error: disk full: --json {out} (No space left on device): saved it as {spare} instead; move it once there is space"
    ), result.output
    assert json.loads(spare.read_text())["rows"][0]["sps"] == 5.0


def test_train_report_that_does_not_fit_is_kept_and_names_the_checkpoint(tmp_path, full_disk):
    report = tmp_path / "r.json"
    result = run_cli("train", "squared", "--no-dashboard", "--train.data-dir", tmp_path / "e", "--run-id", "r1",
                     "--report", report, *SMALL, "--train.total-timesteps", "128")  # fmt: skip
    (spare,) = full_disk.glob("puffer-bench-*-r.json")
    line = result.output.strip().splitlines()[-1]
    assert result.exit_code == 1 and f"saved it as {spare} instead" in line, result.output
    assert f"saved {tmp_path / 'e' / 'r1' / 'model.pt'}" in line
    assert json.loads(spare.read_text())["kind"] == "train"


# ----------------------------------------------------------------------------- a disk that fills during a sweep


def _sqlite_full():
    import sqlalchemy.exc

    return sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))


@pytest.mark.parametrize("where", ["asking for a trial", "recording a result"])
def test_a_disk_that_fills_during_a_sweep_keeps_what_finished_in_one_line(tmp_path, monkeypatch, where):
    import optuna
    from test_sweep import TINY, instant

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"space": {"train.learning_rate": {"low": 0.001, "high": 0.05}}}))
    calls = {"n": 0}
    owner, name = (
        (optuna.study.Study, "ask")
        if where == "asking for a trial"
        else (optuna.storages.RDBStorage, "set_trial_state_values")
    )
    real = getattr(owner, name)

    def fills(self, *a, **k):
        calls["n"] += 1
        if calls["n"] > 2:
            raise _sqlite_full()
        return real(self, *a, **k)

    monkeypatch.setattr(owner, name, fills)
    out = tmp_path / "sweep"
    from appliance import sweep as sw

    with pytest.raises(ApplianceError) as caught:
        list(
            sw.sweep(
                "squared", out, sw.Options(trials=4), str(space), overrides=TINY, profile="cpu", trial=instant
            )
        )
    line = str(caught.value)
    assert "\n" not in line and line.startswith(
        f"disk full in {out} while the sweep ran (database or disk is full): "
    )
    assert f"{out / 'study.db'} holds the " in line and "kept trials.md, pareto.png, best.yaml" in line, line
    if where == "recording a result":
        assert "not recorded there (it runs again): trial 1: score 0.500" in line, line
    assert "| 0 | complete |" in (out / "trials.md").read_text()
    assert yaml.safe_load((out / "best.yaml").read_text())  # the best of what finished


def test_a_run_folder_without_room_for_two_checkpoints_of_its_policy_is_refused_before_training(
    tmp_path, monkeypatch
):
    from collections import namedtuple

    import torch

    data = tmp_path / "exp"
    real = shutil.disk_usage
    usage = namedtuple("usage", "total used free")
    free = {"bytes": 70 * 2**20}  # the claim's 64 MiB floor passes; a 2048-wide layer's checkpoints do not
    monkeypatch.setattr(
        shutil,
        "disk_usage",
        lambda p: usage(2**40, 2**39, free["bytes"]) if str(p).startswith(str(data)) else real(p),
    )
    (data / "r0").mkdir(parents=True)
    with pytest.raises(
        ConfigError,
        match=r"run folder: only 70 MiB free in .*r0 .*\(two checkpoints of this policy: 97 MiB\)",
    ):
        runs.require_checkpoint_room(data / "r0", torch.nn.Linear(2048, 2048))
    runs.require_checkpoint_room(data / "r0", torch.nn.Linear(64, 64))
    monkeypatch.setattr(
        runs, "require_room", lambda *a: None
    )  # past the claim: the check sized to the policy
    free["bytes"] = 2**20
    monkeypatch.setattr(Trainer, "train", lambda self: pytest.fail("trained before checking the room"))
    result = run_cli("train", "squared", "--no-dashboard", "--train.data-dir", data, "--run-id", "r1", *SMALL)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith(f"error: run folder: only 1 MiB free in {data / 'r1'}")
    )
    assert not (data / "r1").exists()  # nothing trained: the folder made for the run goes again
