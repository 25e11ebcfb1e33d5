"""Work with a bound: memory and cores are estimated before anything is allocated, for every env
source (Gymnasium ids, PettingZoo and ``module:factory`` envs as Ocean envs) and for ``sweep
--parallel``; an env's constructor runs under the same timeout as its reset. Each case ran unbounded
(or silently) before its fix."""

from __future__ import annotations

import sys
import threading

import pytest
from click.testing import CliRunner
from conftest import one_line_error

from appliance import vector
from appliance.cli import cli
from appliance.config import memory
from appliance.errors import ConfigError
from appliance.sweep import trials


@pytest.mark.parametrize(
    "env", ["CartPole-v1", "appliance.testing:ComingAndGoing", "appliance.testing:CountingEnv"]
)
@pytest.mark.parametrize("backend", ["serial", "multiprocessing"])
def test_a_vector_past_memory_is_refused_with_the_figures_for_every_env_source(monkeypatch, env, backend):
    """Before the fix the vector started making its 2,000 envs (of a 10 M request, 80 GB)."""
    monkeypatch.setattr(memory, "available_memory", lambda: 2**20)
    with pytest.raises(ConfigError) as refused:
        vector.make(env, backend=backend, num_envs=2000)
    assert str(refused.value).startswith(f"vec.num_envs 2,000 of {env} needs about ")
    assert "of env objects) but 1.0 MiB is available; use at most about" in str(refused.value)


def test_the_env_objects_are_measured_from_the_first_env_made():
    from appliance.vector.sources import resolve_source

    cartpole = resolve_source("CartPole-v1")
    assert 1000 < cartpole.env_bytes < 100_000  # ~3 KB: a Python env, its wrappers and its arrays


def test_train_with_a_billion_cartpoles_is_refused_in_one_line_before_any_env_is_built():
    result = CliRunner().invoke(
        cli, ["train", "CartPole-v1", "--vec.num-envs", "1e9", "--no-dashboard", "--train.device", "cpu"]
    )
    one_line_error(
        result,
        "error: vec.num_envs 1,000,000,000 of CartPole-v1 needs about ",
        "of env objects + training buffers",
        "is available; use at most about",
    )


HANG = """
import threading

import gymnasium

release = threading.Event()


def forever():
    release.wait()
    return gymnasium.make("CartPole-v1")
"""


def test_a_constructor_that_never_returns_is_named_after_the_timeout(tmp_path, monkeypatch):
    """Before the fix the env was made in the main process with no timeout: no output, no end."""
    (tmp_path / "hang_env.py").write_text(HANG)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        result = CliRunner().invoke(
            cli,
            ["train", "hang_env:forever", "--vec.recv-timeout", "1", "--no-dashboard",
             "--train.data-dir", str(tmp_path / "runs")],
        )  # fmt: skip
        one_line_error(
            result,
            "error: creating env 'hang_env:forever' did not return within 1 s (vec.recv_timeout); "
            "fix its constructor, or raise --vec.recv-timeout if it is only slow",
        )
        assert not list((tmp_path / "runs").glob("*/metrics.jsonl"))
    finally:
        sys.modules["hang_env"].release.set()  # the probe's thread, left waiting, ends
        for thread in threading.enumerate():
            if thread.name == "puffer-env-probe":
                thread.join(10)


def test_sweep_parallel_past_the_cores_is_refused_like_nproc(tmp_path, monkeypatch):
    """Before the fix 8 trials started at once on 2 usable cores, without a word."""
    monkeypatch.setattr("appliance.vector.sizes.usable_cores", lambda: 2)
    result = CliRunner().invoke(
        cli, ["sweep", "squared", "--trials", "8", "--parallel", "8", "--out", str(tmp_path / "sweep")]
    )
    one_line_error(
        result,
        "error: --parallel 8: at most 2 trials at once on this machine, one per usable core "
        "(affinity and cgroup quota); pass --parallel 2 or fewer",
    )
    assert not (tmp_path / "sweep").exists()


def test_sweep_parallel_past_the_memory_is_refused_with_each_trials_footprint(tmp_path, monkeypatch):
    monkeypatch.setattr("appliance.vector.sizes.usable_cores", lambda: 64)
    monkeypatch.setattr(memory, "available_memory", lambda: 3 * trials.TRIAL_PROCESS_BYTES)
    result = CliRunner().invoke(
        cli,
        ["sweep", "breakout", "--trials", "8", "--parallel", "8", "--out", str(tmp_path / "sweep"),
         "--vec.num-envs", "64", "--train.device", "cpu"],
    )  # fmt: skip
    line = one_line_error(result, "error: --parallel 8: 8 trials need about ", "for its process + ")
    assert line.endswith("pass --parallel 2 or fewer"), line  # the buffers at the space's 512 envs count
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("env", ["CartPole-v1", "appliance.testing:ComingAndGoing"])
def test_sweep_parallel_counts_a_python_envs_footprint_from_its_first_env(tmp_path, monkeypatch, env):
    """Before the fix a Gymnasium, PettingZoo or module:factory env's trial counted as its process
    alone: its env objects and buffers were left out, however many envs the space allowed."""
    args = [
        "--vec.num-envs",
        "20000",
        "--train.device",
        "cpu",
    ]  # the buffers: 100-300 MiB, at the space's largest sizes
    monkeypatch.setattr("appliance.vector.sizes.usable_cores", lambda: 64)
    monkeypatch.setattr(memory, "available_memory", lambda: 4 * trials.TRIAL_PROCESS_BYTES)
    result = CliRunner().invoke(
        cli, ["sweep", env, "--trials", "8", "--parallel", "4", "--out", str(tmp_path / "sweep"), *args]
    )
    line = one_line_error(result, "error: --parallel 4: 4 trials need about ", "for its process + ")
    assert "MiB for its env's and training buffers" in line, line
    assert line.endswith("pass --parallel 2 or fewer"), line
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("env", ["squared", "CartPole-v1"])
def test_train_nproc_counts_every_rank_of_the_machine_before_any_starts(tmp_path, monkeypatch, env):
    """Each rank checked its own buffers against the whole machine's memory: two that fit alone
    but not together both started allocating (an Ocean env's check ran once, for one process)."""
    from appliance.config import resolve
    from appliance.config.memory import estimate_memory, source_layout
    from appliance.vector.sources import resolve_source

    args = ["--vec.num-envs", "64", "--train.device", "cpu", "--train.total-timesteps", "2000"]
    cfg = resolve(env=env, overrides=args)
    layout = None if env == "squared" else source_layout(resolve_source(env))
    need = sum(estimate_memory(env, cfg.data, layout).values())
    monkeypatch.setattr(memory, "available_memory", lambda: int(1.5 * need))
    result = CliRunner().invoke(
        cli, ["train", env, "--nproc", "2", "--no-dashboard", "--train.data-dir", str(tmp_path), *args]
    )
    one_line_error(result, f"error: vec.num_envs 64 of {env} needs about ", "of memory in each of 2 ranks")
    assert not list(tmp_path.iterdir())
