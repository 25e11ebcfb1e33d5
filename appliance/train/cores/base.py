"""What every core shares: the state type, the interface, and the orthogonal layer init."""

from __future__ import annotations

import math
from typing import ClassVar, Protocol

import torch
from torch import nn

State = tuple[torch.Tensor, ...]


class Core(Protocol):
    """The part of a policy between its encoder and its heads, over features of width ``size``."""

    recurrent: ClassVar[bool]  # whether it carries a state from step to step

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        """The state each of ``batch`` agents starts from (``()`` for a core without one)."""
        ...

    def step(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Inference for one step: x [B, size] -> (h [B, size], the next state)."""
        ...

    def sequence(self, x: torch.Tensor, state: State) -> torch.Tensor:
        """Training over segments: x [B, T, size] from each segment's initial state -> h [B, T, size],
        what ``step`` would give one step at a time."""
        ...


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer
