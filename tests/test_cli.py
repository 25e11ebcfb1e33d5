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
