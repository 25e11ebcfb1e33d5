"""What to build: an Ocean env by name, or an emulated Gymnasium/PettingZoo env from a creator.

An :class:`EnvSource` is picklable, so spawned workers and Ray actors rebuild the same env from it.
Its first env is made here, in a helper thread under the same timeout as a worker's reset (a
constructor that never returns is reported, naming the env), and a second one is measured: what one
env object holds, for the memory check before the vector allocates (:func:`vector.make`). A factory's
own VectorEnv is checked here too (:func:`check_spaces`: the spaces and autoreset mode the trainer's
rows need) before :mod:`~appliance.vector.gymvec` steps it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from appliance.errors import ConfigError


@dataclass
class EnvSource:
    """A buildable description of one env kind and its per-agent spaces."""

    kind: str  # "ocean" | "emulated" | "vector" (a live gymnasium VectorEnv, see vector.gymvec)
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    creator: bytes = b""  # cloudpickled zero-argument creator (emulated)
    agents_per_env: int = 1
    observation_space: spaces.Box | None = None
    action_space: spaces.Space | None = None
    obs_codec: Any = None  # emulation.SpaceCodec restoring the structure before the policy
    env_bytes: int = 0  # what one env object holds (Ocean: its C struct; emulated: measured, see _measure)
    vector_env: Any = field(default=None, repr=False)  # kind "vector": the VectorEnv the factory made
    note: str = ""  # a line `train` prints on how the env was fitted (a mixed team's padding), if any
    action_mask: int = 0  # the observations' last entries that are an action mask (1 allowed), one per action

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self.observation_space.shape)

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Per-agent action shape in the buffers: () for Discrete, (dims,) otherwise."""
        s = self.action_space
        if isinstance(s, spaces.Discrete):
            return ()
        if isinstance(s, spaces.MultiDiscrete):
            return (len(s.nvec),)
        return tuple(s.shape)

    @property
    def action_dtype(self) -> np.dtype:
        return (
            np.dtype(np.int32)
            if isinstance(self.action_space, spaces.Discrete | spaces.MultiDiscrete)
            else np.dtype(np.float32)
        )

    def build_creator(self) -> Callable[[], Any]:
        import cloudpickle

        return cloudpickle.loads(self.creator)


def observation_space(info: dict[str, Any]) -> spaces.Box:
    """An Ocean env's observation Box from its layout: ``obs_low``/``obs_high`` for every element but
    the last ``obs_tail``, which have ``tail_low``/``tail_high`` (go's capture counts beside 0/1 board
    planes). The policy scales each element by its own bound, so one loose bound for all would shrink
    the others (a shared 1e6 made go's board reach the policy as 1e-6)."""
    size, tail = info["obs_size"], info.get("obs_tail", 0)
    dtype = np.dtype(info["obs_dtype"])
    low = np.full(size, info["obs_low"], np.float64)
    high = np.full(size, info["obs_high"], np.float64)
    if tail:
        low[size - tail :], high[size - tail :] = info["tail_low"], info["tail_high"]
    shape = tuple(info.get("obs_shape") or (size,))  # an image's (C, H, W) (Layout.obs_channels), else flat
    if int(np.prod(shape)) != size:
        raise ValueError(f"{info.get('name')}: obs_shape {shape} does not hold obs_size {size} elements")
    return spaces.Box(low.astype(dtype).reshape(shape), high.astype(dtype).reshape(shape), shape, dtype)


def ocean_action_space(info: dict[str, Any]) -> Any:
    """An Ocean env's action space from its layout: Discrete, MultiDiscrete, or (continuous actions,
    ``action_continuous``) a Box of its dimensions in [-1, 1], the range PufferLib's continuous envs clamp to."""
    from gymnasium import spaces

    nvec = info["action_nvec"]
    if info.get("action_continuous"):
        return spaces.Box(-1.0, 1.0, (len(nvec),), np.float32)
    return spaces.Discrete(nvec[0]) if len(nvec) == 1 else spaces.MultiDiscrete(nvec)


def resolve_source(
    env: Any, *, preprocess: str = "auto", timeout: float | None = None, **params: Any
) -> EnvSource:
    """Turn an Ocean name, a Gymnasium id or an env creator into an :class:`EnvSource`. ``params`` are
    an Ocean env's parameters, or keyword arguments for ``gymnasium.make`` (or an import path's
    factory); ``preprocess`` wraps Python envs (``vec.preprocess``, see
    :func:`appliance.emulation.make_factory`); ``timeout``: seconds the first env (its import
    included) may take to be made (None: no limit)."""
    from appliance import ocean

    name = ocean.ocean_name(env)
    if name is not None:
        env = name
        info = ocean.describe(env, **params)
        return EnvSource(
            kind="ocean",
            name=env,
            params=dict(params),
            agents_per_env=info["agents_per_env"],
            env_bytes=int(info.get("env_bytes", 0)),
            observation_space=observation_space(info),
            action_space=ocean_action_space(info),
            action_mask=int(info.get("action_mask", 0)),
        )
    import cloudpickle

    creator, probe, env_bytes = _probe(env, timeout, params, preprocess)
    if _is_vector_env(probe):
        return _vector_source(env, probe)
    try:
        return EnvSource(
            kind="emulated",
            name=getattr(env, "env_id", None)
            or (env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)),
            creator=cloudpickle.dumps(creator),
            agents_per_env=probe.num_agents,
            observation_space=probe.obs_codec.flat_space,
            action_space=probe.action_codec.flat_space,
            obs_codec=probe.obs_codec,
            env_bytes=env_bytes,
            note=probe.team.describe() if getattr(probe, "team", None) is not None else "",
        )
    finally:
        probe.close()


def _probe(
    env: Any, timeout: float | None, params: dict[str, Any], preprocess: str
) -> tuple[Callable[[], Any], Any, int]:
    """The env's creator, its first env (emulated) and what one env holds, made in a helper thread:
    a constructor (or an import) that never returns is reported after ``timeout`` s like a reset
    that never returns, and the env is named. The thread is left behind then; the error ends the
    command (or the sweep trial)."""
    import threading

    from appliance.emulation import emulate, make_factory

    made: dict[str, Any] = {}

    def build() -> None:
        try:
            made["creator"] = make_factory(env, params, preprocess)
            first = made["creator"]()
            if _is_vector_env(first):  # used as it is (vector.gymvec): nothing to emulate or measure
                made["probe"], made["env_bytes"] = first, 0
                return
            made["probe"] = emulate(first)
            made["env_bytes"] = _measure(made["creator"])
        except BaseException as e:
            made["error"] = e

    thread = threading.Thread(target=build, name="puffer-env-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ConfigError(
            f"creating env {_label(env)} did not return within {timeout:g} s (vec.recv_timeout); "
            "fix its constructor, or raise --vec.recv-timeout if it is only slow"
        )
    error = made.get("error")
    if isinstance(error, ConfigError):
        raise error
    if error is not None:
        if "probe" in made:
            made["probe"].close()
        given = f" with env parameters {params}" if params else ""
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ConfigError(f"creating env {env!r}{given} failed: {type(error).__name__}: {first}") from error
    return made["creator"], made["probe"], made["env_bytes"]


def _is_vector_env(obj: Any) -> bool:
    from gymnasium.vector import VectorEnv

    return isinstance(obj, VectorEnv)


def _vector_source(env: Any, vec: Any) -> EnvSource:
    """An :class:`EnvSource` of kind "vector" around the live VectorEnv a factory returned."""
    name = env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)
    try:
        check_spaces(name, vec)
    except ConfigError:
        with contextlib.suppress(Exception):
            vec.close()
        raise
    return EnvSource(
        kind="vector",
        name=name,
        observation_space=vec.single_observation_space,
        action_space=vec.single_action_space,
        vector_env=vec,
    )


def accepts_num_envs(env: Any) -> bool:
    """Whether ``env`` (a creator, or a ``module:factory`` string) takes a ``num_envs`` keyword: a
    VectorEnv factory is then given the vector's ``vec.num_envs``."""
    import importlib
    import inspect

    target = env
    if isinstance(env, str):
        module_name, _, attr = env.partition(":")
        if not module_name or not attr:
            return False
        try:
            target = importlib.import_module(module_name)
            for part in attr.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError):
            return False
    if not callable(target):
        return False
    try:
        return "num_envs" in inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False


def _measure(creator: Callable[[], Any]) -> int:
    """Bytes one more env holds once made (Python and numpy allocations, traced): the first env paid
    for the imports and the caches every env of a process shares. 0 where tracing is not ours to
    start (it already runs) or the env fails a second time."""
    import tracemalloc

    if tracemalloc.is_tracing():
        return 0
    tracemalloc.start(1)
    try:
        env = creator()
        held = tracemalloc.get_traced_memory()[0]
    except Exception:
        return 0
    finally:
        tracemalloc.stop()
    close = getattr(env, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()
    return int(held)


def _label(env: Any) -> str:
    return repr(env) if isinstance(env, str) else getattr(env, "__qualname__", None) or type(env).__name__


def autoreset_mode(env: Any) -> str:
    """``"SameStep"``, ``"NextStep"`` or ``"Disabled"``: the VectorEnv's metadata (gymnasium's default,
    NextStep, where it says nothing)."""
    mode = getattr(env, "metadata", {}).get("autoreset_mode", "NextStep")
    return str(getattr(mode, "value", mode))


def check_spaces(name: str, env: Any) -> None:
    """The trainer's rows need a Box observation and a Discrete, MultiDiscrete or Box action per env."""
    obs, act = env.single_observation_space, env.single_action_space
    if not isinstance(obs, spaces.Box):
        raise ConfigError(
            f"{name}: a VectorEnv source needs a Box single_observation_space, got {type(obs).__name__}; "
            "flatten it in the VectorEnv, or give a single-env creator (structured spaces are emulated then)"
        )
    if not isinstance(act, spaces.Discrete | spaces.MultiDiscrete | spaces.Box):
        raise ConfigError(
            f"{name}: a VectorEnv source needs a Discrete, MultiDiscrete or Box single_action_space, "
            f"got {type(act).__name__}"
        )
    mode = autoreset_mode(env)
    if mode not in ("SameStep", "NextStep"):
        raise ConfigError(
            f"{name}: the VectorEnv's autoreset_mode is {mode}; training needs SameStep or NextStep "
            "(gymnasium.vector.AutoresetMode)"
        )
