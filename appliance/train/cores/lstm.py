"""The ``lstm`` core: an ``nn.LSTM`` for whole sequences in training and an ``nn.LSTMCell`` that
shares its weights for per-step inference."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from appliance.gpu import kernels
from appliance.train.cores.base import State


class LSTM(nn.LSTM):
    recurrent = True

    def __init__(self, size: int, num_layers: int = 1) -> None:
        if num_layers != 1:
            raise ValueError(
                f"policy.num_layers {num_layers}: the lstm core has one layer; use mingru or mlp"
            )
        super().__init__(size, size, batch_first=True)
        cell = nn.LSTMCell(size, size)
        # one set of weights: the cell's parameters are the LSTM's
        cell.weight_ih, cell.weight_hh = self.weight_ih_l0, self.weight_hh_l0
        cell.bias_ih, cell.bias_hh = self.bias_ih_l0, self.bias_hh_l0
        # not a submodule, as its parameters are already this module's: a Policy registers it beside
        # the core as ``cell``, the name its checkpoints give those weights
        self.__dict__["cell"] = cell

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return (
            torch.zeros(batch, self.hidden_size, device=device),
            torch.zeros(batch, self.hidden_size, device=device),
        )

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """``nn.LSTMCell``, or on CUDA in inference its two GEMMs and ``kernels.lstm_step`` (the gate
        math fused into one kernel; the reference is tested equal to the cell)."""
        if kernels.use_cuda(x) and not torch.is_grad_enabled():
            h, c = state
            gx = F.linear(x, self.cell.weight_ih, self.cell.bias_ih)
            gh = F.linear(h.to(gx.dtype), self.cell.weight_hh, self.cell.bias_hh)
            h, c = kernels.lstm_step(gx.contiguous(), gh.contiguous(), c.float().contiguous())
        else:
            h, c = self.cell(x, state)
        return h, (h, c)

    def sequence(self, x: torch.Tensor, state: State) -> torch.Tensor:
        h0, c0 = state
        h, _ = self(x, (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous()))
        return h
