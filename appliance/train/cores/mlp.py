"""The ``mlp`` core: ``num_layers`` times Linear + an activation (GELU unless given), with no state."""

from __future__ import annotations

import torch
from torch import nn

from appliance.train.cores.base import State, layer_init


class MLP(nn.Sequential):
    recurrent = False

    def __init__(self, size: int, num_layers: int = 1, activation: type[nn.Module] = nn.GELU) -> None:
        if num_layers < 1:
            raise ValueError(f"the mlp core needs num_layers >= 1, got {num_layers}")
        layers: list[nn.Module] = []
        for _ in range(num_layers):
            layers += [layer_init(nn.Linear(size, size)), activation()]
        super().__init__(*layers)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return ()

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        return self(x), state

    def sequence(self, x: torch.Tensor, state: State) -> torch.Tensor:
        return self(x)
