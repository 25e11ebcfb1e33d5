"""Env-only speed: agent-steps per second of an Ocean env at several thread counts.

Random actions are drawn once up front and cycled, so the loop measures the env and the vector,
not the random number generator. Every agent row counts as one agent-step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from appliance.bench.vecsps import action_sets
from appliance.vector import native

ACTION_SETS = 64  # cached random action arrays cycled through


def random_actions(vec: native.OceanVec, count: int = ACTION_SETS, seed: int = 0) -> list[np.ndarray]:
    """Cached random actions shaped like ``vec.actions``."""
    return action_sets(vec.single_action_space, vec.num_agents, count=count, seed=seed)


def measure(
    name: str,
    num_envs: int,
    num_threads: int,
    seconds: float = 2.0,
    warmup: float = 0.25,
    seed: int = 0,
    **params: Any,
) -> dict[str, Any]:
    """Step ``num_envs`` envs with ``num_threads`` threads for ``seconds``; return SPS and counts."""
    with native.make(name, num_envs=num_envs, num_threads=num_threads, seed=seed, **params) as vec:
        actions = random_actions(vec, seed=seed)
        vec.reset(seed)
        deadline = time.perf_counter() + warmup
        i = 0
        while time.perf_counter() < deadline:
            vec.step(actions[i % ACTION_SETS])
            i += 1
        steps = 0
        start = time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline:
            for _ in range(8):  # check the clock every 8 steps: cheap, and short steps stay accurate
                vec.step(actions[i % ACTION_SETS])
                i += 1
            steps += 8
            now = time.perf_counter()
        elapsed = now - start
        return {
            "env": name,
            "num_envs": num_envs,
            "num_agents": vec.num_agents,
            "threads": vec.num_threads,
            "steps": steps,
            "seconds": elapsed,
            "sps": steps * vec.num_agents / elapsed,
        }


def scaling(
    name: str,
    threads: Iterable[int],
    num_envs: int,
    seconds: float = 2.0,
    progress: Callable[[dict[str, Any]], None] | None = None,
    **params: Any,
) -> list[dict[str, Any]]:
    """Measure at each thread count; add scaling efficiency SPS_T / (T * SPS_1) when T=1 was measured."""
    rows = []
    for t in threads:
        row = measure(name, num_envs=num_envs, num_threads=t, seconds=seconds, **params)
        rows.append(row)
        if progress:
            progress(row)
    base = next((r["sps"] for r in rows if r["threads"] == 1), None)
    for r in rows:
        r["efficiency"] = r["sps"] / (r["threads"] * base) if base else None
    return rows


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """:func:`scaling` rows as table cells: env, agents, threads, M SPS, efficiency."""
    cells = []
    for r in rows:
        eff = "-" if r["efficiency"] is None else f"{100 * r['efficiency']:.0f}%"
        cells.append([r["env"], str(r["num_agents"]), str(r["threads"]), f"{r['sps'] / 1e6:.3f}", eff])
    return cells
