"""Vector speed: agent-steps per second through any backend, and through gymnasium's vector envs.

One timing loop (:func:`measure`) serves ``vector-bench``, ``autotune`` and the benchmark suites.
It drives the async API (``async_reset``/``recv``/``send``), counts the agent rows each ``recv``
returns, and can spend ``forward_s`` per batch standing in for the policy, so async configurations
that overlap env work with policy time are judged fairly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

ACTION_SETS = 16


def action_sets(space: spaces.Space, rows: int, count: int = ACTION_SETS, seed: int = 0) -> list[np.ndarray]:
    """``count`` cached random action arrays for ``rows`` agents (drawn once, cycled while timing)."""
    rng = np.random.default_rng(seed)
    if isinstance(space, spaces.Discrete):
        return [rng.integers(0, space.n, size=rows).astype(np.int32) for _ in range(count)]
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec).reshape(-1)
        return [rng.integers(0, nvec, size=(rows, len(nvec))).astype(np.int32) for _ in range(count)]
    if isinstance(space, spaces.Box):
        low = np.nan_to_num(np.broadcast_to(space.low, space.shape), neginf=-1.0)
        high = np.nan_to_num(np.broadcast_to(space.high, space.shape), posinf=1.0)
        return [rng.uniform(low, high, size=(rows, *space.shape)).astype(np.float32) for _ in range(count)]
    raise TypeError(f"no random actions for {space}")


class GymnasiumVector:
    """gymnasium.vector.SyncVectorEnv / AsyncVectorEnv behind the async API used by :func:`measure`."""

    def __init__(self, kind: str, creator: Callable[[], Any], num_envs: int) -> None:
        cls = gymnasium.vector.AsyncVectorEnv if kind == "async" else gymnasium.vector.SyncVectorEnv
        self.env = cls([creator] * num_envs)
        self.num_envs = self.agents_per_batch = num_envs
        self.single_action_space = self.env.single_action_space
        self._ids = np.arange(num_envs)
        self._async = kind == "async"
        self._actions: Any = None
        self._first: Any = None
        self._pending = False

    def async_reset(self, seed: int | None = 0) -> None:
        obs, _ = self.env.reset(seed=seed)
        self._first = obs

    def send(self, actions: Any) -> None:
        if self._async:
            self.env.step_async(actions)
            self._pending = True
        else:
            self._actions = actions

    def recv(self) -> tuple[Any, ...]:
        if self._first is not None:
            obs, self._first = self._first, None
            return obs, None, None, None, [], self._ids, None
        obs, rew, term, trunc, infos = self.env.step_wait() if self._async else self.env.step(self._actions)
        self._pending = False
        return obs, rew, term, trunc, infos, self._ids, None

    def close(self) -> None:
        if self._pending:  # finish the step in flight before closing
            self.env.step_wait()
        self.env.close()


@dataclass
class Measurement:
    sps: float
    steps: int  # agent-steps counted
    seconds: float
    batches: int


def measure(
    vec: Any, seconds: float = 1.0, warmup: float = 0.2, forward_s: float = 0.0, seed: int = 0
) -> Measurement:
    """Agent-steps per second of ``vec`` with cached random actions; ``forward_s`` is slept per batch."""
    actions = action_sets(vec.single_action_space, vec.agents_per_batch, seed=seed)
    vec.async_reset(seed)
    i = 0

    def one_batch() -> int:
        nonlocal i
        *_, ids, _ = vec.recv()
        if forward_s:
            time.sleep(forward_s)
        vec.send(actions[i % ACTION_SETS])
        i += 1
        return len(ids)

    warm_until = time.perf_counter() + warmup
    while time.perf_counter() < warm_until:
        one_batch()
    steps = batches = 0
    start = now = time.perf_counter()
    while now - start < seconds:
        steps += one_batch()
        batches += 1
        now = time.perf_counter()
    return Measurement(steps / (now - start), steps, now - start, batches)
