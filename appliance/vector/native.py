"""The native backend: ``num_envs`` Ocean C envs stepped in place by a persistent pthread pool.

The observation, reward and done arrays it returns are the very buffers C writes into: they stay
valid (and change) until the next step, and a trainer may pin them for zero-copy transfers. The
pool steps every env on ``send``, so each ``recv`` returns all of them.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from appliance import _ocean, ocean, pufferlib_envs
from appliance.errors import ConfigError
from appliance.sysinfo import physical_cores
from appliance.vector.base import Vector
from appliance.vector.buffers import aligned_empty, check_actions
from appliance.vector.sizes import Sizes, warn_oversubscribed
from appliance.vector.sources import resolve_source


def _positive_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1


class OceanVec(Vector):
    """``num_envs`` instances of one Ocean env, stepped by ``num_threads`` native threads."""

    backend = "native"

    def __init__(
        self, name: str, num_envs: int, num_threads: int | None = None, seed: int = 0, **params: Any
    ) -> None:
        if not _positive_int(num_envs):
            raise ConfigError(f"{name}: num_envs must be a positive int, got {num_envs!r}")
        if num_threads is None or num_threads == "auto":
            num_threads = min(physical_cores(), int(num_envs))
        if not _positive_int(num_threads):
            raise ConfigError(f"{name}: num_threads must be a positive int or None, got {num_threads!r}")
        if num_threads > num_envs:
            raise ConfigError(
                f"{name}: num_threads ({num_threads}) > num_envs ({num_envs}): each thread needs at least one env; "
                f"use num_threads <= {num_envs}"
            )
        n_envs = int(num_envs)
        self.info = ocean.describe(name, **params)  # unknown envs and bad parameters fail here
        super().__init__(resolve_source(name, **params), Sizes(n_envs, 1, n_envs, n_envs, 1))
        self.name = name
        self.params = {k: params.get(k, v) for k, v in self.info["params"].items()}
        n = self.num_agents
        self.observations = aligned_empty((n, *self.source.obs_shape), self.single_observation_space.dtype)
        self.actions = aligned_empty((n, *self.source.action_shape), self.source.action_dtype)
        self.rewards = aligned_empty((n,), np.float32)
        self.terminals = aligned_empty((n,), np.bool_)
        self.truncations = aligned_empty((n,), np.bool_)
        self.agent_ids = np.arange(n)
        self.masks = np.ones(n, dtype=np.bool_)
        try:
            self._c = _ocean.Vec(
                name,
                n_envs,
                self.observations,
                self.actions,
                self.rewards,
                self.terminals,
                self.truncations,
                num_threads=int(num_threads),
                seed=int(seed),
                params=dict(params),
            )
        except ValueError as e:  # an env's own whole-vector init refused (a PufferLib env's my_vec_init)
            raise ConfigError(str(e)) from None
        self.num_threads = self._c.num_threads
        warn_oversubscribed(name, self.num_threads)
        self._infos: list[dict[str, Any]] = []  # episode stats come from log(), not infos

    # ------------------------------------------------------------------ Vector API

    def async_reset(self, seed: int | None = 0) -> None:
        self._check_open()
        self._c.reset(0 if seed is None else int(seed))

    def send(self, actions: Any) -> None:
        """Check dtype and shape, copy into the C-owned actions buffer, step every env. int32 values
        are range-checked by C on the fly; other integer dtypes here, before a cast could wrap them."""
        self._check_open()
        if (
            type(actions) is np.ndarray
            and actions.dtype == self.actions.dtype
            and actions.shape == self.actions.shape
        ):
            # the usual case, and all check_actions would do for it: a serial microsecond less per step
            if actions is not self.actions:
                np.copyto(self.actions, actions)
            self._c.step()
            return
        actions = np.asarray(actions.detach().cpu().numpy() if hasattr(actions, "detach") else actions)
        check_actions(
            self.name,
            actions,
            self.actions.shape,
            self.single_action_space,
            check_values=actions.dtype != self.actions.dtype,
        )
        np.copyto(self.actions, actions, casting="unsafe")
        self._c.step()

    def recv(self) -> tuple[Any, ...]:
        self._check_open()
        return (
            self.observations,
            self.rewards,
            self.terminals,
            self.truncations,
            self._infos,
            self.agent_ids,
            self.masks,
        )

    def log(self) -> dict[str, float]:
        """Mean of each Log field over the episodes finished since the last call (``n`` = count)."""
        self._check_open()
        return self._c.log()

    def render(self, index: int = 0) -> np.ndarray:
        """One env as an HxWx3 uint8 frame."""
        self._check_open()
        h, w = self.info["frame"]
        if self.name.startswith(pufferlib_envs.PREFIX) and h > 1:  # c_render draws in a raylib window
            pufferlib_envs.render_display(warn=lambda msg: print(f"warning: {msg}", file=sys.stderr))
        return np.frombuffer(self._c.render(int(index)), dtype=np.uint8).reshape(h, w, 3)

    def render_text(self, index: int = 0) -> str:
        self._check_open()
        return self._c.render_text(int(index))

    def close(self) -> None:
        """Stop the threads and free the envs. Idempotent."""
        c = getattr(self, "_c", None)
        if c is not None:
            c.close()

    @property
    def closed(self) -> bool:
        c = getattr(self, "_c", None)
        return c is None or c.closed

    def __del__(self) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{self.name}: this vector is closed")


def make(
    name: str, num_envs: int = 1, num_threads: int | None = None, seed: int = 0, **params: Any
) -> OceanVec:
    """Create ``num_envs`` Ocean envs of ``name`` stepped by native threads (default: physical cores)."""
    return OceanVec(name, num_envs, num_threads=num_threads, seed=seed, **params)
