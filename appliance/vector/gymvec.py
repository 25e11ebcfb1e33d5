"""An existing ``gymnasium.vector.VectorEnv`` used as it is: ale-py's ``AtariVectorEnv`` (C++ threads),
EnvPool's gymnasium API, gymnasium's ``SyncVectorEnv``/``AsyncVectorEnv``, or any other.

A ``module:factory`` env (or a creator) that returns a VectorEnv is recognised when the vector is
made (:func:`appliance.vector.make`); its sub-envs are not re-wrapped: the VectorEnv steps them its
own way and this class only turns what it returns into the trainer's rows.

Autoreset (``metadata["autoreset_mode"]``, gymnasium 1.x):

* ``SAME_STEP``: the step that ends an episode returns the next episode's first observation, as our
  own backends do; passed through.
* ``NEXT_STEP`` (gymnasium's default, and EnvPool's): the step that ends an episode returns its last
  observation, and the next step ignores the action, resets, and returns reward 0. The row that
  holds the last observation keeps its reward and done flag (the advantage needs them) but has mask
  False, so the ignored action it is given is left out of the loss and of the step count; the reset
  step that follows is the new episode's first row.
* ``DISABLED`` is refused: nothing would reset the envs.

Episode return and length are counted here, per env, from the rewards the VectorEnv returns (an
ALE vector env clips them to -1..1 unless made with ``reward_clipping=False``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from appliance.errors import ConfigError
from appliance.vector.base import Vector
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource


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


class GymVector(Vector):
    """One live VectorEnv behind the Vector API; synchronous (every env each ``recv``)."""

    backend = "vector-env"

    def __init__(self, source: EnvSource, env: Any) -> None:
        n = int(env.num_envs)
        super().__init__(source, Sizes(n, 1, n, n, 1))
        self.env = env
        self.num_threads = 1
        self.next_step = autoreset_mode(env) == "NextStep"
        self.agent_ids = np.arange(n)
        self._returns = np.zeros(n, np.float64)
        self._lengths = np.zeros(n, np.int64)
        self._resetting = np.zeros(n, bool)  # NextStep: these envs reset on the step in flight
        self._all_live = np.ones(n, bool)  # every row's mask where no row is a NextStep reset
        self._result: tuple[Any, ...] | None = None
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.source.name}: this vector is closed")

    def async_reset(self, seed: int | None = 0) -> None:
        self._check_open()
        obs, _ = self.env.reset(seed=seed)
        n = self.num_envs
        self._returns[:], self._lengths[:], self._resetting[:] = 0.0, 0, False
        self._result = (
            obs,
            np.zeros(n, np.float32),
            np.zeros(n, bool),
            np.zeros(n, bool),
            [],
            self.agent_ids,
            self._all_live,
        )

    def send(self, actions: Any) -> None:
        self._check_open()
        actions = self._check_actions(actions)
        obs, rewards, terminals, truncations, _ = self.env.step(actions)
        rewards = np.asarray(rewards, np.float32)
        terminals = np.asarray(terminals, bool)
        truncations = np.asarray(truncations, bool)
        live = ~self._resetting  # a NextStep reset step is no step of any episode
        self._returns[live] += rewards[live]
        self._lengths[live] += 1
        done = terminals | truncations
        infos = [
            {
                "episode_return": float(self._returns[i]),
                "episode_length": int(self._lengths[i]),
                "env": int(i),
            }
            for i in np.flatnonzero(done)
        ]
        self._returns[done], self._lengths[done] = 0.0, 0
        if self.next_step:
            masks = ~done  # the last observation's row: its action is ignored by the reset step
            self._resetting = done
        else:
            masks = self._all_live
        self._result = (obs, rewards, terminals, truncations, infos, self.agent_ids, masks)

    def recv(self) -> tuple[Any, ...]:
        self._check_open()
        if self._result is None:
            raise RuntimeError(f"{self.source.name}: recv() before async_reset() or send()")
        return self._result

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.env.close()


class EnvPoolVector(VectorEnv):
    """EnvPool's gymnasium API (``envpool.make(task, env_type="gymnasium", num_envs=N)``) as a
    gymnasium VectorEnv: EnvPool's pool is no VectorEnv subclass (its ``observation_space`` is one
    env's, its arrays are batched) and it resets an env on the step after its episode ended
    (NextStep). Seeds are EnvPool's own ``seed`` argument at make time: ``reset(seed)`` cannot
    reseed a pool."""

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.num_envs = int(pool.config["num_envs"])
        self.single_observation_space = pool.observation_space
        self.single_action_space = pool.action_space
        self.observation_space = batch_space(pool.observation_space, self.num_envs)
        self.action_space = batch_space(pool.action_space, self.num_envs)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        return self.pool.reset()  # type: ignore[no-any-return]

    def step(self, actions: Any) -> tuple[Any, ...]:
        return self.pool.step(actions)  # type: ignore[no-any-return]

    def close(self, **_: Any) -> None:
        close = getattr(self.pool, "close", None)
        if callable(close):
            close()


def envpool(task_id: str = "Pong-v5", num_envs: int = 8, **kwargs: Any) -> Any:
    """``--env appliance.vector.gymvec:envpool --env.task-id Pong-v5``: an EnvPool pool (gymnasium
    API) as a VectorEnv source; ``kwargs`` go to ``envpool.make`` (``seed``, ``num_threads``, ...)."""
    try:
        import envpool as ep
    except ImportError:
        raise ConfigError("appliance.vector.gymvec:envpool needs EnvPool: pip install envpool") from None
    return EnvPoolVector(ep.make(task_id, env_type="gymnasium", num_envs=int(num_envs), **kwargs))
