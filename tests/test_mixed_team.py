"""Mixed-team PettingZoo envs (issue 63 part 3): agents whose spaces differ share one policy through
padded observations with a one-hot of their kind, and `train` says so (appliance/emulation/teams.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from appliance import vector
from appliance.config import resolve
from appliance.emulation import emulate
from appliance.emulation.teams import MixedTeam
from appliance.errors import ConfigError
from appliance.testing import Hunt
from appliance.train import Trainer, loop, session


def test_a_mixed_team_gets_padded_rows_with_its_kind():
    em = emulate(Hunt(hunters=2))
    try:
        assert em.observation_space.shape == (6,) and em.action_space == spaces.Discrete(3)
        obs, mask = np.zeros((3, 6), np.float32), np.zeros(3, bool)
        em.reset(0, obs, mask)
        assert mask.all()
        assert (obs[:2, 4:] == [1, 0]).all() and (obs[2, 4:] == [0, 1]).all()  # the kind's one-hot
        assert obs[2, 3] == 0 and (obs[:, :3] != 0).all()  # the runner's 3 values, padded to 4
        rewards, terms, truncs = np.zeros(3, np.float32), np.zeros(3, bool), np.zeros(3, bool)
        # the runner has 2 actions: the policy's 2 folds to 0, 3 does not exist; Hunt asserts it got a valid one
        em.step(np.array([0, 1, 2], np.int32), obs, rewards, terms, truncs, mask)
        assert rewards.tolist() == [1, 0, 0]
        em.step(np.array([0, 0, 1], np.int32), obs, rewards, terms, truncs, mask)
        assert rewards.tolist() == [1, 1, 1]
        infos = [em.step(np.array([0, 0, 1], np.int32), obs, rewards, terms, truncs, mask) for _ in range(6)]
        assert (
            infos[:5] == [None] * 5
        )  # Hunt's episodes last 8 steps; each kind's mean return beside the team's
        assert infos[5] == {
            "episode_return": 22.0,
            "episode_length": 8,
            "hunter_return": 7.5,
            "runner_return": 7.0,
        }
    finally:
        em.close()


def test_box_actions_of_different_sizes_share_the_widest_and_others_are_refused():
    obs = {"a": spaces.Box(-1, 1, (2,)), "b": spaces.Box(-1, 1, (2,))}
    team = MixedTeam("env", ["a", "b"], obs, {"a": spaces.Box(-1, 1, (2,)), "b": spaces.Box(-2, 2, (3,))})
    assert team.action_space == spaces.Box(np.array([-2, -2, -2]), np.array([2, 2, 2]), (3,), np.float32)
    assert team.action(0, np.array([0.5, -0.5, 0.9], np.float32)).tolist() == [0.5, -0.5]
    assert team.observation_space.shape == (2 + 2,)  # the same observations, two kinds by their actions
    with pytest.raises(ConfigError, match="action spaces differ .*all Discrete or all flat Box"):
        MixedTeam("env", ["a", "b"], obs, {"a": spaces.Discrete(2), "b": spaces.Box(-1, 1, (2,))})


def test_a_mixed_team_trains_one_policy_that_tells_its_kinds_apart():
    """Hunt's observations are noise: a policy blind to the kind scores at most 2 of 3 a step (16 an
    episode of 8); the kinds' one-hot lets it score 3 (24). Measured: seeds 0-4 reached a 3-epoch mean
    of 20 at 1.9-2.5 K agent-steps; the test allows 12 K."""
    cfg = resolve(
        env="appliance.testing:Hunt",
        overrides=[
            "--train.device", "cpu", "--vec.num-envs", "8", "--vec.backend", "serial",
            "--train.bptt-horizon", "8", "--train.minibatch-size", "96", "--policy.core", "mlp",
            "--policy.hidden-size", "32", "--train.learning-rate", "0.003",
        ],
    )  # fmt: skip
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        lines = session.defaults_chosen(cfg, trainer)
        assert any(line.startswith("mixed team: 2 kinds of agent") for line in lines), lines
        stop = loop.Stop(total_timesteps=12_000, target=("episode_return", 20), window=3, min_epochs=5)
        result = loop.run(trainer, stop)
    finally:
        trainer.close()
    assert result.reached, result.history[-3:]
