"""One writer per record (docs/reliability.md): every epoch's metrics record is written once, whatever
ends the run: its steps run out (``train.total_timesteps``, ``--stop-steps``), SIGINT or SIGTERM, or
the ranks of ``--nproc`` stop together. The end of a run used to write the last epoch's record again
(same epoch and step, a new sps and uptime) whenever the loop had just written it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import conftest
import pytest
from click.testing import CliRunner

from appliance import vector
from appliance.cli import cli
from appliance.train import Trainer, loop

EPOCH_STEPS = 64  # conftest.SMALL: 8 envs x horizon 8


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _once_each(run_dir):
    records = _records(run_dir)
    twice = [k for k, n in Counter((r["epoch"], r["global_step"]) for r in records).items() if n > 1]
    assert records and not twice, f"records written twice (epoch, step): {twice}"
    return records


@pytest.fixture
def stop_signals_handled():
    """A stop signal the run does not handle fails the test instead of ending pytest."""

    def unhandled(signum, frame):
        raise AssertionError(f"{signal.Signals(signum).name} was not handled")

    previous = {s: signal.signal(s, unhandled) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for s, handler in previous.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("way", ["epochs", "steps", "steps-every-record", "SIGINT", "SIGTERM", "rollout-cut"])
def test_the_last_record_is_written_once_on_every_way_out(tmp_path, way, stop_signals_handled):
    cfg = conftest.small_config("squared", "--policy.hidden-size", "32")
    trainer = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path)
    stop, every, hooks = loop.Stop(epochs=50), 1.0, []
    if way == "epochs":
        stop = loop.Stop(epochs=1)  # its one epoch is recorded in the loop; the end must not again
    elif way == "steps":
        stop = loop.Stop(total_timesteps=3 * EPOCH_STEPS)  # what --stop-steps gives the loop
    elif way == "steps-every-record":
        stop, every = loop.Stop(total_timesteps=3 * EPOCH_STEPS), 0.0
    elif way in ("SIGINT", "SIGTERM"):
        signum = getattr(signal, way)

        def stop_at_two(t):  # after epoch 2's record: a record-per-second run wrote it in the loop
            if t.epoch == 2:
                os.kill(os.getpid(), signum)

        every, hooks = 0.0, [stop_at_two]
    else:  # a signal in the next rollout, which is dropped: the last record stays epoch 1's
        real_act, calls = trainer.act, [0]

        def act(*args, **kwargs):
            calls[0] += 1
            if calls[0] == 12:  # inside the second rollout (8 steps each)
                raise loop.Interrupted(signal.SIGTERM)
            return real_act(*args, **kwargs)

        trainer.act = act
    seen = []
    try:
        result = loop.run(
            trainer, stop, metrics_every=every, on_epoch=hooks, on_metrics=[seen.append], interruptible=True
        )
    finally:
        trainer.close()
    records = _once_each(tmp_path)
    assert records[-1]["epoch"] == trainer.epoch and records[-1]["global_step"] == trainer.global_step
    assert [(r["epoch"], r["global_step"]) for r in seen] == [(r["epoch"], r["global_step"]) for r in records]
    if way in ("SIGINT", "SIGTERM"):
        assert result.signal == way and trainer.epoch == 2
    if way == "rollout-cut":
        assert result.reason == "interrupted" and records[-1]["epoch"] == 1


def test_stop_steps_on_the_command_line_writes_each_record_once(tmp_path):
    data = tmp_path / "exp"
    result = CliRunner().invoke(
        cli,
        ["train", "squared", "--no-dashboard", *conftest.SMALL, "--policy.hidden-size", "32",
         "--train.data-dir", str(data), "--run-id", "r1", "--stop-steps", str(EPOCH_STEPS)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert [r["epoch"] for r in _once_each(data / "r1")] == [1]


@pytest.mark.slow
def test_nproc_ranks_write_each_record_once(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "appliance.cli", "train", "squared", "--nproc", "2", "--no-dashboard",
         *conftest.SMALL, "--policy.hidden-size", "32", "--train.data-dir", str(tmp_path), "--run-id", "dp",
         "--train.total-timesteps", str(4 * EPOCH_STEPS)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    records = _once_each(tmp_path / "dp")
    assert records[-1]["global_step"] >= 4 * EPOCH_STEPS


def test_a_resumed_run_sets_aside_the_records_of_the_epochs_it_trains_again(tmp_path):
    """Killed between two checkpoints, a run wrote records of epochs its checkpoint does not hold; the
    resume trains them again and writes them again: the old ones are set aside, each epoch keeps one."""
    data = tmp_path / "exp"

    def train(*extra):
        return CliRunner().invoke(
            cli,
            ["train", "squared", "--no-dashboard", *conftest.SMALL, "--policy.hidden-size", "32",
             "--train.data-dir", str(data), *extra],
        )  # fmt: skip

    assert train("--run-id", "r1", "--train.total-timesteps", str(2 * EPOCH_STEPS)).exit_code == 0
    run = data / "r1"
    records = _once_each(run)
    last = records[-1]
    # what a kill after epoch 3's record and before its checkpoint leaves: a record past model.pt's epoch
    ghost = {**last, "epoch": last["epoch"] + 1, "global_step": last["global_step"] + EPOCH_STEPS, "sps": -1}
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps(ghost) + "\n")
    result = train("--resume", "latest", "--train.total-timesteps", str(4 * EPOCH_STEPS))
    assert result.exit_code == 0, result.output
    assert "1 metrics record of epochs after the checkpoint's (2) set aside in" in result.output
    records = _once_each(run)
    assert [r["epoch"] for r in records] == [1, 2, 3, 4] and all(r["sps"] != -1 for r in records)
    assert json.loads((run / "metrics.jsonl.superseded").read_text()) == ghost
