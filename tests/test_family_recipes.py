"""The pieces the families' recipes are made of (issue 63 parts 1 and 2): minibatches of single
transitions for a core without state (``train.minibatch_unit``), advantages computed once an epoch
(``train.recompute_advantages false``), a critic with a trunk of its own (``policy.separate_value``)
and tanh/relu networks (``policy.encoder_activation``)."""

from __future__ import annotations

import pytest
import torch
from conftest import small_config
from gymnasium import spaces

from appliance import vector
from appliance.errors import ConfigError
from appliance.train import Trainer, advantage
from appliance.train.policy import Policy


def _trainer(*extra: str) -> Trainer:
    cfg = small_config("squared", "--policy.core", "mlp", *extra)
    return Trainer(cfg, vector.make_from_config(cfg))


@pytest.mark.parametrize(
    ("unit", "core", "alpha", "want"),
    [
        ("auto", "mlp", "0", True),  # uniform draws over a core without state: CleanRL's shuffled steps
        ("auto", "mlp", "0.8", False),  # prioritized segments, as PufferLib
        ("auto", "lstm", "0", False),  # a recurrent core trains on whole segments
        ("segments", "mlp", "0", False),
        ("transitions", "mlp", "0.8", True),
    ],
)
def test_the_minibatch_unit_is_transitions_only_for_a_core_without_state(unit, core, alpha, want):
    trainer = _trainer("--policy.core", core, "--train.prio-alpha", alpha, "--train.minibatch-unit", unit)
    try:
        assert trainer.transitions is want
        minibatch = trainer.hp.minibatch_size
        assert trainer.mb_segments == (minibatch if want else minibatch // trainer.horizon)
        assert trainer.minibatches == trainer.hp.update_epochs * trainer.batch_size // minibatch
    finally:
        trainer.close()


def test_transitions_are_refused_for_a_recurrent_core_in_one_line():
    with pytest.raises(ConfigError, match="minibatch_unit transitions needs a core without state"):
        _trainer("--policy.core", "lstm", "--train.minibatch-unit", "transitions")


def test_a_transition_minibatch_draws_single_steps_from_many_segments(monkeypatch):
    """Each minibatch row is one step (a [64, 1] slice of the flattened rollout), its steps come from
    more segments than a segment minibatch could hold, and the values written back land in the
    rollout's own [segments, horizon] buffer."""
    seen = []
    real = Trainer._minibatch

    def spy(self, idx, norm_adv, returns):
        seen.append((idx.clone(), norm_adv.shape))
        return real(self, idx, norm_adv, returns)

    monkeypatch.setattr(Trainer, "_minibatch", spy)
    trainer = _trainer("--train.prio-alpha", "0", "--train.update-epochs", "1", "--vec.num-envs", "32")
    try:
        trainer.evaluate()
        before = trainer.rollout.values.clone()
        trainer.train()
        horizon, segments = trainer.horizon, trainer.segments
        assert seen and all(shape == (64, 1) for _, shape in seen)
        assert (segments, len(seen)) == (32, 4)  # a batch of 256 steps, minibatches of 64
        idx = torch.cat([i for i, _ in seen])
        assert int(idx.max()) < segments * horizon
        # a segment minibatch would be 8 whole segments; single steps come from more of them
        assert len(set((seen[0][0] // horizon).tolist())) > 64 // horizon
        assert not torch.equal(trainer.rollout.values, before)  # written back through the views
    finally:
        trainer.close()


def test_advantages_once_an_epoch_are_gae_of_the_rollout_values():
    """recompute_advantages false: every minibatch reads the GAE of the rollout's own values (ratios
    1), and the rollout's values stay what the rollout wrote (the value loss's old values)."""
    trainer = _trainer("--train.prio-alpha", "0", "--train.recompute-advantages", "false")
    try:
        trainer.evaluate()
        b = trainer.rollout
        values = b.values.clone()
        want = advantage.advantage(
            values, b.rewards, b.dones, torch.ones_like(values), trainer.hp.gamma, trainer.hp.gae_lambda
        )
        trainer.train()
        assert torch.equal(b.values, values)
        torch.testing.assert_close(trainer.epoch_advantages, want, rtol=1e-4, atol=1e-5)
    finally:
        trainer.close()
    recomputing = _trainer("--train.prio-alpha", "0")
    try:
        assert recomputing.epoch_advantages is None
    finally:
        recomputing.close()


def test_a_separate_critic_has_its_own_trunk_and_the_actor_none_of_its_gradient():
    obs, act = spaces.Box(-1, 1, (5,)), spaces.Box(-1, 1, (2,))
    policy = Policy(obs, act, core="mlp", hidden_size=16, encoder_activation="tanh", separate_value=True)
    assert isinstance(policy.value_core[1], torch.nn.Tanh) and isinstance(policy.core[1], torch.nn.Tanh)
    x = torch.randn(4, 3, 5)
    out, value = policy.sequence(x, ())
    assert out.shape == (4, 3, 2) and value.shape == (4, 3)
    value.sum().backward()
    assert all(p.grad is None for p in (*policy.encoder.parameters(), *policy.core.parameters()))
    assert all(p.grad is not None for p in policy.value_encoder.parameters())
    _, step_value, _ = policy.step(x[:, 0], ())
    torch.testing.assert_close(step_value, value[:, 0])
    shared = Policy(obs, act, core="mlp", hidden_size=16)
    assert shared.value_encoder is None and isinstance(shared.core[1], torch.nn.GELU)
    assert sum(p.numel() for p in policy.parameters()) > sum(p.numel() for p in shared.parameters())


def test_a_separate_critic_needs_the_mlp_core():
    with pytest.raises(ConfigError, match="separate_value needs the mlp core"):
        Policy(spaces.Box(-1, 1, (5,)), spaces.Discrete(3), core="lstm", hidden_size=16, separate_value=True)


def test_the_log_std_starts_at_policy_log_std_init():
    """rl-zoo's MuJoCo recipes start the Box policy's std at exp(-2): ``policy.log_std_init`` reaches
    the policy through make_policy; its default 0 (a std of 1) builds the weights it built before."""
    from types import SimpleNamespace

    from appliance.train.make import make_policy

    vec = SimpleNamespace(
        single_observation_space=spaces.Box(-1, 1, (5,)), single_action_space=spaces.Box(-1, 1, (3,))
    )
    policy = make_policy(small_config("squared", "--policy.core", "mlp", "--policy.log-std-init", "-2"), vec)
    assert policy.log_std.tolist() == [-2.0] * 3
    std = policy.distribution(torch.zeros(1, 3)).stddev
    torch.testing.assert_close(std, torch.full((1, 3), float(torch.tensor(-2.0).exp())))
    assert make_policy(small_config("squared", "--policy.core", "mlp"), vec).log_std.tolist() == [0.0] * 3
    with pytest.raises(ConfigError, match="log-std-init"):
        small_config("squared", "--policy.log-std-init", "nan")
