"""Defaults that fit what the user brings (issue 63 part 5): a family's minibatch fits the batch a
source makes, an unknown id suggests the namespaced id meant (``ALE/Breakout-v5``, not the legacy
``Breakout-v4``), and a train flag given as a config key names the flag."""

from __future__ import annotations

import gymnasium
import pytest
from gymnasium.envs.registration import EnvSpec

from appliance import vector
from appliance.config import resolve
from appliance.config.gymids import unknown_env
from appliance.errors import ConfigError
from appliance.train import Trainer


def test_a_family_minibatch_fits_a_vector_env_of_two(capsys):
    """The classic family's minibatch (256 = 8 segments of 32) is more than a 2-env VectorEnv's
    batch (64): the trainer takes the whole batch, 64 single steps (the family's mlp core draws
    minibatches in transitions), says so, and trains."""
    cfg = resolve(env="appliance.testing:cartpole_pair", overrides=["--train.device", "cpu"])
    assert (cfg.family.name, cfg.train.minibatch_size, cfg.train.bptt_horizon) == ("classic", 256, 32)
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        assert (trainer.batch_size, trainer.transitions, trainer.mb_segments) == (64, True, 64)
        trainer.evaluate()
        trainer.train()
        assert trainer.epoch == 1 and 0 < trainer.global_step <= 64  # NextStep resets are masked
    finally:
        trainer.close()
    assert "minibatches of 64 instead" in capsys.readouterr().err


def test_a_minibatch_the_user_set_is_kept_and_a_misfit_refused():
    cfg = resolve(
        env="appliance.testing:cartpole_pair",
        overrides=["--train.device", "cpu", "--train.minibatch-size", "256"],
    )
    vec = vector.make_from_config(cfg)
    try:
        with pytest.raises(ConfigError, match=r"minibatch_size \(256\) must divide the batch \(64"):
            Trainer(cfg, vec)
    finally:
        vec.close()


def test_families_fit_a_batch_of_any_agent_count():
    from types import SimpleNamespace

    from appliance.config.families import fit_minibatch

    def fit(agents, minibatch=256, origin="family YAML"):
        train = SimpleNamespace(bptt_horizon=32, minibatch_size=minibatch, batch_size="auto")
        return fit_minibatch(SimpleNamespace(train=train, origin=lambda s, k: origin), agents)[0]

    assert [fit(n) for n in (1, 2, 3, 8, 10, 16, 7)] == [32, 64, 96, 256, 160, 256, 224]
    assert fit(2, origin="command line (--train.minibatch-size)") == 256  # the user's: refused later


def test_an_id_without_its_namespace_suggests_the_namespaced_one(monkeypatch):
    for env_id in ("ALE/Gadget63-v5", "Other/Gadget63-v5", "Gadget63-v4"):
        monkeypatch.setitem(gymnasium.registry, env_id, EnvSpec(env_id, entry_point="gymnasium.envs:x"))
    assert "did you mean 'ALE/Gadget63-v5'?" in str(unknown_env("Gadget63-v5"))
    assert "did you mean 'ALE/Gadget63-v5'?" in str(unknown_env("gadget63-v5"))


def test_a_train_flag_given_as_a_config_key_names_the_flag():
    with pytest.raises(ConfigError, match="--tensorboard is a flag of puffer-bench train, not a config key"):
        resolve(env="CartPole-v1", overrides=["--train.tensorboard"])


def test_mujoco_leaves_no_log_file_and_no_deprecation_lines(tmp_path, monkeypatch, capfd):
    pytest.importorskip("mujoco", reason="the mujoco extra: pip install 'gymnasium[mujoco]'")
    from appliance.emulation import make_factory

    monkeypatch.chdir(tmp_path)
    env = make_factory("HalfCheetah-v5")()  # its XML holds a deprecated attribute MuJoCo warns about
    env.reset(seed=0)
    env.close()
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
    out, err = capfd.readouterr()
    assert "deprecated" not in out + err


def test_a_profiles_minibatch_is_fitted_to_a_horizon_set_elsewhere_and_a_users_is_refused():
    """The cpu profile's minibatch (2,048) over a horizon of 48 from another layer (PufferLib's
    laser_puzzle ini; here the command line) was a refusal with no flag of the user's at fault: it
    is rounded down to whole segments and noted as derived. A minibatch the user set is refused."""
    given = resolve(env="breakout", profile="cpu").train.minibatch_size
    assert given % 48  # breakout's own minibatch is not whole segments of 48 steps
    cfg = resolve(env="breakout", profile="cpu", overrides=["--train.bptt-horizon", "48"])
    assert cfg.train.minibatch_size == given // 48 * 48
    assert cfg.history[("train", "minibatch_size")][-1][0].startswith("set by resolve (whole segments")
    with pytest.raises(
        ConfigError, match=r"minibatch_size \(2048\) must be a multiple of train.bptt_horizon \(48\)"
    ):
        resolve(
            env="breakout",
            profile="cpu",
            overrides=["--train.bptt-horizon", "48", "--train.minibatch-size", "2048"],
        )
