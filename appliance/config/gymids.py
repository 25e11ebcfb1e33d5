"""Gymnasium ids as users type them: the plugin a namespace names is imported before the id is looked
up (``ALE/Pong-v5`` is registered by importing ``ale_py``, as ``gymnasium.make`` users do by hand),
a namespace whose plugin is not installed says which package to install, and an unknown id gets a
did-you-mean over Gymnasium's registry and the Ocean names together."""

from __future__ import annotations

import contextlib
import difflib
import importlib
from typing import Any

from appliance.errors import ConfigError

# namespace -> (the module whose import registers its ids, how to install it)
PLUGINS: dict[str, tuple[str, str]] = {
    "ALE": ("ale_py", "pip install ale-py (or pip install 'puffer-bench[atari]')"),
}


def _namespace(env_id: str) -> str | None:
    from gymnasium.envs.registration import parse_env_id

    try:
        return parse_env_id(env_id)[0]
    except Exception:  # not of the form [namespace/]name[-vN]
        return None


def registered(env_id: str) -> bool:
    """Whether ``env_id`` is a Gymnasium id, after importing the plugin its namespace names (see
    :data:`PLUGINS`). A known namespace whose plugin is not installed is a :class:`ConfigError`
    naming the package to install."""
    import gymnasium

    if env_id in gymnasium.registry:
        return True
    plugin = PLUGINS.get(_namespace(env_id) or "")
    if plugin is None:
        return False
    module, install = plugin
    try:
        importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"env {env_id!r}: the {_namespace(env_id)} ids are registered by the {module} package, which is "
            f"not installed: {install}"
        ) from None
    return env_id in gymnasium.registry


def quiet_physics(env_id: str) -> None:
    """Before a MuJoCo env is made: MuJoCo's own warnings go to Python's ``warnings`` (once each, as
    a ``RuntimeWarning``), its deprecation notices nowhere. Left to itself MuJoCo prints each to
    stdout and appends it to ``MUJOCO_LOG.TXT`` in the working folder, once per env made (67 lines
    for HalfCheetah's 64 envs). Nothing for an env of another kind, or without mujoco installed."""
    import gymnasium

    spec = gymnasium.registry.get(env_id)
    if spec is None or "mujoco" not in str(spec.entry_point):
        return
    try:
        import mujoco
    except ImportError:
        return
    mujoco.set_mju_user_warning(_mujoco_warning)


def _mujoco_warning(message: str) -> None:
    import warnings

    if "deprecated" not in message:
        warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


def gymnasium_id(env: Any) -> str | None:
    """The Gymnasium id ``env`` names: itself, or ``ID`` of ``module:ID`` once importing the module
    registered it; None for anything else (an Ocean name, ``module:factory``, a callable)."""
    import gymnasium

    if not isinstance(env, str):
        env = getattr(
            env, "env_id", None
        )  # a creator made from an id (appliance.emulation's Gymnasium maker)
        if not isinstance(env, str):
            return None
    if ":" in env:
        module, _, attr = env.partition(":")
        if attr in gymnasium.registry:
            return attr
        with contextlib.suppress(Exception):
            importlib.import_module(module)
        return attr if attr in gymnasium.registry else None
    with contextlib.suppress(ConfigError):
        if registered(env):
            return env
    return None


def is_ale(env: Any) -> bool:
    """Whether ``env`` names an Arcade Learning Environment game (namespace ``ALE`` or an ``ale_py``
    entry point): the envs ``vec.preprocess auto`` preprocesses."""
    import gymnasium

    env_id = gymnasium_id(env)
    if env_id is None:
        return False
    spec = gymnasium.registry[env_id]
    return spec.namespace == "ALE" or str(spec.entry_point).startswith("ale_py")


def _load_plugins() -> None:
    """Import every installed plugin of :data:`PLUGINS`, so a did-you-mean sees their ids too."""
    for module, _ in PLUGINS.values():
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def _module_factory(env: str) -> str | None:
    """``mpe2.simple_spread_v3:parallel_env`` for ``mpe2.simple_spread_v3``: an installed module that
    has PettingZoo's ``parallel_env`` factory, named without it (None otherwise)."""
    import importlib.util

    if "." not in env or "/" in env:
        return None
    try:
        if importlib.util.find_spec(env) is None:
            return None
        module = importlib.import_module(env)
    except Exception:  # a parent package that is missing or fails to import: no hint
        return None
    return f"{env}:parallel_env" if callable(getattr(module, "parallel_env", None)) else None


def _in_a_namespace(env: str) -> str | None:
    """``ALE/Breakout-v5`` for ``Breakout-v5``: the registered id that is ``env`` in a namespace
    (case aside), the id meant, where a string match would offer a legacy id (``Breakout-v4``)."""
    import gymnasium

    if "/" in env or any("/" not in i and i.lower() == env.lower() for i in gymnasium.registry):
        return None  # the id itself, case aside (cartpole-v1: CartPole-v1, not phys2d/CartPole-v1)
    matches = sorted(i for i in gymnasium.registry if "/" in i and i.split("/", 1)[1].lower() == env.lower())
    return next((i for i in matches if i.startswith("ALE/")), matches[0] if matches else None)


def unknown_env(env: str) -> ConfigError:
    """ "unknown env 'CartPol-v1'; did you mean 'CartPole-v1'? ..." over the Ocean names and every
    Gymnasium id (installed plugins' included), matched without regard to case."""
    import gymnasium

    from appliance import ocean

    ocean_names = ocean.names()
    plugin = PLUGINS.get(_namespace(env) or "")
    if plugin is not None:
        registered(env)  # a known namespace whose plugin is missing: say which package to install
    factory = _module_factory(env)
    if factory is not None:  # a PettingZoo module named as PettingZoo's docs import it
        hint = f"did you mean {factory!r}? "
    else:
        _load_plugins()
        namespaced = _in_a_namespace(env)
        candidates = {name.lower(): name for name in [*gymnasium.registry, *ocean_names]}
        close = difflib.get_close_matches(env.lower(), list(candidates), n=1, cutoff=0.6)
        guess = namespaced or (candidates[close[0]] if close else None)
        hint = f"did you mean {guess!r}? " if guess else ""
    return ConfigError(
        f"unknown env {env!r}; {hint}known envs: the Ocean envs {', '.join(ocean_names)}, any registered "
        "Gymnasium id (e.g. CartPole-v1, ALE/Pong-v5 with ale-py), or package.module:factory"
    )
