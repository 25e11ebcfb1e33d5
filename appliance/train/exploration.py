"""Box actions' exploration noise: white, or correlated over time per agent."""

from __future__ import annotations

import math

import torch


class BoxNoise:
    """The noise a Gaussian head samples with, for the agents ``ids`` at each step. With
    ``train.noise_corr`` rho > 0 an AR(1) process per agent (rho times its last noise plus
    sqrt(1 - rho^2) fresh N(0, 1): still N(0, 1) at each step, so the log-prob is the Gaussian
    head's, but pushes that last several steps, as MountainCarContinuous needs); with rho 0, None
    (the head draws white noise itself)."""

    def __init__(self, num_agents: int, rho: float) -> None:
        self.num_agents, self.rho = num_agents, rho
        self.last: torch.Tensor | None = None

    def draw(self, ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor | None:
        rho = self.rho
        if rho == 0:
            return None
        if self.last is None:
            self.last = torch.zeros(self.num_agents, out.shape[-1], device=out.device)
        noise = rho * self.last[ids] + math.sqrt(1 - rho * rho) * torch.randn(out.shape, device=out.device)
        self.last[ids] = noise
        return noise
