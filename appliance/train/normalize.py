"""Observation normalization: a running mean and variance per feature, as the field's continuous-
control PPO does (Gymnasium's ``NormalizeObservation``, SB3's ``VecNormalize``).

The statistics live in the policy as buffers, so checkpoints and ``puffer-bench eval`` carry them.
They change only between epochs (:meth:`RunningNorm.update` after the update, from the rollout just
trained on): a rollout and the update that follows see the same normalization, so PPO's ratios
start at 1. Until the first update the statistics are the identity (mean 0, variance 1).
"""

from __future__ import annotations

import torch
from torch import nn


class RunningNorm(nn.Module):
    """``clamp((x - mean) / sqrt(var + eps), -clip, clip)`` over the last dim, the statistics of every
    sample passed to :meth:`update` (Chan et al.'s parallel merge of counts, means and variances)."""

    def __init__(self, size: int, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.clip, self.eps = clip, eps
        # float64 moments (a bfloat16 rollout copy casts them too; the forward casts to the input's dtype)
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(size, dtype=torch.float64))
        self.register_buffer("var", torch.ones(size, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.mean.to(x.dtype)
        inv_std = torch.rsqrt(self.var + self.eps).to(x.dtype)
        return ((x - mean) * inv_std).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the samples ``x [N, size]`` into the statistics."""
        x = x.reshape(-1, self.mean.numel()).to(torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)
