"""The CLI through click's CliRunner: exit codes, one-line errors, resolved config."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from conftest import SMALL

import appliance
from appliance.cli import cli


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_help_and_version():
    result = run("--help")
    assert result.exit_code == 0 and "info" in result.output and "config" in result.output
    assert run("--version").output.strip().endswith(appliance.__version__)


def test_info_json():
    result = run("info", "--json")
    assert result.exit_code == 0
    fp = json.loads(result.output)
    assert "cpu" in fp and "gpus" in fp


def test_info_table():
    result = run("info")
    assert result.exit_code == 0 and "CPU" in result.output


def test_config_typo_exits_2_with_one_line():
    result = run("config", "--train.learnin-rate", "1")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--train.learning-rate" in lines[0]
    assert "Traceback" not in result.output


def test_config_prints_resolved_yaml_with_override():
    result = run("config", "--train.learning-rate", "1e-3")
    assert result.exit_code == 0
    assert yaml.safe_load(result.output)["train"]["learning_rate"] == 1e-3


def test_config_env_profile_and_file(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("policy:\n  hidden_size: 256\n")
    result = run("config", "squared", "--gpu", "h100", "--config", str(f), "--env.size", "7", "--json")
    assert result.exit_code == 0, result.output
    cfg = json.loads(result.output)
    assert (cfg["env_name"], cfg["profile"], cfg["env"]["size"], cfg["policy"]["hidden_size"]) == (
        "squared",
        "h100",
        7,
        256,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["squared"],
        ["breakout", "--train.learning-rate", "3e-4"],
        ["CartPole-v1"],
        ["squared", "--gpu", "h100", "--env.size", "7"],
        ["target", "--config", "FILE"],
    ],
)
def test_config_env_prints_exactly_the_config_train_runs(args, tmp_path, monkeypatch):
    """``config squared`` printed profile null and 4,096 envs where train ran the cpu profile's 256."""
    from appliance.train import session

    mine = tmp_path / "mine.yaml"
    mine.write_text("policy:\n  hidden_size: 64\n")
    args = [str(mine) if a == "FILE" else a for a in args]
    ran = []
    monkeypatch.setattr(session, "train", lambda cfg, options: ran.append(cfg) or iter(()))
    result = run("train", *args)
    assert result.exit_code == 0 and len(ran) == 1, result.output
    shown = run("config", *args, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == ran[0].to_dict()
    assert ran[0].profile is not None


def test_config_bad_profile_and_missing_file(tmp_path):
    result = run("config", "--gpu", "nope")
    assert result.exit_code == 2 and "valid profiles" in result.output
    result = run("config", "--config", str(tmp_path / "none.yaml"))
    assert result.exit_code == 2 and "not found" in result.output


def test_envs_lists_every_env_with_spaces():
    result = run("envs")
    assert result.exit_code == 0
    for name in ("breakout", "snake", "go", "MultiDiscrete"):
        assert name in result.output


def test_envs_show_draws_frames_and_writes_a_gif(tmp_path):
    gif = tmp_path / "out.gif"
    result = run("envs", "show", "squared", "--frames", "3", "--gif", str(gif))
    assert result.exit_code == 0, result.output
    assert "A" in result.output and "wrote 4 frames" in result.output
    from PIL import Image

    with Image.open(gif) as im:
        assert im.n_frames >= 2


def test_envs_show_unknown_env_is_one_line():
    result = run("envs", "show", "brekout")
    assert result.exit_code == 2 and "did you mean 'breakout'" in result.output


def test_envs_sps_table_and_json(tmp_path):
    out = tmp_path / "sps.json"
    result = run(
        "envs",
        "sps",
        "squared,pong",
        "--threads",
        "1,2",
        "--seconds",
        "0.1",
        "--num-envs",
        "32",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [(r["env"], r["threads"]) for r in data["rows"]] == [
        ("squared", 1),
        ("squared", 2),
        ("pong", 1),
        ("pong", 2),
    ]
    assert all(r["sps"] > 0 for r in data["rows"]) and "cpu" in data["fingerprint"]


def test_envs_sps_rejects_unknown_env_and_bad_threads():
    assert run("envs", "sps", "nope", "--seconds", "0.1").exit_code == 2
    assert run("envs", "sps", "squared", "--threads", "0").exit_code == 2


def test_train_then_eval_then_resume(tmp_path):
    data = str(tmp_path / "exp")
    common = [*SMALL, "--train.data-dir", data, "--policy.hidden-size", "32"]
    result = run(
        "train", "squared", "--run-id", "r1", "--no-dashboard", "--train.total-timesteps", "256", *common
    )
    assert result.exit_code == 0, result.output
    assert "saved" in result.output and "epoch" in result.output
    from appliance.config.runs import pick_profile

    assert f"profile '{pick_profile(None)}'" in result.output, "train names the detected profile"
    run_dir = tmp_path / "exp" / "r1"
    for name in ("model.pt", "config.yaml", "metrics.jsonl"):
        assert (run_dir / name).is_file(), name
    assert (tmp_path / "exp" / "latest").read_text() == "r1"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["global_step"] >= 256 and "loss/policy_loss" in records[-1]
    result = run("eval", "squared", "--episodes", "2", "--gif", str(tmp_path / "e.gif"), *common)
    assert result.exit_code == 0, result.output
    assert "episode 2" in result.output and "mean over 2 episodes" in result.output
    result = run(
        "train", "squared", "--resume", "latest", "--no-dashboard", "--train.total-timesteps", "512", *common
    )
    assert result.exit_code == 0, result.output
    assert (
        records[-1]["epoch"] < json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["epoch"]
    )


def test_resume_takes_the_runs_own_config_and_the_command_line_over_it(tmp_path):
    """``--resume RUN`` with no ENV and none of the run's settings continues it as it was trained (it
    refused before: "trained with policy.core 'mingru', this run has 'lstm'"); the command line
    changes what it names and says so; another env is refused in one line."""
    data = str(tmp_path / "exp")
    first = [*SMALL, "--train.data-dir", data, "--policy.hidden-size", "32", "--train.seed", "7"]
    result = run(
        "train", "squared", "--run-id", "r1", "--no-dashboard", "--train.total-timesteps", "256", *first
    )
    assert result.exit_code == 0, result.output
    result = run(
        "train",
        "--resume",
        "r1",
        "--no-dashboard",
        "--train.data-dir",
        data,
        "--train.total-timesteps",
        "512",
    )
    assert result.exit_code == 0, result.output
    assert f"resuming with the run's config {tmp_path / 'exp' / 'r1' / 'config.yaml'}" in result.output
    assert "changed for this resume: train.total_timesteps 256 -> 512" in result.output
    saved = yaml.safe_load((tmp_path / "exp" / "r1" / "config.yaml").read_text())
    assert saved["policy"]["hidden_size"] == 32 and saved["train"]["seed"] == 7
    assert saved["vec"]["num_envs"] == 8 and saved["train"]["total_timesteps"] == 512
    saved_path = (
        tmp_path / "exp" / "r1" / "config.yaml"
    )  # a run saved by an older version: a key since removed
    old = yaml.safe_load(saved_path.read_text())
    saved_path.write_text(
        yaml.safe_dump({**old, "train": {**old["train"], "retired_key": 1}}, sort_keys=False)
    )
    result = run("train", "--resume", "r1", "--no-dashboard", "--train.data-dir", data)
    assert result.exit_code == 0, result.output
    assert "keys no longer known, not applied: train.retired_key" in result.output
    result = run("train", "pong", "--resume", "r1", "--no-dashboard", "--train.data-dir", data)
    assert result.exit_code == 2 and "is a run of squared, not pong" in result.output
    (tmp_path / "exp" / "r1" / "config.yaml").unlink()  # a copied model.pt: ENV and settings as given
    result = run("train", "--resume", "r1", "--no-dashboard", "--train.data-dir", data)
    assert (
        result.exit_code == 2 and "has no config.yaml" in result.output and "Traceback" not in result.output
    )


def test_train_errors_are_one_line(tmp_path):
    result = run("train", "--train.device", "cpu")
    assert result.exit_code == 2 and "train needs an ENV" in result.output
    result = run("eval", "squared", "--train.data-dir", str(tmp_path))
    assert result.exit_code == 2 and "no 'latest' run" in result.output
    import torch

    if not torch.cuda.is_available():
        result = run("train", "squared", "--train.device", "cuda", "--train.data-dir", str(tmp_path))
        assert (
            result.exit_code == 2 and "no CUDA device" in result.output and "Traceback" not in result.output
        )


def test_profile_trace_writes_a_chrome_trace(tmp_path):
    trace = tmp_path / "trace.json"
    result = run(
        "train",
        "squared",
        "--profile-trace",
        str(trace),
        *SMALL,
        "--train.data-dir",
        str(tmp_path),
    )
    assert result.exit_code == 0, result.output
    assert "traceEvents" in trace.read_text()[:2000]
    ops = (tmp_path / "trace.json.ops.txt").read_text()
    assert "ops by self CPU time" in ops and "device time" not in ops  # no GPU profiled here


def test_a_profile_with_the_gpu_gets_a_table_by_device_time_too():
    """A GPU run's profile is read by its kernels' device time (the graphed update's among them):
    the second table's sort key must be one this torch knows, which a CPU profile checks too."""
    import torch

    from appliance.train.session import ops_tables

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(64, 64) @ torch.ones(64, 64)
    text = ops_tables(prof.key_averages(), device=True)
    cpu, _, device = text.partition("ops and kernels by self device time")
    assert "ops by self CPU time" in cpu and "aten::mm" in cpu and "aten::mm" in device


def test_ctrl_c_during_an_import_is_taken_once_the_import_is_over(tmp_path, monkeypatch):
    """torch's and numpy's C++ start-up calls back into Python, and a KeyboardInterrupt raised there
    leaves numpy half-imported or aborts the process (seen in the Ctrl-C-at-0.5-s train test): the
    command line's handler holds a Ctrl-C until the import in progress has finished."""
    import importlib
    import signal
    import sys
    import time

    from appliance import signals as interrupts

    (tmp_path / "slow_module_for_ctrl_c.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.3)\nDONE = True\n"
    )
    monkeypatch.syspath_prepend(tmp_path)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupts.hold_during_imports()
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        interrupted_in = None
        try:
            importlib.import_module("slow_module_for_ctrl_c")
            time.sleep(5)  # the held Ctrl-C comes back within RETRY_S
        except KeyboardInterrupt:
            interrupted_in = "import" if "slow_module_for_ctrl_c" not in sys.modules else "after"
        assert interrupted_in == "after"
        assert sys.modules["slow_module_for_ctrl_c"].DONE
        with pytest.raises(KeyboardInterrupt):  # outside an import: at once, as Python's own handler
            signal.raise_signal(signal.SIGINT)
            time.sleep(5)
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.modules.pop("slow_module_for_ctrl_c", None)


@pytest.mark.parametrize(
    "args, missing",
    [
        (["ab"], "Missing argument 'A'."),
        (["ab", "base"], "Missing argument 'B'."),
        (["compare"], "Missing argument 'REPORTS...'."),
    ],
)
def test_a_missing_argument_is_named_in_one_line(args, missing):
    """Before the fix `ab` with no variants printed `error: A: ` and nothing more."""
    from click.testing import CliRunner

    from appliance.cli import cli

    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {missing} (see puffer-bench {args[0]} --help)", result.output


def test_a_test_that_imports_the_command_line_in_its_body_passes_alone():
    """Importing ``appliance.cli`` installs its SIGINT handler. Run alone, a test whose body made that
    first import failed the suite's signal check at teardown, though it passed in the whole suite,
    where a test module had imported it before any test ran."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    test = "tests/test_docs.py::test_the_sweep_recipes_are_commands_the_cli_takes"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
