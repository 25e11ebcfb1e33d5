"""The Ocean catalogue: which C envs are compiled into ``appliance._ocean``, and their layouts.

Stepping them is the vector layer's job (``appliance.vector.make("breakout", ...)``, the native
backend in :mod:`appliance.vector.native`); this module only names and describes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance import _ocean, pufferlib_envs
from appliance.errors import ConfigError


def names() -> list[str]:
    """Names of the compiled Ocean envs."""
    return sorted(_ocean.names())


def ocean_name(env: Any) -> str | None:
    """The Ocean env that ``env`` names ("breakout" or "ocean:breakout"), or None if it names none.
    ``pufferlib:NAME`` names a PufferLib-format env that `envs build` made: it is loaded here
    (:mod:`appliance.pufferlib_envs`; a one-line ConfigError where it is not built)."""
    if not isinstance(env, str):
        return None
    if env.startswith(pufferlib_envs.PREFIX):
        return pufferlib_envs.load(env)
    name = env.split(":", 1)[1] if env.startswith("ocean:") else env
    return name if name in _ocean.names() else None


def canonical(env: Any) -> Any:
    """``env`` as the config and the vectors name it: a PufferLib env folder is built (cached) and
    becomes ``pufferlib:NAME``, ``pufferlib:NAME`` is loaded; anything else is returned as given."""
    if isinstance(env, str) and pufferlib_envs.is_env_folder(env):
        built = pufferlib_envs.build(env)
        return pufferlib_envs.load_library(built)
    if isinstance(env, str) and env.startswith(pufferlib_envs.PREFIX):
        return pufferlib_envs.load(env)
    return env


def describe(name: str, **params: Any) -> dict[str, Any]:
    """Layout of one env: agents per env, observation size/dtype/bounds, action sizes, params."""
    try:
        return _ocean.describe(name, params)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def available() -> list[dict[str, Any]]:
    """Every env with its default spaces and agent count (``puffer-bench envs``)."""
    return [describe(name) for name in names()]


@dataclass(frozen=True)
class Param:
    """One env parameter as the env's C ``ParamSpec`` table declares it (``envs/<name>.h``): the one
    definition of its type, default and range (bounds included)."""

    name: str
    type: type  # int or float
    default: int | float
    low: float
    high: float


def params(name: str) -> dict[str, Param]:
    """The parameters of Ocean env ``name``, in the order of its ``ParamSpec`` table."""
    info = describe(name)
    out = {}
    for key, value in info["params"].items():
        kind = int if info["param_types"][key] == "int" else float
        low, high = info["param_ranges"][key]
        out[key] = Param(key, kind, kind(value), low, high)
    return out
