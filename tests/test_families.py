"""Envs a user brings: defaults by family, Gymnasium ids as users type them (plugins, did-you-mean,
keyword arguments), image observations either way round, and the Atari preprocessing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from gymnasium import spaces

from appliance import vector
from appliance.cli import cli
from appliance.config import families, gymids, resolve
from appliance.config.images import image_layout
from appliance.emulation.atari import area_matrix
from appliance.errors import ConfigError
from appliance.train import Trainer
from appliance.train.dashboard import Reporter
from appliance.train.policy import Policy

ALE = importlib.util.find_spec("ale_py") is not None
needs_ale = pytest.mark.skipif(not ALE, reason="ale-py is not installed (pip install ale-py)")
FRAMES = "appliance.testing:Frames"


# ----------------------------------------------------------------------------- families


def test_a_classic_control_id_gets_the_classic_family_over_any_profile():
    for profile in ("cpu", "4090"):
        cfg = resolve(env="CartPole-v1", profile=profile)
        assert cfg.family.name == "classic" and "Discrete(2)" in cfg.family.reason
        assert (cfg.vec.num_envs, cfg.vec.backend, cfg.train.minibatch_size) == (8, "serial", 256)
        assert cfg.policy.core == "mlp" and cfg.train.update_epochs == 20
        assert cfg.sources[-1].endswith("families/classic.yaml")
    # the command line still wins over the family
    assert resolve(env="CartPole-v1", overrides=["--vec.num-envs", "16"]).vec.num_envs == 16


def test_each_family_is_read_from_the_spaces():
    assert families.classify(spaces.Box(-1, 1, (4,)), spaces.Discrete(2), None)[0] == "classic"
    assert families.classify(spaces.Box(-1, 1, (3,)), spaces.Box(-2, 2, (1,)), None)[0] == "continuous"
    frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert families.classify(frames, spaces.Discrete(6), None)[0] == "atari"
    assert families.classify(spaces.Box(-1, 1, (4,)), spaces.Discrete(2), 3)[0] == "multiagent"
    assert resolve(env=FRAMES).family.name == "atari"
    assert resolve(env="appliance.testing:ComingAndGoing").family.name == "multiagent"
    assert resolve(env="appliance.testing:Steer").family.name == "continuous"


def test_an_id_with_its_own_yaml_keeps_it_and_ocean_envs_have_no_family():
    cfg = resolve(env="Pendulum-v1", profile="cpu")
    assert cfg.family.name is None and "Pendulum-v1.yaml" in cfg.family.reason
    assert cfg.train.gamma == 0.95 and not any("families" in s for s in cfg.sources)
    assert resolve(env="squared").family is None


def test_family_flag_picks_or_drops_a_family_and_typos_are_one_line():
    assert resolve(env="CartPole-v1", family="continuous").train.update_epochs == 10
    plain = resolve(env="CartPole-v1", family="none")
    assert plain.train.optimizer == "muon" and plain.family.name is None
    with pytest.raises(ConfigError, match="did you mean 'classic'"):
        resolve(env="CartPole-v1", family="clasic")
    with pytest.raises(ConfigError, match="squared is an Ocean env"):
        resolve(env="squared", family="classic")


def test_train_prints_the_family_and_the_encoder_with_its_parameter_count(tmp_path):
    result = CliRunner().invoke(
        cli,
        ["train", "CartPole-v1", "--stop-steps", "256", "--no-dashboard", "--train.data-dir", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].startswith("family: classic (Discrete(2) actions")
    assert "families/classic.yaml" in lines[1] and "--family NAME" in lines[1]
    assert lines[2].startswith("encoder: linear (flat observations of shape (4,)")
    assert "320 parameters of the policy's" in lines[2]


# ----------------------------------------------------------------------------- ids and parameters


def test_a_misspelt_id_gets_a_did_you_mean_over_gymnasium_and_ocean_names():
    with pytest.raises(ConfigError, match="did you mean 'CartPole-v1'") as e:
        resolve(env="CartPol-v1")
    assert "known envs: the Ocean envs" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="did you mean 'squared'"):
        resolve(env="sqaured")
    with pytest.raises(ConfigError, match="did you mean 'CartPole-v1'"):
        vector.make("cartpole-v1", backend="serial")


def test_a_pettingzoo_module_named_without_its_factory_gets_the_import_path(tmp_path, monkeypatch):
    """``mpe2.simple_spread_v3``, as PettingZoo's docs import it, names the module: the error offers
    ``mpe2.simple_spread_v3:parallel_env``, the form that trains (a stand-in package here)."""
    pkg = tmp_path / "fakempe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "spread_v3.py").write_text("def parallel_env(**kwargs):\n    raise RuntimeError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"did you mean 'fakempe.spread_v3:parallel_env'\?"):
        resolve(env="fakempe.spread_v3")
    with pytest.raises(ConfigError, match="unknown env 'fakempe.nothing_here'"):
        resolve(env="fakempe.nothing_here")


def test_a_namespace_whose_plugin_is_missing_says_what_to_install(monkeypatch):
    monkeypatch.setitem(gymids.PLUGINS, "Fake", ("no_such_plugin_module", "pip install fake-envs"))
    with pytest.raises(
        ConfigError, match="registered by the no_such_plugin_module package.*pip install fake-envs"
    ):
        resolve(env="Fake/Thing-v0")


@needs_ale
def test_ale_ids_work_as_typed_without_importing_ale_py_first():
    code = (
        "from appliance.config import resolve; c = resolve(env='ALE/Pong-v5'); "
        "print(c.family.name, c.vec.num_envs, c.vec.preprocess)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["atari", "8", "auto"]
    with pytest.raises(ConfigError, match="did you mean 'ALE/Pong-v5'"):
        resolve(env="ALE/Pnog-v5")


def test_env_keys_are_keyword_arguments_for_gymnasium_make():
    cfg = resolve(env="CartPole-v1", overrides=["--env.sutton-barto-reward", "true"])
    assert dict(cfg.env) == {"sutton_barto_reward": True}
    with vector.make_from_config(cfg) as vec:
        vec.reset(0)
        _, rewards, *_ = vec.step(np.zeros(vec.num_agents, np.int32))
        assert (rewards == 0).all()  # Sutton and Barto's reward: 0 a step, -1 at the end
    bad = resolve(env="CartPole-v1", overrides=["--env.bogus", "1"])
    with pytest.raises(ConfigError, match="with env parameters {'bogus': 1} failed: TypeError") as e:
        vector.make_from_config(bad)
    assert "\n" not in str(e.value)


def test_env_keys_reach_an_import_paths_factory():
    cfg = resolve(env=FRAMES, overrides=["--env.channels-last", "true", "--env.side", "16"])
    with vector.make_from_config(cfg) as vec:
        assert vec.obs_codec.space.shape == (16, 16, 4)


# ----------------------------------------------------------------------------- images


@pytest.mark.parametrize(
    ("shape", "order", "channels"),
    [
        ((84, 84, 3), "HWC", 3),
        ((4, 84, 84), "CHW", 4),
        ((84, 84, 4), "HWC", 4),
        ((4, 84, 84, 3), "SHWC", 12),
        ((4, 3, 64, 64), "SCHW", 12),
        ((84, 84), "HW", 1),
        ((210, 160, 3), "HWC", 3),
    ],
)
def test_images_are_recognised_either_way_round(shape, order, channels):
    layout = image_layout(shape)
    assert layout is not None and (layout.order, layout.channels) == (order, channels)


@pytest.mark.parametrize("shape", [(4,), (9, 9), (3, 4, 4), (128,), (2, 2, 2, 2)])
def test_flat_vectors_and_boards_are_no_images(shape):
    assert image_layout(shape) is None


def test_the_nature_cnn_reads_frames_either_way_round_alike():
    """The same weights over the same frames, given channel-first and channel-last: the same outputs."""
    first = Policy(spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6), core="mlp", hidden_size=512)
    last = Policy(spaces.Box(0, 255, (84, 84, 4), np.uint8), spaces.Discrete(6), core="mlp", hidden_size=512)
    assert first.encoder_choice[0] == last.encoder_choice[0] == "nature"
    last.load_state_dict(first.state_dict())
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    out_first, value_first, _ = first.step(frames, ())
    out_last, value_last, _ = last.step(frames.permute(0, 2, 3, 1).contiguous(), ())
    torch.testing.assert_close(out_first, out_last)
    torch.testing.assert_close(value_first, value_last)
    count = sum(p.numel() for p in first.encoder.parameters())
    assert count == 1_684_128 and f"{count:,} parameters" in first.describe_encoder()


def test_small_images_get_the_small_cnn_and_image_encoders_refuse_vectors():
    small = Policy(spaces.Box(0, 255, (16, 16, 3), np.uint8), spaces.Discrete(3), core="mlp", hidden_size=32)
    assert small.encoder_choice[0] == "cnn"
    with pytest.raises(ConfigError, match="at least 36x36.*--policy.encoder cnn"):
        Policy(spaces.Box(0, 255, (16, 16, 3), np.uint8), spaces.Discrete(3), encoder="nature")
    with pytest.raises(ConfigError, match="needs image observations.*got shape \\(4,\\)"):
        Policy(spaces.Box(-1, 1, (4,)), spaces.Discrete(3), encoder="nature")


@pytest.mark.parametrize("channels_last", ["false", "true"])
def test_emulated_frames_reach_the_cnn_in_their_own_shape(channels_last):
    """A Python env's frames travel flat through the vector; the policy builds its CNN on the
    env's own shape (channel-first frames used to get a Linear over every pixel) and trains."""
    cfg = resolve(
        env=FRAMES,
        overrides=[
            *("--env.channels-last", channels_last),
            *("--vec.backend", "serial", "--vec.num-envs", "2", "--train.device", "cpu"),
            *(
                "--train.bptt-horizon",
                "8",
                "--train.minibatch-size",
                "16",
                "--train.max-minibatch-size",
                "16",
            ),
            *("--policy.hidden-size", "32"),
        ],
    )
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        assert trainer.policy.encoder_choice[0] == "nature" and trainer.policy.image.channels == 4
        trainer.evaluate()
        assert np.isfinite(trainer.train()["policy_loss"])
    finally:
        trainer.close()


# ----------------------------------------------------------------------------- Atari preprocessing


def test_the_area_resize_averages_what_each_output_pixel_covers():
    rows = area_matrix(210, 84)
    assert rows.shape == (84, 210) and np.allclose(rows.sum(1), 1)  # a constant frame stays constant
    half = area_matrix(4, 2)
    assert np.allclose(half @ np.array([1.0, 3.0, 5.0, 7.0]), [2.0, 6.0])  # an exact halving: block means


def test_atari_preprocessing_refuses_what_is_no_ale_game():
    with pytest.raises(ConfigError, match="ALE/Pong-v5 with ale-py.*--vec.preprocess none"):
        vector.make("CartPole-v1", backend="serial", preprocess="atari")
    with pytest.raises(ConfigError, match="choose one of: auto, ale_vector, atari, none"):
        resolve(env="CartPole-v1", overrides=["--vec.preprocess", "atar"])


@needs_ale
def test_ale_games_come_as_four_stacked_84x84_frames():
    with vector.make("ALE/Pong-v5", backend="serial", preprocess="atari") as vec:  # Python workers' frames
        assert vec.obs_codec.space.shape == (4, 84, 84)
        obs, *_ = vec.reset(0)
        obs, *_ = vec.step(np.zeros(1, np.int32))
        assert obs.dtype == np.uint8 and obs.max() > 0
    with pytest.raises(ConfigError, match="leave env.frameskip out"):
        vector.make("ALE/Pong-v5", backend="serial", preprocess="atari", frameskip=4)
    with vector.make("ALE/Pong-v5", backend="serial", preprocess="none") as raw:
        assert raw.obs_codec.space.shape == (210, 160, 3)


# ----------------------------------------------------------------------------- logging


def test_the_log_says_when_no_episode_has_ended_yet():
    trainer = SimpleNamespace(
        policy=torch.nn.Linear(1, 1),
        epoch=3,
        global_step=3072,
        sps=100.0,
        losses={},
        env_stats={},
        timings=SimpleNamespace(buffers=[]),
    )
    reporter = Reporter(trainer, "Hopper-v5", live=False)
    assert reporter.line().endswith("| no episode has ended yet: 3,072 agent-steps in")
    trainer.env_stats = {"episode_return": 12.5, "n": 2.0}
    assert "no episode" not in reporter.line() and "episode_return=12.5" in reporter.line()
