"""Structured spaces as one flat array per agent and back: :class:`SpaceCodec` for observations (exact
dtypes, raw bytes when leaves differ), :class:`ActionCodec` for actions (MultiDiscrete, or a float32
Box whose discrete entries are rounded back)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from appliance.errors import ConfigError


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
