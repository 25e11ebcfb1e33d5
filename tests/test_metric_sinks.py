"""The TensorBoard and W&B sinks of ``puffer-bench train``: events readable, closed on every exit,
W&B's project and run name from the config and run id, its files in the run folder (offline)."""

from __future__ import annotations

import pytest
from conftest import small_config

from appliance.train import loop, session


def config(tmp_path, *extra):
    return small_config(
        "squared", "--train.total-timesteps", "128", "--train.data-dir", str(tmp_path), *extra
    )


def train(cfg, **options):
    return list(session.train(cfg, session.Options(run_id="r1", **options)))


@pytest.fixture
def closes(monkeypatch):
    """Count SummaryWriter.close calls (the real close still runs)."""
    pytest.importorskip(
        "tensorboard", reason="--tensorboard needs tensorboard: pip install 'puffer-bench[logging]'"
    )
    from torch.utils.tensorboard import SummaryWriter

    calls = []
    real = SummaryWriter.close

    def close(self):
        calls.append(self.log_dir)
        real(self)

    monkeypatch.setattr(SummaryWriter, "close", close)
    return calls


def test_tensorboard_events_are_readable_and_the_writer_closed(tmp_path, closes):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(config(tmp_path), tensorboard=True)
    run_dir = tmp_path / "r1"
    assert closes == [str(run_dir)]
    events = EventAccumulator(str(run_dir))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "loss/policy_loss" in tags and "sps" in tags
    losses = events.Scalars("loss/policy_loss")
    assert losses and losses[-1].step == 128  # logged at the agent-step it was measured


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_the_tensorboard_writer_is_closed_when_training_fails(tmp_path, closes, monkeypatch, error):
    def fail(*_, **__):
        raise error

    monkeypatch.setattr(loop, "run", fail)
    with pytest.raises((RuntimeError, loop.Stopped)):
        train(config(tmp_path), tensorboard=True)
    assert len(closes) == 1


def test_the_tensorboard_writer_is_closed_when_the_env_cannot_be_made(tmp_path, closes, monkeypatch):
    from appliance import vector

    def fail(*_, **__):
        raise RuntimeError("no env")

    monkeypatch.setattr(vector, "make_from_config", fail)
    with pytest.raises(RuntimeError, match="no env"):
        train(config(tmp_path), tensorboard=True)
    assert len(closes) == 1


def test_wandb_project_and_run_name_come_from_the_config_and_run_id(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb", reason="--wandb needs wandb: pip install 'puffer-bench[logging]'")
    monkeypatch.setenv("WANDB_MODE", "offline")  # no network, no account
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_DIR", "WANDB_PROJECT", "WANDB_NAME", "WANDB_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    seen = {}
    real_init = wandb.init

    def init(*args, **kwargs):
        run = real_init(*args, **kwargs)
        seen.update(project=run.project, name=run.name, id=run.id, dir=run.dir)
        real_finish = run.finish

        def finish(*a, **k):
            seen["finished"] = True
            return real_finish(*a, **k)

        run.finish = finish
        return run

    monkeypatch.setattr(wandb, "init", init)
    try:
        train(config(tmp_path, "--train.wandb-project", "my-project"), wandb=True)
    finally:
        wandb.teardown()  # W&B's service process, which outlives runs, goes with this test
    run_dir = tmp_path / "r1"
    assert seen["project"] == "my-project" and seen["name"] == "r1" and seen["id"] == "r1"
    assert seen["finished"]
    offline = list((run_dir / "wandb").glob("offline-run-*-r1"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb")), "W&B's files are in the run folder"
    assert str(offline[0]) in seen["dir"]
