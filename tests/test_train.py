"""Trainer pieces: advantages against plain loops, recurrent cores in both forms, invariants, learning."""

from __future__ import annotations

import copy
import importlib
import warnings
from contextlib import nullcontext

import numpy as np
import pytest
import torch
import yaml
from conftest import fake_cpu_bf16
from conftest import small_config as shared_small_config
from gymnasium import spaces

from appliance import vector
from appliance.config import resolve
from appliance.errors import ConfigError, DeviceError
from appliance.gpu import kernels
from appliance.testing import BusyEnv
from appliance.train import Trainer, TrainingError, advantage, losses
from appliance.train.advantage import advantage as compute_advantages
from appliance.train.cores import MinGRU
from appliance.train.make import make_policy, resolve_device
from appliance.train.policy import Policy


def gae_reference(values, rewards, dones, gamma, lam):
    """Textbook GAE in plain Python, in the buffer convention (reward/done at t+1 belong to action t)."""
    S, T = values.shape
    adv = np.zeros((S, T))
    for s in range(S):
        last = 0.0
        for t in range(T - 2, -1, -1):
            nonterminal = 1.0 - dones[s, t + 1]
            delta = rewards[s, t + 1] + gamma * values[s, t + 1] * nonterminal - values[s, t]
            last = delta + gamma * lam * nonterminal * last
            adv[s, t] = last
    return adv


def vtrace_reference(values, rewards, dones, ratios, gamma, lam, rho_clip, c_clip, rho_on="td_error"):
    """V-trace's advantage, loops over plain floats; ``rho_on="reward"``: PufferLib 4.0's CPU loop
    (``puff_advantage_cpu`` in its bindings_cpu.cpp), the clipped ratio on the reward alone."""
    S, T = values.shape
    adv = np.zeros((S, T))
    for s in range(S):
        last = 0.0
        for t in range(T - 2, -1, -1):
            nd = 1.0 - dones[s, t + 1]
            rho = min(ratios[s, t], rho_clip)
            if rho_on == "reward":
                delta = rho * rewards[s, t + 1] + gamma * values[s, t + 1] * nd - values[s, t]
            else:
                delta = rho * (rewards[s, t + 1] + gamma * values[s, t + 1] * nd - values[s, t])
            last = delta + gamma * lam * min(ratios[s, t], c_clip) * nd * last
            adv[s, t] = last
    return adv


def random_rows(seed, S=7, T=13):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(S, T)),
        rng.normal(size=(S, T)),
        (rng.random((S, T)) < 0.15).astype(np.float64),
        rng.uniform(0.3, 2.0, size=(S, T)),
    )


@pytest.mark.parametrize("seed", range(5))
def test_advantage_with_rho_one_is_exactly_gae(seed):
    values, rewards, dones, _ = random_rows(seed)
    assert dones[:, 1:-1].any(), "dones in the middle of rows"
    got = compute_advantages(
        *(torch.tensor(x) for x in (values, rewards, dones, np.ones_like(values))), 0.97, 0.9
    )
    np.testing.assert_allclose(
        got.numpy(), gae_reference(values, rewards, dones, 0.97, 0.9), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("rho_on", ["td_error", "reward"])
@pytest.mark.parametrize("seed", range(5))
def test_vtrace_clipping_matches_the_formula(seed, rho_on):
    values, rewards, dones, ratios = random_rows(seed)
    got = compute_advantages(
        *(torch.tensor(x) for x in (values, rewards, dones, ratios)), 0.99, 0.95, 1.2, 0.8, rho_on
    )
    np.testing.assert_allclose(
        got.numpy(),
        vtrace_reference(values, rewards, dones, ratios, 0.99, 0.95, 1.2, 0.8, rho_on),
        rtol=1e-5,
        atol=1e-5,
    )


def test_vtrace_rho_on_reward_differs_only_where_a_ratio_is_clipped_below_one():
    """train.vtrace_rho_on: the two forms agree while every ratio is 1 (an epoch's first minibatch),
    differ once a ratio below 1 weights a TD error, and an unknown form is refused by name."""
    values, rewards, dones, ratios = (torch.tensor(x) for x in random_rows(0))
    ones = torch.ones_like(ratios)
    for form in ("td_error", "reward"):
        torch.testing.assert_close(
            compute_advantages(values, rewards, dones, ones, 0.99, 0.95, 1.0, 1.0, form),
            compute_advantages(values, rewards, dones, ones, 0.99, 0.95, 1.0, 1.0),
        )
    td, rew = (
        compute_advantages(values, rewards, dones, ratios, 0.99, 0.95, 1.0, 1.0, f)
        for f in ("td_error", "reward")
    )
    assert (td - rew).abs().max() > 0.1
    with pytest.raises(ValueError, match="unknown train.vtrace_rho_on 'rewards'; choose td_error or reward"):
        compute_advantages(values, rewards, dones, ratios, 0.99, 0.95, 1.0, 1.0, "rewards")


def test_vtrace_rho_on_reaches_the_advantage_the_trainer_trains_on(monkeypatch):
    """The config key (default td_error) is what each minibatch's advantage is computed with."""
    seen = []
    real = advantage.compute
    monkeypatch.setattr(advantage, "compute", lambda *a, **k: seen.append(a[4].rho_on) or real(*a, **k))
    for form in ("td_error", "reward"):
        cfg = small_config("squared", **({} if form == "td_error" else {"train": {"vtrace_rho_on": form}}))
        assert cfg.train.vtrace_rho_on == form
        with Trainer(cfg, vector.make_from_config(cfg)) as trainer:
            seen.clear()
            trainer.evaluate()
            trainer.train()
        assert seen and set(seen) == {form}


def test_mingru_scan_equals_stepwise_recurrence():
    torch.manual_seed(0)
    core = MinGRU(16)
    x = torch.randn(5, 40, 16)
    h0 = torch.rand(5, 16) + 0.05
    scanned = core.sequence(x, (h0,))
    state, steps = (h0,), []
    for t in range(40):
        h, state = core.step(x[:, t], state)
        steps.append(h)
    torch.testing.assert_close(scanned, torch.stack(steps, dim=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("core", ["lstm", "mingru", "mlp"])
def test_sequence_and_step_forms_agree(core):
    torch.manual_seed(1)
    policy = Policy(
        spaces.Box(-1, 1, (6,), np.float32), spaces.MultiDiscrete([3, 4]), core=core, hidden_size=32
    )
    obs = torch.randn(3, 20, 6)
    state = policy.initial_state(3)
    logits_seq, values_seq = policy.sequence(obs, state)
    logits, values = [], []
    for t in range(20):
        out, v, state = policy.step(obs[:, t], state)
        logits.append(out)
        values.append(v)
    torch.testing.assert_close(logits_seq, torch.stack(logits, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(values_seq, torch.stack(values, 1), rtol=1e-5, atol=1e-5)


def test_lstm_cell_shares_the_sequence_weights():
    policy = Policy(spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2), core="lstm", hidden_size=8)
    assert policy.cell.weight_hh is policy.core.weight_hh_l0
    assert len(list(policy.parameters())) == len({id(p) for p in policy.parameters()})


@pytest.mark.parametrize("core", ["mlp", "lstm", "mingru"])
def test_cleanrl_init_gives_small_logits_and_unit_value(core):
    """policy.init cleanrl (the default, pufferlib, is test_pufferlib_init_is_what_pufferlib_leaves)."""
    torch.manual_seed(0)
    policy = Policy(
        spaces.Box(0, 2, (121,), np.uint8), spaces.Discrete(5), core=core, hidden_size=128, init="cleanrl"
    )
    w_logits, w_value = policy.decoder.weight, policy.value.weight
    # orthogonal rows scaled by std: each row has norm std
    torch.testing.assert_close(w_logits.norm(dim=1), torch.full((5,), 0.01), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w_value.norm(dim=1), torch.ones(1), rtol=1e-4, atol=1e-5)


def test_box_actions_have_a_learned_log_std():
    policy = Policy(
        spaces.Box(-1, 1, (3,), np.float32), spaces.Box(-1, 1, (2,), np.float32), core="mlp", hidden_size=16
    )
    out, _, _ = policy.step(torch.randn(4, 3), ())
    action, logprob = policy.sample(out)
    assert action.shape == (4, 2) and logprob.shape == (4,)
    assert policy.log_std.requires_grad


@pytest.mark.parametrize("core", ["mlp", "lstm", "mingru"])
def test_an_action_mask_at_the_end_of_the_observation_is_obeyed_and_not_encoded(core):
    """With ``action_mask`` K the last K observation entries are a mask over the heads' actions: no
    forbidden action is sampled, nor the mode, in step or sequence form; a forbidden action's
    log-probability is about -1e4 and takes no gradient; the encoder reads the rest alone."""
    obs_space = spaces.Box(-1.0, 1.0, (4 + 5,), np.float32)  # 4 features, then a mask over 3 + 2 actions
    policy = Policy(obs_space, spaces.MultiDiscrete([3, 2]), core=core, hidden_size=16, action_mask=5)
    assert policy.encoder[0].in_features == 4
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(256, 5)
    mask[:128, 0] = mask[:128, 1] = 0  # head 0: only action 2
    mask[128:, 4] = 0  # head 1: only action 0
    obs = torch.cat([torch.rand(256, 4, generator=g) * 2 - 1, mask], dim=1)
    out, _, _ = policy.step(obs, policy.initial_state(256))
    for _ in range(8):
        action, _ = policy.sample(out)
        assert (action[:128, 0] == 2).all() and (action[128:, 1] == 0).all()
    mode = policy.mode(out)
    assert (mode[:128, 0] == 2).all() and (mode[128:, 1] == 0).all()
    seq_out, _ = policy.sequence(obs.reshape(16, 16, 9), policy.initial_state(16))
    assert (policy.mode(seq_out).reshape(256, 2)[:128, 0] == 2).all()
    forbidden = torch.zeros(256, 2, dtype=torch.long)  # head 0's action 0: forbidden in the first half
    logprob, _ = policy.evaluate_actions(out, forbidden)
    assert (logprob[:128] < -1000).all() and (logprob[128:] > -10).all()
    logprob[:128].sum().backward()
    assert policy.decoder.weight.grad[0].abs().sum() == 0  # the forbidden logit took no gradient
    with pytest.raises(ConfigError, match="one per action"):
        Policy(obs_space, spaces.MultiDiscrete([3, 3]), core=core, hidden_size=16, action_mask=5)
    with pytest.raises(ConfigError, match="Discrete or MultiDiscrete"):
        Policy(obs_space, spaces.Box(-1, 1, (5,)), core=core, hidden_size=16, action_mask=5)


def test_a_trainer_draws_minibatches_of_transitions_smaller_than_a_segment():
    """Minibatches of 4 single steps from rows of 8 (the mlp core, prio_alpha 0): 2 x 8 x 8 / 4 = 32
    a pass, each of 4 rows of one step."""
    cfg = shared_small_config(
        "squared", "--policy.core", "mlp", "--train.prio-alpha", "0", "--train.minibatch-size", "4",
        "--train.max-minibatch-size", "4", "--train.update-epochs", "2",
    )  # fmt: skip
    with Trainer(cfg, vector.make_from_config(cfg)) as trainer:
        assert trainer.transitions and trainer.mb_segments == 4 and trainer.horizon == 8
        assert trainer.minibatches == 2 * trainer.batch_size // 4
        trainer.evaluate()
        stats = trainer.train()
    assert np.isfinite(stats["policy_loss"])


def small_config(env, *extra, **sections):
    """conftest's, with minibatches in chunks of 32 (gradient accumulation on)."""
    return shared_small_config(env, "--train.max-minibatch-size", "32", *extra, **sections)


@pytest.mark.parametrize("core", ["mlp", "lstm", "mingru"])
def test_training_forward_reproduces_the_rollout(core):
    """Ratios start at exactly 1: the update sees the policy the rollout used."""
    cfg = small_config("squared", "--policy.core", core, "--policy.hidden-size", "32")
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        trainer.evaluate()
        with torch.no_grad():
            out, values = trainer.policy.sequence(trainer.rollout.obs, trainer.rollout.initial_state)
            logprob, _ = trainer.policy.evaluate_actions(out, trainer.rollout.actions)
        torch.testing.assert_close(logprob, trainer.rollout.logprobs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(values, trainer.rollout.values, rtol=1e-5, atol=1e-5)
    finally:
        trainer.close()


def run_epochs(cfg, epochs):
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        return [trainer.evaluate() or trainer.train() for _ in range(epochs)]
    finally:
        trainer.close()


def test_same_seed_same_losses_and_gradient_accumulation():
    cfg = small_config(
        "breakout", "--policy.core", "lstm", "--policy.hidden-size", "32", "--train.optimizer", "muon"
    )
    a, b = run_epochs(cfg, 3), run_epochs(cfg, 3)
    assert a == b, "two runs with one seed give identical losses"
    other = run_epochs(
        small_config("breakout", "--policy.core", "lstm", "--policy.hidden-size", "32", "--train.seed", "1"),
        3,
    )
    assert other != a


def test_learns_a_contextual_bandit():
    """Name the colour you see: PPO must go from chance (4 of 16) to nearly always right."""
    from appliance.testing import ColourBandit

    cfg = resolve(
        env="CartPole-v1",
        overrides=[
            "--vec.backend",
            "serial",
            "--vec.num-envs",
            "32",
            "--train.bptt-horizon",
            "16",
            "--train.minibatch-size",
            "128",
            "--train.max-minibatch-size",
            "512",
            "--policy.core",
            "mlp",
            "--train.device",
            "cpu",
            "--train.optimizer",
            "adam",
            "--train.learning-rate",
            "0.01",
            "--train.gamma",
            "0.5",
            "--train.total-timesteps",
            "100000",
        ],
    )
    trainer = Trainer(cfg, vector.make(ColourBandit, backend="serial", num_envs=32))
    try:
        for _ in range(2):  # episodes are 16 steps: the first ones end in the second rollout
            trainer.evaluate()
            trainer.train()
        first = trainer.env_stats["episode_return"]
        for _ in range(25):
            trainer.evaluate()
            trainer.train()
        assert trainer.env_stats["episode_return"] >= 14 > first + 5
    finally:
        trainer.close()


def test_size_rules_and_devices():
    with pytest.raises(ConfigError, match="minibatch_size"):
        cfg = small_config("squared", "--train.minibatch-size", "12")
        Trainer(cfg, vector.make_from_config(cfg))
    with pytest.raises(ConfigError, match="multiple of train.bptt_horizon .8. and of train.minibatch_size"):
        small_config("squared", train={"batch_size": 16})  # refused by resolve, before any env starts
    cfg = small_config("squared", "--train.batch-size", "64", "--vec.num-envs", "16")
    with vector.make_from_config(cfg) as vec, pytest.raises(ConfigError, match="at least num_agents"):
        Trainer(cfg, vec)
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA device"):
            resolve_device("cuda")
    assert resolve_device("cpu").type == "cpu"


def test_nan_loss_stops_with_the_last_good_checkpoint(tmp_path):
    cfg = small_config("squared")
    trainer = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path / "run")
    try:
        trainer.evaluate()
        trainer.train()
        good = trainer.save_checkpoint()
        with torch.no_grad():
            trainer.policy.value.weight.fill_(float("nan"))
        trainer.evaluate()
        with pytest.raises(TrainingError, match=rf"epoch 1 .*last good checkpoint {good} is kept"):
            trainer.train()
        assert good.exists()
    finally:
        trainer.close()


def test_checkpoint_resume_restores_counters_and_weights(tmp_path):
    cfg = small_config("squared")
    first = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path)
    first.evaluate()
    first.train()
    first.save_checkpoint()
    weights = {k: v.clone() for k, v in first.policy.state_dict().items()}
    first.close()
    second = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path)
    second.load_checkpoint(tmp_path, resume=True)
    assert (second.epoch, second.global_step) == (first.epoch, first.global_step)
    for k, v in second.policy.state_dict().items():
        torch.testing.assert_close(v, weights[k])
    second.close()
    assert not list(tmp_path.glob("*.tmp")), "no temp files left by atomic writes"


def test_a_resume_keeps_the_reward_scale_statistics(tmp_path):
    """train.reward_norm's running std of the discounted return is in the checkpoint: before, a resume
    started it afresh (scale 1, then estimated from the restarted games' early returns only)."""
    cfg = small_config("breakout", "--train.reward-norm", "true")
    first = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path)
    for _ in range(2):
        first.evaluate()
        first.train()
    first.save_checkpoint()
    saved = first.return_scale.state_dict()
    first.close()
    assert saved["count"] > 0
    second = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path)
    try:
        assert second.return_scale.state_dict()["count"] == 0
        second.load_checkpoint(tmp_path, resume=True)
        assert second.return_scale.state_dict() == saved
        assert not second.return_scale.returns.any(), "the restarted games' returns start at zero"
    finally:
        second.close()


def test_a_resumed_trainer_updates_as_the_one_it_was_saved_from(tmp_path):
    """Everything an update reads comes back from a checkpoint: given the same rollout, the resumed
    trainer's update is bit-identical to the saved trainer's. So a resumed run differs from the run
    whole by its games alone, which restart (docs/lab/learning.md, "What a resume changes")."""
    cfg = small_config(
        "breakout", "--policy.core", "mingru", "--policy.num-layers", "2", "--train.optimizer", "muon",
        "--train.replay-ratio", "1.5", "--train.learning-rate", "0.05",
    )  # fmt: skip
    saved = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path / "a")
    resumed = None
    try:
        for _ in range(3):
            saved.evaluate()
            saved.train()
        saved.save_checkpoint()
        resumed = Trainer(cfg, vector.make_from_config(cfg), run_dir=tmp_path / "b")
        resumed.load_checkpoint(tmp_path / "a", resume=True)
        saved.evaluate()  # the saved trainer's next rollout, handed to both
        for name, value in vars(saved.rollout).items():
            if isinstance(value, torch.Tensor):
                getattr(resumed.rollout, name).copy_(value)
            elif isinstance(value, tuple) and all(isinstance(t, torch.Tensor) for t in value):
                for mine, theirs in zip(getattr(resumed.rollout, name), value, strict=True):
                    mine.copy_(theirs)
        # both at a later point of the schedules: the learning rate set there must reach the steps
        saved.global_step = resumed.global_step = int(cfg.train.total_timesteps) // 2
        before = {k: v.clone() for k, v in saved.policy.state_dict().items()}
        losses = saved.train(), resumed.train()
        assert losses[0] == losses[1]
        for key, value in saved.policy.state_dict().items():
            assert not torch.equal(value, before[key]) or key.endswith("bias"), f"{key} did not move"
            assert torch.equal(resumed.policy.state_dict()[key], value), key
    finally:
        saved.close()
        if resumed is not None:
            resumed.close()


def test_a_timing_section_closed_after_its_phase_ended_counts_there_and_raises_nothing():
    """A SIGTERM between a section's start and its ``with`` taking hold leaves the section to the
    garbage collector, which closed it after its phase had ended: it raised KeyError 'None.env'
    ("Exception ignored in ... Timings.__call__") in the interrupted run's output."""
    from appliance.train.timings import Timings

    t = Timings()
    with t.phase("evaluate"):
        section = t("env")
        section.__enter__()
    section.__exit__(None, None, None)
    assert t.totals["evaluate.env"] > 0 and "None.env" not in t.totals


def test_timings_cover_every_phase():
    cfg = small_config("squared")
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        trainer.train()
        parts = trainer.timings.breakdown()
        for key in ("evaluate.forward", "evaluate.env", "evaluate.copy", "train.forward", "train.learn"):
            assert parts[key]["seconds"] > 0, key
        assert sum(p["share"] for p in parts.values()) == pytest.approx(1.0, rel=1e-6)
        assert trainer.sps > 0 and trainer.global_step >= 8 * 8  # one row of 8 steps per agent
    finally:
        trainer.close()


def test_emulated_envs_train_through_multiprocessing():
    cfg = resolve(
        env="CartPole-v1",
        overrides=[
            "--vec.backend",  # the classic family steps CartPoles in one process (serial)
            "multiprocessing",
            "--vec.num-envs",
            "4",
            "--vec.num-workers",
            "2",
            "--train.device",
            "cpu",
            "--train.bptt-horizon",
            "8",
            "--train.minibatch-size",
            "32",
            "--policy.core",
            "mlp",
        ],
    )
    assert cfg.vec.backend == "multiprocessing"
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        losses = trainer.train()
        assert np.isfinite(losses["policy_loss"]) and trainer.global_step >= 32
    finally:
        trainer.close()


def test_busy_env_is_a_valid_training_env():
    assert BusyEnv(step_us=0).step(1)[1] == 1.0


def test_image_observations_use_the_cnn_and_structured_ones_are_restored():
    image = Policy(spaces.Box(0, 255, (16, 16, 3), np.uint8), spaces.Discrete(3), core="mlp", hidden_size=32)
    assert image.image_shape == (16, 16, 3)
    out, value, _ = image.step(torch.randint(0, 255, (2, 16, 16, 3), dtype=torch.uint8), ())
    assert out.shape == (2, 3) and value.shape == (2,)
    seq_out, _ = image.sequence(torch.randint(0, 255, (2, 5, 16, 16, 3), dtype=torch.uint8), ())
    assert seq_out.shape == (2, 5, 3)
    from appliance.emulation import SpaceCodec
    from appliance.testing import STRUCTURED_OBS

    codec = SpaceCodec(STRUCTURED_OBS)
    policy = Policy(codec.flat_space, spaces.Discrete(3), core="mlp", hidden_size=16, obs_codec=codec)
    sample = STRUCTURED_OBS.sample()
    features = policy.to_float(torch.as_tensor(codec.flatten(sample))[None])
    assert features.shape == (1, sum(leaf.size for leaf in codec.leaves))
    start = 0
    for leaf in codec.leaves:  # the float32 leaf comes back exactly, wherever the codec put it
        if leaf.path == ("pos",):
            break
        start += leaf.size
    torch.testing.assert_close(features[0, start : start + 2], torch.as_tensor(sample["pos"]))


def test_small_range_integer_observations_are_one_hot_encoded():
    from appliance.train.policy import categories

    board = spaces.Box(0, 2, (121,), np.uint8)
    assert categories(board) == (0, 3) and categories(spaces.Box(-1, 1, (4,), np.int8)) == (-1, 3)
    assert categories(spaces.Box(-1.0, 1.0, (4,), np.float32)) is None
    assert categories(spaces.Box(0, 255, (4,), np.uint8)) is None  # too many values: scaled instead
    policy = Policy(board, spaces.Discrete(5), core="mlp")
    obs = torch.zeros(2, 121, dtype=torch.uint8)
    obs[0, 5], obs[1, 5] = 1, 2
    x = policy.to_float(obs)
    assert x.shape == (2, 363) and x.sum().item() == 2 * 121  # exactly one hot code per cell
    assert x[0, 5 * 3 + 1] == 1 and x[1, 5 * 3 + 2] == 1 and x[0, 5 * 3] == 0
    linear = Policy(board, spaces.Discrete(5), core="mlp", encoder="linear")
    assert linear.to_float.size == 121
    with pytest.raises(ValueError, match="onehot encoder needs integer"):
        Policy(spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2), encoder="onehot")


def test_obs_scale_none_feeds_the_raw_floats_as_pufferlib_and_go_says_so():
    """go's capture counts are declared up to 3 x 49 = 147: divided by that bound they reach the
    encoder as about 0.01 per capture, and go's parity run fell from score 1 to -4 where PufferLib's
    Default policy (raw floats) reached 5.6 (docs/lab/learning.md); with the raw counts ours reached it."""
    from appliance.config import resolve

    space = spaces.Box(0.0, np.array([1.0, 1.0, 147.0], np.float32), dtype=np.float32)
    obs = torch.tensor([[1.0, 0.0, 3.0]])
    scaled = Policy(space, spaces.Discrete(2), core="mlp", encoder="linear")
    raw = Policy(space, spaces.Discrete(2), core="mlp", encoder="linear", obs_scale="none")
    assert torch.allclose(scaled.to_float(obs), torch.tensor([[1.0, 0.0, 3.0 / 147.0]]))
    assert torch.equal(raw.to_float(obs), obs)
    with pytest.raises(ValueError, match="obs_scale 'raw'; choose bounds or none"):
        Policy(space, spaces.Discrete(2), core="mlp", obs_scale="raw")
    assert resolve(env="go").policy.obs_scale == "none"
    assert resolve(env="breakout").policy.obs_scale == "bounds"  # the default elsewhere


# ----------------------------------------------------------------------------- prioritized segments


def test_prioritized_sampling_matches_its_probabilities_and_weights():
    """On a buffer with known |A|: the trainer's sampler (kernels.prio_sample) draws segments in
    proportion to (sum|A| + floor)^alpha, weighted by (N P)^-beta, distinct within a minibatch, and a
    zero-|A| segment can still be drawn."""
    from appliance.gpu.reference import PRIO_FLOOR

    sums = torch.tensor([0.0, 1.0, 2.0, 4.0, 8.0, 1.0, 0.5, 3.0])
    adv = torch.zeros(8, 4)
    adv[:, 0] = -sums / 2  # signs must not matter: priorities use |A|
    adv[:, 1] = sums / 2
    alpha, beta, n = 0.8, 0.4, len(sums)
    probs = (sums + PRIO_FLOOR) ** alpha
    probs = probs / probs.sum()
    draws = 40_000
    counts = torch.zeros(n)
    for step in range(draws):  # one draw per minibatch step: the first pick follows P
        idx, weights = kernels.prio_sample(adv, alpha, beta, 1, 0, step)
        counts[idx] += 1
        if step < 100:
            torch.testing.assert_close(weights, (n * probs[idx]) ** -beta)
    freq = counts / draws
    assert torch.allclose(freq, probs, atol=0.01), (freq, probs)
    # a full minibatch draws every segment once, the zero-|A| one included
    idx, weights = kernels.prio_sample(adv, alpha, beta, n, 0, 1)
    assert sorted(idx.tolist()) == list(range(n))
    torch.testing.assert_close(weights, (n * probs[idx]) ** -beta)
    assert weights[idx == 0].item() > 1 > weights[idx == 4].item(), "rare segments weigh more"
    # alpha 0 is uniform sampling with weight 1
    _, weights = kernels.prio_sample(adv, 0.0, beta, 4, 0, 2)
    torch.testing.assert_close(weights, torch.ones(4))


def test_prio_replacement_draws_as_torch_multinomial_with_the_same_weights():
    """train.prio_replacement's draw (kernels.prio_sample with replacement): from one generator state,
    the very indices of PufferLib 4.0's torch.multinomial(P, n, replacement=True), P proportional to
    (sum|A| + floor)^alpha, with the importance weights (N P)^-beta of the draw without replacement;
    a segment may come more than once, more draws than segments are allowed, and without given
    uniforms (Philox's, keyed on seed and step) the draws' frequencies follow P."""
    from appliance.gpu.reference import PRIO_FLOOR

    gen = torch.Generator().manual_seed(3)
    adv = torch.randn(64, 8, generator=gen) * torch.rand(64, 1, generator=gen) ** 3
    alpha, beta = 0.8, 0.3
    prio = (adv.double().abs().sum(1) + PRIO_FLOOR) ** alpha
    probs = prio / prio.sum()
    for n in (16, 64, 200):
        state = gen.get_state()
        want = torch.multinomial(probs, n, replacement=True, generator=gen)
        gen.set_state(state)
        u = torch.rand(n, dtype=torch.float64, generator=gen)
        idx, weights = kernels.prio_sample(adv, alpha, beta, n, 0, 0, uniform=u, replacement=True)
        assert torch.equal(idx, want), n
        torch.testing.assert_close(weights, (64 * probs[idx]).pow(-beta).float())
        assert len(set(idx.tolist())) < n  # repeats (P(none) is below 1e-2 at n = 16)
    idx, _ = kernels.prio_sample(adv, alpha, beta, 100_000, 5, 7, replacement=True)
    assert torch.equal(idx, kernels.prio_sample(adv, alpha, beta, 100_000, 5, 7, replacement=True)[0])
    freq = torch.bincount(idx, minlength=64).double() / len(idx)
    assert torch.allclose(freq, probs, atol=0.005), (freq - probs).abs().max()
    with pytest.raises(ValueError, match="at least 1 segment"):
        kernels.prio_sample(adv, alpha, beta, 0, 0, 0, replacement=True)


@pytest.mark.parametrize("replacement", [False, True])
def test_the_trainers_minibatches_come_from_its_generator_with_or_without_replacement(
    replacement, monkeypatch
):
    """Each minibatch's segments are drawn from the trainer's CPU generator: by default
    (train.prio_replacement false) one uniform per segment and the top-k of the keys log(1 - u) / P,
    distinct segments, as before the switch existed; with it, PufferLib 4.0's draw,
    torch.multinomial(P, minibatch segments, replacement=True) from the same generator state,
    repeats included."""
    from appliance.gpu.reference import PRIO_FLOOR

    calls = []
    real = kernels.prio_sample

    def spy(adv, *args, **kwargs):
        idx, weights = real(adv, *args, **kwargs)
        calls.append((adv.clone(), idx.clone(), kwargs.get("replacement")))
        return idx, weights

    monkeypatch.setattr(kernels, "prio_sample", spy)
    flag = "true" if replacement else "false"
    cfg = small_config("squared", "--policy.core", "mlp", "--vec.num-envs", "16",
                       "--train.update-epochs", "4", "--train.prio-replacement", flag)  # fmt: skip
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        gen = torch.Generator()
        gen.set_state(trainer.generator.get_state())
        trainer.train()
    finally:
        trainer.close()
    assert (trainer.segments, trainer.mb_segments, len(calls)) == (16, 8, trainer.minibatches) and calls
    repeats = False
    for adv, idx, flagged in calls:
        assert flagged is replacement
        prio = (adv.double().abs().sum(1) + PRIO_FLOOR) ** cfg.train.prio_alpha
        if replacement:
            want = torch.multinomial(prio / prio.sum(), 8, replacement=True, generator=gen)
        else:
            u = torch.rand(16, dtype=torch.float64, generator=gen)
            want = (torch.log1p(-u) / prio).topk(8).indices
        assert torch.equal(idx, want)
        repeats |= len(set(idx.tolist())) < len(idx)
    assert repeats == replacement


@pytest.mark.parametrize("bad", [[float("nan")], [float("inf")], [float("inf"), float("-inf")]])
def test_nan_advantages_stop_with_the_epoch_named(bad):
    """A NaN, an infinity, or infinities of both signs (whose sum is NaN) among the rewards."""
    cfg = small_config("squared")
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        trainer.train()
        trainer.evaluate()
        for i, value in enumerate(bad):
            trainer.rollout.rewards[i, 3] = value
        with pytest.raises(TrainingError, match=r"advantages became NaN/Inf in epoch 1 "):
            trainer.train()
    finally:
        trainer.close()


@pytest.mark.parametrize("core", ["lstm", "mlp"])
def test_gradient_accumulation_equals_the_full_batch_gradient(core):
    """A minibatch split into chunks (max_minibatch_size) accumulates the gradient of the whole."""
    cfg = small_config("squared", "--policy.core", core, "--policy.hidden-size", "32")
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        b = trainer.rollout
        values, ratios = b.values.clone(), b.ratios.clone()
        idx = torch.arange(trainer.mb_segments)
        adv = torch.randn(len(idx), trainer.horizon, generator=torch.Generator().manual_seed(1))
        returns = adv + b.values[idx]

        def gradient(chunk):
            b.values.copy_(values)
            b.ratios.copy_(ratios)
            trainer.chunk_segments = chunk
            trainer.optimizer.zero_grad()
            with trainer.timings.phase("train"):
                trainer._minibatch(idx, adv, returns)
            return [p.grad.clone() for p in trainer.policy.parameters() if p.grad is not None]

        full = gradient(trainer.mb_segments)
        for chunk in (1, trainer.mb_segments // 2):
            parts = gradient(chunk)
            assert len(parts) == len(full)
            for g, f in zip(parts, full, strict=True):
                torch.testing.assert_close(g, f, rtol=1e-4, atol=1e-6)
        assert trainer.mb_segments == 8
    finally:
        trainer.close()


def _heavyball_muon(monkeypatch):
    """heavyball 1.7.2's ForeachMuon, the optimizer PufferLib 3.0 trains with (a dev dependency), run
    eagerly: its torch.compile of the same math needs a C++ toolchain and compile workers, and takes
    longer than the test."""
    heavyball = pytest.importorskip("heavyball")
    from importlib.metadata import version

    if version("heavyball") != "1.7.2":
        pytest.skip(f"the reference is heavyball 1.7.2, found {version('heavyball')}")
    monkeypatch.setattr(importlib.import_module("heavyball.utils"), "compile_mode", None)
    return heavyball.ForeachMuon


@pytest.mark.parametrize("graph_safe", [False, True])
def test_muon_takes_pufferlibs_steps(graph_safe, monkeypatch):
    """Our Muon takes heavyball 1.7.2 ForeachMuon's steps (PufferLib 3.0's optimizer, built with
    betas=(adam_beta1, adam_beta2)) on a policy's shapes: Nesterov momentum as a running sum with
    beta = adam_beta1, Newton-Schulz for matrices (and a conv kernel viewed as a matrix) scaled by
    sqrt(max(1, rows/cols)), plain momentum for vectors. In float64 both are exact up to heavyball
    keeping its momentum in float32."""
    from appliance.train.optim import Muon

    ForeachMuon = _heavyball_muon(monkeypatch)
    gen = torch.Generator().manual_seed(0)
    shapes = [(512, 128), (128, 118), (3, 128), (1, 128), (512,), (3,), (8, 3, 3, 3)]
    ours = [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float64)) for s in shapes]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    lr = torch.tensor(0.04, dtype=torch.float64) if graph_safe else 0.04
    opt = Muon(ours, lr=lr, momentum=0.89, ns_dtype=torch.float64)
    ref_opt = ForeachMuon(ref, lr=0.04, betas=(0.89, 0.9), eps=1e-4)
    for _ in range(4):
        for p, q in zip(ours, ref, strict=True):
            p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            q.grad = p.grad.clone()
        start = [p.detach().clone() for p in ours]
        opt.step()
        ref_opt.step()
        for p, q, s in zip(ours, ref, start, strict=True):
            step, ref_step = p.detach() - s, q.detach() - s
            assert ref_step.norm() > 0
            assert (step - ref_step).norm() <= 1e-6 * ref_step.norm(), p.shape


def test_muon_momentum_is_adam_beta1_and_every_parameter_is_in_it():
    """train.optimizer muon puts every parameter (heads and biases too) in one Muon whose momentum is
    train.adam_beta1, as PufferLib 3.0 does; none goes to Adam at Muon's learning rate."""
    from appliance.train.optim import Muon, make_optimizer

    cfg = small_config("squared", "--train.adam-beta1", "0.8", "--train.learning-rate", "0.03")
    vec = vector.make_from_config(cfg)
    try:
        policy = make_policy(cfg, vec)
    finally:
        vec.close()
    opt = make_optimizer(policy, cfg.train)
    assert [type(o) for o in opt.optimizers] == [Muon]
    (group,) = opt.param_groups
    assert group["momentum"] == 0.8 and group["lr"] == 0.03
    assert {id(p) for p in group["params"]} == {id(p) for p in policy.parameters()}


def test_muon_newton_schulz_in_float32_stays_near_the_bfloat16_reference(monkeypatch):
    """On a CPU our Newton-Schulz runs in float32 where heavyball runs bfloat16: the steps agree to
    within bfloat16's rounding (a few percent), not exactly."""
    from appliance.train.optim import Muon

    ForeachMuon = _heavyball_muon(monkeypatch)
    gen = torch.Generator().manual_seed(1)
    ours = torch.nn.Parameter(torch.randn(512, 128, generator=gen))
    ref = torch.nn.Parameter(ours.detach().clone())
    opt, ref_opt = Muon([ours], lr=0.02, momentum=0.9), ForeachMuon([ref], lr=0.02, betas=(0.9, 0.9))
    grad = torch.randn(512, 128, generator=gen)
    ours.grad, ref.grad = grad.clone(), grad.clone()
    start = ours.detach().clone()
    opt.step()
    ref_opt.step()
    step, ref_step = ours.detach() - start, ref.detach() - start
    assert (step - ref_step).norm() < 0.05 * ref_step.norm()


PUFFERLIB4_NS = [
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
]


def _pufferlib4_orthogonalize(g):
    """PufferLib 4.0's muon.py Newton-Schulz, written out from its formulas: x = g (the wide way
    round) / max(|g|, 1e-7); per triple (a, b, c): s = x x^T, y = c s + b I, y = y s + a I, x = y x;
    back the original way round, times sqrt(max(1, rows/cols))."""
    rows, cols = g.shape
    x = g.T if rows > cols else g
    x = x / torch.clamp(x.norm(), min=1e-7)
    eye = torch.eye(x.shape[0], dtype=x.dtype)
    for a, b, c in PUFFERLIB4_NS:
        s = x @ x.T
        y = c * s + b * eye
        y = y @ s + a * eye
        x = y @ x
    x = x.T if rows > cols else x
    return x * max(1.0, rows / cols) ** 0.5


@pytest.mark.parametrize("graph_safe", [False, True])
def test_muon_ns_pufferlib4_takes_the_steps_of_its_muon_py(graph_safe):
    """train.muon_ns pufferlib4: our Muon's steps are PufferLib 4.0's muon.py's (Nesterov momentum as
    a running sum, its Newton-Schulz with a triple per step for matrices and a conv kernel viewed as
    one, plain momentum for vectors), written out in _pufferlib4_orthogonalize; exact in float64, and
    in float32 (its dtype on every device) to float32's rounding. The default, heavyball, takes other
    steps (test_muon_takes_pufferlibs_steps holds it to heavyball 1.7.2)."""
    from appliance.train.optim import Muon

    gen = torch.Generator().manual_seed(0)
    shapes = [(512, 128), (128, 118), (3, 128), (1, 128), (512,), (3,), (8, 3, 3, 3)]
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
        ours = [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=dtype)) for s in shapes]
        ref = [p.detach().clone() for p in ours]
        heavy = [torch.nn.Parameter(p.detach().clone()) for p in ours]
        momenta = [torch.zeros_like(p) for p in ref]
        lr = torch.tensor(0.04, dtype=dtype) if graph_safe else 0.04
        ns_dtype = torch.float64 if dtype == torch.float64 else None  # float32: its default everywhere
        opt = Muon(ours, lr=lr, momentum=0.89, ns="pufferlib4", ns_dtype=ns_dtype)
        heavy_opt = Muon(heavy, lr=lr, momentum=0.89, ns_dtype=dtype)
        for _ in range(4):
            for p, q in zip(ours, heavy, strict=True):
                p.grad = torch.randn(p.shape, generator=gen, dtype=dtype)
                q.grad = p.grad.clone()
            for p, r, m in zip(ours, ref, momenta, strict=True):
                m.mul_(0.89).add_(p.grad)
                u = p.grad + 0.89 * m
                if u.ndim >= 2:
                    u = _pufferlib4_orthogonalize(u.reshape(u.shape[0], -1)).view(u.shape)
                r.sub_(0.04 * u)
            opt.step()
            heavy_opt.step()
        for p, r in zip(ours, ref, strict=True):
            torch.testing.assert_close(p.detach(), r, rtol=tol, atol=tol)
        assert not torch.allclose(ours[0].detach(), heavy[0].detach(), rtol=1e-3, atol=1e-4)
        assert torch.equal(ours[4].detach(), heavy[4].detach())  # vectors: no Newton-Schulz in either
    with pytest.raises(ValueError, match="unknown train.muon_ns 'keller'; choose heavyball or pufferlib4"):
        Muon(ours, lr=0.04, ns="keller")


def test_muon_ns_reaches_the_optimizer_and_defaults_to_heavyball():
    """train.muon_ns: heavyball by default (the Muon of before the switch), pufferlib4 when set."""
    from appliance.train.optim import make_optimizer

    for extra, want in (((), "heavyball"), (("--train.muon-ns", "pufferlib4"), "pufferlib4")):
        cfg = small_config("squared", *extra)
        assert cfg.train.muon_ns == want
        vec = vector.make_from_config(cfg)
        try:
            policy = make_policy(cfg, vec)
        finally:
            vec.close()
        (muon,) = make_optimizer(policy, cfg.train).optimizers
        assert muon.ns == want
    with pytest.raises(ConfigError, match="muon-ns.*heavyball, pufferlib4"):
        small_config("squared", "--train.muon-ns", "keller")


@pytest.mark.parametrize("core", ["lstm", "mingru"])
def test_bfloat16_rollout_weights_follow_the_float32_masters(core):
    """train.precision bfloat16 on a GPU: the rollout steps a bfloat16 copy of the weights. The copy
    keeps the LSTM cell's weights shared with the LSTM's, refreshes in place from the masters, and
    steps like the float32 policy under bf16 autocast (the training forward)."""
    from appliance.train.policy import copy_weights, inference_copy

    policy = Policy(spaces.Box(0, 1, (10,), np.float32), spaces.Discrete(4), core=core, hidden_size=32)
    twin = inference_copy(policy, torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in twin.parameters())
    if core == "lstm":
        assert twin.cell.weight_ih is twin.core.weight_ih_l0
    address = [p.data_ptr() for p in twin.parameters()]
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    copy_weights(twin, policy)
    assert [p.data_ptr() for p in twin.parameters()] == address, "refreshed in place"
    for p, q in zip(twin.parameters(), policy.parameters(), strict=True):
        assert torch.equal(p, q.to(torch.bfloat16))
    obs = torch.rand(64, 10)
    state = policy.initial_state(64)
    with torch.autocast("cpu", torch.bfloat16):
        out, value, _ = twin.step(obs, state)
        ref_out, ref_value, _ = policy.step(obs, state)
    torch.testing.assert_close(out.float(), ref_out.float(), rtol=0.05, atol=0.02)
    torch.testing.assert_close(value.float(), ref_value.float(), rtol=0.05, atol=0.05)


def policy_and_twin(optimizer):
    """A small squared config with ``train.optimizer``, its policy and a copy of it."""
    cfg = small_config("squared", "--train.optimizer", optimizer)
    vec = vector.make_from_config(cfg)
    try:
        policy = make_policy(cfg, vec)
    finally:
        vec.close()
    return cfg, policy, copy.deepcopy(policy)


def same_gradients(policy, twin, gen):
    """One random gradient, the same on both."""
    for p, q in zip(policy.parameters(), twin.parameters(), strict=True):
        p.grad = torch.randn(p.shape, generator=gen)
        q.grad = p.grad.clone()


@pytest.mark.parametrize("optimizer", ["muon", "adam"])
def test_graph_safe_optimizers_take_the_same_steps(optimizer):
    """The graph-safe optimizers (learning rate a device tensor that set_lr fills in place, Muon on
    torch ops only) take the very steps of the plain ones, learning-rate annealing included
    (test_muon_takes_pufferlibs_steps checks the graph-safe Muon against heavyball)."""
    from appliance.train.optim import make_optimizer, set_lr

    cfg, policy, twin = policy_and_twin(optimizer)
    plain, safe = make_optimizer(policy, cfg.train), make_optimizer(twin, cfg.train, graph_safe=True)
    assert all(isinstance(g["lr"], torch.Tensor) for g in safe.param_groups)
    gen = torch.Generator().manual_seed(1)
    for scale in (1.0, 0.7, 0.2):
        assert set_lr(plain, scale) == set_lr(safe, scale)
        same_gradients(policy, twin, gen)
        plain.step()
        safe.step()
    for p, q in zip(policy.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("graph_safe", [False, True])
@pytest.mark.parametrize("optimizer", ["muon", "adam"])
def test_a_learning_rate_set_after_loading_a_state_is_the_one_the_steps_take(optimizer, graph_safe):
    """Loading a state replaces a torch optimizer's group dicts; MultiOptimizer kept the old ones, so
    set_lr after a resume changed nothing a step reads and the run trained on at the checkpoint's
    learning rate to its end (breakout at PufferLib 4.0's recipe, resumed at 33.8 M, stayed near
    0.38 where the run whole reached 0.9: docs/lab/learning.md, "What a resume changes"). A graph-safe
    learning rate stays the tensor a captured graph holds."""
    from appliance.train.optim import make_optimizer, set_lr

    cfg, policy, twin = policy_and_twin(optimizer)
    saved, resumed = (
        make_optimizer(policy, cfg.train, graph_safe),
        make_optimizer(twin, cfg.train, graph_safe),
    )
    held = [g["lr"] for g in resumed.param_groups]
    set_lr(saved, 0.7)
    resumed.load_state_dict(saved.state_dict())
    assert [float(g["lr"]) for g in resumed.param_groups] == pytest.approx([cfg.train.learning_rate * 0.7])
    for scale in (0.3, 0.05):
        set_lr(saved, scale)
        set_lr(resumed, scale)
        gen = torch.Generator().manual_seed(1)
        same_gradients(policy, twin, gen)
        saved.step()
        resumed.step()
        for o in resumed.optimizers:
            assert [float(g["lr"]) for g in o.param_groups] == pytest.approx(
                [cfg.train.learning_rate * scale]
            )
    for p, q in zip(policy.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)
    if graph_safe:
        assert all(g["lr"] is t for g, t in zip(resumed.param_groups, held, strict=True))
    # a run resumed with another train.learning_rate anneals from its own, not the checkpoint's
    faster = small_config("squared", "--train.optimizer", optimizer, "--train.learning-rate", "0.5")
    other = make_optimizer(copy.deepcopy(policy), faster.train, graph_safe)
    other.load_state_dict(saved.state_dict())
    assert set_lr(other, 0.5) == 0.25 and [float(g["lr"]) for g in other.param_groups] == pytest.approx(
        [0.25]
    )


@pytest.mark.parametrize("backend", ["serial", "multiprocessing"])
def test_ocean_episode_stats_reach_the_trainer_on_every_backend(backend):
    """Ocean envs keep episode stats in C; a process backend sends them as infos (means of n)."""
    cfg = small_config("squared", "--vec.backend", backend, "--vec.num-workers", "2", "--policy.core", "mlp")
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        for _ in range(6):  # squared episodes end within a few 8-step rows
            trainer.evaluate()
            trainer.train()
            if trainer.env_stats:
                break
        stats = trainer.env_stats
        assert {"perf", "score", "episode_return", "episode_length", "n"} <= set(stats), stats
        assert stats["n"] >= 1 and 0 <= stats["perf"] <= 1
    finally:
        trainer.close()


def test_episode_means_weigh_logs_by_their_episode_count():
    from appliance.train.episodes import episode_means

    out = episode_means([{"perf": 1.0, "n": 3.0}, {"perf": 0.0, "n": 1.0}, {"perf": 0.5}])
    assert out == {"perf": pytest.approx(3.5 / 5), "n": 5.0}


def test_a_pettingzoo_env_by_import_path_trains_through_multiprocessing():
    cfg = resolve(
        env="appliance.testing:take_turns_parallel",
        overrides=[
            "--vec.num-envs", "4", "--vec.num-workers", "2", "--train.device", "cpu",
            "--train.bptt-horizon", "8", "--train.minibatch-size", "64", "--policy.core", "mlp",
        ],
    )  # fmt: skip
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        assert trainer.vec.num_agents == 8
        for _ in range(3):
            trainer.evaluate()
            trainer.train()
        assert trainer.env_stats["episode_length"] == 8
    finally:
        trainer.close()


def test_ocean_episode_stats_with_an_autotuned_async_config(tmp_path):
    """An autotune result (multiprocessing, batches smaller than num_envs) loaded with --config:
    the trainer still sees the Ocean env's episode stats."""
    from appliance.tune.autotune import profile_yaml

    best = {"backend": "multiprocessing", "num_envs": 8, "num_workers": 2, "batch_size": 4, "sps": 1.0}
    path = tmp_path / "tuned.yaml"
    path.write_text(profile_yaml("squared", best, 0.0, None))
    cfg = resolve(
        env="squared",
        config_file=path,
        overrides=["--train.device", "cpu", "--train.bptt-horizon", "8", "--train.minibatch-size", "64",
                   "--policy.core", "mlp"],
    )  # fmt: skip
    assert (cfg.vec.backend, cfg.vec.batch_size) == ("multiprocessing", 4)
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        for _ in range(6):
            trainer.evaluate()
            trainer.train()
            if trainer.env_stats:
                break
        assert trainer.env_stats["n"] >= 1 and "perf" in trainer.env_stats
    finally:
        trainer.close()


def test_an_update_epoch_rerun_from_its_saved_state_repeats_itself():
    """graphs.update_state/restore (gpu-check's replay-vs-call comparison): weights, optimizer state,
    rollout values and ratios and the segment draws' generator come back, so the epoch repeats."""
    from appliance.train.graphs import restore, update_state

    cfg = small_config("squared")
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        trainer.train()
        trainer.evaluate()
        saved, epoch = update_state(trainer), trainer.epoch
        first = trainer.train()
        weights = [p.detach().clone() for p in trainer.policy.parameters()]
        restore(saved)
        trainer.epoch = epoch
        second = trainer.train()
        assert first == second
        for p, q in zip(trainer.policy.parameters(), weights, strict=True):
            assert torch.equal(p.detach(), q)
    finally:
        trainer.close()


@pytest.mark.parametrize("core", ["lstm", "mingru", "mlp"])
def test_pufferlib_init_is_what_pufferlib_leaves(core):
    """policy.init pufferlib (the default): with a recurrent core every encoder and head weight is
    orthogonal with gain 1 and every bias zero, the core as torch makes it (PufferLib's LSTM wrapper);
    with mlp the logits start at std 0.01 and the value at 1 (its Default policy). cleanrl keeps the
    logits at 0.01 under every core."""
    obs, act = spaces.Box(-1, 1, (118,), np.float32), spaces.Discrete(3)
    torch.manual_seed(0)
    policy = Policy(obs, act, core=core, hidden_size=128)
    cleanrl = Policy(obs, act, core=core, hidden_size=128, init="cleanrl")
    head = policy.decoder.weight.detach()
    if core == "mlp":
        assert head.norm(dim=1).max() < 0.02
    else:
        torch.testing.assert_close(head @ head.T, torch.eye(3), atol=1e-5, rtol=0)
        enc = policy.encoder[0].weight.detach()
        torch.testing.assert_close(
            enc.T @ enc, torch.eye(118), atol=1e-4, rtol=0
        )  # [128, 118]: orthonormal columns
        for module in (policy.encoder, policy.decoder, policy.value):
            for name, p in module.named_parameters():
                if name.endswith("bias"):
                    assert not p.detach().any()
    assert cleanrl.decoder.weight.detach().norm(dim=1).max() < 0.02
    with pytest.raises(ValueError, match="unknown policy init"):
        Policy(obs, act, core=core, init="xavier")


def _torch_default_bound(layer):
    """The bound b of torch's default U(-b, b) for ``layer``'s weights and biases (1/sqrt(fan_in);
    an LSTM's: 1/sqrt(hidden size))."""
    if isinstance(layer, torch.nn.LSTM):
        return layer.hidden_size**-0.5
    return (layer.weight[0].numel()) ** -0.5


@pytest.mark.parametrize("core", ["lstm", "mingru", "mlp"])
def test_torch_init_leaves_every_layer_as_torch_makes_it(core):
    """policy.init torch (PufferLib 4.0's models): no layer keeps an override. Every weight and bias of
    the encoder, core and heads lies in torch's U(-b, b), b = 1/sqrt(fan_in) (the LSTM's 1/sqrt(h)),
    with that uniform's spread b/sqrt(3); no bias is zero and the logits are not scaled to 0.01 (the
    pufferlib and cleanrl inits break these: orthogonal weights spill past b); the LSTM cell still
    shares the LSTM's weights. The Nature CNN's convolutions too."""
    torch.manual_seed(0)
    obs, act = spaces.Box(-1, 1, (118,), np.float32), spaces.Discrete(3)
    policy = Policy(obs, act, core=core, hidden_size=128, init="torch")
    image = Policy(spaces.Box(0, 255, (40, 40, 3), np.uint8), act, core=core, hidden_size=64, init="torch")
    layers = [m for p in (policy, image) for m in p.modules() if hasattr(m, "reset_parameters")]
    assert {type(m).__name__ for m in layers} >= {"Linear", "Conv2d"}
    for layer in layers:
        if isinstance(layer, torch.nn.LSTMCell):  # the LSTM's own weights, checked there
            continue
        bound = _torch_default_bound(layer)
        for name, p in layer.named_parameters(recurse=False):
            p = p.detach()
            assert p.abs().max() <= bound, (type(layer).__name__, name)
            assert p.all(), (type(layer).__name__, name)
            if p.numel() >= 300:
                assert p.std() == pytest.approx(bound / 3**0.5, rel=0.15), (type(layer).__name__, name)
    assert policy.decoder.weight.detach().norm(dim=1).min() > 0.1
    torch.manual_seed(0)
    pufferlib = Policy(obs, act, core=core, hidden_size=128)
    if core == "mlp":  # its Default policy: torch's encoder, logits at 0.01
        assert pufferlib.decoder.weight.detach().norm(dim=1).max() < 0.02
    else:  # its LSTM wrapper: orthogonal weights
        assert pufferlib.encoder[0].weight.detach().abs().max() > _torch_default_bound(pufferlib.encoder[0])
    if core == "lstm":
        assert policy.cell.weight_ih is policy.core.weight_ih_l0


def test_encoder_activation_none_is_one_linear_and_image_encoders_refuse_it():
    """policy.encoder_activation none: the linear and onehot encoders are their Linear alone (PufferLib
    4.0's encoder), with the weights' names and, from one seed, the weights of gelu (the default:
    Linear then GELU); the cnn and nature encoders, whose layers have their own activations, refuse
    it in one line."""
    from torch.nn import functional as F

    for space, kind in (
        (spaces.Box(-1, 1, (6,), np.float32), "linear"),
        (spaces.Box(0, 2, (12,), np.uint8), "onehot"),
    ):
        torch.manual_seed(0)
        gelu = Policy(space, spaces.Discrete(3), core="mlp", hidden_size=16)
        torch.manual_seed(0)
        bare = Policy(space, spaces.Discrete(3), core="mlp", hidden_size=16, encoder_activation="none")
        assert gelu.encoder_choice[0] == bare.encoder_choice[0] == kind
        assert [type(m) for m in gelu.encoder] == [torch.nn.Linear, torch.nn.GELU]
        assert [type(m) for m in bare.encoder] == [torch.nn.Linear]
        want, got = gelu.state_dict(), bare.state_dict()
        assert list(want) == list(got) and all(torch.equal(want[k], got[k]) for k in want)
        obs = torch.as_tensor(np.stack([space.sample() for _ in range(5)]))
        linear = F.linear(bare.to_float(obs), bare.encoder[0].weight, bare.encoder[0].bias)
        with torch.no_grad():
            torch.testing.assert_close(bare.encode(obs), linear)
            torch.testing.assert_close(gelu.encode(obs), F.gelu(linear))
        assert (linear < 0).any()  # what GELU would have bent
    for encoder in ("cnn", "nature"):
        with pytest.raises(
            ConfigError,
            match=f"encoder_activation none applies to the linear and onehot encoders, not {encoder}",
        ):
            Policy(spaces.Box(0, 255, (40, 40, 3), np.uint8), spaces.Discrete(3), encoder=encoder,
                   encoder_activation="none")  # fmt: skip
    with pytest.raises(ValueError, match="encoder_activation 'swish'; choose gelu, none, tanh, relu"):
        Policy(spaces.Box(-1, 1, (6,), np.float32), spaces.Discrete(3), encoder_activation="swish")


def test_the_policy_switches_default_to_todays_policy_and_reach_it_from_the_config():
    """policy.init (default pufferlib) and policy.encoder_activation (default gelu): the default
    config builds, from one seed, the very weights of a Policy given neither argument, with GELU
    after the encoder; --policy.init torch --policy.encoder-activation none builds PufferLib 4.0's
    (one bare Linear, no zero biases)."""
    cfg = small_config("squared", "--policy.core", "mingru")
    assert (cfg.policy.init, cfg.policy.encoder_activation) == ("pufferlib", "gelu")
    assert (cfg.train.prio_replacement, cfg.train.muon_ns) == (False, "heavyball")
    vec = vector.make_from_config(cfg)
    try:
        torch.manual_seed(0)
        made = make_policy(cfg, vec)
        torch.manual_seed(0)
        p = cfg.policy
        plain = Policy(vec.single_observation_space, vec.single_action_space, core=p.core,
                       hidden_size=p.hidden_size, encoder=p.encoder, obs_scale=p.obs_scale,
                       num_layers=p.num_layers)  # fmt: skip
        want, got = plain.state_dict(), made.state_dict()
        assert list(want) == list(got) and all(torch.equal(want[k], got[k]) for k in want)
        assert isinstance(made.encoder[-1], torch.nn.GELU)
        cfg4 = small_config(
            "squared",
            "--policy.core",
            "mingru",
            "--policy.init",
            "torch",
            "--policy.encoder-activation",
            "none",
        )
        made4 = make_policy(cfg4, vec)
    finally:
        vec.close()
    assert [type(m) for m in made4.encoder] == [torch.nn.Linear]
    assert made4.encoder[0].bias.detach().all() and made4.value.bias.detach().all()
    with pytest.raises(ConfigError, match="pufferlib.*cleanrl.*torch"):
        small_config("squared", "--policy.init", "xavier")


def test_stop_steps_ends_the_run_early_with_the_schedule_of_total_timesteps(tmp_path):
    """train --stop-steps N stops after N agent-steps, while the learning rate still anneals over
    train.total_timesteps (so a run stopped at 30 M steps of 90 M matches a 90 M run up to there)."""
    from click.testing import CliRunner

    from appliance.cli import cli

    args = ["train", "squared", "--gpu", "cpu", "--no-dashboard", "--run-id", "early", "--stop-steps", "3e4",
            "--train.data-dir", str(tmp_path), "--vec.num-envs", "64", "--train.bptt-horizon", "16",
            "--train.minibatch-size", "512", "--train.max-minibatch-size", "512", "--train.total-timesteps", "1e6",
            "--policy.core", "mlp", "--train.learning-rate", "0.01"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    import json

    records = [json.loads(line) for line in (tmp_path / "early" / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    assert 30_000 <= last["global_step"] < 30_000 + 64 * 16
    lr = last["loss/learning_rate"]
    assert 0.99 * 0.01 < lr < 0.01  # 3 % into a 1 M-step cosine: barely annealed (not cut to 3e4 steps)
    bad = CliRunner().invoke(cli, ["train", "squared", "--stop-steps", "0"])
    assert bad.exit_code == 2 and "--stop-steps: '0' is out of range" in bad.output


@pytest.mark.parametrize("engine", ["on", "off"])
@pytest.mark.parametrize("reset", [True, False])
def test_reset_state_zeroes_the_recurrent_state_at_each_rollout(engine, reset):
    """train.reset_state true (PufferLib 3.0's rollout): every agent starts each rollout from the
    initial state, so each segment trains from it; false: the state carries on across rollouts. On
    the engine's buffers (views of the trainer's state) and the plain loop alike."""
    cfg = small_config("squared", "--train.reset-state", str(reset).lower(), "--train.engine", engine)
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        for _ in range(2):
            trainer.evaluate()
        h0 = trainer.rollout.initial_state[0]
        first_rows = h0[: trainer.vec.num_agents]  # each agent's first segment of the second rollout
        assert (first_rows.abs().sum() == 0) == reset
    finally:
        trainer.close()


@pytest.mark.parametrize("has_bf16", [True, False])
def test_bfloat16_on_a_cpu_trains_float32_masters_and_warns_without_bf16_units(monkeypatch, has_bf16):
    """train.precision bfloat16 on a CPU: a bfloat16 rollout copy beside float32 master weights, the
    update under bf16 autocast; a CPU without AVX512-BF16/AMX gets a warning (bf16 is slower there)."""
    fake_cpu_bf16(monkeypatch, has_bf16)
    cfg = small_config("squared", "--train.precision", "bfloat16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        assert any("without bfloat16 instructions" in str(w.message) for w in caught) != has_bf16
        assert trainer.amp and trainer.rollout_policy is not trainer.policy
        assert all(p.dtype == torch.bfloat16 for p in trainer.rollout_policy.parameters())
        assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
        for _ in range(2):
            trainer.evaluate()
            losses = trainer.train()
        assert np.isfinite([losses["policy_loss"], losses["value_loss"]]).all()
        assert abs(losses["importance"] - 1) < 0.5
    finally:
        trainer.close()


@pytest.mark.parametrize("has_bf16", [True, False])
def test_precision_auto_is_bfloat16_exactly_where_the_cpu_has_bf16_units(monkeypatch, has_bf16):
    """train.precision auto (breakout's on the cpu profile): bfloat16 on a CPU with AVX512-BF16 or
    AMX, float32 on one without (where bf16 would be slower); an explicit precision is kept either
    way, and the trainer says which it resolved to."""
    from appliance.config import resolve
    from appliance.train.make import resolve_precision

    fake_cpu_bf16(monkeypatch, has_bf16)
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == ("bfloat16" if has_bf16 else "float32")
    assert resolve_precision("float32", cpu) == "float32"
    assert resolve(env="breakout", profile="cpu").train.precision == "auto"
    cfg = small_config("squared", "--train.precision", "auto")
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        assert trainer.precision == ("bfloat16" if has_bf16 else "float32")
        assert trainer.amp == has_bf16
    finally:
        trainer.close()


# ------------------------------------------------------------------------ the loss, in one place


def test_the_torch_loss_is_what_trains_on_the_cpu(monkeypatch):
    """docs/architecture.md, "How to change the loss or the advantage", step 1: an edit to losses.ppo_loss is what the
    trainer minimizes here, for discrete and Box actions alike."""
    real, seen = losses.ppo_loss, []

    def edited(*args):
        seen.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(losses, "ppo_loss", edited)
    for env in ("squared", "MountainCarContinuous-v0"):
        cfg = small_config(env)
        with Trainer(cfg, vector.make_from_config(cfg)) as trainer:
            trainer.evaluate()
            trainer.train()
            minibatches = trainer.hp.update_epochs * trainer.segments // trainer.mb_segments
        assert len(seen) >= minibatches, env
        seen.clear()


def test_the_gpu_start_up_check_holds_the_fused_loss_to_the_edited_torch_loss(monkeypatch):
    """Step 3: a fused kernel that still computes the old loss is refused once the torch loss
    changes. The stand-in for the kernel here is the old loss through autograd."""
    real, coefs = losses.ppo_loss, losses.Coefs(0.2, 0.2, 0.5, 0.01)

    def stale_kernel(*args, grad_scale=1.0):
        with monkeypatch.context() as m:
            m.setattr(losses, "ppo_loss", real)
            return losses.gradients(*args[:9], losses.Coefs(*args[9:]), grad_scale)

    losses.check_fused(stale_kernel, [3, 4], coefs, "cpu")  # the same loss: no complaint

    def edited(*args):
        res = real(*args)
        return res._replace(loss=res.loss + 0.1 * args[0].mean())  # a researcher's new term

    monkeypatch.setattr(losses, "ppo_loss", edited)
    with pytest.raises(TrainingError, match="fused CUDA loss differs from the torch loss .* in grad_logits"):
        losses.check_fused(stale_kernel, [3, 4], coefs, "cpu")


def test_the_edited_torch_advantage_is_what_trains_on_the_cpu(monkeypatch):
    """docs/architecture.md, "How to change the loss or the advantage", step 1: on a CPU the host build of
    kernels/advantage.cuh runs for float32 tensors; an edit to advantage.advantage that the build
    does not have is found when the trainer starts, said in one warning, and the run uses the edit.
    Unedited, the build runs and nothing is said."""
    from appliance.gpu import host

    cfg = small_config("squared")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the build agrees with the definition: no warning
        with Trainer(cfg, vector.make_from_config(cfg)) as trainer:
            assert trainer.advantage_accelerated
    real, calls = advantage.advantage, []

    def edited(
        values, rewards, dones, ratios, gamma, gae_lambda, rho_clip=1.0, c_clip=1.0, rho_on="td_error"
    ):
        calls.append(values.shape)
        return 0.5 * real(values, rewards, dones, ratios, gamma, gae_lambda, rho_clip, c_clip, rho_on)

    monkeypatch.setattr(advantage, "advantage", edited)
    expect = (
        pytest.warns(UserWarning, match=r"advantage\(\) .* differs from the CPU build")
        if host.available()
        else nullcontext()
    )
    with expect, Trainer(cfg, vector.make_from_config(cfg)) as trainer:
        calls.clear()  # the start-up check's own call
        trainer.evaluate()
        trainer.train()
        minibatches = trainer.hp.update_epochs * trainer.segments // trainer.mb_segments
    assert len(calls) >= minibatches


def test_the_gpu_start_up_check_holds_the_fused_advantage_to_the_edited_torch_one(monkeypatch):
    """The CUDA kernel that still computes the old advantage is refused, in one line, once
    advantage.advantage changes; the stand-in for the kernel here is the unedited function."""
    real = advantage.advantage
    monkeypatch.setattr(kernels, "advantage", real)
    monkeypatch.setattr(advantage, "_build_for", lambda *tensors: kernels.advantage)
    assert advantage.check_at_start(
        torch.device("cpu"), advantage.Coefs(0.99, 0.95, 1.0, 1.0)
    )  # the same: no complaint
    monkeypatch.setattr(advantage, "advantage", lambda *a: real(*a) + 0.01)
    with pytest.raises(
        TrainingError, match="fused CUDA advantage differs from advantage.* kernels/advantage.cuh"
    ):
        advantage.check_at_start(torch.device("cpu"), advantage.Coefs(0.99, 0.95, 1.0, 1.0))


def test_a_run_saved_before_obs_scale_is_evaluated_on_the_observations_it_trained_on(tmp_path):
    """go's defaults now feed raw observations; a go run saved before policy.obs_scale existed was
    trained on them divided by their bounds, and eval must rebuild that policy, not today's."""
    from appliance.config import resolve
    from appliance.train.evaluate import config_of_run

    old = {"policy": {"core": "lstm", "hidden_size": 128, "encoder": "auto", "init": "pufferlib"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    assert config_of_run(resolve(env="go"), tmp_path).policy.obs_scale == "bounds"
    new = {"policy": {**old["policy"], "obs_scale": "none"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(new))
    assert config_of_run(resolve(env="go"), tmp_path).policy.obs_scale == "none"
    (tmp_path / "config.yaml").unlink()  # no saved config: the command's own settings
    assert config_of_run(resolve(env="go"), tmp_path).policy.obs_scale == "none"


def test_a_run_saved_before_encoder_activation_is_evaluated_with_its_gelu(tmp_path):
    """A run saved before policy.encoder_activation existed had GELU after its encoder: eval rebuilds
    that, whatever the command line says; a run that saved the key gets its own."""
    from appliance.train.evaluate import config_of_run

    old = {"policy": {"core": "lstm", "hidden_size": 128, "encoder": "auto", "init": "pufferlib"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    asked = ["--policy.encoder-activation", "none"]
    assert (
        config_of_run(resolve(env="squared", overrides=asked), tmp_path).policy.encoder_activation == "gelu"
    )
    new = {"policy": {**old["policy"], "encoder_activation": "none"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(new))
    assert config_of_run(resolve(env="squared"), tmp_path).policy.encoder_activation == "none"


@pytest.mark.parametrize(
    ("ratio", "epochs", "want"), [("auto", 2, 8), ("1.5", 1, 6), ("1.5", 3, 6), ("0.1", 1, 1)]
)
def test_replay_ratio_is_fractional_passes_over_the_batch(ratio, epochs, want):
    """train.replay_ratio (PufferLib 4.0's): int(ratio x batch / minibatch) minibatches an epoch, at
    least one; auto keeps update_epochs' whole passes. Here the batch is four minibatches."""
    cfg = small_config(
        "squared",
        "--train.minibatch-size",
        "16",
        "--train.replay-ratio",
        ratio,
        "--train.update-epochs",
        str(epochs),
    )
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    steps = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda: steps.append(1) or step()
    try:
        assert trainer.segments // trainer.mb_segments == 4
        trainer.evaluate()
        trainer.train()
        assert len(steps) == want
    finally:
        trainer.close()


@pytest.mark.parametrize("floor", [0.0, 0.25])
def test_the_learning_rate_anneals_down_to_min_lr_ratio(floor):
    """The cosine schedule ends at learning_rate x train.min_lr_ratio (PufferLib 4.0's), and starts
    at the learning rate."""
    cfg = small_config("squared", "--train.min-lr-ratio", str(floor), "--train.learning-rate", "0.01")
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        assert trainer.train()["learning_rate"] == pytest.approx(0.01)
        trainer.global_step = cfg.train.total_timesteps
        trainer.evaluate()
        assert trainer.train()["learning_rate"] == pytest.approx(0.01 * floor)
    finally:
        trainer.close()


@pytest.mark.parametrize("beta1", [1.0, 0.84])
def test_the_importance_exponent_anneals_from_prio_beta0_to_prio_beta1(monkeypatch, beta1):
    """Each update's beta is prio_beta0 + (prio_beta1 - prio_beta0) * global_step / total_timesteps:
    to 1 by default (a full correction at the end), to b0 + (1 - b0) * alpha where a config follows
    PufferLib's own anneal (the 4.0 parity configs)."""
    seen = []
    real = kernels.prio_sample
    monkeypatch.setattr(kernels, "prio_sample", lambda *a, **k: seen.append(float(a[2])) or real(*a, **k))
    overrides = {"prio_beta0": 0.2, "total_timesteps": 1000}
    cfg = small_config("squared", train=overrides if beta1 == 1.0 else {**overrides, "prio_beta1": beta1})
    assert cfg.train.prio_beta1 == beta1
    with Trainer(cfg, vector.make_from_config(cfg)) as trainer:
        trainer.evaluate()
        trainer.global_step = 250  # a quarter of the way
        trainer.train()
    assert seen and all(b == pytest.approx(0.2 + (beta1 - 0.2) * 0.25) for b in seen)
