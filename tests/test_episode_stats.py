"""Episode statistics that are true (issue 63): an epoch that ended no episode reports none, a
metrics record counts the episodes of its window (``env/n``, 0 when none) and never repeats an
earlier record's values as fresh, and the dashboard says when what it shows is old."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from appliance import vector
from appliance.config import resolve
from appliance.train import Trainer, loop
from appliance.train.dashboard import Reporter
from appliance.train.episodes import Episodes


def fixed_length_config(length: int = 40):
    """2 CountingEnvs whose episodes all last ``length`` steps, epochs of 2 x 8 agent-steps: both
    envs end an episode together every ``length / 8`` epochs, as HalfCheetah's 64 envs do."""
    return resolve(
        env="appliance.testing:CountingEnv",
        overrides=[
            "--env.length", str(length), "--vec.num-envs", "2", "--vec.backend", "serial",
            "--train.device", "cpu", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
            "--policy.core", "mlp", "--policy.hidden-size", "16",
        ],
    )  # fmt: skip


def test_an_epoch_without_episodes_reports_none_and_records_count_their_own(tmp_path):
    cfg = fixed_length_config(40)
    trainer = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path)
    records = []
    try:
        result = loop.run(trainer, loop.Stop(epochs=12), on_metrics=[records.append], metrics_every=-1)
    finally:
        trainer.close()
    # the rollouts' 41st and 81st observations (epochs 6 and 11: the first row is reset()'s) end 2
    # episodes of 40 steps each; the other epochs none
    ended = [e.get("n", 0) for e in result.history]
    assert ended == [0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0], result.history
    assert [e for e in result.history if not e.get("n")] == [{}] * 10  # no earlier values again
    assert result.history[5]["episode_length"] == 40
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[: len(records)] == [json.loads(json.dumps(r)) for r in records]
    for r in records:
        env = {k: v for k, v in r.items() if k.startswith("env/")}
        assert "env/n" in env, r
        if env["env/n"] == 0:
            assert env == {"env/n": 0.0}, r  # nothing stale beside a zero count
    assert sum(r["env/n"] for r in records) == 4  # each episode counted once, whatever the cadence
    assert [r["env/n"] for r in records[:12]] == ended


def test_a_record_pools_the_epochs_since_the_one_before():
    episodes = Episodes()
    episodes.note(1, {"episode_return": 10.0, "n": 1.0})
    episodes.note(2, {})
    episodes.note(3, {"episode_return": 4.0, "n": 3.0})
    episodes.note(3, {"episode_return": 2.0, "n": 3.0})  # ranks merged: the epoch's stats replaced
    assert episodes.take_window() == {"episode_return": pytest.approx(16.0 / 4), "n": 4.0}
    assert episodes.take_window() == {"n": 0.0}


def test_episode_stats_are_empty_when_no_episode_ended():
    episodes = Episodes()
    vec = SimpleNamespace()  # no log(): the emulated envs' infos
    episodes.collect([{"episode_return": 3.0, "episode_length": 3, "env": 0}])
    assert episodes.stats(vec) == {"episode_return": 3.0, "episode_length": 3.0, "n": 1.0}
    assert episodes.stats(vec) == {}


def test_the_dashboard_says_when_its_episode_stats_are_old():
    trainer = SimpleNamespace(
        policy=torch.nn.Linear(1, 1), epoch=7, global_step=7000, sps=100.0, losses={},
        env_stats={}, last_env_stats={"episode_return": 12.5, "n": 2.0}, last_env_step=5000,
        timings=SimpleNamespace(buffers=[]),
    )  # fmt: skip
    line = Reporter(trainer, "HalfCheetah-v5", live=False).line()
    assert line.endswith("| episode_return=12.5 (no episode ended since step 5,000)"), line
    trainer.env_stats = {"episode_return": 13.0, "n": 1.0}
    assert Reporter(trainer, "HalfCheetah-v5", live=False).line().endswith("| episode_return=13")


def test_time_limited_episodes_are_staggered_at_start():
    """Pendulum's episodes always last its 200-step limit: unstaggered, 8 envs would end theirs
    together at steps 200, 400, ...; env i's first episode is cut (and not reported) after 200 x
    frac(i x golden ratio) steps, so the envs end their first whole episodes at 8 different steps."""
    vec = vector.make("Pendulum-v1", backend="serial", num_envs=8)
    first: dict[int, int] = {}  # env -> the step its first whole episode ended
    try:
        vec.async_reset(0)
        for step in range(401):
            infos = vec.recv()[4]
            for info in infos:
                assert info["episode_length"] == 200  # whole episodes only: the cut ones are not reported
                first.setdefault(info["env"], step)
            vec.send(np.zeros((8, 1), np.float32))
    finally:
        vec.close()
    assert sorted(first) == list(range(8)) and first[0] == 200  # env 0 uncut
    assert len(set(first.values())) == 8, first
