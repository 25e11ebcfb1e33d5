"""Threads chosen, not inherited (issue 60, part 3): ``train`` sizes torch's pools and the native env
threads from the cores, the load others put on them and the policy's size, and says so."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import torch
from click.testing import CliRunner
from conftest import SMALL

from appliance.cli import cli
from appliance.config import threads
from appliance.vector.sizes import usable_cores


def test_a_small_policy_gets_one_thread_and_a_busy_core_is_taken_out():
    small = threads.choose(
        cores=2, busy=0.0, params=5_000, minibatch_rows=2048, native_auto=False, environ={}
    )
    assert (small.intra, small.interop, small.env) == (1, 1, None)
    big = threads.choose(
        cores=8, busy=0.0, params=2_000_000, minibatch_rows=32768, native_auto=True, environ={}
    )
    assert (big.intra, big.env) == (8, 8)  # 393 GFLOP per minibatch: every free core
    loaded = threads.choose(
        cores=8, busy=2.7, params=2_000_000, minibatch_rows=32768, native_auto=True, environ={}
    )
    assert (loaded.intra, loaded.env) == (5, 5)  # 2.7 cores busy: 3 taken out
    assert "others using 2.7 of them: 5 free" in loaded.why
    one = threads.choose(
        cores=2, busy=1.0, params=2_000_000, minibatch_rows=32768, native_auto=True, environ={}
    )
    assert (one.intra, one.env) == (1, 1)
    never_none = threads.choose(
        cores=1, busy=3.0, params=10**9, minibatch_rows=10**6, native_auto=True, environ={}
    )
    assert (never_none.intra, never_none.env) == (1, 1)
    medium = threads.choose(
        cores=16, busy=0.0, params=100_000, minibatch_rows=32768, native_auto=False, environ={}
    )
    assert medium.intra == 9  # 19.7 GFLOP: one per 2 GFLOP
    assert "\n" not in medium.why and medium.why.startswith("threads: torch 9 intra-op, 1 inter-op")


def test_omp_num_threads_given_is_kept_and_said():
    chosen = threads.choose(2, 1.0, 10**9, 10**6, native_auto=False, environ={"OMP_NUM_THREADS": "2"})
    assert chosen.intra == 2
    assert "OMP_NUM_THREADS=2 kept" in chosen.why


def test_an_explicit_num_threads_or_another_backend_is_left_alone():
    data = {"vec": {"backend": "native", "num_threads": 3, "num_envs": 64}}
    assert not threads.apply_env_threads(data, 2, 1.0) and data["vec"]["num_threads"] == 3
    data = {"vec": {"backend": "multiprocessing", "num_threads": "auto", "num_envs": 64}}
    assert not threads.apply_env_threads(data, 2, 1.0) and data["vec"]["num_threads"] == "auto"
    data = {"vec": {"backend": "native", "num_threads": "auto", "num_envs": 64}}
    assert threads.apply_env_threads(data, 4, 1.2) and data["vec"]["num_threads"] == 3


@pytest.fixture
def busy_neighbour():
    """One process spinning on a core beside the test, as ``python -c 'while True: pass'``."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.2)  # started and spinning
    yield proc
    proc.kill()
    proc.wait()


def test_the_load_look_sees_a_busy_neighbour(busy_neighbour):
    assert threads.others_busy(seconds=0.3) >= 0.5


def test_train_beside_a_busy_process_leaves_it_its_core(tmp_path, monkeypatch, busy_neighbour):
    """A small run with one busy process beside it: the threads line names fewer torch and env threads
    than the usable cores, and torch's pool in the train process is set to what it says."""
    if usable_cores() < 2:
        pytest.skip("one usable core: nothing to leave to the neighbour")
    for name in threads.USER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "FLOP_PER_THREAD", 1.0)  # any policy is "big": the load alone decides
    before = torch.get_num_threads()
    try:
        args = [
            "--train.total-timesteps",
            "64",
            "--train.data-dir",
            str(tmp_path),
            "--policy.hidden-size",
            "16",
        ]
        result = CliRunner().invoke(cli, ["train", "squared", *SMALL, *args, "--no-dashboard"])
        assert result.exit_code == 0, result.output
        line = next(x for x in result.output.splitlines() if x.startswith("threads: "))
        intra = int(re.search(r"torch (\d+) intra-op", line).group(1))
        env = int(re.search(r"(\d+) native env thread", line).group(1))
        assert intra <= usable_cores() - 1, line
        assert env <= usable_cores() - 1, line
        assert torch.get_num_threads() == intra
        config = (
            tmp_path / next(p.name for p in tmp_path.iterdir() if p.is_dir()) / "config.yaml"
        ).read_text()
        assert "num_threads: auto" in config  # the saved config keeps auto: a resume chooses afresh
    finally:
        torch.set_num_threads(before)
