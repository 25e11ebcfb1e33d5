"""Rewards on their way into the rollout: scaled by the discounted return's running std, then clamped.

One function, :func:`scale_and_clamp`, for the plain loop (one ``recv`` at a time) and the rollout
engine (a horizon of steps at once, in step order), so both give the same rewards.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


class ReturnScale:
    """Rewards times 1 / max(1, std of the discounted return), the std a running estimate.

    Envs whose returns stay within about 1 (squared) are left alone (the factor stays exactly 1);
    breakout's and target's returns do exceed it and are scaled too (for breakout this learned
    slower in an mlp/adam test: see tests/test_learning.py). An env with
    large returns (Gymnasium classic control: -1 a step for hundreds of steps) would otherwise ask
    the value head for targets in the hundreds: the value loss then dominates the shared core's
    gradient, and with ``vf_clip_coef`` the value can move only 0.2 per epoch, so advantages stay
    noise and the policy drifts to a deterministic one (entropy 1.09 -> 0.0005 on Acrobot).
    """

    def __init__(self, num_agents: int, gamma: float) -> None:
        self.gamma = gamma
        self.returns = np.zeros(num_agents, np.float64)
        self.count, self.mean, self.m2 = 0, 0.0, 0.0
        self.scale = 1.0

    def state_dict(self) -> dict[str, float]:
        """The running statistics a checkpoint keeps (not the agents' partial returns: a resumed run
        starts its games afresh, so those start at zero again)."""
        return {"count": self.count, "mean": self.mean, "m2": self.m2, "scale": self.scale}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count, self.mean, self.m2 = int(state["count"]), float(state["mean"]), float(state["m2"])
        self.scale = float(state["scale"])
        self.returns[:] = 0.0

    def update(self, ids: np.ndarray, rewards: Any, dones: np.ndarray) -> float:
        r = np.asarray(rewards, np.float64)
        if not np.isfinite(r).all():
            return self.scale  # the NaN check in train() names the epoch
        ret = self.returns[ids] * self.gamma + r
        self.returns[ids] = np.where(dones, 0.0, ret)
        n = len(ret)
        mean, var = float(ret.mean()), float(ret.var())
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += var * n + delta * delta * self.count * n / total
        self.count = total
        std = math.sqrt(self.m2 / self.count)
        self.scale = 1.0 / std if std > 1.0 else 1.0
        return self.scale


def scale_and_clamp(
    scale: ReturnScale | None, ids: np.ndarray, rewards: np.ndarray, dones: np.ndarray, clamp: float
) -> torch.Tensor:
    """``rewards`` of the agents ``ids`` (``[len(ids)]`` for one step, or ``[steps, len(ids)]`` in step
    order) times the return scale at each step (``train.reward_norm``; none: 1), clamped to
    ``[-clamp, clamp]``, as a float32 tensor on the CPU."""
    out = torch.as_tensor(np.asarray(rewards, np.float32))
    if scale is not None:
        steps = out.numel() // len(ids)
        r, d = np.reshape(rewards, (steps, len(ids))), np.reshape(dones, (steps, len(ids)))
        factors = np.array([scale.update(ids, r[t], d[t]) for t in range(steps)], np.float32)
        if (factors != 1.0).any():
            out = (out.reshape(steps, -1) * torch.from_numpy(factors)[:, None]).reshape(out.shape)
    return out.clamp(-clamp, clamp)
