"""The CLI through click's CliRunner: exit codes, one-line errors, resolved config."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

import appliance
from appliance.cli import cli


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_help_and_version():
    result = run("--help")
    assert result.exit_code == 0 and "info" in result.output and "config" in result.output
    assert run("--version").output.strip().endswith(appliance.__version__)


def test_info_json():
    result = run("info", "--json")
    assert result.exit_code == 0
    fp = json.loads(result.output)
    assert "cpu" in fp and "gpus" in fp


def test_info_table():
    result = run("info")
    assert result.exit_code == 0 and "CPU" in result.output


def test_config_typo_exits_2_with_one_line():
    result = run("config", "--train.learnin-rate", "1")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--train.learning-rate" in lines[0]
    assert "Traceback" not in result.output


def test_config_prints_resolved_yaml_with_override():
    result = run("config", "--train.learning-rate", "1e-3")
    assert result.exit_code == 0
    assert yaml.safe_load(result.output)["train"]["learning_rate"] == 1e-3


def test_config_env_profile_and_file(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("policy:\n  hidden_size: 256\n")
    result = run("config", "squared", "--gpu", "h100", "--config", str(f), "--env.size", "7", "--json")
    assert result.exit_code == 0, result.output
    cfg = json.loads(result.output)
    assert (cfg["env_name"], cfg["profile"], cfg["env"]["size"], cfg["policy"]["hidden_size"]) == (
        "squared",
        "h100",
        7,
        256,
    )


def test_config_bad_profile_and_missing_file(tmp_path):
    result = run("config", "--gpu", "nope")
    assert result.exit_code == 2 and "valid profiles" in result.output
    result = run("config", "--config", str(tmp_path / "none.yaml"))
    assert result.exit_code == 2 and "not found" in result.output


def test_envs_lists_every_env_with_spaces():
    result = run("envs")
    assert result.exit_code == 0
    for name in ("breakout", "snake", "go", "MultiDiscrete"):
        assert name in result.output


def test_envs_show_draws_frames_and_writes_a_gif(tmp_path):
    gif = tmp_path / "out.gif"
    result = run("envs", "show", "squared", "--frames", "3", "--gif", str(gif))
    assert result.exit_code == 0, result.output
    assert "A" in result.output and "wrote 4 frames" in result.output
    from PIL import Image

    with Image.open(gif) as im:
        assert im.n_frames >= 2


def test_envs_show_unknown_env_is_one_line():
    result = run("envs", "show", "brekout")
    assert result.exit_code == 2 and "did you mean 'breakout'" in result.output


def test_envs_sps_table_and_json(tmp_path):
    out = tmp_path / "sps.json"
    result = run(
        "envs",
        "sps",
        "squared,pong",
        "--threads",
        "1,2",
        "--seconds",
        "0.1",
        "--num-envs",
        "32",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [(r["env"], r["threads"]) for r in data["rows"]] == [
        ("squared", 1),
        ("squared", 2),
        ("pong", 1),
        ("pong", 2),
    ]
    assert all(r["sps"] > 0 for r in data["rows"]) and "cpu" in data["fingerprint"]


def test_envs_sps_rejects_unknown_env_and_bad_threads():
    assert run("envs", "sps", "nope", "--seconds", "0.1").exit_code == 2
    assert run("envs", "sps", "squared", "--threads", "0").exit_code == 2
