"""The ``mlp`` core: Linear + GELU, with no state."""

from __future__ import annotations

import torch
from torch import nn

from appliance.train.cores.base import State, layer_init


class MLP(nn.Sequential):
    recurrent = False

    def __init__(self, size: int) -> None:
        super().__init__(layer_init(nn.Linear(size, size)), nn.GELU())

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return ()

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        return self(x), state

    def sequence(self, x: torch.Tensor, state: State) -> torch.Tensor:
        return self(x)
