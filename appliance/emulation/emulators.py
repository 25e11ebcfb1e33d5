"""Gymnasium and PettingZoo envs behind one interface that writes into caller-owned rows (the
emulators every Python-env backend steps), and the factories that make them from a name, a
Gymnasium id or an import path."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

from appliance.emulation.codecs import ActionCodec, SpaceCodec
from appliance.emulation.contracts import (
    _GYM_ERRORS,
    _INTS,
    _NUMBERS,
    _PZ_STEP,
    _flag,
    _info,
    _reset_pair,
    _reward,
    _space,
    _step_arity,
    _translate,
    _what,
    check_observation,
    describe_space,
    env_name,
)
from appliance.emulation.teams import MixedTeam
from appliance.errors import ConfigError, EnvContractError


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
        self._cut = 0  # the first episode ends after this many steps (stagger); 0: as the env ends it
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

    def stagger(self, index: int) -> None:
        """Env ``index`` of the vector: where the env has a time limit (``spec.max_episode_steps``),
        its first episode is cut short (truncated, and not reported: it is no whole episode) after
        ``limit * frac(index * golden ratio)`` steps, so that envs whose episodes all last the limit
        (HalfCheetah's 1,000 steps) do not end them together, once every ``limit x envs`` agent-steps,
        but spread, and the curve gets returns every epoch. Env 0 is not cut."""
        limit = getattr(getattr(self.env, "spec", None), "max_episode_steps", None)
        self._cut = int(limit * ((index * 0.6180339887498949) % 1.0)) if limit and index > 0 else 0

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
        if self._cut and self.episode_length >= self._cut:  # the staggered start: its one cut
            self._cut = 0
            if not (terminal or truncated):
                truncations[0] = True
                self._reset(None, obs[0])
                self.episode_return, self.episode_length = 0.0, 0
                return None
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
        obs = {
            a: _space(self.name, f"observation_space({a!r})", env.observation_space(a)) for a in self.agents
        }
        act = {a: _space(self.name, f"action_space({a!r})", env.action_space(a)) for a in self.agents}
        first = self.agents[0]
        obs_space, act_space = obs[first], act[first]
        # agents of different spaces (predator and prey): padded rows with a kind feature (teams.py)
        self.team: MixedTeam | None = None
        if any(obs[a] != obs_space or act[a] != act_space for a in self.agents[1:]):
            self.team = MixedTeam(self.name, self.agents, obs, act)
            obs_space, act_space = self.team.observation_space, self.team.action_space
        self.observation_space, self.action_space = obs_space, act_space
        self.obs_codec = SpaceCodec(obs_space)
        self.action_codec = ActionCodec(act_space)
        self.num_agents = len(self.agents)
        self.index = {agent: i for i, agent in enumerate(self.agents)}
        self.agent_returns = np.zeros(self.num_agents, np.float64)  # a mixed team's, per agent
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
        codec, team = self.obs_codec, self.team
        for agent, sample in samples.items():
            i = self._row(agent, call, "an observation")
            if team is not None:  # a mixed team: the agent's own space, padded, and its kind
                check_observation(self.name, call, team.obs_codec(i), sample, f" for {agent!r}")
                team.write(i, sample, obs[i])
                mask[i] = True
                continue
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
        self.agent_returns[:] = 0

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
        if self.team is None:
            live = {
                agent: self.action_codec.unflatten(actions[self.index[agent]]) for agent in self.env.agents
            }
        else:
            live = {
                agent: self.team.action(self.index[agent], actions[self.index[agent]])
                for agent in self.env.agents
            }
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
        if self.team is not None:
            self.agent_returns += rewards
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
            if self.team is not None:  # each kind's mean return: a predator's gain is the prey's loss
                info.update(self.team.kind_returns(self.agent_returns))
                self.agent_returns[:] = 0
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


PREPROCESS = ("auto", "ale_vector", "atari", "none")


def make_factory(
    env: str | Callable[[], Any], kwargs: dict[str, Any] | None = None, preprocess: str = "auto"
) -> Callable[[], Any]:
    """A zero-argument env creator from a callable, a Gymnasium id, ``package.module:factory`` (a
    class or function that makes a Gymnasium or PettingZoo parallel env) or ``module:Env-v0`` (a
    Gymnasium id that importing ``module`` registers). ``kwargs`` go to ``gymnasium.make`` or the
    factory (the config's ``env`` section of a non-Ocean env). ``preprocess`` (``vec.preprocess``):
    ``atari`` wraps an ALE game as :mod:`appliance.emulation.atari` does; ``auto`` does so for ALE
    ids; ``none`` makes the env as it is."""
    from appliance.config import gymids

    if preprocess not in PREPROCESS:
        raise ConfigError(f"vec.preprocess {preprocess!r}: choose one of {', '.join(PREPROCESS)}")
    args = tuple(sorted((kwargs or {}).items()))
    atari = preprocess in ("atari", "ale_vector") or (preprocess == "auto" and gymids.is_ale(env))
    if atari and not gymids.is_ale(env):
        raise ConfigError(
            f"vec.preprocess atari applies to Arcade Learning Environment ids (ALE/Pong-v5 with ale-py); "
            f"{env!r} is not one: use --vec.preprocess none"
        )
    if callable(env):
        if args:
            raise ConfigError(f"env parameters {sorted(dict(args))} need an env named by id or import path")
        return env
    if isinstance(env, str):
        if ":" in env:
            return _from_import_path(env, args, atari)
        if not gymids.registered(env):
            raise gymids.unknown_env(env)
        return _GymMaker(env, args, atari)
    raise ConfigError(f"env must be an Ocean name, a Gymnasium id or a callable, got {type(env).__name__}")


def _from_import_path(spec: str, kwargs: tuple[tuple[str, Any], ...], atari: bool) -> Callable[[], Any]:
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
        return _ImportMaker(spec, kwargs)
    if attr in gymnasium.registry:  # importing the module registered it
        return _GymMaker(spec, kwargs, atari)
    raise ConfigError(
        f"env {spec!r}: module {module_name!r} has no callable {attr!r} and registers no Gymnasium id {attr!r}"
    )


@dataclass(frozen=True)
class _ImportMaker:
    """Picklable creator for ``package.module:factory`` (workers import the module themselves)."""

    spec: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __call__(self) -> Any:
        import importlib

        module_name, _, attr = self.spec.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
        return target(**dict(self.kwargs))


@dataclass(frozen=True)
class _GymMaker:
    """Picklable creator for a Gymnasium id (workers started with spawn re-create it): keyword
    arguments for ``gymnasium.make``, and the Atari preprocessing where ``atari``."""

    env_id: str
    kwargs: tuple[tuple[str, Any], ...] = ()
    atari: bool = False

    def __call__(self) -> gymnasium.Env:
        from appliance.config import gymids

        gymids.registered(self.env_id)  # a spawned worker imports the namespace's plugin too
        gymids.quiet_physics(self.env_id)  # no MUJOCO_LOG.TXT in the working folder, no deprecation lines
        if self.atari:
            from appliance.emulation.atari import make_atari

            return make_atari(self.env_id, dict(self.kwargs))
        return gymnasium.make(self.env_id, **dict(self.kwargs))
