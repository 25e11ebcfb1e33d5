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
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from appliance.errors import ConfigError, EnvContractError

# ----------------------------------------------------------------------------- codecs


@dataclass(frozen=True)
class Leaf:
    path: tuple[Any, ...]
    space: spaces.Space
    shape: tuple[int, ...]
    dtype: np.dtype
    size: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", int(np.prod(self.shape)) if self.shape else 1)


def _leaves(space: spaces.Space, path: tuple[Any, ...] = ()) -> list[Leaf]:
    if isinstance(space, spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in _leaves(sub, (*path, key))]
    if isinstance(space, spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in _leaves(sub, (*path, i))]
    if isinstance(space, spaces.Discrete):
        return [Leaf(path, space, (), np.dtype(space.dtype))]
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        return [Leaf(path, space, tuple(space.shape), np.dtype(space.dtype))]
    raise ConfigError(
        f"cannot emulate space {space!r} at {'/'.join(map(str, path)) or 'top level'}: supported are "
        "Box, Discrete, MultiDiscrete, MultiBinary, and Dict/Tuple of them"
    )


def _get(sample: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        sample = sample[key]
    return sample


def _build(space: spaces.Space, values: dict[tuple[Any, ...], Any], path: tuple[Any, ...] = ()) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: _build(sub, values, (*path, key)) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_build(sub, values, (*path, i)) for i, sub in enumerate(space.spaces))
    return values[path]


class SpaceCodec:
    """Flatten samples of ``space`` into one fixed-size 1-D array and back."""

    def __init__(self, space: spaces.Space) -> None:
        self.space = space
        self.leaves = _leaves(space)
        dtypes = {leaf.dtype for leaf in self.leaves}
        self.same_dtype = len(dtypes) == 1
        self.dtype = next(iter(dtypes)) if self.same_dtype else np.dtype(np.uint8)
        offsets, position = [], 0
        for leaf in self.leaves:
            offsets.append(position)
            position += leaf.size if self.same_dtype else leaf.size * leaf.dtype.itemsize
        self.offsets = offsets
        self.size = position
        self.flat_space = self._flat_space()
        # fast path: a plain Box/MultiDiscrete/MultiBinary/Discrete observation is already flat
        self._leaf = self.leaves[0] if len(self.leaves) == 1 and not self.leaves[0].path else None
        self._leaf_flat = self._leaf is not None and len(self._leaf.shape) <= 1

    def _flat_space(self) -> spaces.Box:
        if not self.same_dtype:
            return spaces.Box(0, 255, (self.size,), np.uint8)
        if self.dtype.kind == "f":
            low = np.concatenate(
                [
                    np.broadcast_to(
                        np.asarray(getattr(leaf.space, "low", -np.inf), self.dtype), leaf.shape
                    ).ravel()
                    if isinstance(leaf.space, spaces.Box)
                    else np.zeros(leaf.size, self.dtype)
                    for leaf in self.leaves
                ]
            )
            high = np.concatenate(
                [
                    np.broadcast_to(np.asarray(leaf.space.high, self.dtype), leaf.shape).ravel()
                    if isinstance(leaf.space, spaces.Box)
                    else np.full(leaf.size, np.inf, self.dtype)
                    for leaf in self.leaves
                ]
            )
            return spaces.Box(low, high, (self.size,), self.dtype)
        info = np.iinfo(self.dtype) if self.dtype.kind in "iu" else None
        low = info.min if info else 0
        high = info.max if info else 1
        return spaces.Box(low, high, (self.size,), self.dtype)

    def flatten(self, sample: Any, out: np.ndarray | None = None) -> np.ndarray:
        """One sample into a flat array (written into ``out`` when given)."""
        if out is None:
            out = np.empty(self.size, self.dtype)
        if self._leaf is not None:
            out[:] = sample if self._leaf_flat else np.asarray(sample).reshape(-1)
            return out
        raw = out if self.same_dtype else out.view(np.uint8)
        for leaf, offset in zip(self.leaves, self.offsets, strict=True):
            value = np.asarray(_get(sample, leaf.path), dtype=leaf.dtype)
            if self.same_dtype:
                raw[offset : offset + leaf.size] = value.reshape(-1)
            else:
                raw[offset : offset + leaf.size * leaf.dtype.itemsize] = (
                    np.ascontiguousarray(value).reshape(-1).view(np.uint8)
                )
        return out

    def unflatten(self, flat: np.ndarray) -> Any:
        """A flat array ``[..., size]`` back into the structure, with a leading batch shape if given."""
        flat = np.asarray(flat)
        batch = flat.shape[:-1]
        values = {}
        for leaf, offset in zip(self.leaves, self.offsets, strict=True):
            if self.same_dtype:
                part = flat[..., offset : offset + leaf.size]
            else:
                part = np.ascontiguousarray(
                    flat[..., offset : offset + leaf.size * leaf.dtype.itemsize]
                ).view(leaf.dtype)
            value = part.reshape(batch + leaf.shape).astype(leaf.dtype, copy=False)
            values[leaf.path] = value if (batch or leaf.shape) else value[()]
        return _build(self.space, values)


class ActionCodec:
    """Flat actions for the policy (one MultiDiscrete, Discrete or Box) and back to the env's structure."""

    def __init__(self, space: spaces.Space) -> None:
        self.space = space
        self.leaves = _leaves(space)
        discrete = [
            isinstance(leaf.space, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary)
            for leaf in self.leaves
        ]
        self.kind = "discrete" if all(discrete) else ("box" if not any(discrete) else "mixed")
        self.size = sum(leaf.size for leaf in self.leaves)
        if self.kind == "discrete":
            nvec = np.concatenate([self._nvec(leaf) for leaf in self.leaves])
            single = len(self.leaves) == 1 and isinstance(self.leaves[0].space, spaces.Discrete)
            self.flat_space: spaces.Space = (
                spaces.Discrete(int(nvec[0])) if single else spaces.MultiDiscrete(nvec)
            )
            self.dtype = np.dtype(np.int32)
        else:
            low = np.concatenate([self._bounds(leaf)[0] for leaf in self.leaves]).astype(np.float32)
            high = np.concatenate([self._bounds(leaf)[1] for leaf in self.leaves]).astype(np.float32)
            self.flat_space = spaces.Box(low, high, (self.size,), np.float32)
            self.dtype = np.dtype(np.float32)
        top = space if len(self.leaves) == 1 and not self.leaves[0].path else None
        self._discrete_start = int(top.start) if isinstance(top, spaces.Discrete) else None  # fast path

    @staticmethod
    def _nvec(leaf: Leaf) -> np.ndarray:
        s = leaf.space
        if isinstance(s, spaces.Discrete):
            return np.array([s.n])
        if isinstance(s, spaces.MultiDiscrete):
            return np.asarray(s.nvec).reshape(-1)
        return np.full(leaf.size, 2)

    def _bounds(self, leaf: Leaf) -> tuple[np.ndarray, np.ndarray]:
        s = leaf.space
        if isinstance(s, spaces.Box):
            return np.broadcast_to(s.low, leaf.shape).ravel(), np.broadcast_to(s.high, leaf.shape).ravel()
        n = self._nvec(leaf)
        return np.zeros(len(n)), (n - 1).astype(np.float64)

    def unflatten(self, flat: np.ndarray) -> Any:
        """One agent's flat action into the env's action structure."""
        if (
            self._discrete_start is not None
        ):  # a plain Discrete action: one Python int (cheapest for env checks)
            return int(flat[0] if getattr(flat, "ndim", 0) else flat) + self._discrete_start
        flat = np.asarray(flat).reshape(-1)
        values, i = {}, 0
        for leaf in self.leaves:
            part = flat[i : i + leaf.size]
            i += leaf.size
            s = leaf.space
            if isinstance(s, spaces.Discrete):
                values[leaf.path] = np.int64(int(np.rint(part[0])) + int(s.start))
            elif isinstance(s, spaces.MultiDiscrete):
                values[leaf.path] = (
                    np.rint(part).astype(np.int64).reshape(leaf.shape) + np.asarray(s.start)
                ).astype(s.dtype)
            elif isinstance(s, spaces.MultiBinary):
                values[leaf.path] = np.rint(part).astype(s.dtype).reshape(leaf.shape)
            else:
                values[leaf.path] = part.astype(s.dtype).reshape(leaf.shape)
        return _build(self.space, values)

    def flatten(self, action: Any) -> np.ndarray:
        """An env-structured action into the flat form (the inverse of unflatten)."""
        parts = []
        for leaf in self.leaves:
            value = np.asarray(_get(action, leaf.path)).reshape(-1)
            if isinstance(leaf.space, spaces.Discrete | spaces.MultiDiscrete):
                value = value - np.asarray(getattr(leaf.space, "start", 0)).reshape(-1)
            parts.append(value.astype(self.dtype))
        return np.concatenate(parts)


# ----------------------------------------------------------------------------- env contracts

_NUMBERS = frozenset({float, int, np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8})
_INTS = frozenset({int, np.int64, np.int32, np.int16, np.int8, np.uint8})
_BOOLS = frozenset({bool, np.bool_})
_UNPACK = re.compile(r"values to unpack \(expected 5, got (\d+)\)")


def env_name(env: Any) -> str:
    """The name errors give an env: its Gymnasium id, else its (unwrapped) class name."""
    spec = getattr(env, "spec", None)
    if getattr(spec, "id", None):
        return str(spec.id)
    return type(getattr(env, "unwrapped", env)).__name__


def describe_space(space: Any) -> str:
    """Short: ``Box(4,) float32``, ``Discrete(3)``; Dict/Tuple and others as gymnasium prints them."""
    if isinstance(space, spaces.Box):
        return f"Box{tuple(space.shape)} {np.dtype(space.dtype)}"
    return repr(space)


def _what(value: Any) -> str:
    """A value described for an error: its type, and shape and dtype for arrays."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return f"an ndarray of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


def _step_arity(
    name: str, call: str, result: Any, expected: str = "5: (observation, reward, terminated, truncated, info)"
) -> EnvContractError:
    if isinstance(result, tuple | list) and len(result) == 4:
        got = "4 values (observation, reward, done, info: the old gym API)"
    elif isinstance(result, tuple | list):
        got = f"{len(result)} values"
    else:
        got = _what(result)
    return EnvContractError(f"{name}: {call} returned {got}; it must return {expected}")


def _reward(name: str, call: str, reward: Any, who: str = "") -> float:
    """One reward as a float, or the broken rule: one finite number (a 0-d array is one number)."""
    if type(reward) in _NUMBERS:  # numpy scalars, ints
        r = float(reward)
        if not r - r:
            return r
    value = reward
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value.item()
    elif isinstance(value, np.ndarray):
        raise EnvContractError(
            f"{name}: {call} returned a reward{who} of shape {value.shape}; a reward must be one number"
        )
    if not isinstance(value, float | int | np.floating | np.integer):
        raise EnvContractError(
            f"{name}: {call} returned a reward{who} of type {type(reward).__name__}; a reward must be one number"
        )
    r = float(value)
    if r - r:  # NaN or +-Inf: x - x is 0.0 for every finite x
        raise EnvContractError(f"{name}: {call} returned a reward{who} of {r}; rewards must be finite")
    return r


def _flag(name: str, call: str, key: str, value: Any, who: str = "") -> bool:
    """terminated or truncated: a bool (numpy's too, and a 0-d bool array)."""
    if type(value) in _BOOLS:
        return bool(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype == np.bool_:
        return bool(value)
    shown = f" ({value!r})" if isinstance(value, int | float | np.number) else ""
    raise EnvContractError(
        f"{name}: {call} returned {key}{who} of type {type(value).__name__}{shown}; it must be a bool"
    )


def _info(name: str, call: str, info: Any) -> None:
    if not isinstance(info, dict):
        raise EnvContractError(
            f"{name}: {call} returned info of type {type(info).__name__}; it must be a dict"
        )


def _reset_pair(name: str, result: Any) -> Any:
    """``reset()``'s (observation, info), or the broken rule."""
    if not isinstance(result, tuple) or len(result) != 2:
        got = (
            f"a {type(result).__name__} of {len(result)} items"
            if isinstance(result, tuple)
            else _what(result) + (" (a bare observation?)" if result is not None else "")
        )
        raise EnvContractError(f"{name}: reset() returned {got}; it must return (observation, info)")
    if not isinstance(result[1], dict):
        raise EnvContractError(
            f"{name}: reset() returned (observation, {_what(result[1])}); the second item must be the info dict"
        )
    return result[0]


def check_observation(name: str, call: str, codec: SpaceCodec, sample: Any, who: str = "") -> None:
    """Every leaf of ``sample`` present, of the space's shape, and of a dtype that casts to the
    space's (same kind: float64 into float32 is fine, floats into uint8 are not)."""
    space = codec.space
    for leaf in codec.leaves:
        where = "".join(f"[{key!r}]" for key in leaf.path)
        try:
            value = _get(sample, leaf.path)
        except (KeyError, IndexError, TypeError):
            raise EnvContractError(
                f"{name}: {call} returned an observation{who} without {where or 'a value'}; its observation_space is "
                f"{describe_space(space)}"
            ) from None
        try:
            array = np.asarray(value)
        except Exception:  # ragged lists and the like
            array = np.asarray(None)
        part = f"an observation{who}{where and ' whose ' + where}"
        expected = describe_space(leaf.space) if where else describe_space(space)
        if array.dtype.kind not in "biuf":
            raise EnvContractError(
                f"{name}: {call} returned {part} of type {type(value).__name__}; "
                f"its observation_space{where} is {expected}"
            )
        if array.shape != leaf.shape:
            raise EnvContractError(
                f"{name}: {call} returned {part} of shape {array.shape}; its observation_space{where} is {expected}"
            )
        if not np.can_cast(array.dtype, leaf.dtype, "same_kind"):
            raise EnvContractError(
                f"{name}: {call} returned {part} of dtype {array.dtype}, which does not cast to "
                f"{leaf.dtype} without losing values; its observation_space{where} is {expected}"
            )


def _gymnasium_frame(error: BaseException) -> str | None:
    """Where in Gymnasium's own wrappers or env checker ``error`` was raised (None: elsewhere). Those
    raise on an env's bad output before this module sees it (TimeLimit unpacks ``step`` into 5)."""
    tb, last = error.__traceback__, None
    while tb is not None:
        last, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    if last is None:
        return None
    path = last.replace("\\", "/")
    for part, what in (
        ("gymnasium/wrappers/", "wrappers reject"),
        ("gymnasium/utils/passive_env_checker", "env checker rejects"),
    ):
        if part in path:
            return what
    return None


def _translate(name: str, call: str, error: Exception) -> Exception:
    """An error Gymnasium's wrappers raised on the env's output, as the contract it broke."""
    where = _gymnasium_frame(error)
    if where is None:
        return error
    unpack = _UNPACK.search(str(error))
    if unpack and call == "step()":
        return _step_arity(name, call, (None,) * int(unpack.group(1)))
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return EnvContractError(f"{name}: {call} returned what Gymnasium's {where}: {first}")


_PZ_STEP = ("observations", "rewards", "terminations", "truncations", "infos")
_GYM_ERRORS = (AssertionError, ValueError, TypeError, gymnasium.error.Error)


def _space(name: str, kind: str, space: Any) -> spaces.Space:
    if not isinstance(space, spaces.Space):
        raise EnvContractError(
            f"{name}: {kind} is {_what(space)}, not a gymnasium.spaces.Space; set it in __init__"
        )
    return space


# ----------------------------------------------------------------------------- emulated envs


def _close_quietly(env: Any) -> None:
    with contextlib.suppress(Exception):
        env.close()


class GymnasiumEmulator:
    """One Gymnasium env as one agent row: flat obs in, flat actions out, auto-reset, contracts checked."""

    def __init__(self, env: gymnasium.Env, name: str | None = None) -> None:
        self.env = env
        self.name = name or env_name(env)
        self.observation_space = _space(self.name, "observation_space", env.observation_space)
        self.action_space = _space(self.name, "action_space", env.action_space)
        self.obs_codec = SpaceCodec(self.observation_space)
        self.action_codec = ActionCodec(self.action_space)
        self.num_agents = 1
        self.episode_return = 0.0
        self.episode_length = 0
        leaf = self.obs_codec._leaf
        # the fast path: an ndarray of the space's own shape and of a dtype already seen to cast
        self._shape = leaf.shape if leaf is not None else None
        self._dtypes = {leaf.dtype} if leaf is not None else set()
        self._flat = leaf is not None and len(leaf.shape) == 1  # step() copies these itself
        self._float = self.obs_codec.dtype.kind == "f"
        self._inner = getattr(env, "unwrapped", env)
        self._inner_spaces = (self._inner.observation_space, self._inner.action_space)
        kind = leaf.dtype.kind if leaf is not None and not leaf.shape else ""
        self._scalars = _INTS if kind in ("i", "u") else (_NUMBERS if kind == "f" else frozenset())

    def _observe(self, sample: Any, out: np.ndarray, call: str) -> None:
        if type(sample) is np.ndarray and sample.shape == self._shape and sample.dtype in self._dtypes:
            out[:] = sample if sample.ndim <= 1 else sample.reshape(-1)
            return
        if type(sample) in self._scalars:  # one number for a Discrete or shape-() Box space
            out[0] = sample
            return
        check_observation(self.name, call, self.obs_codec, sample)
        if self._shape is not None and type(sample) is np.ndarray:
            self._dtypes.add(sample.dtype)
        self.obs_codec.flatten(sample, out)

    def _reset(self, seed: int | None, out: np.ndarray) -> None:
        """reset(), its result checked (and its observation finite), into ``out``."""
        try:
            result = self.env.reset() if seed is None else self.env.reset(seed=seed)
        except _GYM_ERRORS as e:
            raise _translate(self.name, "reset()", e) from None
        if type(result) is tuple and len(result) == 2 and type(result[1]) is dict:
            sample = result[0]
        else:
            sample = _reset_pair(self.name, result)
        self._observe(sample, out, "reset()")
        # the sum of squares is finite unless something is NaN or Inf (or beyond 1e19: then ask again)
        if self._float and not math.isfinite(out.dot(out)) and not np.isfinite(out).all():
            raise EnvContractError(f"{self.name}: reset() returned an observation holding NaN or Inf")
        inner = self._inner  # the unwrapped env's own attributes: a wrapper's would be a property chain
        if (
            inner.action_space is not self._inner_spaces[1]
            or inner.observation_space is not self._inner_spaces[0]
        ):
            self._check_spaces_kept()

    def _check_spaces_kept(self) -> None:
        for kind, first in (
            ("observation_space", self.observation_space),
            ("action_space", self.action_space),
        ):
            now = getattr(self.env, kind)
            if now is not first and now != first:
                raise EnvContractError(
                    f"{self.name}: {kind} changed from {describe_space(first)} to {describe_space(now)}; "
                    "the vector's buffers hold the first, so an env must keep its spaces"
                )
        self._inner_spaces = (self._inner.observation_space, self._inner.action_space)  # equal ones

    def reset(self, seed: int | None, obs: np.ndarray, mask: np.ndarray) -> None:
        self._reset(seed, obs[0])
        mask[0] = True
        self.episode_return, self.episode_length = 0.0, 0

    def step(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminals: np.ndarray,
        truncations: np.ndarray,
        mask: np.ndarray,
    ) -> dict[str, Any] | None:
        try:
            result = self.env.step(self.action_codec.unflatten(actions[0]))
        except _GYM_ERRORS as e:
            raise _translate(self.name, "step()", e) from None
        try:
            sample, reward, terminal, truncated, info = result
        except (TypeError, ValueError):
            raise _step_arity(self.name, "step()", result) from None
        # the common case costs a few type compares (x - x is 0.0 for every finite x); anything else
        # goes the long way round, which raises on a broken rule
        ok = type(reward) is float and not reward - reward
        r = reward if ok else _reward(self.name, "step()", reward)
        if type(terminal) is not bool or type(truncated) is not bool or type(info) is not dict:
            terminal = _flag(self.name, "step()", "terminated", terminal)
            truncated = _flag(self.name, "step()", "truncated", truncated)
            _info(self.name, "step()", info)
        self.episode_return += r
        self.episode_length += 1
        rewards[0], terminals[0], truncations[0] = r, terminal, truncated  # mask stays True (set on reset)
        if terminal or truncated:
            done = {"episode_return": self.episode_return, "episode_length": self.episode_length}
            self._reset(None, obs[0])
            self.episode_return, self.episode_length = 0.0, 0
            return done
        if (
            self._flat
            and type(sample) is np.ndarray
            and sample.shape == self._shape
            and sample.dtype in self._dtypes
        ):
            obs[0, :] = sample  # the fast path, _observe's first case inlined
        else:
            self._observe(sample, obs[0], "step()")
        return None

    def close(self) -> None:
        _close_quietly(self.env)


class PettingZooEmulator:
    """A PettingZoo parallel env as ``len(possible_agents)`` rows with a presence mask, contracts checked."""

    def __init__(self, env: Any, name: str | None = None) -> None:
        self.env = env
        self.name = name or str(getattr(env, "metadata", {}).get("name") or env_name(env))
        self.agents = list(env.possible_agents)
        if not self.agents:
            raise ConfigError(f"{self.name}: PettingZoo env has no possible_agents")
        first = self.agents[0]
        obs_space = _space(self.name, f"observation_space({first!r})", env.observation_space(first))
        act_space = _space(self.name, f"action_space({first!r})", env.action_space(first))
        for agent in self.agents[1:]:
            if env.observation_space(agent) != obs_space or env.action_space(agent) != act_space:
                raise ConfigError(
                    f"PettingZoo agents must share spaces to share one policy: {agent!r} differs from {first!r}"
                )
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_codec = SpaceCodec(obs_space)
        self.action_codec = ActionCodec(act_space)
        self.num_agents = len(self.agents)
        self.index = {agent: i for i, agent in enumerate(self.agents)}
        self.episode_return = 0.0
        self.episode_length = 0
        leaf = self.obs_codec._leaf  # the fast path, as GymnasiumEmulator's
        self._shape = leaf.shape if leaf is not None else None
        self._dtypes = {leaf.dtype} if leaf is not None else set()

    def _row(self, agent: Any, call: str, what: str) -> int:
        i = self.index.get(agent)
        if i is None:
            raise EnvContractError(
                f"{self.name}: {call} returned {what} for {agent!r}, which is not in possible_agents {self.agents}"
            )
        return i

    def _dicts(self, call: str, result: Any) -> tuple[dict[Any, Any], ...]:
        """``step``'s five dicts keyed by agent, or the broken rule."""
        if type(result) is not tuple or len(result) != 5:
            raise _step_arity(self.name, call, result, f"5 dicts keyed by agent: ({', '.join(_PZ_STEP)})")
        for what, value in zip(_PZ_STEP, result, strict=True):
            if not isinstance(value, dict):
                raise EnvContractError(
                    f"{self.name}: {call} returned {what} as {_what(value)}; a ParallelEnv returns one dict "
                    "per item, keyed by agent"
                )
        return result

    def _write(self, samples: Any, obs: np.ndarray, mask: np.ndarray, call: str) -> None:
        if not isinstance(samples, dict):
            raise EnvContractError(
                f"{self.name}: {call} returned observations as {_what(samples)}; a ParallelEnv returns a dict "
                "keyed by agent"
            )
        obs[:] = 0
        mask[:] = False
        codec = self.obs_codec
        for agent, sample in samples.items():
            i = self._row(agent, call, "an observation")
            if not (
                type(sample) is np.ndarray and sample.shape == self._shape and sample.dtype in self._dtypes
            ):
                check_observation(self.name, call, codec, sample, f" for {agent!r}")
                if self._shape is not None and type(sample) is np.ndarray:
                    self._dtypes.add(sample.dtype)
            codec.flatten(sample, obs[i])
            mask[i] = True
        for agent in self.env.agents:
            if agent not in samples:
                raise EnvContractError(
                    f"{self.name}: {call} returned no observation for {agent!r}, which is in env.agents"
                    + ("" if agent in self.index else f" but not in possible_agents {self.agents}")
                )

    def reset(self, seed: int | None, obs: np.ndarray, mask: np.ndarray) -> None:
        self._write(_reset_pair(self.name, self.env.reset(seed=seed)), obs, mask, "reset()")
        self.episode_return, self.episode_length = 0.0, 0

    def step(
        self,
        actions: np.ndarray,
        obs: np.ndarray,
        rewards: np.ndarray,
        terminals: np.ndarray,
        truncations: np.ndarray,
        mask: np.ndarray,
    ) -> dict[str, Any] | None:
        name, call = self.name, "step()"
        live = {agent: self.action_codec.unflatten(actions[self.index[agent]]) for agent in self.env.agents}
        samples, rew, term, trunc, _ = self._dicts(call, self.env.step(live))
        rewards[:] = 0
        terminals[:] = False
        truncations[:] = False
        total = 0.0
        for agent, r in rew.items():
            i = self._row(agent, call, "a reward")
            if type(r) not in _NUMBERS or r - r:
                r = _reward(name, call, r, f" for {agent!r}")
            rewards[i] = r
            total += r
        for agent, t in term.items():
            terminals[self._row(agent, call, "terminated")] = _flag(
                name, call, "terminated", t, f" for {agent!r}"
            )
        for agent, t in trunc.items():
            truncations[self._row(agent, call, "truncated")] = _flag(
                name, call, "truncated", t, f" for {agent!r}"
            )
        self.episode_return += total
        self.episode_length += 1
        info = None
        if not self.env.agents:  # everyone is done: a new episode
            info = {"episode_return": self.episode_return, "episode_length": self.episode_length}
            samples, call = _reset_pair(name, self.env.reset()), "reset()"
            self.episode_return, self.episode_length = 0.0, 0
        self._write(samples, obs, mask, call)
        # an agent that just finished keeps its row visible this step, so the trainer sees its done flag
        for agent in self.index:
            if term.get(agent) or trunc.get(agent):
                mask[self.index[agent]] = True
        return info

    def close(self) -> None:
        _close_quietly(self.env)


def _pettingzoo_kinds() -> tuple[type, type] | None:
    try:
        from pettingzoo import AECEnv, ParallelEnv
    except ImportError:  # pragma: no cover - pettingzoo is a dependency
        return None
    return ParallelEnv, AECEnv


def emulate(env: Any, name: str | None = None) -> GymnasiumEmulator | PettingZooEmulator:
    """Wrap a created env: Gymnasium envs are single-agent, PettingZoo parallel envs multi-agent.
    ``name`` is what contract errors call it (default: its Gymnasium id or class name).

    Envs are recognized by type, so a parallel env whose ``agents`` appear only after ``reset`` (any
    made with ``aec_to_parallel``) is accepted before it is reset.
    """
    if isinstance(env, gymnasium.Env):
        return GymnasiumEmulator(env, name)
    kinds = _pettingzoo_kinds()
    if kinds is not None:
        parallel, aec = kinds
        if isinstance(env, parallel):
            return PettingZooEmulator(env, name)
        if isinstance(env, aec):
            raise ConfigError(
                f"{type(env).__name__} is a PettingZoo AEC env; wrap it with "
                "pettingzoo.utils.conversions.aec_to_parallel (agents must act simultaneously)"
            )
    raise ConfigError(
        f"cannot emulate {type(env).__name__}: expected a gymnasium.Env or a pettingzoo.ParallelEnv "
        "(wrap AEC envs with pettingzoo.utils.conversions.aec_to_parallel)"
    )


def make_factory(env: str | Callable[[], Any]) -> Callable[[], Any]:
    """A zero-argument env creator from a callable, a Gymnasium id, ``package.module:factory`` (a
    class or function that makes a Gymnasium or PettingZoo parallel env) or ``module:Env-v0`` (a
    Gymnasium id that importing ``module`` registers)."""
    if callable(env):
        return env
    if isinstance(env, str):
        if ":" in env:
            return _from_import_path(env)
        if env not in gymnasium.registry:
            import difflib

            close = difflib.get_close_matches(env, list(gymnasium.registry), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"unknown env {env!r}: not an Ocean env, not a registered Gymnasium id{hint}, "
                "and not package.module:factory"
            )
        return _GymMaker(env)
    raise ConfigError(f"env must be an Ocean name, a Gymnasium id or a callable, got {type(env).__name__}")


def _from_import_path(spec: str) -> Callable[[], Any]:
    """``package.module:factory`` or ``module:Env-v0`` as a picklable creator."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"env {spec!r}: expected package.module:factory or module:Env-v0")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"env {spec!r}: cannot import module {module_name!r}: {e}") from None
    target = module
    try:
        for part in attr.split("."):
            target = getattr(target, part)
    except AttributeError:
        target = None
    if callable(target):
        return _ImportMaker(spec)
    if attr in gymnasium.registry:  # importing the module registered it
        return _GymMaker(spec)
    raise ConfigError(
        f"env {spec!r}: module {module_name!r} has no callable {attr!r} and registers no Gymnasium id {attr!r}"
    )


@dataclass(frozen=True)
class _ImportMaker:
    """Picklable creator for ``package.module:factory`` (workers import the module themselves)."""

    spec: str

    def __call__(self) -> Any:
        import importlib

        module_name, _, attr = self.spec.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
        return target()


@dataclass(frozen=True)
class _GymMaker:
    """Picklable creator for a Gymnasium id (workers started with spawn re-create it)."""

    env_id: str

    def __call__(self) -> gymnasium.Env:
        return gymnasium.make(self.env_id)
