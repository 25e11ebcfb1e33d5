"""Threads chosen, not inherited (issue 60, part 3): ``train`` sizes torch's pools and the native env
threads from the cores, the load others put on them and the policy's size, and says so."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
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


class Neighbour:
    """A process spinning on a core, as ``python -c 'while True: pass'`` run by someone else: started
    through a shell that exits at once, so it is not this process's child (a run counts its own
    children, its env workers, as its own load)."""

    def __init__(self) -> None:
        out = subprocess.run(
            ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
            check=True,
        )
        self.pid = int(out.stdout.split()[-1])
        time.sleep(0.2)  # started and spinning

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        for _ in range(100):  # reaped by its new parent
            if not self.alive():
                return
            time.sleep(0.01)


@pytest.fixture(autouse=True)
def no_steal(monkeypatch):
    """These tests are about processes beside a run. The thread rule also counts the hypervisor's steal
    as others' load, and a shared host steals by itself (0.2-0.9 of 2 vCPUs on one CI-like host, where a
    run then gave the core back and took it away again): in this process the steal reads as none."""
    import psutil

    real = psutil.cpu_times

    def cpu_times(percpu: bool = False):
        rows = real(percpu=percpu)
        unstolen = lambda t: t._replace(steal=0.0) if hasattr(t, "steal") else t  # noqa: E731
        return [unstolen(t) for t in rows] if percpu else unstolen(rows)

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)


@pytest.fixture
def busy_neighbour():
    proc = Neighbour()
    yield proc
    proc.kill()


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


class Counters:
    """Fake :func:`threads.load_counters` reads: others' load in cores' worth for each next span of
    ``span`` seconds, this process using one core throughout."""

    def __init__(self, loads: list[float], span: float = 10.0) -> None:
        self.loads, self.span = list(loads), span
        self.now, self.others, self.own = 0.0, 0.0, 0.0

    def read(self) -> tuple[float, float, float]:
        return self.others + self.own, self.own, self.now

    def advance(self) -> None:
        self.others += self.loads.pop(0) * self.span
        self.own += self.span
        self.now += self.span


def watch(loads: list[float], intra: int = 2, environ: dict[str, str] | None = None):
    counters, applied = Counters(loads), []
    look = threads.Watch(
        2, 10**9, 10**6, intra, environ=environ or {}, read=counters.read, apply=applied.append, start=False
    )
    return look, counters, applied


def step(look: threads.Watch, counters: Counters) -> list[str]:
    counters.advance()
    look.look()
    return look.said()


def test_a_neighbour_that_comes_mid_run_takes_a_thread_after_two_looks():
    look, counters, applied = watch([1.0, 1.0, 1.0])
    assert step(look, counters) == [] and applied == [] and look.want == 2  # one look is not enough
    assert step(look, counters) == [
        "threads: torch 1 intra-op from now, was 2 (others and the hypervisor used 1.0 of 2 usable cores over the last 20 s)"
    ]
    assert applied == [1] and look.want == 1
    assert step(look, counters) == [] and applied == [1]  # the same load: no change


def test_a_load_gone_gives_the_thread_back_and_a_burst_changes_nothing():
    look, counters, applied = watch([0.0, 1.0, 0.0, 0.0], intra=1)  # started beside a passing job
    assert step(look, counters) == []  # the cores free once: pending
    assert step(look, counters) == []  # busy again: the change waits for two looks in a row
    assert step(look, counters) == []
    assert "torch 2 intra-op from now, was 1 (others and the hypervisor used 0.0" in step(look, counters)[0]
    assert applied == [2]


def test_omp_num_threads_given_stays_for_the_whole_run():
    counters, reads = Counters([1.0] * 100, span=0.01), []

    def read():
        counters.advance()
        reads.append(1)
        return counters.read()

    kept = threads.Watch(2, 10**9, 10**6, 2, every=0.01, environ={"OMP_NUM_THREADS": "2"}, read=read)
    time.sleep(0.1)
    kept.close()
    assert not kept.active and reads == [] and kept.want == 2 and kept.said() == []


def test_sync_sets_the_calling_threads_count_and_a_new_thread_takes_it():
    """torch's intra-op count is each thread's own: sync on the thread about to work."""
    look, counters, _ = watch([1.0, 1.0])
    before = torch.get_num_threads()
    seen: list[int] = []

    def worker() -> None:
        look.sync()
        seen.append(torch.get_num_threads())

    try:
        step(look, counters), step(look, counters)
        look.sync()
        assert torch.get_num_threads() == 1
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert seen == [1]
    finally:
        torch.set_num_threads(before)


def test_the_watch_thread_looks_and_stops():
    counters = Counters([1.0] * 1000, span=0.01)
    reads = []

    def read():
        counters.advance()
        reads.append(1)
        return counters.read()

    look = threads.Watch(2, 10**9, 10**6, 2, every=0.01, environ={}, read=read)
    deadline = time.monotonic() + 10
    while look.want != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    look.close()
    assert look.want == 1 and "torch 1 intra-op from now" in look.said()[0]
    n = len(reads)
    time.sleep(0.05)
    assert len(reads) == n  # closed: no more looks


def test_a_run_started_beside_a_passing_job_takes_the_core_back_when_it_ends(
    tmp_path, monkeypatch, busy_neighbour
):
    """The defect the first look alone left: a busy process when the run starts and gone after held the
    run to one torch thread for all its epochs. Now the watch's looks give the core back, the run says
    so, and the metrics records carry torch's count."""
    if usable_cores() != 2:
        pytest.skip("the counts below are those of 2 usable cores")
    for name in threads.USER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "FLOP_PER_THREAD", 1.0)  # any policy is "big": the load alone decides

    class KillsTheNeighbour(threads.Watch):  # at the first look while the run goes: the passing job ends
        def look(self) -> None:
            busy_neighbour.kill()
            super().look()

    monkeypatch.setattr(threads, "Watch", KillsTheNeighbour)
    monkeypatch.setattr(threads, "RELOOK_S", 0.2)
    from appliance.train.trainer import Trainer

    evaluate = Trainer.evaluate

    def slower(self, *args, **kwargs):
        # the watch calls for the core after three looks (0.6 s); on a fast host the whole run took 1 s
        # and ended before the line was said: every epoch at least 20 ms, so 94 epochs outlast them anywhere
        time.sleep(0.02)
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "evaluate", slower)
    args = ["train", "squared", *SMALL, "--train.total-timesteps", "6000", "--policy.hidden-size", "16"]
    before = torch.get_num_threads()
    try:
        result = CliRunner().invoke(cli, [*args, "--train.data-dir", str(tmp_path), "--no-dashboard"])
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert any(x.startswith("threads: torch 1 intra-op, 1 inter-op") for x in lines), result.output
        assert any(x.startswith("threads: torch 2 intra-op from now, was 1") for x in lines), result.output
        assert torch.get_num_threads() == 2
        metrics = next(p for p in tmp_path.iterdir() if p.is_dir()) / "metrics.jsonl"
        counts = [json.loads(x)["threads"] for x in metrics.read_text().splitlines()]
        assert counts[0] == 1 and counts[-1] == 2, counts
    finally:
        torch.set_num_threads(before)


def test_counters_that_cannot_be_read_leave_the_first_choice_standing():
    """psutil failing (a /proc it cannot read): no watch thread, no change, no error for the run."""

    def unreadable():
        raise PermissionError("/proc/stat")

    look = threads.Watch(2, 10**9, 10**6, 2, every=0.01, environ={}, read=unreadable)
    time.sleep(0.05)
    look.close()
    assert not look.active and look.want == 2 and look.said() == []
