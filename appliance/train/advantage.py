"""Advantages: V-trace-clipped GAE over ``[segments, horizon]`` rows.

Position t of a row holds what the trainer had when it chose action t: the observation, the value
V_t, and the reward r_t and done flag d_t that arrived *with* that observation (the results of
action t-1). So action t's outcome is (r_{t+1}, d_{t+1}) and, backward over t:

    delta_t = min(rho_t, rho_clip) * (r_{t+1} + gamma * V_{t+1} * (1 - d_{t+1}) - V_t)
    A_t     = delta_t + gamma * lambda * min(rho_t, c_clip) * (1 - d_{t+1}) * A_{t+1}

with A_{T-1} = 0 (its outcome is not in the row). With rho = 1 this is exactly GAE(gamma, lambda).
``rho_on="reward"`` (``train.vtrace_rho_on``) puts the clipped ratio on the reward alone, as
PufferLib 4.0's CPU advantage loop does:

    delta_t = min(rho_t, rho_clip) * r_{t+1} + gamma * V_{t+1} * (1 - d_{t+1}) - V_t

:func:`advantage` is the definition; :func:`compute` is what the trainer calls: the fused CUDA
kernel (``kernels.advantage``, the same recursion) for CUDA tensors, its body compiled for the CPU
(``appliance.gpu.host``) for float32 CPU tensors, this function everywhere else. Both builds are
accelerations of this function, held to it when a trainer starts (:func:`check_at_start`): an edit
here that the kernel does not have stops a GPU run in one line and, on a CPU, makes the run use the
edited function (with a warning), so the edit is never silently ignored.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from appliance.errors import TrainingError
from appliance.gpu import host, kernels

if TYPE_CHECKING:
    from appliance.config.keys import TrainConfig

KERNEL_TOLERANCE = (1e-4, 1e-5)  # (relative, absolute): a build of the kernel against advantage(), float32
RHO_ON = ("td_error", "reward")  # what the clipped ratio weights in each TD error (train.vtrace_rho_on)


@dataclass(frozen=True)
class Coefs:
    """The advantage's coefficients, as :func:`advantage` and its builds take them after the four
    tensors: ``gamma``, ``gae_lambda``, the V-trace clips and what the clipped ratio weights."""

    gamma: float
    gae_lambda: float
    rho_clip: float = 1.0
    c_clip: float = 1.0
    rho_on: str = "td_error"

    @classmethod
    def of(cls, train: TrainConfig) -> Coefs:
        """From the config's train section (``train.gamma``, ``train.vtrace_rho_clip``, ...)."""
        return cls(
            train.gamma, train.gae_lambda, train.vtrace_rho_clip, train.vtrace_c_clip, train.vtrace_rho_on
        )

    def args(self) -> tuple[float, float, float, float, str]:
        return (self.gamma, self.gae_lambda, self.rho_clip, self.c_clip, self.rho_on)


def advantage(
    values: torch.Tensor,
    rewards: torch.Tensor,
    dones: torch.Tensor,
    ratios: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
    rho_on: str = "td_error",
) -> torch.Tensor:
    """The advantages ``[segments, horizon]`` in float32, by the recursion above."""
    if rho_on not in RHO_ON:
        raise ValueError(f"unknown train.vtrace_rho_on {rho_on!r}; choose td_error or reward")
    on_reward = rho_on == "reward"
    values, rewards, dones, ratios = (t.float() for t in (values, rewards, dones, ratios))
    advantages = torch.zeros_like(values)
    rho = torch.clamp(ratios, max=rho_clip)
    c = torch.clamp(ratios, max=c_clip)
    last = torch.zeros_like(values[:, 0])
    for t in range(values.shape[1] - 2, -1, -1):
        not_done = 1.0 - dones[:, t + 1]
        if on_reward:
            delta = rho[:, t] * rewards[:, t + 1] + gamma * values[:, t + 1] * not_done - values[:, t]
        else:
            delta = rho[:, t] * (rewards[:, t + 1] + gamma * values[:, t + 1] * not_done - values[:, t])
        last = delta + gamma * gae_lambda * c[:, t] * not_done * last
        advantages[:, t] = last
    return advantages


def compute(
    values: torch.Tensor,
    rewards: torch.Tensor,
    dones: torch.Tensor,
    ratios: torch.Tensor,
    coefs: Coefs,
    accelerated: bool = True,
) -> torch.Tensor:
    """:func:`advantage`, by the fused kernel where ``kernels.use_cuda`` says it runs, and by the same
    kernel body compiled for the CPU for float32 CPU tensors (:mod:`appliance.gpu.host`);
    ``accelerated=False`` (what :func:`check_at_start` returns when the host build disagrees with
    :func:`advantage`): this function always."""
    fn = _build_for(values, rewards, dones, ratios) if accelerated else None
    return (fn or advantage)(values, rewards, dones, ratios, *coefs.args())


def _build_for(*tensors: torch.Tensor):
    """The accelerated build :func:`compute` runs on these tensors, or None for :func:`advantage`."""
    if kernels.use_cuda(tensors[0]):
        return kernels.advantage
    if host.use_host(*tensors):
        return host.advantage
    return None


def _test_batch(
    device: torch.device, rows: int = 64, horizon: int = 16, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Values, rewards, dones (some episodes ending inside a row) and ratios around 1, some beyond
    either clip, for :func:`check_at_start`."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    values = torch.randn(rows, horizon, generator=gen)
    rewards = torch.randn(rows, horizon, generator=gen)
    dones = (torch.rand(rows, horizon, generator=gen) < 0.1).float()
    ratios = torch.exp(0.5 * torch.randn(rows, horizon, generator=gen))
    return tuple(t.to(device) for t in (values, rewards, dones, ratios))


def check_at_start(device: torch.device, coefs: Coefs) -> bool:
    """Hold the build :func:`compute` runs for float32 tensors on ``device`` to :func:`advantage` on
    one random batch, at the run's own coefficients. Agreeing (or no build here): True. The CUDA
    kernel disagreeing: a :class:`TrainingError` naming what to do, as the fused loss's check. The
    host build disagreeing: a warning, and False, for ``compute(..., accelerated=False)``."""
    batch = _test_batch(device)
    build = _build_for(*batch)
    if build is None:
        return True
    got = build(*batch, *coefs.args()).float()
    want = advantage(*batch, *coefs.args())
    rtol, atol = KERNEL_TOLERANCE
    if torch.allclose(got, want, rtol=rtol, atol=atol):
        return True
    err = float((got - want).abs().max())
    if build is kernels.advantage:
        raise TrainingError(
            f"the fused CUDA advantage differs from advantage() in appliance/train/advantage.py by up "
            f"to {err:.3g} on a test batch: port the change to kernels/advantage.cuh, or run with "
            "PUFFER_KERNELS=reference to train with the torch advantage"
        )
    warnings.warn(
        f"advantage() in appliance/train/advantage.py differs from the CPU build of "
        f"kernels/advantage.cuh by up to {err:.3g} on a test batch: training with advantage() (slower); "
        "port the change to kernels/advantage.cuh and reinstall (pip install -e .) for the kernel's speed",
        stacklevel=2,
    )
    return False
