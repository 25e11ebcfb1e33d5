"""What every vector backend shares.

* :class:`EnvSource`: what to build (an Ocean env by name, or an emulated Gymnasium/PettingZoo env
  from a creator), picklable so spawned workers and Ray actors can rebuild it.
* :class:`OceanGroup` / :class:`EmulatedGroup`: a contiguous slice of the vector's envs stepped in
  place into given buffer rows. Every backend runs the same groups (serial: one over all envs;
  multiprocessing and Ray: one per worker), so backends differ only in transport and their results
  are the same step for step. Env ``i`` of the vector is always seeded from (seed, i).
* :func:`check_sizes` and :func:`check_actions`: the rules, with errors that propose valid values.
* :class:`Vector`: the sync wrappers ``reset``/``step`` over ``async_reset``/``send``/``recv``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from appliance.errors import ApplianceError, ConfigError

# ----------------------------------------------------------------------------- errors


class WorkerError(ApplianceError, RuntimeError):
    """An env raised inside a worker, or a worker died or timed out; the vector is closed."""


# ----------------------------------------------------------------------------- sources


@dataclass
class EnvSource:
    """A buildable description of one env kind and its per-agent spaces."""

    kind: str  # "ocean" | "emulated"
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    creator: bytes = b""  # cloudpickled zero-argument creator (emulated)
    agents_per_env: int = 1
    observation_space: spaces.Box | None = None
    action_space: spaces.Space | None = None
    obs_codec: Any = None  # emulation.SpaceCodec restoring the structure before the policy

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self.observation_space.shape)

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Per-agent action shape in the buffers: () for Discrete, (dims,) otherwise."""
        s = self.action_space
        if isinstance(s, spaces.Discrete):
            return ()
        if isinstance(s, spaces.MultiDiscrete):
            return (len(s.nvec),)
        return tuple(s.shape)

    @property
    def action_dtype(self) -> np.dtype:
        return (
            np.dtype(np.int32)
            if isinstance(self.action_space, spaces.Discrete | spaces.MultiDiscrete)
            else np.dtype(np.float32)
        )

    def build_creator(self) -> Callable[[], Any]:
        import cloudpickle

        return cloudpickle.loads(self.creator)


def resolve_source(env: Any, **params: Any) -> EnvSource:
    """Turn an Ocean name, a Gymnasium id or an env creator into an :class:`EnvSource`."""
    from appliance import envs as ocean

    name = ocean.ocean_name(env)
    if name is not None:
        env = name
        info = ocean.describe(env, **params)
        nvec = info["action_nvec"]
        return EnvSource(
            kind="ocean",
            name=env,
            params=dict(params),
            agents_per_env=info["agents_per_env"],
            observation_space=spaces.Box(
                info["obs_low"], info["obs_high"], (info["obs_size"],), np.dtype(info["obs_dtype"])
            ),
            action_space=spaces.Discrete(nvec[0]) if len(nvec) == 1 else spaces.MultiDiscrete(nvec),
        )
    import cloudpickle

    from appliance.emulation import emulate, make_factory

    if params:
        raise ConfigError(
            f"env parameters {sorted(params)} only apply to Ocean envs; pass them to your env creator"
        )
    creator = make_factory(env)
    try:
        probe = emulate(creator())
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"creating env {env!r} failed: {type(e).__name__}: {e}") from e
    try:
        return EnvSource(
            kind="emulated",
            name=getattr(env, "env_id", None)
            or (env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)),
            creator=cloudpickle.dumps(creator),
            agents_per_env=probe.num_agents,
            observation_space=probe.obs_codec.flat_space,
            action_space=probe.action_codec.flat_space,
            obs_codec=probe.obs_codec,
        )
    finally:
        probe.close()


# ----------------------------------------------------------------------------- buffers and groups


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
    from appliance.envs import aligned_empty

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


class OceanGroup:
    """``count`` Ocean envs (global indices from ``env_offset``) stepped by C in the given rows."""

    def __init__(
        self, source: EnvSource, env_offset: int, count: int, buffers: Buffers, num_threads: int = 1
    ) -> None:
        from appliance import _ocean

        self.buffers = buffers
        buffers.masks[:] = True
        self.vec = _ocean.Vec(
            source.name,
            count,
            buffers.observations,
            buffers.actions,
            buffers.rewards,
            buffers.terminals,
            buffers.truncations,
            num_threads=num_threads,
            seed=0,
            params=source.params,
            env_offset=env_offset,
        )

    def reset(self, seed: int) -> list[dict[str, Any]]:
        self.vec.reset(int(seed))
        return []

    def step(self) -> list[dict[str, Any]]:
        self.vec.step()
        return []

    def log(self) -> dict[str, float]:
        return self.vec.log()

    def close(self) -> None:
        self.vec.close()


class EnvStepError(Exception):
    """An emulated env raised; carries the global env index and the formatted traceback."""

    def __init__(self, env_index: int, where: str, tb: str) -> None:
        super().__init__(f"env {env_index} raised in {where}:\n{tb}")
        self.env_index, self.where, self.tb = env_index, where, tb

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes (Ray sends exceptions)
        return (EnvStepError, (self.env_index, self.where, self.tb))


class EmulatedGroup:
    """``count`` emulated Python envs; env ``j`` writes rows ``j*k .. (j+1)*k`` (k agents per env)."""

    def __init__(self, source: EnvSource, env_offset: int, count: int, buffers: Buffers) -> None:
        from appliance.emulation import emulate

        creator = source.build_creator()
        self.offset, self.k, self.buffers = env_offset, source.agents_per_env, buffers
        self.envs = []
        for j in range(count):
            try:
                self.envs.append(emulate(creator()))
            except Exception as e:
                self.close()
                raise EnvStepError(env_offset + j, "creation", traceback.format_exc()) from e
        # each env's row views, made once: slicing six arrays per env per step costs more than a small env
        b = buffers
        self._views = [
            tuple(
                a[self._rows(j)]
                for a in (b.actions, b.observations, b.rewards, b.terminals, b.truncations, b.masks)
            )
            for j in range(count)
        ]

    def _rows(self, j: int) -> slice:
        return slice(j * self.k, (j + 1) * self.k)

    def reset(self, seed: int | None) -> list[dict[str, Any]]:
        b = self.buffers
        for j, env in enumerate(self.envs):
            rows = self._rows(j)
            try:
                env.reset(
                    None if seed is None else int(seed) + self.offset + j, b.observations[rows], b.masks[rows]
                )
            except Exception as e:
                raise EnvStepError(self.offset + j, "reset", traceback.format_exc()) from e
            b.rewards[rows] = 0
            b.terminals[rows] = False
            b.truncations[rows] = False
        return []

    def step(self) -> list[dict[str, Any]]:
        infos = []
        for j, (env, views) in enumerate(zip(self.envs, self._views, strict=True)):
            try:
                info = env.step(*views)
            except Exception as e:
                raise EnvStepError(self.offset + j, "step", traceback.format_exc()) from e
            if info:
                infos.append({"env": self.offset + j, **info})
        return infos

    def log(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


def make_group(
    source: EnvSource, env_offset: int, count: int, buffers: Buffers, num_threads: int = 1
) -> OceanGroup | EmulatedGroup:
    if source.kind == "ocean":
        return OceanGroup(source, env_offset, count, buffers, num_threads)
    return EmulatedGroup(source, env_offset, count, buffers)


# ----------------------------------------------------------------------------- rules


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _nearest_multiples(value: int, step: int, limit: int | None = None) -> list[int]:
    below = max(step, (value // step) * step)
    above = below + step if below < value or below == value else below
    options = sorted({below, above} - {value})
    return [o for o in options if limit is None or o <= limit] or [step]


def _cgroup_cpu_limit() -> float | None:
    """CPUs the cgroup quota allows (docker --cpus), or None when unlimited or unknown."""
    candidates = [  # cgroup v2, then v1
        ("/sys/fs/cgroup/cpu.max", None),
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
    ]
    for quota_path, period_path in candidates:
        try:
            with open(quota_path) as f:
                fields = f.read().split()
            if period_path is not None:
                with open(period_path) as f:
                    fields.append(f.read().strip())
        except OSError:
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = float(fields[0]), float(fields[1])
        except ValueError:
            return None
        return quota / period if quota > 0 and period > 0 else None
    return None


def usable_cores() -> int:
    """Logical CPUs this process may run on at once: its affinity mask, capped by a cgroup CPU quota."""
    import math
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = _cgroup_cpu_limit()
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)


def warn_oversubscribed(name: str, num_threads: int, cores: int | None = None) -> None:
    """Warn (RuntimeWarning) when native threads exceed the usable cores: they then take turns on the
    cores, each step waits for the slowest, and speed drops instead of rising."""
    import warnings

    cores = usable_cores() if cores is None else cores
    if num_threads > cores:
        warnings.warn(
            f"{name}: {num_threads} native threads > {cores} usable cores (affinity and cgroup quota): "
            f"threads will take turns on the cores; use num_threads <= {cores}",
            RuntimeWarning,
            stacklevel=3,
        )


def default_workers(num_envs: int, cores: int) -> int:
    """The largest divisor of num_envs that is at most the core count (one worker per core)."""
    return max(d for d in _divisors(num_envs) if d <= max(1, cores))


@dataclass(frozen=True)
class Sizes:
    num_envs: int
    num_workers: int
    envs_per_worker: int
    batch_size: int  # envs per recv
    workers_per_batch: int


def check_sizes(
    num_envs: Any, num_workers: Any, batch_size: Any, zero_copy: bool, overwork: bool, cores: int
) -> Sizes:
    """Check the vector size rules; each broken rule is a ConfigError naming valid alternatives."""
    if not isinstance(num_envs, int | np.integer) or isinstance(num_envs, bool) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive int, got {num_envs!r}")
    num_envs = int(num_envs)
    if num_workers in (None, "auto"):
        num_workers = default_workers(num_envs, cores)
    if not isinstance(num_workers, int | np.integer) or isinstance(num_workers, bool) or num_workers < 1:
        raise ConfigError(f"num_workers must be a positive int or 'auto', got {num_workers!r}")
    num_workers = int(num_workers)
    if num_workers > num_envs:
        raise ConfigError(
            f"num_workers ({num_workers}) > num_envs ({num_envs}): every worker needs an env; use num_workers <= {num_envs}"
        )
    if num_envs % num_workers:
        envs_options = _nearest_multiples(num_envs, num_workers)
        worker_options = [d for d in _divisors(num_envs) if abs(d - num_workers) <= max(2, num_workers)][:4]
        raise ConfigError(
            f"num_envs ({num_envs}) must be divisible by num_workers ({num_workers}) so every worker steps the same "
            f"number of envs; nearest valid: num_envs={' or '.join(map(str, envs_options))}, "
            f"or num_workers={' or '.join(map(str, worker_options))}"
        )
    if num_workers > cores and not overwork:
        raise ConfigError(
            f"num_workers ({num_workers}) > physical cores ({cores}): workers would compete for cores; "
            f"use num_workers <= {cores}, or pass overwork=True if you mean it"
        )
    envs_per_worker = num_envs // num_workers
    if batch_size in (None, "auto"):
        batch_size = num_envs
    if not isinstance(batch_size, int | np.integer) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive int or 'auto', got {batch_size!r}")
    batch_size = int(batch_size)
    if batch_size > num_envs:
        raise ConfigError(f"batch_size ({batch_size}) > num_envs ({num_envs}); use batch_size <= {num_envs}")
    if batch_size % envs_per_worker:
        options = _nearest_multiples(batch_size, envs_per_worker, limit=num_envs)
        raise ConfigError(
            f"batch_size ({batch_size}) must be a multiple of envs_per_worker ({envs_per_worker} = num_envs {num_envs} "
            f"/ num_workers {num_workers}): a batch is whole workers; nearest valid: batch_size={' or '.join(map(str, options))}"
        )
    workers_per_batch = batch_size // envs_per_worker
    if zero_copy and num_workers % workers_per_batch:
        options = [d * envs_per_worker for d in _divisors(num_workers)]
        raise ConfigError(
            f"zero_copy needs num_workers ({num_workers}) divisible by workers per batch ({workers_per_batch} = batch_size "
            f"{batch_size} / envs_per_worker {envs_per_worker}) so batches are contiguous blocks; "
            f"valid batch_size values: {', '.join(map(str, options))}; or zero_copy=False"
        )
    return Sizes(num_envs, num_workers, envs_per_worker, batch_size, workers_per_batch)


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


# ----------------------------------------------------------------------------- base class


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
