"""The training update as device work only, captured as a CUDA graph on a GPU.

One PPO minibatch (V-trace advantages, prioritized sampling, forward, ``kernels.ppo_loss``,
backward, clipping, the optimizer step) reads nothing back to the host: the sampling step and the
importance exponent beta live in device scalars (:class:`EpochScalars`), statistics are summed
on the device and read once per epoch, and NaN checks are made on those sums. So the very same
Python function runs eagerly on a CPU (the reference path, tested there) and, on a GPU, is
captured once after a warm-up and replayed for every later minibatch (:class:`MinibatchGraph`).
A replay runs none of the eager timing sections, so :class:`ReplayClock` times each replay as a whole
with CUDA events (the trainer's ``train.graphed``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from appliance.train.losses import STAT_NAMES

if TYPE_CHECKING:
    from appliance.config import TrainConfig

# What EpochScalars.sums holds, in order: the loss terms (each chunk's weighted by its share of the
# minibatch), then per minibatch the clipped gradient's norm, the mean importance weight and
# whether any advantage was NaN/Inf.
STATS = (*STAT_NAMES, "grad_norm", "importance", "nonfinite_advantages")
LOSS_TERMS = slice(0, len(STAT_NAMES))  # kernels.ppo_loss's order too
GRAD_NORM, IMPORTANCE, NONFINITE = 6, 7, 8


class EpochScalars:
    """The device scalars one epoch of minibatches reads and writes."""

    def __init__(self, device: torch.device) -> None:
        self.step = torch.zeros(1, dtype=torch.int64, device=device)  # prio_sample's Philox step
        self.beta = torch.zeros((), dtype=torch.float32, device=device)
        self.sums = torch.zeros(len(STATS), dtype=torch.float32, device=device)
        self.last_advantages: torch.Tensor | None = None  # the last minibatch's (explained variance)

    def begin(self, step: int, beta: float) -> None:
        self.step.fill_(step)
        self.beta.fill_(beta)
        self.sums.zero_()

    def finish(self, minibatches: int) -> dict[str, float]:
        """The epoch's means: the one read-back of the update."""
        return {k: v / minibatches for k, v in zip(STATS, self.sums.tolist(), strict=True)}


def _timing_event() -> Any:
    return torch.cuda.Event(enable_timing=True)


class ReplayClock:
    """Device seconds of graph replays: an event pair recorded around each replay on the current
    stream, read (and forgotten) by :meth:`take` after the caller's synchronization, so timing adds
    no synchronization of its own. ``event`` makes one timing event (a CUDA event; tests pass fakes)."""

    def __init__(self, event: Callable[[], Any] = _timing_event) -> None:
        self.event = event
        self.pairs: list[tuple[Any, Any]] = []

    @contextmanager
    def __call__(self) -> Iterator[None]:
        start, end = self.event(), self.event()
        start.record()
        yield
        end.record()
        self.pairs.append((start, end))

    def take(self) -> float:
        """Seconds between each pair's events, summed; waits for the last event if it has not run."""
        total = 0.0
        for start, end in self.pairs:
            end.synchronize()
            total += start.elapsed_time(end) / 1000  # milliseconds
        self.pairs.clear()
        return total


class MinibatchGraph:
    """Calls ``fn`` (one minibatch) eagerly, or with ``capture`` (CUDA) eagerly for ``WARMUP`` calls
    on a side stream, then captures it once and replays the graph on every later call, each replay
    timed by ``clock``. A capture records without running, so the capturing call replays once to do
    its minibatch."""

    WARMUP = 3

    def __init__(self, fn: Callable[[], None], capture: bool, clock: ReplayClock | None = None) -> None:
        self.fn, self.capture = fn, capture
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.replay = True  # False: run fn eagerly even once captured (gpu-check compares the two)
        self.clock = clock or ReplayClock()

    def __call__(self) -> None:
        if not self.capture:
            self.fn()
            return
        if self.graph is not None:
            if self.replay:
                with self.clock():
                    self.graph.replay()
            else:
                self.fn()
            return
        self.calls += 1
        if self.calls <= self.WARMUP:  # allocations, lazy module loads and cuDNN plans happen here
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.fn()
            torch.cuda.current_stream().wait_stream(side)
            return
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.fn()
        self.graph = graph
        with self.clock():
            graph.replay()

    @property
    def captured(self) -> bool:
        return self.graph is not None


@dataclass
class SavedUpdate:
    """What an update epoch changes, copied: (tensor, copy) pairs and the random generators' states
    (the segment draws' uniforms come from torch's generator: the trainer's on a CPU, the device's
    default one on CUDA)."""

    tensors: list[tuple[torch.Tensor, torch.Tensor]]
    generator: torch.Generator
    cpu_state: torch.Tensor
    cuda_state: torch.Tensor | None


def update_state(trainer: Any) -> SavedUpdate:
    """Weights, optimizer state, the rollout's values and ratios, and the generators' states.
    :func:`restore` puts them back in place (same addresses, so a captured graph still reads them):
    gpu-check runs one epoch's update twice from the same state."""
    tensors = [*trainer.policy.parameters(), trainer.rollout.values, trainer.rollout.ratios]
    for opt in trainer.optimizer.optimizers:
        for state in opt.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
        tensors += [g["lr"] for g in opt.param_groups if isinstance(g["lr"], torch.Tensor)]
    cuda = trainer.device.type == "cuda"
    return SavedUpdate(
        [(t, t.detach().clone()) for t in tensors],
        trainer.generator,
        trainer.generator.get_state(),
        torch.cuda.get_rng_state(trainer.device) if cuda else None,
    )


@torch.no_grad()
def restore(saved: SavedUpdate) -> None:
    for t, copy in saved.tensors:
        t.copy_(copy)
    saved.generator.set_state(saved.cpu_state)
    if saved.cuda_state is not None:
        torch.cuda.set_rng_state(saved.cuda_state)


class RolloutGraphs:
    """The rollout engine's policy step for each buffer as device work at device-held indices, so a
    CUDA graph per buffer can hold it (:mod:`appliance.train.engine` launches them from its C threads):
    the buffer's observations in from the vector's (pinned) rows, the policy step on the buffer's
    recurrent state, ``kernels.sample_logits`` at the device-held global step, the rollout write at the
    device-held column ``t``, the actions out to the vector's rows, then ``t += 1`` and
    ``step += num_agents``. :meth:`body` runs eagerly anywhere (the CPU tests use it as the engine's
    callback); :meth:`capture` records it once per buffer on the buffer's stream.

    Needs every agent to own one rollout row (``train.batch_size auto``: one pass of the horizon),
    Discrete or MultiDiscrete actions, and the observations on the trainer's device.
    """

    def __init__(self, trainer: Any, engine: Any) -> None:
        self.trainer, self.engine = trainer, engine
        dev = trainer.device
        heads = len(trainer.policy.nvec)
        self.t = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in engine.buffers]
        self.step = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in engine.buffers]
        self.out = [
            (
                torch.zeros(
                    (buf.count,) if heads == 1 else (buf.count, heads), dtype=torch.int64, device=dev
                ),
                torch.zeros(buf.count, dtype=torch.float32, device=dev),
                torch.zeros(buf.count, dtype=torch.float32, device=dev),
            )
            for buf in engine.buffers
        ]
        self.graphs: list[torch.cuda.CUDAGraph] = []

    @staticmethod
    def supported(trainer: Any, engine: Any) -> str | None:
        """None when the rollout step can be graphed, else why not (said once in the run's log)."""
        if trainer.policy.nvec is None:
            return "Box actions sample from torch's Gaussian, not the fused kernel"
        if engine.passes != 1:
            return "train.batch_size is above num_agents * bptt_horizon (agents write several rows)"
        if trainer.rollout.obs.device.type != trainer.device.type:  # (cuda:0 vs the trainer's "cuda")
            return "train.cpu_offload keeps the observations on the host"
        return None

    def begin(self) -> None:
        """Before a horizon: column 0, the plain loop's global step, the segments' initial states."""
        tr = self.trainer
        for t, step in zip(self.t, self.step, strict=True):
            t.zero_()
            step.fill_(tr.global_step)
        for saved, now in zip(tr.rollout.initial_state, tr.state, strict=True):
            saved.copy_(now)

    def body(self, b: int) -> None:
        """Buffer ``b``'s policy step at the device-held column and step (no host read-back)."""
        tr, buf, r = self.trainer, self.engine.buffers[b], self.trainer.rollout
        rows = slice(buf.first, buf.first + buf.count)
        t = self.t[b]
        obs = buf.obs if buf.obs_device is None else buf.obs_device.copy_(buf.obs, non_blocking=True)
        with torch.no_grad():
            action, logprob, value, new_state = tr.policy_step(
                obs, buf.state, buf.ids, self.step[b], out=self.out[b]
            )
            for s, new in zip(buf.state, new_state, strict=True):
                s.copy_(new)
            r.write_column(rows, t, obs, action, logprob, value)
            buf.actions.copy_(action.reshape(buf.actions.shape), non_blocking=buf.stream is not None)
            t += 1
            self.step[b] += tr.vec.num_agents

    def capture(self) -> list[int]:
        """One graph per buffer, recorded (not run) on the buffer's stream after an eager epoch has
        warmed every library up on it; returns the graph execs for ``Engine.set_graphs``."""
        self.graphs = []
        for b, buf in enumerate(self.engine.buffers):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=buf.stream):
                self.body(b)
            self.graphs.append(graph)
        torch.cuda.synchronize()
        return [g.raw_cuda_graph_exec() for g in self.graphs]

    def nonfinite(self) -> str | None:
        """After a graphed horizon, the NaN check the eager step makes at every step, once: None, or
        what went NaN/Inf first ("observations" from the env, else "logits" from the policy)."""
        r = self.trainer.rollout
        if bool(torch.isfinite(r.logprobs).all()):
            return None
        return (
            "observations"
            if r.obs.is_floating_point() and not bool(torch.isfinite(r.obs).all())
            else "logits"
        )


def can_capture(
    hp: TrainConfig, device: torch.device, policy: Any, profile: bool, data_parallel: bool
) -> bool:
    """Whether the update can be one CUDA graph per minibatch: ``train.graphs`` on a CUDA device,
    except where a graph cannot hold it: Box actions (no fused loss), observations kept on the host
    (``cpu_offload``), ``torch.compile`` (its own graphs), per-phase profiling (it synchronizes) and
    data-parallel ranks (the all-reduces)."""
    return bool(
        hp.graphs
        and device.type == "cuda"
        and policy.nvec is not None
        and not hp.cpu_offload
        and not hp.compile
        and not profile
        and not data_parallel
    )
