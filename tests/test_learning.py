"""Learning actually works, on the CPU, within a few minutes on 2 cores (all `slow`; make test runs them).

Each test trains with settings tuned for small CPU runs (the defaults target large GPU batches) and
checks the end result against a random policy measured in the same test, or against the env's bar.
"""

from __future__ import annotations

import numpy as np
import pytest

from appliance import vector
from appliance.bench.envsps import random_actions
from appliance.config import resolve
from appliance.train import Trainer, loop
from appliance.train.loop import Stop
from appliance.vector import native

CPU = [
    "--train.device",
    "cpu",
    "--policy.core",
    "mlp",
    "--train.optimizer",
    "adam",
    "--train.prio-alpha",
    "0",
]


def train(env, overrides, target=None, window=5, min_epochs=1, vec=None):
    """Env stats of every epoch, trained through the one training loop until the steps run out or
    the mean of ``target = (metric, value)`` over ``window`` epochs reaches the value."""
    cfg = resolve(env=env, overrides=[*CPU, *overrides])
    trainer = Trainer(cfg, vec or vector.make_from_config(cfg))
    stop = Stop(
        total_timesteps=cfg.train.total_timesteps, target=target, window=window, min_epochs=min_epochs
    )
    try:
        return loop.run(trainer, stop).history
    finally:
        trainer.close()


def recent(history, key, epochs=5):
    """Mean of ``key`` over the last epochs that ended episodes. Early epochs only see the episodes that
    end fastest (for squared: the successes), so callers also require enough epochs before judging."""
    values = [e[key] for e in history if key in e][-epochs:]
    return float(np.mean(values)) if values else float("nan")


def random_score(env, key, steps=3000, num_envs=64):
    params = dict(resolve(env=env).env)
    with native.make(env, num_envs=num_envs, seed=0, **params) as vec:
        actions = random_actions(vec, count=64)
        vec.reset(0)
        for i in range(steps):
            vec.step(actions[i % 64])
        return vec.log()[key]


@pytest.mark.slow
def test_cartpole_reaches_475():
    history = train(
        "CartPole-v1",
        [
            "--vec.backend",
            "serial",
            "--vec.num-envs",
            "8",
            "--train.total-timesteps",
            "250000",
            "--train.bptt-horizon",
            "128",
            "--train.minibatch-size",
            "256",
            "--train.learning-rate",
            "0.001",
            "--train.gamma",
            "0.99",
            "--train.gae-lambda",
            "0.95",
            "--train.update-epochs",
            "4",
            "--train.vf-clip-coef",
            "100",
            "--train.ent-coef",
            "0",
            "--train.vf-coef",
            "0.5",
            "--train.max-grad-norm",
            "0.5",
        ],
        target=("episode_return", 475),
        window=3,
        min_epochs=10,
    )
    assert recent(history, "episode_return", 3) >= 475


SQUARED = [
    "--vec.num-envs",
    "256",
    "--train.bptt-horizon",
    "32",
    "--train.minibatch-size",
    "2048",
    "--train.max-minibatch-size",
    "4096",
    "--train.learning-rate",
    "0.01",
    "--train.update-epochs",
    "2",
    "--train.ent-coef",
    "0.01",
    "--train.gamma",
    "0.9",
]


@pytest.mark.slow
def test_squared_learns_to_reach_the_target():
    baseline = random_score("squared", "perf")
    history = train(
        "squared",
        [*SQUARED, "--train.total-timesteps", "2000000"],
        target=("perf", 0.92),
        min_epochs=20,
    )
    assert len(history) >= 20 and recent(history, "perf") >= 0.9 > baseline + 0.5


@pytest.mark.slow
def test_target_reward_rises_well_above_random():
    baseline = random_score("target", "episode_return", steps=1000)
    history = train(
        "target",
        [
            "--vec.num-envs",
            "32",
            "--train.bptt-horizon",
            "16",
            "--train.minibatch-size",
            "1024",
            "--train.learning-rate",
            "0.003",
            "--train.update-epochs",
            "2",
            "--train.ent-coef",
            "0.01",
            "--train.total-timesteps",
            "600000",
        ],
    )
    final = recent(history, "episode_return")
    assert final > baseline + 1.0, (final, baseline)


@pytest.mark.slow
def test_breakout_scores_clearly_above_random():
    baseline = random_score("breakout", "score")
    history = train(
        "breakout",
        [
            "--vec.num-envs",
            "256",
            "--train.bptt-horizon",
            "64",
            "--train.minibatch-size",
            "4096",
            "--train.max-minibatch-size",
            "4096",
            "--train.learning-rate",
            "0.01",
            "--train.update-epochs",
            "2",
            "--train.ent-coef",
            "0.01",
            "--train.gamma",
            "0.99",
            "--train.gae-lambda",
            "0.95",
            "--train.total-timesteps",
            "4000000",
        ],
        target=("score", 1.4 * baseline),
        min_epochs=20,
    )
    assert len(history) >= 20 and recent(history, "score") >= 1.4 * baseline, baseline
