"""The ``mingru`` core: a minimal GRU, a parallel log-space scan over time for training and the
same recurrence one step at a time for inference."""

from __future__ import annotations

import torch
from torch import nn

from appliance.gpu import kernels, reference
from appliance.train.cores.base import State


class MinGRU(nn.Module):
    """Minimal GRU: h_t = (1 - z_t) * h_{t-1} + z_t * g(W_h x_t), z_t = sigmoid(W_z x_t).

    g(x) = x + 0.5 for x >= 0, sigmoid(x) otherwise, keeps h positive so training can run the
    recurrence as a log-space parallel scan (a cumulative logsumexp) instead of a loop over time.
    """

    recurrent = True

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.linear = nn.Linear(size, 2 * size)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return (torch.full((batch, self.size), 0.5, device=device),)  # g(0): inside the positive range

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One step: x [B, H], h [B, H] (positive) -> new h (``kernels.mingru_step``: fused on CUDA
        in inference; the torch reference, which autograd follows, elsewhere)."""
        kv = self.linear(x)
        if torch.is_grad_enabled():
            h = reference.mingru_step(kv, state[0])
        else:
            h = kernels.mingru_step(kv.contiguous(), state[0].float().contiguous())
        return h, (h,)

    def sequence(self, x: torch.Tensor, state: State) -> torch.Tensor:
        """All steps at once: x [B, T, H], h0 [B, H] -> h [B, T, H] via log-space cumulative sums
        (``kernels.mingru_scan``: a fused forward and backward on CUDA)."""
        return kernels.mingru_scan(self.linear(x), state[0])
