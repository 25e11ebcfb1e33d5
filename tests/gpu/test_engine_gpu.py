"""The rollout engine on a CUDA device: buffers on their own streams, pinned vector arrays, and the
native loop launching captured CUDA graphs (cuGraphLaunch through dlopen)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from appliance import _ocean, vector
from appliance.config import resolve
from appliance.train import Trainer


def config(*extra: str):
    return resolve(
        "breakout",
        profile="cpu",
        overrides=[
            "--train.device", "cuda", "--train.precision", "float32", "--vec.num-envs", "64",
            "--vec.num-threads", "4", "--policy.hidden-size", "64", "--train.bptt-horizon", "16",
            "--train.minibatch-size", "256", "--train.max-minibatch-size", "256", *extra,
        ],
    )  # fmt: skip


def rollout(cfg) -> dict[str, torch.Tensor]:
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        trainer.evaluate()
        r = trainer.rollout
        return {k: getattr(r, k).cpu() for k in ("obs", "actions", "logprobs", "values", "rewards", "dones")}
    finally:
        trainer.close()


def test_one_buffer_on_cuda_is_the_plain_loop():
    plain, engine = rollout(config("--train.engine", "off")), rollout(config("--train.engine", "on"))
    for key in plain:
        assert torch.equal(plain[key], engine[key]), key


@pytest.mark.parametrize("buffers", [2, 4])
def test_buffers_on_their_own_streams_give_the_plain_loops_rollout(buffers):
    """cuBLAS may pick another kernel for a smaller batch: values to 1e-4, and the sampled actions
    (Philox on (seed, step, agent)) may flip only where logits differ in their last bits."""
    plain = rollout(config("--train.engine", "off"))
    engine = rollout(config("--train.buffers", str(buffers)))
    assert torch.equal(plain["obs"][:, 0], engine["obs"][:, 0])  # the first step's observations
    agree = (plain["actions"] == engine["actions"]).float().mean().item()
    assert agree > 0.99, f"{buffers} buffers: only {agree:.3f} of the actions agree"
    if agree == 1.0:
        torch.testing.assert_close(engine["values"], plain["values"], rtol=1e-4, atol=1e-4)


def test_the_native_loop_launches_one_captured_graph_per_buffer():
    vec = vector.make("breakout", backend="native", num_envs=8, num_threads=2, seed=0)
    vec.async_reset(0)
    cudart = torch.cuda.cudart()
    assert int(cudart.cudaHostRegister(vec.actions.ctypes.data, vec.actions.nbytes, 0)) == 0
    engine = _ocean.Engine(vec._c, [1, 1])
    try:
        streams = [torch.cuda.Stream() for _ in range(2)]
        counters = [torch.zeros(1, dtype=torch.int32, device="cuda") for _ in range(2)]
        actions = torch.from_numpy(vec.actions)
        graphs = []
        for b, stream in enumerate(streams):
            source = torch.full((4,), b + 1, dtype=torch.int32, device="cuda")
            graph = torch.cuda.CUDAGraph()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                counters[b] += 0  # warm-up outside capture
                torch.cuda.synchronize()
                with torch.cuda.graph(graph, stream=stream):
                    counters[b] += 1
                    actions[b * 4 : (b + 1) * 4].copy_(source, non_blocking=True)
            graphs.append(graph)
        torch.cuda.synchronize()
        rewards, dones = np.zeros((7, 8), np.float32), np.zeros((7, 8), np.bool_)
        engine.run_graphs(
            7, [g.raw_cuda_graph_exec() for g in graphs], [s.cuda_stream for s in streams], rewards, dones
        )
        assert [int(c.item()) for c in counters] == [7, 7]
        np.testing.assert_array_equal(vec.actions, [1, 1, 1, 1, 2, 2, 2, 2])
        times = engine.take_times()
        assert all(t["steps"] == 7 and t["env"] > 0 for t in times)
    finally:
        engine.close()
        cudart.cudaHostUnregister(vec.actions.ctypes.data)
        vec.close()


def test_captured_rollout_graphs_replay_the_eager_policy_step():
    """Graphs on: the first horizon runs RolloutGraphs' body eagerly, then one graph per buffer is
    captured and launched by the C loop. Two rollouts without an update between them must match the
    eager engine (graphs off) on the same seed."""
    rollouts = {}
    for graphs in ("true", "false"):
        cfg = config("--train.buffers", "2", "--train.graphs", graphs)
        trainer = Trainer(cfg, vector.make_from_config(cfg))
        try:
            trainer.evaluate()
            assert (trainer.engine.graphs is not None) == (graphs == "true"), trainer.engine.graph_reason
            trainer.evaluate()  # graphs on: launched by the C threads
            r = trainer.rollout
            rollouts[graphs] = {k: getattr(r, k).cpu() for k in ("obs", "actions", "logprobs", "values")}
        finally:
            trainer.close()
    on, off = rollouts["true"], rollouts["false"]
    assert (on["actions"] == off["actions"]).float().mean().item() > 0.99
    assert torch.equal(on["obs"][:, 0], off["obs"][:, 0])
