"""The :class:`Vector` base class every backend shares: attributes, action checks, sync wrappers."""

from __future__ import annotations

from typing import Any

import numpy as np

from appliance.errors import ApplianceError
from appliance.vector.buffers import check_actions
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource


class WorkerError(ApplianceError, RuntimeError):
    """An env raised inside a worker, or a worker died or timed out; the vector is closed."""


class Vector:
    """Shared attributes and the sync wrappers. Subclasses implement async_reset, send, recv, close."""

    backend = "base"

    def __init__(self, source: EnvSource, sizes: Sizes) -> None:
        self.source = source
        self.sizes = sizes
        self.num_envs = sizes.num_envs
        self.num_workers = sizes.num_workers
        self.batch_size = sizes.batch_size
        self.agents_per_env = source.agents_per_env
        self.num_agents = sizes.num_envs * source.agents_per_env
        self.agents_per_batch = sizes.batch_size * source.agents_per_env
        self.single_observation_space = source.observation_space
        self.single_action_space = source.action_space
        self.obs_codec = source.obs_codec
        self.action_mask = source.action_mask  # the observations' mask tail (Policy's action_mask), or 0
        self._batch_action_shape = (self.agents_per_batch, *source.action_shape)

    def _check_actions(self, actions: Any) -> np.ndarray:
        return check_actions(self.source.name, actions, self._batch_action_shape, self.single_action_space)

    def reset(self, seed: int | None = 0) -> tuple[np.ndarray, list[dict[str, Any]]]:
        self.async_reset(seed)
        obs, _, _, _, infos, _, _ = self.recv()
        return obs, infos

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        self.send(actions)
        obs, rewards, terminals, truncations, infos, _, _ = self.recv()
        return obs, rewards, terminals, truncations, infos

    def __enter__(self) -> Vector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # implemented by backends
    def async_reset(self, seed: int | None = 0) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def send(self, actions: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def recv(self) -> tuple[Any, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
