"""Policy cores, one small module each: what a :class:`~appliance.train.policy.Policy` runs between
its encoder and its heads.

* ``mlp`` (:mod:`.mlp`): Linear + GELU, no state.
* ``lstm`` (:mod:`.lstm`): an ``nn.LSTM`` for whole sequences in training and an ``nn.LSTMCell``
  that shares its weights for per-step inference.
* ``mingru`` (:mod:`.mingru`): minimal GRU, a parallel log-space scan over time for training, the
  same recurrence one step at a time for inference.

Each has the three methods of :class:`Core` (``initial_state``, ``step``, ``sequence``), so the
policy composes any of them the same way.
"""

from __future__ import annotations

from appliance.train.cores.base import Core, State, layer_init
from appliance.train.cores.lstm import LSTM
from appliance.train.cores.mingru import MinGRU
from appliance.train.cores.mlp import MLP

CORES: dict[str, type[MLP | LSTM | MinGRU]] = {"mlp": MLP, "lstm": LSTM, "mingru": MinGRU}

__all__ = ["CORES", "LSTM", "MLP", "Core", "MinGRU", "State", "layer_init"]
