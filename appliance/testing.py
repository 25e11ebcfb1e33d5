"""Small Python envs for benchmarks and tests of the vector backends.

They live in the package (not under tests/) because spawned workers must import them, and because
``puffer-bench vector-bench --step-us`` uses :class:`BusyEnv` to stand in for a costlier env.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv


class BusyEnv(gymnasium.Env):
    """CartPole-sized observations; each step busy-waits ``step_us`` microseconds (no sleep: CPU cost)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, step_us: float = 50.0, episode_length: int = 200) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.step_us, self.episode_length = step_us, episode_length
        self._t = 0
        self._rng = np.random.default_rng()

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        return self._rng.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        end = time.perf_counter() + self.step_us * 1e-6
        while time.perf_counter() < end:
            pass
        self._t += 1
        obs = self._rng.uniform(-1, 1, 4).astype(np.float32)
        return obs, float(action), self._t >= self.episode_length, False, {}


class CountingEnv(gymnasium.Env):
    """Deterministic: obs = [seed-derived id, step count]; reward = action; ends after ``length`` steps.

    ``fail_at``: raise at that step; ``kill_at``: SIGKILL its own process; ``sleep_at``: sleep that long.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self, length: int = 10, fail_at: int = -1, kill_at: int = -1, sleep_at: int = -1, sleep_s: float = 0.0
    ) -> None:
        self.observation_space = spaces.Box(-1e9, 1e9, (2,), np.float32)
        self.action_space = spaces.Discrete(4)
        self.length, self.fail_at, self.kill_at, self.sleep_at, self.sleep_s = (
            length,
            fail_at,
            kill_at,
            sleep_at,
            sleep_s,
        )
        self._id, self._t, self._total = 0.0, 0, 0

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is not None:
            self._id = float(seed)
        self._t = 0
        return np.array([self._id, 0], np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        self._total += 1
        if self._total == self.fail_at:
            raise RuntimeError(f"CountingEnv failed on purpose at step {self._total}")
        if self._total == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if self._total == self.sleep_at:
            time.sleep(self.sleep_s)
        return np.array([self._id, self._t], np.float32), float(action), self._t >= self.length, False, {}


STRUCTURED_OBS = spaces.Dict(
    {
        "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
        "grid": spaces.Box(0, 255, (3, 3), np.uint8),
        "flags": spaces.MultiBinary(3),
        "mode": spaces.Discrete(4, start=1),
        "pair": spaces.Tuple((spaces.Discrete(3), spaces.MultiDiscrete([2, 5]))),
    }
)
STRUCTURED_ACTION = spaces.Dict({"move": spaces.Discrete(3), "power": spaces.MultiDiscrete([2, 4])})


class StructuredEnv(gymnasium.Env):
    """Dict/Tuple observations of mixed dtypes and a Dict action, for emulation tests and examples."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    observation_space = STRUCTURED_OBS
    action_space = STRUCTURED_ACTION

    def __init__(self, length: int = 20) -> None:
        self.length, self._t = length, 0
        self.last_action: Any = None

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self._t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        assert self.action_space.contains(action), action
        self.last_action = action
        self._t += 1
        return self.observation_space.sample(), float(action["move"]), self._t >= self.length, False, {}


class ComingAndGoing(ParallelEnv):  # type: ignore[misc]
    """A PettingZoo ParallelEnv whose agents come and go: agent_i is present on steps where
    (t + i) % 3 != 0, and leaves for good after ``life + i`` steps. Rewards equal the action."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "name": "coming_and_going"}

    def __init__(self, num_agents: int = 3, life: int = 6) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.life = life
        self.agents: list[str] = []
        self._t = 0
        self._obs = spaces.Box(0.0, 100.0, (2,), np.float32)
        self._act = spaces.Discrete(3)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs

    def action_space(self, agent: str) -> spaces.Space:
        return self._act

    def _present(self) -> list[str]:
        return [
            a
            for i, a in enumerate(self.possible_agents)
            if self._t < self.life + i and (self._t + i) % 3 != 0
        ]

    def _observe(self) -> dict[str, np.ndarray]:
        return {a: np.array([self.possible_agents.index(a), self._t], np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._t = 1
        self.agents = self._present()
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rewards = {a: float(actions[a]) for a in self.agents}
        self._t += 1
        terminations = {a: self._t >= self.life + self.possible_agents.index(a) for a in self.agents}
        truncations = {a: False for a in self.agents}
        self.agents = self._present()  # empty once every agent's life is over: the episode ends
        return self._observe(), rewards, terminations, truncations, {a: {} for a in self.agents}

    def close(self) -> None:
        pass


class Hunt(ParallelEnv):  # type: ignore[misc]
    """A mixed team: ``hunters`` agents see 4 numbers and choose of 3 actions, one ``runner`` sees 3
    and chooses of 2. The observations are noise; a hunter scores 1 for action 0, the runner 1 for
    action 1, so one shared policy scores more than 2 a step only if it tells the kinds apart (the
    one-hot a mixed team's rows carry). Episodes last ``length`` steps."""

    metadata: ClassVar[dict[str, Any]] = {"name": "hunt_v0", "render_modes": []}

    def __init__(self, hunters: int = 2, length: int = 8) -> None:
        self.possible_agents = [f"hunter_{i}" for i in range(hunters)] + ["runner_0"]
        self.agents: list[str] = []
        self.length, self._t = length, 0
        self._rng = np.random.default_rng(0)

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (4 if agent.startswith("hunter") else 3,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3 if agent.startswith("hunter") else 2)

    def _observe(self) -> dict[str, np.ndarray]:
        return {
            a: self._rng.uniform(-1, 1, self.observation_space(a).shape).astype(np.float32)
            for a in self.agents
        }

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents, self._t = list(self.possible_agents), 0
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        for a, act in actions.items():
            assert self.action_space(a).contains(act), (a, act)
        rewards = {a: float(int(actions[a]) == (0 if a.startswith("hunter") else 1)) for a in self.agents}
        self._t += 1
        done = self._t >= self.length
        obs = self._observe()
        agents = list(self.agents)
        if done:
            self.agents = []
        return (
            obs,
            rewards,
            dict.fromkeys(agents, done),
            dict.fromkeys(agents, False),
            {a: {} for a in agents},
        )


class ColourBandit(gymnasium.Env):
    """A contextual bandit: see one of 4 colours (one-hot), get +1 for naming it. 16 steps an episode.
    The quickest proof that a trainer learns: chance is 4 per episode, a solved policy scores 16."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    observation_space = spaces.Box(0.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(4)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t, self._colour = 0, int(self.np_random.integers(4))
        return np.eye(4, dtype=np.float32)[self._colour], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self._colour)
        self._t += 1
        self._colour = int(self.np_random.integers(4))
        return np.eye(4, dtype=np.float32)[self._colour], reward, self._t >= 16, False, {}


class Steer(gymnasium.Env):
    """A continuous contextual bandit: see a target in [-1, 1], get -|action - target|; 8 steps an
    episode. Keeps the last action it was given (tests of Box-action clipping read it)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    last_action: np.ndarray | None = None

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t, self._target = 0, self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self._target.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.last_action = np.array(action, np.float32)
        reward = -float(np.abs(self.last_action - self._target).sum())
        self._t += 1
        self._target = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self._target.copy(), reward, self._t >= 8, False, {}


class Frames(gymnasium.Env):
    """Image observations either way round: ``stack`` grayscale frames of ``side`` x ``side`` pixels,
    channel-first (``stack``, side, side) as ``FrameStackObservation`` gives them, or channel-last
    with ``channels_last``. A bright square in the left or right half says which action (0 or 1)
    earns +1; 8 steps an episode. For tests of the image encoders and the atari family."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    action_space = spaces.Discrete(2)

    def __init__(self, side: int = 36, stack: int = 4, channels_last: bool = False) -> None:
        self.side, self.stack, self.channels_last = side, stack, channels_last
        shape = (side, side, stack) if channels_last else (stack, side, side)
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)

    def _frame(self) -> np.ndarray:
        self._side = int(self.np_random.integers(2))
        frame = np.zeros((self.stack, self.side, self.side), np.uint8)
        half = self.side // 2
        frame[:, half // 2 : half // 2 + 4, self._side * half + 2 : self._side * half + 6] = 255
        return np.ascontiguousarray(frame.transpose(1, 2, 0)) if self.channels_last else frame

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self._side)
        self._t += 1
        return self._frame(), reward, self._t >= 8, False, {}


class TakeTurns(AECEnv):  # type: ignore[misc]
    """A tiny PettingZoo AEC env: ``num_agents`` agents act in turn; each sees its own bit and gets
    +1 for repeating it. ``length`` cycles an episode. For ``aec_to_parallel`` (see
    :func:`take_turns_parallel`), whose ``agents`` exist only after ``reset``."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "name": "take_turns", "is_parallelizable": True}

    def __init__(self, num_agents: int = 2, length: int = 8) -> None:
        super().__init__()
        self.possible_agents = [f"player_{i}" for i in range(num_agents)]
        self.length = length
        self.render_mode = None
        self._obs = spaces.Box(0.0, 1.0, (2,), np.float32)
        self._act = spaces.Discrete(2)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs

    def action_space(self, agent: str) -> spaces.Space:
        return self._act

    def observe(self, agent: str) -> np.ndarray:
        return np.eye(2, dtype=np.float32)[self._bits[agent]]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._bits = {a: int(self._rng.integers(2)) for a in self.agents}
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self._turn, self._t = 0, 0
        self.agent_selection = self.agents[0]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self.rewards = {a: 0.0 for a in self.agents}
        self.rewards[agent] = float(int(action) == self._bits[agent])
        self._cumulative_rewards[agent] = 0.0
        self._accumulate_rewards()
        self._turn += 1
        if self._turn == len(self.agents):  # the end of a cycle: new bits, maybe the end
            self._turn, self._t = 0, self._t + 1
            self._bits = {a: int(self._rng.integers(2)) for a in self.agents}
            if self._t >= self.length:
                self.terminations = {a: True for a in self.agents}
        self.agent_selection = self.agents[self._turn]

    def close(self) -> None:
        pass


def take_turns_parallel() -> Any:
    """:class:`TakeTurns` through ``aec_to_parallel``: a ParallelEnv with no ``agents`` before reset."""
    from pettingzoo.utils.conversions import aec_to_parallel

    return aec_to_parallel(TakeTurns())


class BrokenEnv(gymnasium.Env):
    """Breaks one env contract on purpose (``rule``, one of :data:`BROKEN_RULES`), from step ``at`` on,
    for tests of the checks in :mod:`appliance.emulation`. Otherwise a 4-float observation, a
    Discrete(2) action, reward 1 and 10-step episodes."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    made = 0  # instances made in this process: with rule "instance_spaces" every other one differs

    def __init__(self, rule: str = "", at: int = 2) -> None:
        assert rule in BROKEN_RULES or not rule, rule
        self.rule, self.at = rule, at
        BrokenEnv.made += 1
        dtype = np.uint8 if rule == "obs_dtype" else np.float32
        self.observation_space = spaces.Box(0, 255, (4,), dtype) if rule != "no_space" else None
        self.action_space = spaces.Discrete(2 + (rule == "instance_spaces") * (BrokenEnv.made % 2))
        self._t, self._resets = 0, 0

    def _obs(self) -> np.ndarray:
        return np.zeros(4, self.observation_space.dtype)

    def reset(self, seed: int | None = None, options: dict | None = None) -> Any:
        self._t, self._resets = 0, self._resets + 1
        obs = self._obs()
        if self.rule == "reset_none":
            return None
        if self.rule == "reset_bare":
            return obs
        if self.rule == "reset_info":
            return obs, None
        if self.rule == "obs_nan":
            obs[2] = np.nan
        if self.rule == "spaces_change" and self._resets > 1:
            self.action_space = spaces.Discrete(3)
        return obs, {}

    def step(self, action: Any) -> Any:
        self._t += 1
        obs, reward, terminated, truncated, info = self._obs(), 1.0, self._t >= 10, False, {}
        if self._t < self.at:
            return obs, reward, terminated, truncated, info
        rule = self.rule
        if rule == "step_4":
            return obs, reward, terminated or truncated, info
        if rule == "obs_shape":
            obs = np.zeros(7, np.float32)
        elif rule == "obs_dtype":  # frames scaled to [0, 1] for a uint8 space
            obs = np.full(4, 0.5, np.float32)
        elif rule == "reward_shape":
            reward = np.array([1.0])
        elif rule == "reward_nan":
            reward = float("nan")
        elif rule == "terminated_int":
            terminated = int(terminated)
        elif rule == "info_list":
            info = []
        return obs, reward, terminated, truncated, info


BROKEN_RULES = (
    "reset_none",
    "reset_bare",
    "reset_info",
    "step_4",
    "obs_shape",
    "obs_dtype",
    "obs_nan",
    "reward_shape",
    "reward_nan",
    "terminated_int",
    "info_list",
    "spaces_change",
    "instance_spaces",
    "no_space",
)


class BrokenAgents(ParallelEnv):  # type: ignore[misc]
    """A PettingZoo ParallelEnv of agents "a" and "b" that breaks one rule (``rule``) from step ``at``:
    ``intruder`` (an observation for an agent not in possible_agents), ``missing`` (no observation
    for "b", still in ``agents``), ``reward_key`` (a reward for "intruder"), ``lists`` (rewards as a
    list), ``terminated_str`` ("yes" as a flag)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "name": "broken_agents"}

    def __init__(self, rule: str = "", at: int = 2) -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self.rule, self.at, self._t = rule, at, 0
        self._obs = spaces.Box(0.0, 1.0, (2,), np.float32)
        self._act = spaces.Discrete(2)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs

    def action_space(self, agent: str) -> spaces.Space:
        return self._act

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._t, self.agents = 0, list(self.possible_agents)
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        self._t += 1
        obs = {a: np.zeros(2, np.float32) for a in self.agents}
        rewards: Any = {a: 1.0 for a in self.agents}
        terminations: dict[str, Any] = {a: self._t >= 10 for a in self.agents}
        truncations = {a: False for a in self.agents}
        if self._t >= 10:
            self.agents = []
        if self._t >= self.at:
            if self.rule == "intruder":
                obs["intruder"] = np.zeros(2, np.float32)
            elif self.rule == "missing":
                del obs["b"]
            elif self.rule == "reward_key":
                rewards["intruder"] = 1.0
            elif self.rule == "lists":
                rewards = list(rewards.values())
            elif self.rule == "terminated_str":
                terminations["a"] = "yes"
        return obs, rewards, terminations, truncations, {a: {} for a in self.agents}

    def close(self) -> None:
        pass


def cartpole_vector(num_envs: int = 2, autoreset_mode: str = "NextStep") -> gymnasium.vector.VectorEnv:
    """A gymnasium ``SyncVectorEnv`` of CartPoles: a tiny ``module:factory`` VectorEnv source
    (``appliance.vector.gymvec``) in either autoreset mode."""
    return gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.make("CartPole-v1")] * int(num_envs),
        autoreset_mode=gymnasium.vector.AutoresetMode(autoreset_mode),
    )


def cartpole_pair() -> gymnasium.vector.VectorEnv:
    """A VectorEnv source of exactly 2 CartPoles (its factory takes no ``num_envs``): a batch smaller
    than the family's minibatch."""
    return cartpole_vector(2)


def tiny_sweep_args(total_timesteps: int) -> list[str]:
    """A sweep trial on a small squared (5x5, 32 envs, an MLP of 32) for ``total_timesteps`` steps:
    a few seconds a trial on one core, for the sweep tests."""
    return [
        "--train.device", "cpu", "--policy.core", "mlp", "--train.optimizer", "adam", "--env.size", "5",
        "--vec.num-envs", "32", "--vec.num-threads", "1", "--train.bptt-horizon", "16",
        "--train.minibatch-size", "512", "--train.total-timesteps", str(total_timesteps),
        "--train.prio-alpha", "0", "--policy.hidden-size", "32",
    ]  # fmt: skip
