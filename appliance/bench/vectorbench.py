"""Side by side: our vector backends against gymnasium's SyncVectorEnv/AsyncVectorEnv (and
stable-baselines3's SubprocVecEnv when installed), same env, same core count, random actions.

Each approach is measured at a few ``num_envs`` and keeps its best, so no side is judged at a size
that does not suit it. The ratio column is SPS over the faster of gymnasium's two.

``vector_env`` adds a row for an existing VectorEnv (``module:factory`` taking ``num_envs``, e.g.
ale-py's ``AtariVectorEnv`` through ``appliance.emulation.atari:vector``), run as the trainer runs it
(:mod:`appliance.vector.gymvec`); ``num_envs`` fixes every approach's sizes (a short Atari run).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium

from appliance.bench.vecsps import GymnasiumVector, measure
from appliance.errors import ConfigError


@dataclass
class Approach:
    family: str  # what the row is called
    baseline: bool  # gymnasium's own: the ratio's denominator
    sizes: list[int]
    build: Callable[[int], Any]


def resolve_env(env: str, step_us: float | None) -> tuple[str, Any]:
    """(label, creator or Ocean name) for --env / --step-us."""
    from appliance import ocean
    from appliance.testing import BusyEnv

    if step_us is not None:
        if step_us < 0:
            raise ConfigError(f"--step-us must be >= 0, got {step_us}")
        return f"BusyEnv(step_us={step_us:g})", functools.partial(BusyEnv, step_us)
    if env.lower() == "cartpole":
        env = "CartPole-v1"
    env = ocean.canonical(env)  # a PufferLib-format env folder is built and named pufferlib:NAME
    if env.startswith(("ocean:", "pufferlib:")):
        name = ocean.ocean_name(env)
        if name is None:
            raise ConfigError(
                f"unknown Ocean env {env[len('ocean:') :]!r}; known: {', '.join(ocean.names())}"
            )
        return env, name
    from appliance.emulation import make_factory

    return env, make_factory(env)


def approaches(
    target: Any,
    cores: int,
    vector_env: str | None = None,
    vector_params: dict[str, Any] | None = None,
    num_envs: list[int] | None = None,
) -> list[Approach]:
    from appliance import vector

    c = max(1, cores)
    sizes = [c, 4 * c, 16 * c, 32 * c, 64 * c]
    out = []
    if vector_env is not None:
        params = dict(vector_params or {})
        out.append(
            Approach(
                f"VectorEnv {vector_env}",
                False,
                sizes,
                lambda n: vector.make(vector_env, backend="serial", num_envs=n, **params),
            )
        )
    if isinstance(target, str):  # Ocean: native threads, and one native vector per worker process
        out.append(
            Approach(
                f"native ({c} threads)",
                False,
                [256 * c, 1024 * c],
                lambda n: vector.make(target, backend="native", num_envs=n, num_threads=c),
            )
        )
        out.append(
            Approach(
                f"multiprocessing ({c} workers)",
                False,
                [256 * c, 1024 * c],
                lambda n: vector.make(target, backend="multiprocessing", num_envs=n, num_workers=c),
            )
        )
        if multi_agent(target):  # gymnasium's and SB3's vectors step one agent per env: no baseline
            return _sized(out, num_envs)
        creator: Callable[[], Any] = functools.partial(_OceanSingle, target)
    else:
        creator = target
        out.append(
            Approach(
                f"multiprocessing ({c} workers)",
                False,
                sizes,
                lambda n: vector.make(creator, backend="multiprocessing", num_envs=n, num_workers=c),
            )
        )
        if c % 2 == 0:
            out.append(
                Approach(
                    f"multiprocessing async ({c} workers, 2 blocks)",
                    False,
                    [2 * s for s in sizes],
                    lambda n: vector.make(
                        creator, backend="multiprocessing", num_envs=n, num_workers=c, batch_size=n // 2
                    ),
                )
            )
        out.append(
            Approach("serial", False, sizes, lambda n: vector.make(creator, backend="serial", num_envs=n))
        )
    out.append(
        Approach("gymnasium SyncVectorEnv", True, sizes, lambda n: GymnasiumVector("sync", creator, n))
    )
    out.append(
        Approach(
            "gymnasium AsyncVectorEnv",
            True,
            [c, 2 * c, 4 * c],
            lambda n: GymnasiumVector("async", creator, n),
        )
    )
    try:
        from stable_baselines3.common.vec_env import SubprocVecEnv  # noqa: F401

        out.append(
            Approach(
                "stable-baselines3 SubprocVecEnv", False, [c, 2 * c, 4 * c], lambda n: _SB3Vector(creator, n)
            )
        )
    except ImportError:
        pass
    return _sized(out, num_envs)


def _sized(out: list[Approach], num_envs: list[int] | None) -> list[Approach]:
    if num_envs:
        for a in out:
            a.sizes = list(num_envs)
    return out


def multi_agent(target: Any) -> bool:
    """An Ocean env with more than one agent per env (gymnasium's vectors cannot run it as it is)."""
    from appliance import ocean

    return isinstance(target, str) and ocean.describe(target)["agents_per_env"] > 1


class _OceanSingle(gymnasium.Env):
    """One Ocean env as a plain Gymnasium env, so gymnasium's vector envs can run it too."""

    def __init__(self, name: str) -> None:
        from appliance.vector import native

        self.vec = native.make(name, num_envs=1, num_threads=1)
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, _ = self.vec.reset(seed or 0)
        return obs[0].copy(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        import numpy as np

        obs, rew, term, trunc, _ = self.vec.step(np.asarray(action).reshape(self.vec.actions.shape))
        return obs[0].copy(), float(rew[0]), bool(term[0]), bool(trunc[0]), {}

    def close(self) -> None:
        self.vec.close()


class _SB3Vector:
    """stable-baselines3 SubprocVecEnv behind the async API."""

    def __init__(self, creator: Callable[[], Any], n: int) -> None:
        import numpy as np
        from stable_baselines3.common.vec_env import SubprocVecEnv

        self.env = SubprocVecEnv([creator] * n)
        self.single_action_space = self.env.action_space
        self.agents_per_batch = n
        self._ids = np.arange(n)
        self._first = True

    def async_reset(self, seed: int | None = 0) -> None:
        self.env.seed(seed)
        self.env.reset()
        self._first = True

    def send(self, actions: Any) -> None:
        self.env.step_async(actions)

    def recv(self) -> tuple[Any, ...]:
        if self._first:
            self._first = False
            return None, None, None, None, [], self._ids, None
        self.env.step_wait()
        return None, None, None, None, [], self._ids, None

    def close(self) -> None:
        self.env.close()


def run(
    env: str,
    step_us: float | None,
    cores: int,
    seconds: float,
    progress: Callable[[dict[str, Any]], None] | None = None,
    vector_env: str | None = None,
    vector_params: dict[str, Any] | None = None,
    num_envs: list[int] | None = None,
) -> dict[str, Any]:
    """Measure every approach at each of its sizes; return rows (best per family) and every sample."""
    label, target = resolve_env(env, step_us)
    samples = []
    for approach in approaches(target, cores, vector_env, vector_params, num_envs):
        for n in approach.sizes:
            vec = approach.build(n)
            try:
                m = measure(vec, seconds=seconds)
            finally:
                vec.close()
            row = {"family": approach.family, "baseline": approach.baseline, "num_envs": n, "sps": m.sps}
            samples.append(row)
            if progress:
                progress(row)
    best: dict[str, dict[str, Any]] = {}
    for row in samples:
        if row["family"] not in best or row["sps"] > best[row["family"]]["sps"]:
            best[row["family"]] = row
    gym_best = max((r["sps"] for r in best.values() if r["baseline"]), default=None)
    rows = [{**r, "ratio": r["sps"] / gym_best if gym_best else None} for r in best.values()]
    out = {"env": label, "cores": cores, "seconds": seconds, "rows": rows, "samples": samples}
    if multi_agent(target):
        out["note"] = (
            f"{label} has several agents per env: gymnasium's and stable-baselines3's vectors step one "
            "agent per env, so only our backends are timed (no ratio)"
        )
    return out


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """:func:`run`'s rows, fastest first, as cells: approach, num_envs, SPS, ratio to the best gymnasium."""
    cells = []
    for r in sorted(result["rows"], key=lambda r: -r["sps"]):
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        cells.append([r["family"], str(r["num_envs"]), f"{r['sps']:,.0f}", ratio])
    return cells
