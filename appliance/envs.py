"""Ocean envs: C envs stepped in place by native threads (``appliance._ocean``).

``make("breakout", num_envs=1024)`` returns an :class:`OceanVec` with the Vector API of DESIGN.md.
The observation, reward and done arrays it returns are the very buffers C writes into: they stay
valid (and change) until the next step, and a trainer may pin them for zero-copy transfers.
"""

from __future__ import annotations

import builtins
from typing import Any

import gymnasium
import numpy as np

from appliance import _ocean
from appliance.errors import ConfigError
from appliance.sysinfo import physical_cores

ALIGN = 64  # bytes: every buffer starts on a cache line


def aligned_empty(shape: tuple[int, ...], dtype: Any, align: int = ALIGN) -> np.ndarray:
    """A zeroed C-contiguous array whose data starts on an ``align``-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def names() -> builtins.list[str]:
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


def available() -> builtins.list[dict[str, Any]]:
    """Every env with its default spaces and agent count (``puffer-bench envs``)."""
    return [describe(name) for name in names()]


list = available  # appliance.envs.list(), as the docs name it


class OceanVec:
    """``num_envs`` instances of one Ocean env, stepped by ``num_threads`` native threads."""

    backend = "native"

    def __init__(
        self, name: str, num_envs: int, num_threads: int | None = None, seed: int = 0, **params: Any
    ) -> None:
        if not isinstance(num_envs, int | np.integer) or isinstance(num_envs, bool) or num_envs < 1:
            raise ConfigError(f"{name}: num_envs must be a positive int, got {num_envs!r}")
        if num_threads is None or num_threads == "auto":
            num_threads = min(physical_cores(), int(num_envs))
        if not isinstance(num_threads, int | np.integer) or num_threads < 1:
            raise ConfigError(f"{name}: num_threads must be a positive int or None, got {num_threads!r}")
        if num_threads > num_envs:
            raise ConfigError(
                f"{name}: num_threads ({num_threads}) > num_envs ({num_envs}): each thread needs at least one env; "
                f"use num_threads <= {num_envs}"
            )
        self.name = name
        self.info = describe(name, **params)
        self.params = {k: params.get(k, v) for k, v in self.info["params"].items()}
        self.num_envs = int(num_envs)
        self.agents_per_env = self.info["agents_per_env"]
        self.num_agents = self.num_envs * self.agents_per_env
        self.agents_per_batch = self.num_agents
        self.batch_size = self.num_envs  # synchronous: every recv returns all envs
        self.num_workers = 1
        self.obs_codec = None  # flat observations are the native structure
        nvec = self.info["action_nvec"]
        obs_dtype = np.dtype(self.info["obs_dtype"])
        self.single_observation_space = gymnasium.spaces.Box(
            low=self.info["obs_low"],
            high=self.info["obs_high"],
            shape=(self.info["obs_size"],),
            dtype=obs_dtype,
        )
        self.single_action_space = (
            gymnasium.spaces.Discrete(nvec[0]) if len(nvec) == 1 else gymnasium.spaces.MultiDiscrete(nvec)
        )
        n = self.num_agents
        self.observations = aligned_empty((n, self.info["obs_size"]), obs_dtype)
        self.actions = aligned_empty((n,) if len(nvec) == 1 else (n, len(nvec)), np.int32)
        self.rewards = aligned_empty((n,), np.float32)
        self.terminals = aligned_empty((n,), np.bool_)
        self.truncations = aligned_empty((n,), np.bool_)
        self.agent_ids = np.arange(n)
        self.masks = np.ones(n, dtype=np.bool_)
        self._c = _ocean.Vec(
            name,
            self.num_envs,
            self.observations,
            self.actions,
            self.rewards,
            self.terminals,
            self.truncations,
            num_threads=int(num_threads),
            seed=int(seed),
            params=dict(params),
        )
        self.num_threads = self._c.num_threads
        from appliance.vector.base import warn_oversubscribed

        warn_oversubscribed(name, self.num_threads)
        self._infos: builtins.list[dict[str, Any]] = []

    # ------------------------------------------------------------------ Vector API

    def async_reset(self, seed: int | None = 0) -> None:
        self._check_open()
        self._c.reset(0 if seed is None else int(seed))

    def send(self, actions: Any) -> None:
        self._check_open()
        self._write_actions(actions)
        self._c.step()

    def recv(self) -> tuple[np.ndarray, ...] | tuple[Any, ...]:
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

    def reset(self, seed: int | None = 0) -> tuple[np.ndarray, builtins.list[dict[str, Any]]]:
        self.async_reset(seed)
        return self.observations, self._infos

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, builtins.list]:
        self.send(actions)
        return self.observations, self.rewards, self.terminals, self.truncations, self._infos

    def log(self) -> dict[str, float]:
        """Mean of each Log field over the episodes finished since the last call (``n`` = count)."""
        self._check_open()
        return self._c.log()

    def render(self, index: int = 0) -> np.ndarray:
        """One env as an HxWx3 uint8 frame."""
        self._check_open()
        h, w = self.info["frame"]
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

    def __enter__(self) -> OceanVec:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # ------------------------------------------------------------------ checks

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{self.name}: this vector is closed")

    def _write_actions(self, actions: Any) -> None:
        """Check dtype and shape, then copy into the C-owned actions buffer. int32 values are range-checked
        by C; other integer dtypes here, before a cast could wrap them into range."""
        from appliance.vector.base import check_actions

        actions = np.asarray(actions.detach().cpu().numpy() if hasattr(actions, "detach") else actions)
        check_actions(
            self.name,
            actions,
            self.actions.shape,
            self.single_action_space,
            check_values=actions.dtype != np.int32,
        )
        np.copyto(self.actions, actions, casting="unsafe")


def make(
    name: str, num_envs: int = 1, num_threads: int | None = None, seed: int = 0, **params: Any
) -> OceanVec:
    """Create ``num_envs`` Ocean envs of ``name`` stepped by native threads (default: physical cores)."""
    return OceanVec(name, num_envs, num_threads=num_threads, seed=seed, **params)
