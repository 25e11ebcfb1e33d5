"""Emulation: any Gymnasium or PettingZoo env as flat fixed-size arrays per agent.

Structured spaces (Dict, Tuple, nested; Box, Discrete, MultiDiscrete, MultiBinary leaves) travel
through the vector backends as one flat array per agent, and :meth:`SpaceCodec.unflatten` restores
the exact structure, dtypes included, just before the policy.

* Observations: if every leaf has the same dtype the flat array has that dtype; otherwise it holds
  the leaves' raw bytes (uint8) and unflatten reinterprets them, so nothing is rounded or cast.
* Actions: all-discrete structures become one MultiDiscrete (a single Discrete stays Discrete);
  all-Box structures one float32 Box; mixtures a float32 Box whose discrete entries are rounded back.

A PettingZoo parallel env keeps a fixed number of agent rows (``possible_agents``); rows of agents
that are absent this step have ``mask`` False and zero observations and rewards.

Env contracts are checked here, where an env's output enters (every Python-env backend steps these
emulators): what ``reset`` and ``step`` return, observation shapes and dtypes, rewards, flags, info,
PettingZoo agent keys and the spaces themselves. A broken rule is an :class:`EnvContractError` naming
the env, the call and the rule in one line. The per-step checks are type, shape and dtype compares
(an observation whose array matches the space is copied without further work); non-finite
observations are checked on reset only (the trainer names NaN observations met later).

The package: :mod:`~appliance.emulation.codecs` (flattening), :mod:`~appliance.emulation.contracts`
(the checks), :mod:`~appliance.emulation.emulators` (the emulators and env factories). Import from
``appliance.emulation``.
"""

from appliance.emulation.codecs import ActionCodec, Leaf, SpaceCodec
from appliance.emulation.contracts import check_observation, describe_space, env_name
from appliance.emulation.emulators import GymnasiumEmulator, PettingZooEmulator, emulate, make_factory

__all__ = [
    "ActionCodec",
    "GymnasiumEmulator",
    "Leaf",
    "PettingZooEmulator",
    "SpaceCodec",
    "check_observation",
    "describe_space",
    "emulate",
    "env_name",
    "make_factory",
]
