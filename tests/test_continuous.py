"""Box actions: observation normalization, clipping to the bounds, correlated exploration noise and
the per-task Gymnasium defaults (the learning itself: tests/test_learning.py, slow)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from appliance import vector
from appliance.config import resolve
from appliance.train import Trainer
from appliance.train.normalize import RunningNorm
from appliance.train.policy import Policy


def steer_config(*extra):
    return resolve(
        env="appliance.testing:Steer",
        overrides=[
            "--vec.backend", "serial", "--vec.num-envs", "4", "--train.device", "cpu",
            "--train.bptt-horizon", "8", "--train.minibatch-size", "32", "--policy.core", "mlp",
            "--policy.hidden-size", "16", *extra,
        ],
    )  # fmt: skip


def test_running_norm_merges_batches_as_one():
    norm = RunningNorm(3)
    x = torch.zeros(5, 3).uniform_(-4, 4)
    torch.testing.assert_close(norm(x), x.clamp(-10, 10))  # the identity before any update
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (n, 3)) for n in (7, 1, 50)]
    for b in batches:
        norm.update(torch.as_tensor(b))
    everything = np.concatenate(batches)
    np.testing.assert_allclose(norm.mean.numpy(), everything.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.var.numpy(), everything.var(0), rtol=1e-10)
    out = norm(torch.as_tensor(everything, dtype=torch.float32))
    np.testing.assert_allclose(out.mean(0).numpy(), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(0, unbiased=False).numpy(), 1, atol=1e-4)
    assert norm(torch.full((1, 3), 1e6)).max() == 10  # clamped


def test_obs_norm_is_on_for_box_actions_only_and_saved_with_the_weights():
    obs = spaces.Box(-1.0, 1.0, (3,), np.float32)
    box = Policy(obs, spaces.Box(-2.0, 2.0, (2,), np.float32), core="mlp", hidden_size=8)
    assert box.obs_norm is not None
    assert Policy(obs, spaces.Discrete(3), core="mlp", hidden_size=8).obs_norm is None
    assert Policy(obs, spaces.Discrete(3), core="mlp", hidden_size=8, obs_norm=True).obs_norm is not None
    box.update_obs_norm(torch.randn(4, 5, 3) * 3 + 1, torch.ones(4, 5))
    twin = Policy(obs, spaces.Box(-2.0, 2.0, (2,), np.float32), core="mlp", hidden_size=8)
    twin.load_state_dict(box.state_dict())  # checkpoints (and eval) carry the statistics
    x = torch.randn(6, 3)
    torch.testing.assert_close(twin.encode(x), box.encode(x))


def test_statistics_change_between_epochs_so_ratios_start_at_one():
    trainer = Trainer(steer_config(), vector.make_from_config(steer_config()))
    try:
        trainer.evaluate()
        trainer.train()
        assert trainer.policy.obs_norm.count == trainer.batch_size  # merged after the update
        trainer.evaluate()
        with torch.no_grad():
            out, values = trainer.policy.sequence(trainer.rollout.obs, trainer.rollout.initial_state)
            logprob, _ = trainer.policy.evaluate_actions(out, trainer.rollout.actions)
        torch.testing.assert_close(logprob, trainer.rollout.logprobs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(values, trainer.rollout.values, rtol=1e-5, atol=1e-5)
    finally:
        trainer.close()


def test_envs_get_actions_clipped_to_the_bounds_and_ppo_keeps_the_sample():
    trainer = Trainer(steer_config(), vector.make_from_config(steer_config()))
    try:
        with torch.no_grad():
            trainer.policy.log_std.fill_(1.5)  # std 4.5: most samples fall outside [-1, 1]
        trainer.evaluate()
        actions = trainer.rollout.actions
        assert (actions.abs() > 1).float().mean() > 0.5, "the rollout keeps the unclipped samples"
        with torch.no_grad():
            out, _ = trainer.policy.sequence(trainer.rollout.obs, trainer.rollout.initial_state)
            logprob, _ = trainer.policy.evaluate_actions(out, actions)
        torch.testing.assert_close(logprob, trainer.rollout.logprobs, rtol=1e-5, atol=1e-5)
        sent = [em.env.last_action for em in trainer.vec.group.envs]
        assert all(a is not None and np.all(np.abs(a) <= 1.0) for a in sent), sent
        last = actions[:, -1].reshape(-1).numpy()  # agent i wrote row i (as many rows as agents)
        np.testing.assert_allclose(np.concatenate(sent), np.clip(last, -1, 1), rtol=1e-6)
    finally:
        trainer.close()


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_exploration_noise_is_standard_normal_with_the_asked_correlation(rho):
    trainer = Trainer(steer_config("--train.noise-corr", str(rho)), vector.make_from_config(steer_config()))
    try:
        torch.manual_seed(0)
        ids, out = torch.arange(4), torch.zeros(4, 1)
        if rho == 0:
            assert trainer.box_noise.draw(ids, out) is None  # white: the Gaussian head samples itself
            return
        noise = torch.stack([trainer.box_noise.draw(ids, out) for _ in range(4000)])[100:, :, 0]
        assert abs(noise.std().item() - 1) < 0.1
        lag1 = torch.corrcoef(torch.stack([noise[:-1].reshape(-1), noise[1:].reshape(-1)]))[0, 1]
        assert abs(lag1.item() - rho) < 0.03
    finally:
        trainer.close()


def test_gymnasium_ids_take_their_tuned_yaml_and_profiles_still_apply():
    cfg = resolve(env="MountainCarContinuous-v0", profile="cpu")
    assert any(s.endswith("gymnasium/MountainCarContinuous-v0.yaml") for s in cfg.sources)
    assert cfg.policy.core == "mlp" and cfg.train.noise_corr == 0.9 and cfg.vec.num_envs == 256
    assert cfg.vec.backend == "multiprocessing"
    cfg = resolve(env="Pendulum-v1", overrides=["--train.gamma", "0.9"])
    assert cfg.train.gamma == 0.9 and cfg.train.optimizer == "adam"
    plain = resolve(env="MountainCar-v0")  # no YAML of its own: its family's (defaults/families/)
    assert plain.family.name == "classic" and plain.sources[-1].endswith("families/classic.yaml")
    acrobot = resolve(env="Acrobot-v1")  # its own YAML (rl-zoo's Acrobot values), no family layer
    assert acrobot.family.name is None and acrobot.train.optimizer == "adam"
    assert (acrobot.vec.num_envs, acrobot.train.minibatch_size, acrobot.policy.separate_value) == (
        16,
        64,
        True,
    )


def test_the_learn_suite_holds_both_tasks_and_waits_out_mountain_cars_first_episodes():
    from appliance.bench.suite import definition as suite
    from appliance.errors import ConfigError

    items = {item["env"]: item for item in suite.load("learn")[0]["time_to_score"]}
    assert items["Pendulum-v1"]["target"] == -200 and items["MountainCarContinuous-v0"]["target"] == 90
    assert items["MountainCarContinuous-v0"]["min_epochs"] * 64 >= 999  # its first episodes have all ended
    bad = {
        "name": "x",
        "time_to_score": [{"env": "squared", "metric": "perf", "target": 1, "max_timesteps": 9}],
    }
    bad["time_to_score"][0]["min_epochs"] = 0
    with pytest.raises(ConfigError, match=r"min_epochs: must be a positive integer"):
        suite.validate(bad)


def test_a_learn_item_whose_module_is_missing_is_skipped_and_said_so():
    """The learn suite's Hopper-v5 and simple_spread entries need mujoco and mpe2: where one is not
    installed the suite still loads and its runner skips that item with the module named."""
    from appliance.bench.suite import definition as suite
    from appliance.bench.suite.steps import SuiteRunner
    from appliance.errors import ConfigError

    items = {item["env"]: item for item in suite.load("learn")[0]["time_to_score"]}
    assert items["Hopper-v5"]["requires"] == ["mujoco"] and items["Hopper-v5"]["target"] == 1000
    assert items["mpe2.simple_spread_v3:parallel_env"]["requires"] == ["mpe2"]
    item = {"env": "squared", "metric": "perf", "target": 1, "max_timesteps": 9}
    data = suite.validate(
        {
            "name": "t",
            "time_to_score": [{**item, "requires": ["no_such_module_here"], "label": "other"}, item],
        }
    )

    class Report:
        def __init__(self):
            self.data = {"skipped": [], "fingerprint": {}, "analysis": {}, "seed": 0}

        def skip(self, what, why):
            self.data["skipped"].append({"what": what, "why": why})

    report = Report()
    runner = SuiteRunner(data, "cpu", report, 1)
    assert [s.label for s in runner.steps] == ["time to perf >= 1 on squared"]
    assert report.data["skipped"] == [
        {"what": "time to perf >= 1 on squared (other)", "why": "needs no_such_module_here (not installed)"}
    ]
    with pytest.raises(ConfigError, match=r"requires: must be a list of module names"):
        suite.validate({"name": "t", "time_to_score": [{**item, "requires": "mujoco"}]})


def test_time_to_score_items_on_one_env_keep_their_own_metrics(monkeypatch):
    """Two time_to_score items for one env, metric and target (a suite's variants) are named by their
    labels, so the second does not replace the first's metrics and curves in the report; without
    labels the suite is refused, naming both items."""
    from appliance.bench.report.schema import Report
    from appliance.bench.suite import definition as suite
    from appliance.bench.suite import training
    from appliance.bench.suite.steps import SuiteRunner
    from appliance.errors import ConfigError

    item = {"env": "squared", "metric": "perf", "target": 1, "max_timesteps": 9, "repeats": 1}
    with pytest.raises(ConfigError, match=r"time_to_score\[1\]: .*as time_to_score\[0\] does; give each"):
        suite.validate({"name": "t", "time_to_score": [item, {**item, "overrides": {"train.seed": 3}}]})
    with pytest.raises(ConfigError, match=r"label: must be a non-empty name without '/'"):
        suite.validate({"name": "t", "time_to_score": [{**item, "label": "a/b"}]})

    seen = []

    def fake(cfg, metric, target, max_timesteps, min_epochs=1):
        seen.append(cfg.train.bptt_horizon)
        steps = float(100 * cfg.train.bptt_horizon)
        return {
            "seconds": 1.0,
            "steps": steps,
            "final": 1.0,
            "reached": True,
            "last": 1.0,
            "curve": {"steps": [steps], "seconds": [1.0], "score": [1.0]},
        }

    monkeypatch.setattr(training, "time_to_score", fake)
    data = suite.validate(
        {
            "name": "t",
            "time_to_score": [item, {**item, "label": "h8", "overrides": {"train.bptt_horizon": 8}}],
        }
    )
    report = Report({"name": "t"}, {"name": "cpu"}, {}, {}, seed=0, repeats=1)
    runner = SuiteRunner(data, "cpu", report, 1)
    assert [s.label for s in runner.steps] == [
        "time to perf >= 1 on squared",
        "time to perf >= 1 on squared (h8)",
    ]
    for step in runner.steps:
        step.run()
    metrics = report.data["metrics"]
    default = metrics["time_to_score/squared/perf>=1/steps"]["samples"]
    assert default == [100.0 * seen[0]] and seen[1] == 8
    assert metrics["time_to_score/squared/h8/perf>=1/steps"]["samples"] == [800.0]
    assert metrics["time_to_score/squared/h8/perf>=1/steps"]["labels"]["variant"] == "h8"
    assert set(report.data["analysis"]["learning_curves"]) == {"squared", "squared/h8"}
