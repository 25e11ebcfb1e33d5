"""The ``mingru`` core: PufferNet, layers of minimal GRUs joined by highway connections; a parallel
log-space scan over time in training and the same recurrence one step at a time in inference."""

from __future__ import annotations

import torch
from torch import nn

from appliance.gpu import kernels, reference
from appliance.train.cores.base import State


class MinGRU(nn.Module):
    """``num_layers`` layers, each one GEMM without bias, ``x W^T = [k, v, p]``, then

        h_t = (1 - z_t) * h_{t-1} + z_t * g(v_t),   z_t = sigmoid(k_t)         (the minimal GRU)
        y_t = x_t + sigmoid(p_t) * (h_t W_o^T - x_t)                              (the highway)

    where g(v) = v + 0.5 for v >= 0 and sigmoid(v) otherwise, which keeps h positive so that
    training can run the recurrence as a log-space parallel scan. ``k`` and ``v`` have
    ``expansion_factor * size`` units (the layer's state); ``W_o`` brings them back to ``size`` and
    is left out when the factor is 1. Each layer's ``y`` is the next layer's ``x``; the state is one
    ``h`` per layer, starting from zeros.

    With ``num_layers`` 2 and ``size`` 64 this is PufferLib 4.0's breakout network; with one layer
    its pong one. Its MinGRU reads no expansion factor (every width is ``size``), so only factor 1
    is the same network.
    """

    recurrent = True

    def __init__(self, size: int, num_layers: int = 1, expansion_factor: int = 1) -> None:
        super().__init__()
        if num_layers < 1 or expansion_factor < 1:
            raise ValueError(
                f"the mingru core needs num_layers >= 1 and expansion_factor >= 1, "
                f"got {num_layers} and {expansion_factor}"
            )
        self.size, self.num_layers, self.inner = size, num_layers, size * expansion_factor
        self.layers = nn.ModuleList(
            nn.Linear(size, 2 * self.inner + size, bias=False) for _ in range(num_layers)
        )
        self.out = (
            nn.ModuleList(nn.Linear(self.inner, size, bias=False) for _ in range(num_layers))
            if expansion_factor != 1
            else None
        )

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return tuple(torch.zeros(batch, self.inner, device=device) for _ in range(self.num_layers))

    def _highway(self, i: int, x: torch.Tensor, h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        out = h if self.out is None else self.out[i](h.to(self.out[i].weight.dtype))
        return torch.lerp(x, out.to(x.dtype), torch.sigmoid(p).to(x.dtype))

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One step: x [B, size], one h [B, inner] per layer -> (y [B, size], the new h's);
        ``kernels.mingru_step`` in inference (fused on CUDA, the host build on a CPU), the torch
        reference, which autograd follows, elsewhere."""
        new = []
        for i, layer in enumerate(self.layers):
            kv, p = layer(x).split((2 * self.inner, self.size), dim=-1)
            if torch.is_grad_enabled():
                h = reference.mingru_step(kv, state[i])
            else:
                h = kernels.mingru_step(kv.contiguous(), state[i].float().contiguous())
            new.append(h)
            x = self._highway(i, x, h, p)
        return x, tuple(new)

    def sequence(self, x: torch.Tensor, state: State) -> torch.Tensor:
        """All steps at once: x [B, T, size] from each layer's h0 [B, inner] -> y [B, T, size]
        (``kernels.mingru_scan`` per layer: fused forward and backward on CUDA, the host build on
        a CPU)."""
        for i, layer in enumerate(self.layers):
            kv, p = layer(x).split((2 * self.inner, self.size), dim=-1)
            x = self._highway(i, x, kernels.mingru_scan(kv, state[i]), p)
        return x
