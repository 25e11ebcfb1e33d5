"""vector-bench and autotune: real measurements, short; the saved profile loads through --config."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from appliance.bench import vectorbench
from appliance.bench.vecsps import GymnasiumVector, action_sets, measure
from appliance.cli import cli
from appliance.config import resolve
from appliance.emulation import make_factory
from appliance.errors import ConfigError
from appliance.tune import autotune


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_measure_counts_agent_steps_of_gymnasium_vectors():
    vec = GymnasiumVector("sync", make_factory("CartPole-v1"), 4)
    try:
        m = measure(vec, seconds=0.1, warmup=0.02)
    finally:
        vec.close()
    assert m.batches > 0 and m.steps == 4 * m.batches and m.sps > 0


def test_action_sets_match_spaces():
    from gymnasium import spaces

    (a,) = action_sets(spaces.MultiDiscrete([3, 5]), 7, count=1)
    assert a.shape == (7, 2) and a.dtype.kind == "i" and (a[:, 1] < 5).all()
    (b,) = action_sets(spaces.Box(-2, 2, (3,)), 4, count=1)
    assert b.shape == (4, 3) and (abs(b) <= 2).all()


@pytest.mark.slow
def test_vector_bench_compares_against_gymnasium(tmp_path):
    out = tmp_path / "vb.json"
    result = run("vector-bench", "--env", "cartpole", "--cores", "1", "--seconds", "0.05", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "gymnasium SyncVectorEnv" in result.output and "vs best gymnasium" in result.output
    data = json.loads(out.read_text())
    families = {r["family"] for r in data["rows"]}
    assert {
        "gymnasium SyncVectorEnv",
        "gymnasium AsyncVectorEnv",
        "serial",
        "multiprocessing (1 workers)",
    } <= families
    best_gym = max(r["sps"] for r in data["rows"] if r["baseline"])
    for r in data["rows"]:
        assert r["ratio"] == pytest.approx(r["sps"] / best_gym)
    assert len(data["samples"]) > len(data["rows"]), "several num_envs per approach"


@pytest.mark.slow
def test_vector_bench_ocean_and_step_us():
    label, target = vectorbench.resolve_env("ocean:squared", None)
    assert target == "squared"
    label, creator = vectorbench.resolve_env("cartpole", 50)
    assert "BusyEnv" in label and creator().step_us == 50
    with pytest.raises(ConfigError, match="unknown Ocean env"):
        vectorbench.resolve_env("ocean:nope", None)
    result = vectorbench.run("ocean:squared", None, cores=1, seconds=0.03)
    families = {r["family"] for r in result["rows"]}
    assert "native (1 threads)" in families and "multiprocessing (1 workers)" in families


def test_autotune_candidates_respect_cores_ram_and_batch():
    cands = autotune.candidates("breakout", cores=2, batch_size=None, max_ram_bytes=2**40, ram_per_env=1000)
    assert {c["backend"] for c in cands} == {"native", "multiprocessing"}
    assert all(c.get("num_threads", 1) <= 2 and c.get("num_workers", 1) <= 2 for c in cands)
    small = autotune.candidates(
        "breakout", cores=2, batch_size=None, max_ram_bytes=2000 * 1000, ram_per_env=1000
    )
    assert small and all(c["num_envs"] <= 2000 for c in small)
    fixed = autotune.candidates("CartPole-v1", cores=2, batch_size=4, max_ram_bytes=2**40, ram_per_env=1000)
    assert all(c["batch_size"] == 4 for c in fixed)
    with pytest.raises(ConfigError, match="no configuration fits --max-ram-gb"):
        autotune.candidates("breakout", cores=2, batch_size=None, max_ram_bytes=10, ram_per_env=1000)


def test_autotune_profiles_the_env():
    p = autotune.profile_env("squared", {"size": 11}, seconds=0.05)
    assert p["sps_per_core"] > 0 and p["step_us_mean"] > 0 and p["reset_ms"] > 0
    assert p["obs_bytes_per_env_step"] == 121 and p["ram_per_env_bytes"] > 121


@pytest.mark.slow
def test_autotune_cli_picks_fastest_and_saves_a_loadable_profile(tmp_path):
    path = tmp_path / "tuned.yaml"
    result = run("autotune", "squared", "--seconds", "0.05", "--save", str(path))
    assert result.exit_code == 0, result.output
    assert "fastest:" in result.output and "agent-steps/s on one core" in result.output
    doc = yaml.safe_load(path.read_text())
    assert "autotuned for squared" in doc["profile"]["description"]
    cfg = resolve(env="squared", config_file=path)
    assert cfg.vec.backend == doc["vec"]["backend"] and cfg.vec.num_envs == doc["vec"]["num_envs"]


@pytest.mark.slow
def test_autotune_python_env_with_forward_time(tmp_path):
    result = run(
        "autotune",
        "CartPole-v1",
        "--seconds",
        "0.05",
        "--batch-size",
        "4",
        "--forward-ms",
        "1",
        "--cores",
        "2",
    )
    assert result.exit_code == 0, result.output
    assert "fastest:" in result.output and "batch_size=4" in result.output


def test_autotune_cli_errors_are_one_line():
    result = run("autotune", "squared", "--max-ram-gb", "0.0000001", "--seconds", "0.02")
    assert result.exit_code == 2 and "no configuration fits" in result.output
    result = run("autotune", "NoSuchEnv-v0")
    assert result.exit_code == 2 and "unknown env" in result.output


def test_autotune_times_engine_buffers_when_asked_and_saves_the_fastest(tmp_path):
    path = tmp_path / "tuned.yaml"
    result = run(
        "autotune",
        "breakout",
        "--seconds",
        "0.05",
        "--batch-size",
        "64",
        "--buffers",
        "1,2",
        "--save",
        str(path),
    )
    assert result.exit_code == 0, result.output
    assert "rollout engine, 1 buffers" in result.output and "rollout engine, 2 buffers" in result.output
    doc = yaml.safe_load(path.read_text())
    assert doc["train"]["buffers"] in (1, 2) and "engine buffers" in doc["profile"]["description"]
    tuned = resolve(env="breakout", config_file=path).train
    assert tuned.buffers == doc["train"]["buffers"]
    # breakout.ini's minibatch (32,768) is larger than 64 envs' batch: the saved config cuts it to fit
    assert tuned.minibatch_size == 64 * tuned.bptt_horizon >= tuned.max_minibatch_size


def test_autotune_buffer_counts():
    assert autotune.buffer_counts("auto", cuda=False) == []  # a CPU keeps its behaviour
    assert autotune.buffer_counts("auto", cuda=True) == [1, 2, 4, 8]
    assert autotune.buffer_counts("4,1,2", cuda=False) == [1, 2, 4]
    with pytest.raises(ConfigError, match="--buffers"):
        autotune.buffer_counts("many", cuda=False)
