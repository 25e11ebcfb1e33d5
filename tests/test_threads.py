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
    def intra(cores: int, busy: float, params: int, rows: int) -> int:
        return threads.choose(cores, busy, params, rows, environ={}).intra

    assert intra(2, 0.0, 5_000, 2048) == 1  # CartPole's policy: 0.06 GFLOP a minibatch
    assert intra(8, 0.0, 2_000_000, 32768) == 8  # 393 GFLOP: every free core
    assert intra(8, 2.7, 2_000_000, 32768) == 5  # 2.7 cores busy: 3 taken out
    assert intra(2, 1.0, 2_000_000, 32768) == 1
    assert intra(1, 3.0, 10**9, 10**6) == 1  # never none
    assert intra(16, 0.0, 100_000, 32768) == 16  # 19.7 GFLOP: one per GFLOP, at most the cores
    assert intra(16, 0.0, 20_000, 32768) == 3  # 3.9 GFLOP
    assert intra(2, 0.0, 41_156, 8192) == 2  # breakout's AVX2 cpu profile (LSTM 64): 2.0 GFLOP
    assert intra(4, None, 10**9, 10**6) == 4  # load not known: every core
    line = threads.choose(8, 2.7, 2_000_000, 32768, ("num_threads", 5), environ={}).why
    assert line.startswith("threads: torch 5 intra-op, 1 inter-op, 5 native env threads (8 usable cores")
    assert "others using 2.7 of them: 5 free" in line and "\n" not in line
    assert "1 env worker (" in threads.choose(2, 1.0, 5_000, 2048, ("num_workers", 1), environ={}).why


def test_omp_num_threads_given_is_kept_and_said():
    chosen = threads.choose(2, 1.0, 10**9, 10**6, environ={"OMP_NUM_THREADS": "2"})
    assert chosen.intra == 2
    assert "OMP_NUM_THREADS=2 kept" in chosen.why


def test_env_threads_and_workers_left_auto_are_sized_to_the_free_cores():
    data = {"vec": {"backend": "native", "num_threads": 3, "num_envs": 64}}
    assert threads.apply_env_threads(data, 2, 1.0) is None and data["vec"]["num_threads"] == 3  # given
    data = {"vec": {"backend": "native", "num_threads": "auto", "num_envs": 64}}
    assert threads.apply_env_threads(data, 4, 1.2) == "num_threads" and data["vec"]["num_threads"] == 3
    data = {
        "vec": {"backend": "multiprocessing", "num_workers": "auto", "num_threads": "auto", "num_envs": 8}
    }
    assert threads.apply_env_threads(data, 4, 1.2) == "num_workers"
    assert data["vec"]["num_workers"] == 2 and data["vec"]["num_threads"] == "auto"  # 3 free: 2 divides 8
    data = {"vec": {"backend": "multiprocessing", "num_workers": 4, "num_envs": 8}}
    assert threads.apply_env_threads(data, 2, 1.0) is None and data["vec"]["num_workers"] == 4
    data = {"vec": {"backend": "serial", "num_workers": "auto", "num_threads": "auto", "num_envs": 8}}
    assert threads.apply_env_threads(data, 2, 1.0) is None


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


# (command, what the threads line calls the env threads it set, the key saved as auto); CartPole's
# family steps its envs in the train process (the serial backend): torch's threads only
RUNS = {
    "squared": (
        ["train", "squared", *SMALL, "--train.total-timesteps", "64", "--policy.hidden-size", "16"],
        "native env thread",
        "num_threads",
    ),
    "CartPole-v1": (["train", "CartPole-v1", "--stop-steps", "256"], None, None),
}


@pytest.mark.parametrize("env", list(RUNS))
def test_train_beside_a_busy_process_leaves_it_its_core(env, tmp_path, monkeypatch, busy_neighbour):
    """A small run with one busy process beside it (an Ocean env on native threads, a Gymnasium one
    in-process): the threads line names fewer torch threads (and env threads) than the usable cores,
    and torch's pool in the train process is set to what it says."""
    if usable_cores() < 2:
        pytest.skip("one usable core: nothing to leave to the neighbour")
    for name in threads.USER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "FLOP_PER_THREAD", 1.0)  # any policy is "big": the load alone decides
    args, what, key = RUNS[env]
    before = torch.get_num_threads()
    try:
        result = CliRunner().invoke(cli, [*args, "--train.data-dir", str(tmp_path), "--no-dashboard"])
        assert result.exit_code == 0, result.output
        line = next(x for x in result.output.splitlines() if x.startswith("threads: "))
        intra = int(re.search(r"torch (\d+) intra-op", line).group(1))
        assert intra <= usable_cores() - 1, line
        assert torch.get_num_threads() == intra
        if what is not None:
            envs = int(re.search(rf"(\d+) {what}", line).group(1))
            assert envs <= usable_cores() - 1, line
            saved = (next(p for p in tmp_path.iterdir() if p.is_dir()) / "config.yaml").read_text()
            assert f"{key}: auto" in saved  # saved as auto: a resume chooses afresh
    finally:
        torch.set_num_threads(before)
