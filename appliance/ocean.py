"""The Ocean catalogue: which C envs are compiled into ``appliance._ocean``, and their layouts.

Stepping them is the vector layer's job (``appliance.vector.make("breakout", ...)``, the native
backend in :mod:`appliance.vector.native`); this module only names and describes them.
"""

from __future__ import annotations

from typing import Any

from appliance import _ocean
from appliance.errors import ConfigError


def names() -> list[str]:
    """Names of the compiled Ocean envs."""
    return sorted(_ocean.names())


def ocean_name(env: Any) -> str | None:
    """The Ocean env that ``env`` names ("breakout" or "ocean:breakout"), or None if it names none."""
    if not isinstance(env, str):
        return None
    name = env.split(":", 1)[1] if env.startswith("ocean:") else env
    return name if name in _ocean.names() else None


def describe(name: str, **params: Any) -> dict[str, Any]:
    """Layout of one env: agents per env, observation size/dtype/bounds, action sizes, params."""
    try:
        return _ocean.describe(name, params)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def available() -> list[dict[str, Any]]:
    """Every env with its default spaces and agent count (``puffer-bench envs``)."""
    return [describe(name) for name in names()]
