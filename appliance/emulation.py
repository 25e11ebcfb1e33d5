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
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from appliance.errors import ConfigError

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


# ----------------------------------------------------------------------------- emulated envs


def _close_quietly(env: Any) -> None:
    with contextlib.suppress(Exception):
        env.close()


class GymnasiumEmulator:
    """One Gymnasium env as one agent row: flat obs in, flat actions out, auto-reset."""

    def __init__(self, env: gymnasium.Env) -> None:
        self.env = env
        self.obs_codec = SpaceCodec(env.observation_space)
        self.action_codec = ActionCodec(env.action_space)
        self.num_agents = 1
        self.episode_return = 0.0
        self.episode_length = 0

    def reset(self, seed: int | None, obs: np.ndarray, mask: np.ndarray) -> None:
        sample, _ = self.env.reset(seed=seed)
        self.obs_codec.flatten(sample, obs[0])
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
        sample, reward, terminal, truncated, _ = self.env.step(self.action_codec.unflatten(actions[0]))
        self.episode_return += float(reward)
        self.episode_length += 1
        rewards[0], terminals[0], truncations[0] = (
            reward,
            terminal,
            truncated,
        )  # mask stays True (set on reset)
        info = None
        if terminal or truncated:
            info = {"episode_return": self.episode_return, "episode_length": self.episode_length}
            sample, _ = self.env.reset()
            self.episode_return, self.episode_length = 0.0, 0
        self.obs_codec.flatten(sample, obs[0])
        return info

    def close(self) -> None:
        _close_quietly(self.env)


class PettingZooEmulator:
    """A PettingZoo parallel env as ``len(possible_agents)`` rows with a presence mask."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.agents = list(env.possible_agents)
        if not self.agents:
            raise ConfigError("PettingZoo env has no possible_agents")
        first = self.agents[0]
        obs_space, act_space = env.observation_space(first), env.action_space(first)
        for agent in self.agents[1:]:
            if env.observation_space(agent) != obs_space or env.action_space(agent) != act_space:
                raise ConfigError(
                    f"PettingZoo agents must share spaces to share one policy: {agent!r} differs from {first!r}"
                )
        self.obs_codec = SpaceCodec(obs_space)
        self.action_codec = ActionCodec(act_space)
        self.num_agents = len(self.agents)
        self.index = {agent: i for i, agent in enumerate(self.agents)}
        self.episode_return = 0.0
        self.episode_length = 0

    def _write(self, samples: dict[str, Any], obs: np.ndarray, mask: np.ndarray) -> None:
        obs[:] = 0
        mask[:] = False
        for agent, sample in samples.items():
            i = self.index[agent]
            self.obs_codec.flatten(sample, obs[i])
            mask[i] = True

    def reset(self, seed: int | None, obs: np.ndarray, mask: np.ndarray) -> None:
        samples, _ = self.env.reset(seed=seed)
        self._write(samples, obs, mask)
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
        live = {agent: self.action_codec.unflatten(actions[self.index[agent]]) for agent in self.env.agents}
        samples, rew, term, trunc, _ = self.env.step(live)
        rewards[:] = 0
        terminals[:] = False
        truncations[:] = False
        for agent, r in rew.items():
            rewards[self.index[agent]] = r
        for agent, t in term.items():
            terminals[self.index[agent]] = t
        for agent, t in trunc.items():
            truncations[self.index[agent]] = t
        self.episode_return += float(sum(rew.values()))
        self.episode_length += 1
        info = None
        if not self.env.agents:  # everyone is done: a new episode
            info = {"episode_return": self.episode_return, "episode_length": self.episode_length}
            samples, _ = self.env.reset()
            self.episode_return, self.episode_length = 0.0, 0
        self._write(samples, obs, mask)
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


def emulate(env: Any) -> GymnasiumEmulator | PettingZooEmulator:
    """Wrap a created env: Gymnasium envs are single-agent, PettingZoo parallel envs multi-agent.

    Envs are recognized by type, so a parallel env whose ``agents`` appear only after ``reset`` (any
    made with ``aec_to_parallel``) is accepted before it is reset.
    """
    if isinstance(env, gymnasium.Env):
        return GymnasiumEmulator(env)
    kinds = _pettingzoo_kinds()
    if kinds is not None:
        parallel, aec = kinds
        if isinstance(env, parallel):
            return PettingZooEmulator(env)
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
