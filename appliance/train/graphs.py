"""The training update as device work only, captured as a CUDA graph on a GPU.

One PPO minibatch (V-trace advantages, prioritized sampling, forward, ``kernels.ppo_loss``,
backward, clipping, the optimizer step) reads nothing back to the host: the sampling step and the
importance exponent beta live in device scalars (:class:`EpochScalars`), statistics are summed
on the device and read once per epoch, and NaN checks are made on those sums. So the very same
Python function runs eagerly on a CPU (the reference path, tested there) and, on a GPU, is
captured once after a warm-up and replayed for every later minibatch (:class:`MinibatchGraph`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# What EpochScalars.sums holds, in order: the loss terms (each chunk's weighted by its share of the
# minibatch), then per minibatch the clipped gradient's norm, the mean importance weight and
# whether any advantage was NaN/Inf.
STATS = (
    "loss",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clipfrac",
    "grad_norm",
    "importance",
    "nonfinite_advantages",
)
LOSS_TERMS = slice(0, 6)  # reference.STAT_NAMES, kernels.ppo_loss's order
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


class MinibatchGraph:
    """Calls ``fn`` (one minibatch) eagerly, or with ``capture`` (CUDA) eagerly for ``WARMUP`` calls
    on a side stream, then captures it once and replays the graph on every later call. A capture
    records without running, so the capturing call replays once to do its minibatch."""

    WARMUP = 3

    def __init__(self, fn: Callable[[], None], capture: bool) -> None:
        self.fn, self.capture = fn, capture
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None

    def __call__(self) -> None:
        if not self.capture:
            self.fn()
            return
        if self.graph is not None:
            self.graph.replay()
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
        graph.replay()

    @property
    def captured(self) -> bool:
        return self.graph is not None
