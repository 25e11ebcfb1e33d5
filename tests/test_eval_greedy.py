"""`eval --greedy`: the policy's most likely action (argmax per head, the mean of a Box) instead of
a sample, the deterministic evaluation SB3 and CleanRL users expect."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from click.testing import CliRunner
from gymnasium import spaces

from appliance.cli import cli
from appliance.train.policy import Policy


def test_mode_is_the_argmax_of_each_head_and_the_mean_of_a_box():
    out = torch.tensor([[0.1, 2.0, -1.0, 0.5, 0.4], [3.0, 0.0, 0.0, -2.0, 1.0]])
    multi = SimpleNamespace(nvec=[3, 2], action_space=spaces.MultiDiscrete([3, 2]))
    assert Policy.mode(multi, out).tolist() == [[1, 0], [0, 1]]
    one = SimpleNamespace(nvec=[5], action_space=spaces.Discrete(5))
    assert Policy.mode(one, out).tolist() == [1, 0]  # shaped as sample's: one index per row
    box = SimpleNamespace(nvec=None, action_space=spaces.Box(-1, 1, (5,)))
    assert torch.equal(Policy.mode(box, out), out)


def test_eval_greedy_plays_a_trained_run(tmp_path):
    common = ["--vec.num-envs", "8", "--train.batch-size", "256", "--train.minibatch-size", "128",
              "--train.bptt-horizon", "16", "--policy.hidden-size", "32", "--train.data-dir", str(tmp_path)]  # fmt: skip
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["train", "squared", "--no-dashboard", "--train.total-timesteps", "256", "--run-id", "g", *common],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["eval", "squared", "--greedy", "--episodes", "2", *common])
    assert result.exit_code == 0, result.output
    assert "mean over 2 episodes" in result.output
