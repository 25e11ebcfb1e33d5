"""Run folders and --nproc (issues 28 and 27): one claim and lock for every entry point, default run
ids that never collide, nothing left behind by a run that trains nothing, ranks that stop like one
process, and every numeric option of every command checked before any work."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from appliance.cli import cli
from appliance.train import checkpoint

SMALL = [
    "--no-dashboard", "--train.device", "cpu", "--vec.num-envs", "8", "--train.bptt-horizon", "8",
    "--train.minibatch-size", "64", "--policy.hidden-size", "32", "--train.total-timesteps", "128",
]  # fmt: skip
SAFE = re.compile(r"[A-Za-z0-9._-]+")


def cli_run(*args):
    return CliRunner().invoke(cli, list(args))


def train(data, *extra, env="squared"):
    return cli_run("train", env, *SMALL, "--train.data-dir", str(data), *extra)


def one_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def metric_steps(run) -> list[int]:
    return [json.loads(line)["global_step"] for line in (run / checkpoint.METRICS).read_text().splitlines()]


def folders(data) -> list[str]:
    return sorted(p.name for p in data.iterdir() if p.is_dir()) if data.exists() else []


# ----------------------------------------------------------------------------- run folders


def test_a_named_run_folder_that_holds_a_run_is_refused_and_left_as_it_was(tmp_path):
    data = tmp_path / "exp"
    assert train(data, "--run-id", "r1").exit_code == 0
    run = data / "r1"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.name != checkpoint.LOCK}
    result = train(data, "--run-id", "r1")
    assert result.exit_code == 2
    assert one_line(result) == (
        f"error: {run} holds a run (epoch 2); pass --resume r1 to continue it or another --run-id"
    )
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.name != checkpoint.LOCK} == before
    assert train(data, "--resume", "r1", "--train.total-timesteps", "192").exit_code == 0  # as it says


def test_a_named_folder_with_metrics_but_no_checkpoint_is_refused_too(tmp_path):
    run = tmp_path / "exp" / "r1"
    run.mkdir(parents=True)
    (run / checkpoint.METRICS).write_text('{"epoch": 1}\n')
    result = train(tmp_path / "exp", "--run-id", "r1")
    assert result.exit_code == 2
    assert "holds a run that wrote no checkpoint (metrics.jsonl)" in one_line(result)
    assert (run / checkpoint.METRICS).read_text() == '{"epoch": 1}\n'


@pytest.mark.parametrize("run_id", ["a/b", "../up", "latest", ".hidden", "x:y"])
def test_a_run_id_that_is_not_one_safe_folder_name_is_refused(tmp_path, run_id):
    result = train(tmp_path / "exp", "--run-id", run_id)
    assert result.exit_code == 2 and "is not a run folder name" in one_line(result)
    assert folders(tmp_path / "exp") == [] and not (tmp_path / "up").exists()


@pytest.fixture
def same_second(monkeypatch):
    """Every default run id made in the test gets the same UTC second."""
    monkeypatch.setattr(checkpoint.time, "strftime", lambda fmt, t=None: "20260101-000000")


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path, same_second):
    data = tmp_path / "exp"
    with checkpoint.locked(data / "squared-20260101-000000"):  # a run that is still starting
        second = train(data)
        assert second.exit_code == 0, second.output
        third = train(data)
        assert third.exit_code == 0, third.output
    assert folders(data) == [f"squared-20260101-000000{n}" for n in ("", "-2", "-3")]
    for name in folders(data)[1:]:  # one run each: steps never go back (two runs in one file would)
        steps = metric_steps(data / name)
        assert steps == sorted(steps) and steps[-1] == 128, steps


def test_a_run_that_fails_before_training_leaves_no_folder(tmp_path):
    data = tmp_path / "exp"
    for extra in ([], ["--run-id", "named"]):
        result = train(data, "--train.minibatch-size", "7", *extra)  # refused when the trainer is built
        assert result.exit_code == 2 and "minibatch_size" in one_line(result)
    assert folders(data) == []


def test_a_named_empty_folder_is_used_and_tidied_when_nothing_trained(tmp_path):
    run = tmp_path / "exp" / "mine"
    run.mkdir(parents=True)
    assert train(tmp_path / "exp", "--run-id", "mine", "--train.minibatch-size", "7").exit_code == 2
    assert run.is_dir() and list(run.iterdir()) == []  # the user's folder stays, empty as it was
    assert train(tmp_path / "exp", "--run-id", "mine").exit_code == 0
    assert (run / checkpoint.MODEL).is_file()


def test_run_folders_named_from_env_specs_are_safe_in_a_shell(tmp_path):
    assert checkpoint.run_name("spread:make") == "spread-make"
    assert checkpoint.run_name("ALE/Pong-v5") == "ALE-Pong-v5"
    data = tmp_path / "exp"
    result = train(
        data, "--vec.backend", "serial", "--vec.num-envs", "2", "--train.minibatch-size", "16",
        "--train.total-timesteps", "16", env="appliance.testing:ColourBandit",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (name,) = folders(data)
    assert SAFE.fullmatch(name) and name.startswith("appliance.testing-ColourBandit-"), name
    assert (data / "latest").read_text() == name
