"""Env parameters have one source, the C ParamSpec (envs/<name>.h): the config's env section is built
from it, an env YAML may only tune values inside it, and the batch rules are checked at resolve time."""

from __future__ import annotations

import pytest

from appliance import ocean
from appliance.config import env_names, env_yaml, resolve, yaml_problems
from appliance.errors import ConfigError


@pytest.mark.parametrize("env", env_names())
def test_every_env_yaml_only_tunes_values_the_paramspec_accepts(env):
    """Fails on a key the ParamSpec lacks, a wrong type, a value outside the C range, or a value that
    merely repeats the C default, and says which."""
    assert yaml_problems(env) == []


@pytest.mark.parametrize("env", env_names())
def test_the_env_section_is_the_paramspec_defaults_typed_as_c_declares(env):
    section = resolve(env=env).env
    spec = ocean.params(env)
    assert list(section) == list(spec)
    for key, p in spec.items():
        assert type(section[key]) is p.type, key
        assert p.low <= section[key] <= p.high


def test_yaml_problems_name_each_kind_of_mistake(tmp_path, monkeypatch):
    from appliance.config import env_params

    path = tmp_path / "snake.yaml"
    path.write_text(
        "env:\n  width: 12\n  height: 2.5\n  vision: 99\n  num_snkes: 3\n  max_ticks: 2000\n"
        "profiles:\n  cpu: {env: {reward_food: 11}}\n"
    )
    monkeypatch.setattr(env_params, "env_yaml", lambda env: path)
    problems = "\n".join(yaml_problems("snake"))
    assert "env.height = 2.5 is not an int" in problems
    assert "env.vision = 99 is outside the C range [1, " in problems
    assert "env.num_snkes is not a parameter of snake" in problems
    assert "env.max_ticks = 2000 repeats the C default" in problems
    assert "profiles.cpu.env.reward_food = 11 is outside the C range [-10, 10]" in problems
    assert "env.width" not in problems  # a tuned value inside the range


def test_a_yaml_env_value_outside_the_c_range_is_a_config_error_at_load(tmp_path, monkeypatch):
    from appliance.config import build

    path = tmp_path / "breakout.yaml"
    path.write_text("env:\n  frameskip: 40\n")
    monkeypatch.setattr(build, "env_yaml", lambda env: path)
    with pytest.raises(
        ConfigError,
        match=r"env.frameskip \(from .*breakout.yaml\): 40 is out of range; expected an int >= 1 and <= 16",
    ):
        resolve(env="breakout")
    path.write_text("env:\n  frame_skip: 4\n")
    with pytest.raises(ConfigError, match=r"unknown config key env.frame_skip .*did you mean env.frameskip"):
        resolve(env="breakout")
    path.write_text("env:\n  frameskip: 2.5\n")
    with pytest.raises(ConfigError, match=r"env.frameskip .*expected an int, got 2.5"):
        resolve(env="breakout")


def test_an_env_without_a_yaml_runs_on_its_paramspec(monkeypatch):
    from appliance.config import build

    monkeypatch.setattr(build, "env_yaml", lambda env: None)
    cfg = resolve(env="squared")
    assert dict(cfg.env) == {"size": 11}
    assert env_yaml("squared") is not None  # the shipped one, with tuned training values


def test_the_binding_refuses_a_fraction_for_an_int_parameter():
    with pytest.raises(ConfigError, match="parameter 'size' = 10.5 must be a whole number"):
        ocean.describe("squared", size=10.5)
    assert ocean.describe("go", komi=6.5)["params"]["komi"] == 7.5  # describe's params are the defaults


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--train.minibatch-size", "1000"],
            r"train.minibatch_size \(1000\) must be a multiple of train.bptt_horizon \(64\); e.g. 960",
        ),
        (
            ["--train.max-minibatch-size", "100"],
            r"train.max_minibatch_size \(100\) must be a multiple of train.bptt_horizon",
        ),
        (
            ["--train.batch-size", "8000"],
            r"train.batch_size \(8000\) must be a multiple of train.bptt_horizon \(64\) and of train.minibatch_size",
        ),
        (["--train.batch-size", "4096", "--train.minibatch-size", "8192"], r"train.batch_size \(4096\)"),
    ],
)
def test_batch_rules_are_checked_when_the_config_is_resolved(args, message):
    with pytest.raises(ConfigError, match=message):
        resolve(env="squared", overrides=args)


def test_batch_rules_that_hold_pass():
    resolve(env="squared", overrides=["--train.batch-size", "16384", "--train.minibatch-size", "4096"])
    resolve(overrides=["--train.bptt-horizon", "16"])


def test_minibatches_of_single_transitions_need_not_be_whole_segments():
    """A minibatch drawn in single steps (the mlp core with prio_alpha 0, or minibatch_unit
    transitions) may be any divisor of the batch: rl-zoo's Walker2d minibatches of 32 from a row of
    512 steps. Segments still must be whole ones, and the batch a whole number of minibatches."""
    flat = ["--policy.core", "mlp", "--train.prio-alpha", "0", "--train.bptt-horizon", "512"]
    cfg = resolve(
        env="squared", overrides=[*flat, "--train.minibatch-size", "32", "--train.max-minibatch-size", "32"]
    )
    assert cfg.train.minibatch_size == 32 and cfg.train.max_minibatch_size == 32
    with pytest.raises(ConfigError, match=r"minibatch_size \(32\) must be a multiple of train.bptt_horizon"):
        resolve(
            env="squared",
            overrides=[*flat[:2], "--train.bptt-horizon", "512", "--train.minibatch-size", "32"],
        )
    with pytest.raises(ConfigError, match=r"train.batch_size \(1024\) must be a multiple of"):
        resolve(
            env="squared", overrides=[*flat, "--train.minibatch-size", "96", "--train.batch-size", "1024"]
        )
