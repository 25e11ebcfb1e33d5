"""The arrays a vector steps in place, and the checks on what goes into them.

* :func:`aligned_empty`: zeroed arrays whose data starts on a cache line (the native backend hands
  them to C; multiprocessing lays the same shapes out in shared memory via :func:`buffer_layout`).
* :class:`Buffers` / :func:`allocate`: one set of rows per vector; groups write views of them.
* :func:`check_actions`: dtype, shape and range of actions, before anything is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

if TYPE_CHECKING:
    from appliance.vector.sources import EnvSource

ALIGN = 64  # bytes: every buffer starts on a cache line


def aligned_empty(shape: tuple[int, ...], dtype: Any, align: int = ALIGN) -> np.ndarray:
    """A zeroed C-contiguous array whose data starts on an ``align``-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


@dataclass
class Buffers:
    """Rows of the vector's arrays that one group writes (views, never copies)."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    truncations: np.ndarray
    masks: np.ndarray

    def rows(self, start: int, stop: int) -> Buffers:
        return Buffers(
            *(
                a[start:stop]
                for a in (
                    self.observations,
                    self.actions,
                    self.rewards,
                    self.terminals,
                    self.truncations,
                    self.masks,
                )
            )
        )


def allocate(source: EnvSource, num_agents: int) -> Buffers:
    """Cache-line aligned, zeroed arrays for ``num_agents`` rows."""
    return Buffers(
        aligned_empty((num_agents, *source.obs_shape), source.observation_space.dtype),
        aligned_empty((num_agents, *source.action_shape), source.action_dtype),
        aligned_empty((num_agents,), np.float32),
        aligned_empty((num_agents,), np.bool_),
        aligned_empty((num_agents,), np.bool_),
        np.ones(num_agents, dtype=np.bool_),
    )


def buffer_layout(source: EnvSource, num_agents: int) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """Names, shapes and dtypes of the arrays, in the order Buffers holds them."""
    return [
        ("observations", (num_agents, *source.obs_shape), np.dtype(source.observation_space.dtype)),
        ("actions", (num_agents, *source.action_shape), source.action_dtype),
        ("rewards", (num_agents,), np.dtype(np.float32)),
        ("terminals", (num_agents,), np.dtype(np.bool_)),
        ("truncations", (num_agents,), np.dtype(np.bool_)),
        ("masks", (num_agents,), np.dtype(np.bool_)),
    ]


def check_actions(
    name: str, actions: Any, expected_shape: tuple[int, ...], space: spaces.Space, check_values: bool = True
) -> np.ndarray:
    """Dtype, shape and value checks before anything is sent; returns a numpy array.

    ``check_values=False`` leaves the range check to the caller (the Ocean binding checks int32
    actions in C, on the fly)."""
    if hasattr(actions, "detach"):  # a torch tensor
        actions = actions.detach().cpu().numpy()
    actions = np.asarray(actions)
    discrete = isinstance(space, spaces.Discrete | spaces.MultiDiscrete)
    if discrete and actions.dtype.kind not in "iu":
        raise TypeError(f"{name}: actions must be integers for {space}, got dtype {actions.dtype}")
    if not discrete and actions.dtype.kind not in "fiu":
        raise TypeError(f"{name}: actions must be numbers for {space}, got dtype {actions.dtype}")
    if actions.shape != expected_shape:
        raise ValueError(
            f"{name}: actions have shape {actions.shape}; expected {expected_shape} (agents x {space})"
        )
    if discrete and check_values and actions.size:
        nvec = (
            [int(space.n)]
            if isinstance(space, spaces.Discrete)
            else [int(n) for n in np.asarray(space.nvec).reshape(-1)]
        )
        if actions.dtype in (np.int32, np.int64) and actions.flags.c_contiguous:
            from appliance import _ocean

            flat = _ocean.first_invalid(actions, nvec)  # one pass in C: no numpy fixed costs on the hot path
        else:
            bad = (actions < 0) | (actions >= np.asarray(nvec))
            flat = int(np.flatnonzero(bad)[0]) if bad.any() else -1
        if flat >= 0:
            agent = flat // max(1, actions.size // expected_shape[0])
            value = int(actions.reshape(-1)[flat])
            raise ValueError(f"{name}: action {value} for agent {agent} is out of range for {space}")
    if actions.dtype.kind == "f" and actions.size and not np.isfinite(actions).all():
        # NaN or inf would enter the env's state and stay there (every later observation poisoned)
        flat = int(np.flatnonzero(~np.isfinite(actions))[0])
        agent = flat // max(1, actions.size // expected_shape[0])
        value = actions.reshape(-1)[flat]
        raise ValueError(
            f"{name}: action {value} for agent {agent} is not finite; {space} needs finite numbers"
        )
    return actions
