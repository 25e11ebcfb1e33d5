"""Data-parallel training on the CPU with gloo: the update is the big-batch update, it learns, and a
failed rank ends the job cleanly (appliance.train.launcher, rank and distributed)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from procs import children, command_line

from appliance import vector
from appliance.config import resolve
from appliance.errors import ConfigError
from appliance.train import checkpoint, launcher, runs
from appliance.train.rank import RankTrainer, merge_stats
from appliance.train.trainer import Trainer

PUFFER = [str(Path(sys.executable).parent / "puffer-bench")]

# One minibatch holding the whole buffer, no prioritization (uniform draws, importance 1) and no
# clipping of the gradient: the update is then a plain function of the rows drawn.
EXACT = [
    "--train.device", "cpu", "--policy.hidden-size", "32", "--train.optimizer", "adam",
    "--train.bptt-horizon", "16", "--train.update-epochs", "1", "--train.prio-alpha", "0",
    "--train.max-grad-norm", "1e9", "--train.learning-rate", "0.001",
]  # fmt: skip
AGENTS, HALF = 8, 4
# The segments each rank "draws" (with repeats, as multinomial with replacement can), as rows of its
# own buffer; one process holding all 8 rows draws the union, rank 1's rows shifted by 4.
DRAWS = ([3, 0, 0, 2], [1, 1, 3, 2])
BUFFERS = ("obs", "actions", "logprobs", "values", "rewards", "dones", "masks")


def _config(agents: int, seed: int = 0):
    mb = agents * 16
    return resolve(
        env="squared",
        overrides=[
            *EXACT, "--vec.num-envs", str(agents), "--vec.num-threads", "1", "--train.seed", str(seed),
            "--train.minibatch-size", str(mb), "--train.max-minibatch-size", str(mb),
        ],
    )  # fmt: skip


def _draw(rows):
    def multinomial(probs, n, replacement=False, generator=None):
        assert n == len(rows), "the trainer drew a different number of segments than the test expects"
        return torch.tensor(rows)

    return multinomial


def _grads(trainer):
    return [p.grad.detach().numpy().copy() for p in trainer._params]


def _rank_update(data_path: str) -> dict:
    """One rank: rank 0 takes the reference weights (the others start from their own seed's), each
    rank gets its half of the reference buffer, draws its segments, and runs one update."""
    rank, _, _ = launcher.init()
    data = torch.load(data_path, weights_only=False)
    cfg = _config(HALF, seed=rank)
    trainer = RankTrainer(cfg, vector.make_from_config(cfg))
    try:
        if rank == 0:
            trainer.policy.load_state_dict(data["weights"])
        trainer.broadcast_weights()
        before = [p.detach().numpy().copy() for p in trainer._params]
        rows = slice(rank * HALF, (rank + 1) * HALF)
        for name in BUFFERS:
            getattr(trainer.rollout, name).copy_(data[name][rows])
        for saved, ref in zip(trainer.rollout.initial_state, data["initial_state"], strict=True):
            saved.copy_(ref[rows])
        torch.multinomial = _draw(DRAWS[rank])
        trainer.train()
        return {
            "before": before,
            "grads": _grads(trainer),
            "after": [p.detach().numpy().copy() for p in trainer._params],
        }
    finally:
        trainer.close()
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_compute_the_gradient_of_one_process_holding_all_agents(tmp_path, monkeypatch):
    cfg = _config(AGENTS)
    ref = Trainer(cfg, vector.make_from_config(cfg))
    try:
        ref._params = list({id(p): p for p in ref.policy.parameters()}.values())
        ref.evaluate()  # real observations, actions and rewards from 8 squared envs
        assert ref.rollout.segments == AGENTS
        data = {name: getattr(ref.rollout, name).clone() for name in BUFFERS}
        data["initial_state"] = [s.clone() for s in ref.rollout.initial_state]
        data["weights"] = {k: v.clone() for k, v in ref.policy.state_dict().items()}
        torch.save(data, tmp_path / "data.pt")
        weights = [p.detach().numpy().copy() for p in ref._params]
        monkeypatch.setattr(torch, "multinomial", _draw([*DRAWS[0], *(HALF + i for i in DRAWS[1])]))
        ref.train()
        expected = _grads(ref)
    finally:
        ref.close()

    ranks = launcher.launch(_rank_update, (str(tmp_path / "data.pt"),), launcher.Launch(nproc=2))
    for rank in (0, 1):
        for w, start in zip(weights, ranks[rank]["before"], strict=True):
            np.testing.assert_array_equal(start, w)  # rank 1 built other weights; it took rank 0's
        for g, want in zip(ranks[rank]["grads"], expected, strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-6)
    for a, b in zip(ranks[0]["after"], ranks[1]["after"], strict=True):
        np.testing.assert_array_equal(a, b)  # the same step on every rank: the weights stay equal
    assert any(np.abs(g).max() > 1e-4 for g in expected)  # a real gradient, not all zeros


def _fail_on_rank_one() -> None:
    launcher.init()
    if int(os.environ["RANK"]) == 1:
        raise ValueError("rank one cannot go on")
    torch.distributed.barrier()  # rank 0 waits here for a rank that will never come


@pytest.mark.slow
def test_a_rank_that_raises_ends_the_job_with_its_rank_and_error():
    def scratch() -> set[str]:  # what torch's launcher and spawn leave in the temp dir by default
        tmp = Path(tempfile.gettempdir())
        return {p.name for pattern in ("torchelastic_*", "pytorch-errorfile-*") for p in tmp.glob(pattern)}

    before, default_tempdir, start = scratch(), tempfile.tempdir, time.time()
    with pytest.raises(launcher.DistributedError, match=r"rank 1 failed: ValueError: rank one cannot go on"):
        launcher.launch(_fail_on_rank_one, (), launcher.Launch(nproc=2))
    assert time.time() - start < 60
    assert scratch() - before == set()  # the ranks' logs and error files went with the launch
    assert tempfile.tempdir == default_tempdir  # the launch's own temp dir is not left as the default


def test_launch_options_are_checked():
    with pytest.raises(ConfigError, match="--node-rank"):
        launcher.Launch(nproc=2, nnodes=2, node_rank=2, master_port=29500).check()
    with pytest.raises(ConfigError, match="--master-port"):
        launcher.Launch(nproc=1, nnodes=2).check()


def test_episode_stats_of_the_ranks_merge_weighted_by_episode_count():
    merged = merge_stats([{"perf": 1.0, "n": 3.0}, {}, {"perf": 0.0, "n": 1.0}])
    assert merged == {"perf": 0.75, "n": 4.0}
    assert merge_stats([{}, {}]) == {}


# ----------------------------------------------------------------------------- the train command

SMALL = [
    "--no-dashboard", "--train.device", "cpu", "--policy.core", "mlp", "--train.optimizer", "adam",
    "--env.size", "5", "--vec.num-envs", "64", "--train.bptt-horizon", "16",
    "--train.minibatch-size", "512", "--train.learning-rate", "0.01", "--train.ent-coef", "0.01",
    "--train.gamma", "0.9", "--train.prio-alpha", "0", "--train.update-epochs", "2",
]  # fmt: skip


def _train(tmp_path, run_id, *extra, **kwargs):
    return subprocess.Popen(
        [*PUFFER, "train", "squared", "--nproc", "2", *SMALL, "--train.data-dir", str(tmp_path),
         "--run-id", run_id, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs,
    )  # fmt: skip


def _random_perf(steps: int = 2000) -> float:
    """perf of uniformly random actions on the same squared (size 5)."""
    from appliance.bench.envsps import random_actions
    from appliance.vector import native

    with native.make("squared", num_envs=64, seed=0, size=5) as vec:
        actions = random_actions(vec, count=64)
        vec.reset(0)
        for i in range(steps):
            vec.step(actions[i % 64])
        return vec.log()["perf"]


def _perf(run_dir: Path) -> list[float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["env/perf"] for r in records if "env/perf" in r]


def _late_perf(run_dir: Path, total: int, share: float = 0.25) -> float:
    """The perf of the episodes that ended in the last ``share`` of ``total`` agent-steps, each record
    weighed by its episodes (``env/n``): a rule over agent-steps, not over lines, which are written at
    most once a second and so fall differently on a fast or a busy machine."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    late = [r for r in records if "env/perf" in r and r["global_step"] >= (1 - share) * total]
    weights = [r.get("env/n", 1) for r in late]
    return sum(r["env/perf"] * w for r, w in zip(late, weights, strict=True)) / sum(weights) if late else 0.0


@pytest.mark.slow
def test_two_ranks_learn_squared_and_resume(tmp_path):
    proc = _train(tmp_path, "dp", "--train.total-timesteps", "120000", "--train.checkpoint-interval", "50")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert re.search(r"on 2 ranks \([\d,]+ SPS; per rank [\d,]+, [\d,]+\)", out), out
    perf = _perf(tmp_path / "dp")
    last = json.loads((tmp_path / "dp" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["sps/rank0"] > 0 and last["sps/rank1"] > 0 and last["time/allreduce"] > 0
    late = _late_perf(tmp_path / "dp", 120000)
    assert late >= 0.75 > _random_perf() + 0.3, (late, perf)
    state = checkpoint.read(tmp_path / "dp" / runs.MODEL)["state"]
    assert state["global_step"] >= 120000  # the steps of both ranks
    # --resume: every rank starts from the checkpoint and the run goes on to the new total
    proc = _train(tmp_path, "dp", "--resume", "dp", "--train.total-timesteps", "130000")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    resumed = checkpoint.read(tmp_path / "dp" / runs.MODEL)["state"]
    assert resumed["global_step"] >= 130000 and resumed["epoch"] > state["epoch"]
    assert np.mean(_perf(tmp_path / "dp")[-2:]) >= 0.7  # resumed from the trained weights, not anew


@pytest.mark.slow
def test_killing_one_rank_ends_the_job_and_leaves_no_process(tmp_path):
    import psutil

    proc = _train(tmp_path, "kill", "--train.total-timesteps", "100000000")
    try:
        deadline = time.time() + 120
        while not (tmp_path / "kill" / "config.yaml").exists():  # rank 0 is training
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.2)
        ranks = [c for c in children(proc.pid) if "spawn_main" in command_line(c)]
        ranks = [r for r in ranks if "resource_tracker" not in command_line(r)]
        assert len(ranks) == 2, [command_line(r) for r in ranks]
        os.kill(ranks[-1].pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0
        assert re.search(r"error: rank \d failed: killed by SIGKILL; the other ranks were stopped", err), err
        assert "Traceback" not in err
        _, alive = psutil.wait_procs(ranks, timeout=10)
        assert not alive, [p.pid for p in alive]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _spawned(pid: int) -> tuple[list, list]:
    """The ranks and the resource tracker under ``pid``."""
    ranks, trackers = [], []
    for c in children(pid):
        line = command_line(c)
        (trackers if "resource_tracker" in line else ranks if "spawn_main" in line else []).append(c)
    return ranks, trackers


def _semaphores() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("sem.")}


@pytest.mark.slow
@pytest.mark.parametrize("when", ["importing", "training"])
def test_ranks_and_their_semaphores_die_with_a_launcher_killed_outright(tmp_path, when):
    """SIGKILL to the launcher alone, as the OOM killer sends it: before the fix both ranks and the
    resource tracker ran on indefinitely, with sem.mp-* names left in /dev/shm."""
    import psutil

    before = _semaphores()
    proc = _train(tmp_path, "orphan", "--train.total-timesteps", "100000000")
    ranks: list = []
    try:
        deadline = time.time() + 120
        while len(ranks) < 2 or (when == "training" and not (tmp_path / "orphan" / "config.yaml").exists()):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.1)
            ranks, trackers = _spawned(proc.pid)
        ranks, trackers = _spawned(proc.pid)
        proc.kill()
        proc.wait()
        _, alive = psutil.wait_procs([*ranks, *trackers], timeout=10)
        assert not alive, [(p.pid, command_line(p)) for p in alive]
        deadline = time.time() + 10
        while _semaphores() - before and time.time() < deadline:
            time.sleep(0.1)
        assert not _semaphores() - before, "the launch left shared-memory names behind"
    finally:
        for p in ranks:  # ranks first: the tracker they hold then unlinks the names as it exits
            with contextlib.suppress(psutil.Error):
                p.kill()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
