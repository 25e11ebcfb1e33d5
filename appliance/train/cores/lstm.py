"""The ``lstm`` core: an ``nn.LSTM`` for whole sequences in training and an ``nn.LSTMCell`` that
shares its weights for per-step inference (on the CPU its products and the extension's gate pass)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from appliance.gpu import host, kernels
from appliance.train.cores.base import State


class LSTM(nn.LSTM):
    recurrent = True
    # the float32 CPU rollout's products in int16 (``train.rollout_int16``; the trainer sets it)
    rollout_int16 = False

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
        math fused into one kernel; the reference is tested equal to the cell), and on the CPU
        :meth:`_host_step` in float32 and :meth:`_bf16_step` in bfloat16."""
        if torch.is_grad_enabled():
            h, c = self.cell(x, state)
        elif kernels.use_cuda(x):
            h, c = state
            gx = F.linear(x, self.cell.weight_ih, self.cell.bias_ih)
            gh = F.linear(h.to(gx.dtype), self.cell.weight_hh, self.cell.bias_hh)
            h, c = kernels.lstm_step(gx.contiguous(), gh.contiguous(), c.float().contiguous())
        elif _plain_float32_cpu(x, *state):
            h, c = self._host_step(x, state)
        elif _bf16_cpu(x, self.cell.weight_ih):
            h, c = self._bf16_step(x, state)
        else:
            h, c = self.cell(x, state)
        return h, (h, c)

    def _bf16_step(self, x: torch.Tensor, state: State) -> State:
        """The cell in bfloat16 for the CPU rollout (its bf16 weights, or autocast's): ``[x, h]``
        against both weights in one bf16 product (one GEMM of twice the depth), then the biases and
        the gate math in float32 in one pass, ``host.lstm_gates``, which widens the bf16 product as
        it reads it (torch ops on a float32 copy without the extension).
        ``c`` comes out in float32, as ``h`` does under autocast: the cell state keeps its precision
        from step to step, where the cell under autocast takes it in bf16. Within bf16 rounding of
        the float32 cell (tests/test_cores.py); its speed: docs/lab/cpu-speed.md."""
        h, c = state
        cell = self.cell
        bf16 = torch.bfloat16
        weight = torch.cat([cell.weight_ih, cell.weight_hh], 1).to(bf16).t().contiguous()
        gates = torch.mm(torch.cat([x.to(bf16), h.to(bf16)], 1), weight)
        h, c = self._gate_pass(gates, c.float(), cell.bias_ih.float() + cell.bias_hh.float())
        # without autocast the next layer's bf16 weights take h in their dtype
        return (h, c) if torch.is_autocast_enabled("cpu") else (h.to(x.dtype), c)

    def _host_step(self, x: torch.Tensor, state: State) -> State:
        """The cell's arithmetic for the CPU rollout in fewer passes over memory: both products
        accumulated into one gate buffer against contiguous copies of the transposed weights (MKL's
        faster layout for these shapes; a copy a step, as the update may change the weights in
        place), then the biases and the gate math in one pass, ``host.lstm_gates`` (or, without the
        extension, torch ops in place). The cell's result to float32 rounding (tests/test_cores.py);
        with ``rollout_int16`` the products are in 16-bit integers and the gate math follows them a
        few rows at a time, ``host.lstm_step_i16``. Its speed: docs/lab/cpu-speed.md."""
        h, c = state
        cell = self.cell
        bias = cell.bias_ih + cell.bias_hh
        if self.rollout_int16 and host.use_host(x, h, c):
            return host.lstm_step_i16(x, h, c, cell.weight_ih, cell.weight_hh, bias)
        gates = torch.mm(x, cell.weight_ih.t().contiguous())
        gates.addmm_(h, cell.weight_hh.t().contiguous())
        return self._gate_pass(gates, c, bias)

    def _gate_pass(self, gates: torch.Tensor, c: torch.Tensor, bias: torch.Tensor) -> State:
        """``(h, c')`` from pre-activations ``gates [B, 4H]`` (both products in; float32 or bf16),
        the float32 cell state and both biases' sum: ``host.lstm_gates``, which reads either, or
        without it torch ops in place on float32 gates."""
        if host.use_host(c):
            return host.lstm_gates(gates, c, bias)
        gates = gates.float()  # a bf16 product widened (float32: itself)
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


def _bf16_cpu(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """A CPU step whose products run in bfloat16: bf16 weights (the rollout's copy), or bf16 CPU
    autocast over float32 ones."""
    if x.device.type != "cpu":
        return False
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu") == torch.bfloat16
    return weight.dtype == torch.bfloat16 and x.dtype == torch.bfloat16


def _plain_float32_cpu(*tensors: torch.Tensor) -> bool:
    """Float32 CPU tensors with no autocast over them (under CPU autocast the cell's products run in
    its dtype)."""
    return not torch.is_autocast_enabled("cpu") and all(
        t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors
    )
