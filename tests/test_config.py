"""Config layering, override parsing and every ConfigError path."""

from __future__ import annotations

import json

import pytest
import yaml

from appliance.config import Config, coerce, env_names, parse_overrides, profile_names, resolve
from appliance.errors import ConfigError


def test_defaults_have_every_section_and_typed_values():
    cfg = resolve()
    assert set(cfg.data) == {"vec", "train", "policy", "env", "bench"}
    assert isinstance(cfg.train.learning_rate, float)
    assert isinstance(cfg.vec.num_envs, int)
    assert cfg.vec.num_threads == "auto"
    assert cfg.env == {}


def test_layers_apply_in_order(tmp_path):
    user = tmp_path / "user.yaml"
    user.write_text("train:\n  learning_rate: 0.5\n  minibatch_size: 1024\n")
    cfg = resolve(
        env="squared", profile="4090", config_file=user, overrides=["--train.minibatch-size", "512"]
    )
    assert cfg.env["size"] == 11  # env layer
    assert cfg.train.total_timesteps == 3_500_000  # env layer (squared.yaml) beats defaults (10 M)
    assert cfg.train.precision == "bfloat16"  # profile layer
    assert cfg.bench.expected_gpu == "RTX 4090" and cfg.bench.profile == "4090"
    assert cfg.train.learning_rate == 0.5  # user file beats env layer
    assert cfg.train.minibatch_size == 512  # command line beats user file
    assert cfg.sources[-1] == "command line"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--train.learning-rate", "3e-4"], {"train": {"learning_rate": "3e-4"}}),
        (["--train.learning_rate=3e-4"], {"train": {"learning_rate": "3e-4"}}),
        (["--train.compile"], {"train": {"compile": "true"}}),
        (
            ["--train.compile", "--vec.num-envs", "8"],
            {"train": {"compile": "true"}, "vec": {"num_envs": "8"}},
        ),
        (["--train.learning-rate", "-1e-3"], {"train": {"learning_rate": "-1e-3"}}),
    ],
)
def test_parse_overrides(args, expected):
    assert parse_overrides(args) == expected


def test_override_values_are_typed_from_defaults():
    cfg = resolve(
        overrides=[
            "--train.learning-rate",
            "3e-4",
            "--vec.num-envs",
            "1e3",
            "--vec.zero-copy",
            "no",
            "--bench.threads",
            "1,2,4",
            "--vec.batch-size",
            "64",
            "--train.device",
            "cpu",
        ]
    )
    assert cfg.train.learning_rate == pytest.approx(3e-4)
    assert cfg.vec.num_envs == 1000 and isinstance(cfg.vec.num_envs, int)
    assert cfg.vec.zero_copy is False
    assert cfg.bench.threads == [1, 2, 4]
    assert cfg.vec.batch_size == 64
    assert cfg.train.device == "cpu"


@pytest.mark.parametrize(
    ("default", "value", "result"),
    [
        (1, "7", 7),
        (1.0, 2, 2.0),
        (True, "off", False),
        ("a", "b", "b"),
        ([1], "[3, 4]", [3, 4]),
        ("auto", "auto", "auto"),
        ("auto", "12", 12),
        ("auto", 0.5, 0.5),
    ],
)
def test_coerce(default, value, result):
    assert coerce(value, default) == result


@pytest.mark.parametrize(
    ("default", "value"),
    [(1, "x"), (1, 1.5), (1, True), (True, "maybe"), ("a", 3), (1.0, "fast"), ("auto", True), ([1], "[1")],
)
def test_coerce_rejects(default, value):
    with pytest.raises(ValueError):
        coerce(value, default)


def test_unknown_key_suggests_nearest_cli_name():
    with pytest.raises(ConfigError, match=r"--train\.learnin-rate.*did you mean --train\.learning-rate\?"):
        resolve(overrides=["--train.learnin-rate", "1"])


def test_unknown_section_suggests_nearest():
    with pytest.raises(ConfigError, match="unknown config section 'trian'.*did you mean 'train'"):
        resolve(overrides=["--trian.learning-rate", "1"])


def test_wrong_type_names_key_and_expected_type():
    with pytest.raises(ConfigError, match=r"--vec\.num-envs.*expected an int, got 'many'"):
        resolve(overrides=["--vec.num-envs", "many"])


def test_bad_choice_suggests_nearest():
    with pytest.raises(ConfigError, match="did you mean 'adam'"):
        resolve(overrides=["--train.optimizer", "adma"])


def test_env_key_without_env_is_explained():
    with pytest.raises(ConfigError, match="env parameters come with an env"):
        resolve(overrides=["--env.size", "5"])


def test_env_params_are_typed_by_env_yaml():
    assert resolve(env="squared", overrides=["--env.size", "7"]).env["size"] == 7
    with pytest.raises(ConfigError, match="expected an int"):
        resolve(env="squared", overrides=["--env.size", "big"])


def test_malformed_overrides():
    with pytest.raises(ConfigError, match="needs the form --section.key"):
        parse_overrides(["--learning-rate", "1"])
    with pytest.raises(ConfigError, match="unexpected argument 'oops'"):
        parse_overrides(["oops"])


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        resolve(config_file=tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  learning_rate: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad YAML in .*bad\.yaml: line \d+, column \d+"):
        resolve(config_file=bad)
    notmap = tmp_path / "list.yaml"
    notmap.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        resolve(config_file=notmap)
    typo = tmp_path / "typo.yaml"
    typo.write_text("train:\n  learnig_rate: 0.1\n")
    with pytest.raises(
        ConfigError, match=r"train\.learnig_rate.*typo\.yaml.*did you mean train\.learning_rate"
    ):
        resolve(config_file=typo)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("vec:\n  zero_copy: 3\n")
    with pytest.raises(ConfigError, match=r"vec\.zero_copy.*expected a bool, got 3"):
        resolve(config_file=wrong)


def test_unknown_env_and_profile_list_valid_ones():
    with pytest.raises(ConfigError, match="did you mean 'squared'.*known envs"):
        resolve(env="squarde")
    with pytest.raises(ConfigError, match="did you mean '4090'.*valid profiles: .*h100"):
        resolve(profile="4091")


def test_every_profile_and_env_yaml_resolves():
    for profile in profile_names():
        assert resolve(profile=profile).bench.profile == profile
    for env in env_names():
        assert resolve(env=env).env_name == env
    assert {"cpu", "2080", "4090", "5090", "h100"} <= set(profile_names())


def test_serializes_to_yaml_and_json_round_trip():
    cfg = resolve(env="squared", overrides=["--train.seed", "7"])
    as_yaml = yaml.safe_load(cfg.to_yaml())
    as_json = json.loads(cfg.to_json())
    assert as_yaml == as_json == cfg.to_dict()
    assert as_json["train"]["seed"] == 7
    again = Config({s: as_json[s] for s in ("vec", "train", "policy", "env", "bench")})
    assert again.train.seed == 7


def test_section_attribute_error_suggests():
    with pytest.raises(AttributeError, match="did you mean learning_rate"):
        _ = resolve().train.learning_rat


# ----------------------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--train.minibatch-size", "-1024"],
            r"--train.minibatch-size .*-1024 is out of range; expected an int >= 1",
        ),
        (["--train.minibatch-size", "0"], r"--train.minibatch-size .*0 is out of range"),
        (["--train.bptt-horizon", "0"], r"--train.bptt-horizon .*0 is out of range"),
        (["--train.update-epochs", "0"], r"--train.update-epochs .*0 is out of range"),
        (["--train.checkpoint-interval", "0"], r"--train.checkpoint-interval .*0 is out of range"),
        (["--policy.hidden-size", "0"], r"--policy.hidden-size .*0 is out of range"),
        (
            ["--train.learning-rate", "-1"],
            r"--train.learning-rate .*-1.0 is out of range; expected a number > 0",
        ),
        (["--train.learning-rate", "nan"], r"--train.learning-rate .*nan is not a finite number"),
        (["--train.learning-rate", "1e38"], r"--train.learning-rate .*1e\+38 is out of range; .*<= 10"),
        (["--train.total-timesteps", "-5"], r"--train.total-timesteps .*-5 is out of range"),
        (["--vec.recv-timeout", "-1"], r"--vec.recv-timeout .*-1.0 is out of range; expected a number > 0"),
        (["--train.gamma", "inf"], r"--train.gamma .*inf is not a finite number"),
        (["--train.learning-rate", "1e400"], r"--train.learning-rate .*inf is not a finite number"),
        (
            ["--train.seed", "1" + "0" * 400],
            r"--train.seed .*100000000000\.\.\. \(401 digits\) is out of range",
        ),
        (["--bench.threads", "1,0"], r"--bench.threads .*0 is out of range"),
        (["--train.data-dir", ""], r"--train.data-dir .*must not be empty"),
        (["--bench.threads", "[]"], r"--bench.threads .*must not be empty"),
        (["--env.frameskip", "0"], r"--env.frameskip .*0 is out of range; expected an int >= 1 and <= 16"),
    ],
)
def test_out_of_range_values_are_refused_when_the_config_is_resolved(args, message):
    with pytest.raises(ConfigError, match=message):
        resolve(env="breakout", overrides=args)


def test_ranges_apply_to_every_layer(tmp_path):
    user = tmp_path / "user.yaml"
    user.write_text("train:\n  update_epochs: 0\n")
    with pytest.raises(ConfigError, match=r"train.update_epochs \(from .*user.yaml\): 0 is out of range"):
        resolve(config_file=user)


def test_every_numeric_default_has_a_range_and_lies_in_it():
    from appliance.config import CHOICES, RANGES, check_value, defaults

    for section, values in defaults().items():
        for key, value in (values or {}).items():
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            numeric |= value == "auto" and (section, key) not in CHOICES  # 'auto' or a number
            numeric |= isinstance(value, list) and all(isinstance(v, int) for v in value)
            if numeric:
                assert (section, key) in RANGES, f"{section}.{key} has no range in RANGES"
            check_value(section, key, value)
    for profile in profile_names():
        resolve(profile=profile)
    for env in env_names():
        resolve(env=env)


def test_a_config_too_large_for_memory_is_refused_with_the_figure(monkeypatch):
    import psutil

    from appliance import config

    class Memory:
        available = 8 * 2**30

    monkeypatch.setattr(psutil, "virtual_memory", Memory)
    monkeypatch.setattr(config.memory, "_gpu_present", lambda: False)
    with pytest.raises(
        ConfigError,
        match=r"vec.num_envs 1,000,000,000 of breakout needs about [\d,.]+ GiB of memory \(vector [\d,.]+ GiB "
        r"\+ training buffers [\d,.]+ GiB\) but 8.0 GiB is available; use at most about [\d,]+ envs",
    ):
        resolve(env="breakout", overrides=["--vec.num-envs", "1e9"])
    defaults = resolve(env="breakout")
    need, n = config.estimate_memory("breakout", defaults.data), defaults.vec.num_envs
    assert n * 118 * 4 < need["vector"] < 2 * n * (118 * 4 + 264 + 8)  # observations dominate
    assert need["training"] > 64 * need["vector"] // 2  # one row per agent and horizon step
    resolve(env="breakout", overrides=["--vec.num-envs", "4096"])  # a normal size fits


@pytest.mark.parametrize("what", ["config", "suite"])
def test_a_file_that_is_not_utf8_is_one_line(tmp_path, what):
    from click.testing import CliRunner

    from appliance.cli import cli

    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"train:\n  learning_rate: 0.01  # caf\xe9\n")
    args = ["config", "squared", "--config", str(path)] if what == "config" else ["run", "--suite", str(path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: {'config file' if what == 'config' else 'suite'} {path} is not UTF-8 text: byte 0xe9 on line 2; "
        "save it as UTF-8"
    ]


def test_cli_refuses_a_bad_value_before_anything_starts():
    from click.testing import CliRunner

    from appliance.cli import cli

    result = CliRunner().invoke(cli, ["train", "squared", "--train.minibatch-size", "-1024"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --train.minibatch-size (from command line): -1024 is out of range; expected an int >= 1"
    ]
