"""Advantages: V-trace-clipped GAE over ``[segments, horizon]`` rows.

Position t of a row holds what the trainer had when it chose action t: the observation, the value
V_t, and the reward r_t and done flag d_t that arrived *with* that observation (the results of
action t-1). So action t's outcome is (r_{t+1}, d_{t+1}) and, backward over t:

    delta_t = min(rho_t, rho_clip) * (r_{t+1} + gamma * V_{t+1} * (1 - d_{t+1}) - V_t)
    A_t     = delta_t + gamma * lambda * min(rho_t, c_clip) * (1 - d_{t+1}) * A_{t+1}

with A_{T-1} = 0 (its outcome is not in the row). With rho = 1 this is exactly GAE(gamma, lambda).

:func:`advantage` is the definition; :func:`compute` is what the trainer calls: the fused CUDA
kernel (``kernels.advantage``, the same recursion) for CUDA tensors, its body compiled for the CPU
(``appliance.gpu.host``) for float32 CPU tensors, this function everywhere else.
"""

from __future__ import annotations

import torch

from appliance.gpu import host, kernels


def advantage(
    values: torch.Tensor,
    rewards: torch.Tensor,
    dones: torch.Tensor,
    ratios: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
) -> torch.Tensor:
    """The advantages ``[segments, horizon]`` in float32, by the recursion above."""
    values, rewards, dones, ratios = (t.float() for t in (values, rewards, dones, ratios))
    advantages = torch.zeros_like(values)
    rho = torch.clamp(ratios, max=rho_clip)
    c = torch.clamp(ratios, max=c_clip)
    last = torch.zeros_like(values[:, 0])
    for t in range(values.shape[1] - 2, -1, -1):
        not_done = 1.0 - dones[:, t + 1]
        delta = rho[:, t] * (rewards[:, t + 1] + gamma * values[:, t + 1] * not_done - values[:, t])
        last = delta + gamma * gae_lambda * c[:, t] * not_done * last
        advantages[:, t] = last
    return advantages


def compute(
    values: torch.Tensor,
    rewards: torch.Tensor,
    dones: torch.Tensor,
    ratios: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
) -> torch.Tensor:
    """:func:`advantage`, by the fused kernel where ``kernels.use_cuda`` says it runs, and by the same
    kernel body compiled for the CPU for float32 CPU tensors (:mod:`appliance.gpu.host`)."""
    if kernels.use_cuda(values):
        fn = kernels.advantage
    elif host.use_host(values, rewards, dones, ratios):
        fn = host.advantage
    else:
        fn = advantage
    return fn(values, rewards, dones, ratios, gamma, gae_lambda, rho_clip, c_clip)
