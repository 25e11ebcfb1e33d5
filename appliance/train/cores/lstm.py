"""The ``lstm`` core: an ``nn.LSTM`` for whole sequences in training and an ``nn.LSTMCell`` that
shares its weights for per-step inference."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from appliance.gpu import host, kernels
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
        """``nn.LSTMCell``; in inference on CUDA its two GEMMs and ``kernels.lstm_step`` (the gate
        math fused into one kernel; the reference is tested equal to the cell), and in float32 on the
        CPU :meth:`_host_step`."""
        if torch.is_grad_enabled():
            h, c = self.cell(x, state)
        elif kernels.use_cuda(x):
            h, c = state
            gx = F.linear(x, self.cell.weight_ih, self.cell.bias_ih)
            gh = F.linear(h.to(gx.dtype), self.cell.weight_hh, self.cell.bias_hh)
            h, c = kernels.lstm_step(gx.contiguous(), gh.contiguous(), c.float().contiguous())
        elif _plain_float32_cpu(x, *state):
            h, c = self._host_step(x, state)
        else:
            h, c = self.cell(x, state)
        return h, (h, c)

    def _host_step(self, x: torch.Tensor, state: State) -> State:
        """The cell's arithmetic for the CPU rollout in fewer passes over memory: both products
        accumulated into one gate buffer against contiguous copies of the transposed weights (MKL's
        faster layout for these shapes; a copy a step, as the update may change the weights in
        place), then the biases and the gate math in one pass, ``host.lstm_gates`` (or, without the
        extension, torch ops in place). The cell's result to float32 rounding (tests/test_cores.py);
        its speed: docs/lab/cpu-speed.md."""
        h, c = state
        cell = self.cell
        bias = cell.bias_ih + cell.bias_hh
        gates = torch.mm(x, cell.weight_ih.t().contiguous())
        gates.addmm_(h, cell.weight_hh.t().contiguous())
        if host.use_host(gates, c):
            return host.lstm_gates(gates, c, bias)
        gates += bias
        n = self.hidden_size
        gates[:, : 2 * n].sigmoid_()  # input and forget gates
        gates[:, 3 * n :].sigmoid_()  # output gate
        gates[:, 2 * n : 3 * n].tanh_()  # the candidate
        i, f, g, o = gates.chunk(4, 1)
        c = (f * c).addcmul_(i, g)
        return c.tanh().mul_(o), c

    def sequence(self, x: torch.Tensor, state: State) -> torch.Tensor:
        h0, c0 = state
        h, _ = self(x, (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous()))
        return h


def _plain_float32_cpu(*tensors: torch.Tensor) -> bool:
    """Float32 CPU tensors with no autocast over them (under CPU autocast the cell's products run in
    its dtype)."""
    return not torch.is_autocast_enabled("cpu") and all(
        t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors
    )
