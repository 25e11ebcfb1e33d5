"""Autotune: measure one env, time candidate vector configurations, keep the fastest.

1. Profile the env: agent-steps/s on one core, step-time variance, reset cost, RAM per env and the
   observation bandwidth it implies.
2. Build candidates (backend, num_envs, num_workers or threads, batch_size, zero_copy) that fit the
   cores and ``max_ram_gb``, time each with :func:`appliance.bench.vecsps.measure` (optionally
   spending ``forward_ms`` per batch to stand in for the policy), and pick the highest SPS.
3. On a GPU machine (or when asked with ``--buffers``), for a native Ocean winner: time the rollout
   engine's ``Trainer.evaluate`` with 1, 2, 4 and 8 buffers (``train.buffers``, those that divide
   num_envs) under the hardware profile's trainer settings, and keep the fastest (:func:`tune_buffers`).
   On a CPU the buffers' policy steps share the cores with the envs, so nothing is tried there unless asked.
4. Write the winner as a YAML profile that ``--config`` accepts.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil
import yaml

from appliance import ocean
from appliance.bench.vecsps import action_sets, measure
from appliance.config import RANGES
from appliance.errors import ConfigError


def profile_env(env: Any, params: dict[str, Any], seconds: float = 0.5) -> dict[str, Any]:
    """Speed, variance, reset cost, memory and bandwidth of one env (measured, not looked up)."""
    from appliance import vector

    out: dict[str, Any] = {}
    name = ocean.ocean_name(env)
    if name is not None:
        info = ocean.describe(name, **params)
        itemsize = 4 if info["obs_dtype"] == "float32" else 1
        obs_bytes = info["obs_size"] * itemsize * info["agents_per_env"]
        row_bytes = obs_bytes + info["agents_per_env"] * (4 * len(info["action_nvec"]) + 4 + 2)
        out["ram_per_env_bytes"] = info["env_bytes"] + row_bytes
        one_core = vector.make(name, backend="native", num_envs=256, num_threads=1, **params)
        single = vector.make(name, backend="native", num_envs=1, num_threads=1, **params)
    else:
        out["ram_per_env_bytes"] = _python_env_ram(env)
        one_core = vector.make(env, backend="serial", num_envs=8)
        single = vector.make(env, backend="serial", num_envs=1)
        obs_bytes = (
            int(np.prod(one_core.single_observation_space.shape))
            * one_core.single_observation_space.dtype.itemsize
        )
        obs_bytes *= one_core.agents_per_env
    try:
        m = measure(one_core, seconds=seconds)
        out["sps_per_core"] = m.sps
        actions = action_sets(single.single_action_space, single.agents_per_batch, count=8)
        single.reset(0)
        times = []
        for i in range(300):
            t = time.perf_counter()
            single.step(actions[i % 8])
            times.append(time.perf_counter() - t)
        times_arr = np.asarray(times[20:])
        out["step_us_mean"] = float(times_arr.mean() * 1e6)
        out["step_time_cv"] = float(times_arr.std() / times_arr.mean())
        t = time.perf_counter()
        for i in range(10):
            single.reset(i)
        out["reset_ms"] = (time.perf_counter() - t) / 10 * 1e3
    finally:
        one_core.close()
        single.close()
    out["obs_bytes_per_env_step"] = obs_bytes
    out["obs_mb_per_s_per_core"] = obs_bytes * out["sps_per_core"] / max(1, one_core.agents_per_env) / 1e6
    return out


def _python_env_ram(env: Any, count: int = 32) -> float:
    """RSS growth per env when ``count`` envs are created in this process (a measured estimate)."""
    from appliance import vector

    gc.collect()
    before = psutil.Process().memory_info().rss
    vec = vector.make(env, backend="serial", num_envs=count)
    after = psutil.Process().memory_info().rss
    vec.close()
    return max(after - before, 0) / count


def candidates(
    env: Any, cores: int, batch_size: int | None, max_ram_bytes: float, ram_per_env: float
) -> list[dict[str, Any]]:
    """Configurations worth timing on this machine, within RAM; the trainer's batch size if given."""
    c = max(1, cores)
    workers = sorted({w for w in (1, 2, 4, 8, 16, 32, c) if w <= c})
    out: list[dict[str, Any]] = []
    if ocean.ocean_name(env) is not None:
        sizes = [batch_size] if batch_size else [1024, 4096, 16384]
        for n in sizes:
            for t in workers:
                if t <= n:
                    out.append(
                        {
                            "backend": "native",
                            "num_envs": n,
                            "num_threads": t,
                            "batch_size": n,
                            "zero_copy": True,
                        }
                    )
        for n in sizes:
            if n % c == 0:
                out.append(
                    {
                        "backend": "multiprocessing",
                        "num_envs": n,
                        "num_workers": c,
                        "batch_size": n,
                        "zero_copy": True,
                    }
                )
    else:
        per_worker = [1, 4, 16]
        for w in workers:
            for k in per_worker:
                n = w * k
                if batch_size and n not in (batch_size, 2 * batch_size):
                    continue
                out.append(
                    {
                        "backend": "multiprocessing",
                        "num_envs": n,
                        "num_workers": w,
                        "batch_size": batch_size or n,
                        "zero_copy": True,
                    }
                )
                if w % 2 == 0 and not batch_size:
                    out.append(
                        {
                            "backend": "multiprocessing",
                            "num_envs": 2 * n,
                            "num_workers": w,
                            "batch_size": n,
                            "zero_copy": True,
                        }
                    )
        for n in [batch_size] if batch_size else [4, 16]:
            out.append({"backend": "serial", "num_envs": n, "batch_size": n, "zero_copy": False})
    fitting = [cand for cand in out if cand["num_envs"] * ram_per_env <= max_ram_bytes]
    if not fitting:
        n = min(cand["num_envs"] for cand in out)
        raise ConfigError(
            f"no configuration fits --max-ram-gb {max_ram_bytes / 2**30:g}: the smallest, {n:,} envs, needs "
            f"{n * ram_per_env / 2**30:.3g} GiB at {ram_per_env / 2**20:.3g} MiB an env; give a smaller "
            "--batch-size or a larger --max-ram-gb"
        )
    return fitting


def time_candidate(
    env: Any, params: dict[str, Any], cand: dict[str, Any], seconds: float, forward_ms: float
) -> float:
    from appliance import vector

    kwargs = {k: v for k, v in cand.items() if k != "backend"}
    vec = vector.make(
        ocean.ocean_name(env) or env,
        backend=cand["backend"],
        overwork=False,
        **kwargs,
        **(params if ocean.ocean_name(env) else {}),
    )
    try:
        return measure(vec, seconds=seconds, forward_s=forward_ms / 1e3).sps
    finally:
        vec.close()


def tune(
    env: Any,
    params: dict[str, Any],
    cores: int,
    seconds: float,
    batch_size: int | None,
    max_ram_gb: float,
    forward_ms: float,
    on_profile: Callable[[dict[str, Any]], None] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Profile, time every candidate, and return {profile, results, best}."""
    profile = profile_env(env, params, seconds=min(seconds, 0.5))
    if on_profile:
        on_profile(profile)
    cands = candidates(env, cores, batch_size, max_ram_gb * 2**30, profile["ram_per_env_bytes"])
    results = []
    for cand in cands:
        try:
            sps = time_candidate(env, params, cand, seconds, forward_ms)
            row = {**cand, "sps": sps}
        except ConfigError as e:  # a rule the candidate broke on this machine: report, go on
            row = {**cand, "sps": None, "error": str(e)}
        results.append(row)
        if on_result:
            on_result(row)
    timed = [r for r in results if r["sps"]]
    if not timed:
        raise ConfigError("no candidate configuration could be timed")
    best = max(timed, key=lambda r: r["sps"])
    return {"profile": profile, "results": results, "best": best}


BUFFER_COUNTS = (1, 2, 4, 8)


def buffer_counts(spec: str | list[int], cuda: bool) -> list[int]:
    """``--buffers``: ``auto`` (1, 2, 4, 8 on a CUDA machine, none on a CPU), ``none``, or a list ``1,2,4``
    (as text, or as the CLI parsed it); a count outside ``train.buffers``' range is refused."""
    text = spec.strip().lower() if isinstance(spec, str) else ""
    if text == "auto":
        return list(BUFFER_COUNTS) if cuda else []
    if text == "none":
        return []
    try:
        counts = sorted({int(x) for x in text.split(",")}) if isinstance(spec, str) else sorted(set(spec))
    except ValueError:
        raise ConfigError(
            f"--buffers {spec!r}: expected auto, none or a list of counts such as 1,2,4"
        ) from None
    valid = RANGES[("train", "buffers")]
    if not counts or not all(valid.contains(c) for c in counts):
        raise ConfigError(f"--buffers {spec!r}: buffer counts must be ints {valid}")
    return counts


def fitting_minibatch(env: str, params: dict[str, Any], vec: dict[str, Any], profile: str) -> dict[str, int]:
    """``train`` keys that let an Ocean env's trainer take a batch of ``vec``'s envs: with
    ``batch_size auto`` (envs x agents x horizon), a minibatch that does not divide that batch (64
    breakout envs against breakout.ini's 32,768) is cut to the largest that does, so the tuned config
    trains as it is. Empty where nothing needs changing (or the env is not Ocean)."""
    from appliance import ocean
    from appliance.config import resolve

    name = ocean.ocean_name(env)
    if name is None or "num_envs" not in vec:
        return {}
    t = resolve(
        name, profile=profile, overrides={"vec": {"num_envs": vec["num_envs"]}, "env": dict(params)}
    ).train
    if t.batch_size != "auto":
        return {}
    segments = int(vec["num_envs"]) * ocean.describe(name, **params)["agents_per_env"]
    if t.minibatch_size % t.bptt_horizon == 0 and (segments * t.bptt_horizon) % t.minibatch_size == 0:
        return {}
    most = max(t.minibatch_size // t.bptt_horizon, 1)  # segments a minibatch may hold
    mb = max(d for d in range(1, min(segments, most) + 1) if segments % d == 0) * t.bptt_horizon
    return {"minibatch_size": mb, "max_minibatch_size": min(mb, t.max_minibatch_size)}


def tune_buffers(
    env: str,
    params: dict[str, Any],
    vec: dict[str, Any],
    counts: list[int],
    profile: str,
    seconds: float,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any] | None:
    """Rollout agent-steps/s of ``Trainer.evaluate`` through the engine with each buffer count that
    divides ``vec['num_envs']`` (one warm-up epoch, then epochs for about ``seconds``); the best row."""
    from appliance import vector
    from appliance.config import resolve
    from appliance.train import Trainer

    rows = []
    for count in counts:
        if vec["num_envs"] % count:
            continue
        layer = {
            "vec": {k: vec[k] for k in ("backend", "num_envs", "num_threads") if k in vec},
            "train": {"engine": "on", "buffers": count, **fitting_minibatch(env, params, vec, profile)},
            "env": dict(params),
        }
        cfg = resolve(env, profile=profile, overrides=layer)
        trainer = Trainer(cfg, vector.make_from_config(cfg))
        try:
            trainer.evaluate()  # warm-up: allocator, kernels
            start, steps = time.perf_counter(), trainer.global_step
            while True:
                trainer.evaluate()
                elapsed = time.perf_counter() - start
                if elapsed >= seconds:
                    break
            row = {
                "buffers": count,
                "sps": (trainer.global_step - steps) / elapsed,
                "threads": trainer.engine.threads,
            }
        finally:
            trainer.close()
        rows.append(row)
        if on_result:
            on_result(row)
    return max(rows, key=lambda r: r["sps"]) if rows else None


def profile_yaml(
    env: Any,
    best: dict[str, Any],
    forward_ms: float,
    cpu: str | None,
    buffers: dict[str, Any] | None = None,
    train: dict[str, Any] | None = None,
) -> str:
    """The winner as a config layer for ``--config``: the vec section, ``train`` keys it needs
    (``train.buffers`` when :func:`tune_buffers` ran, a minibatch that fits the winner's batch from
    :func:`fitting_minibatch`) and a descriptive header."""
    vec = {
        k: best[k]
        for k in ("backend", "num_envs", "num_workers", "num_threads", "batch_size", "zero_copy")
        if k in best
    }
    doc: dict[str, Any] = {
        "profile": {
            "description": f"autotuned for {env} on {cpu or 'this CPU'}: {best['sps']:.0f} agent-steps/s measured"
            + (f" with {forward_ms:g} ms simulated policy time per batch" if forward_ms else "")
            + (
                f"; rollout {buffers['sps']:.0f} agent-steps/s with {buffers['buffers']} engine buffers"
                if buffers
                else ""
            ),
            "gpu": "",
        },
        "vec": vec,
    }
    train = {**(train or {}), **({"buffers": buffers["buffers"]} if buffers else {})}
    if train:
        doc["train"] = train
    header = f"# written by puffer-bench autotune {env} on {time.strftime('%Y-%m-%d', time.gmtime())}\n"
    return header + yaml.safe_dump(doc, sort_keys=False)


def profile_line(env: str, p: dict[str, Any]) -> str:
    """One line on the env's own cost, printed before the candidates are timed."""
    return (
        f"[bold]{env}[/]: {p['sps_per_core']:,.0f} agent-steps/s on one core; step {p['step_us_mean']:.1f} us "
        f"(CV {p['step_time_cv']:.2f}); reset {p['reset_ms']:.3f} ms; {p['ram_per_env_bytes'] / 1024:.1f} KiB per env; "
        f"obs {p['obs_bytes_per_env_step']} B per env-step = {p['obs_mb_per_s_per_core']:.1f} MB/s per core"
    )


def candidate_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Timed candidates as table cells; the fastest is starred."""
    best = max((r["sps"] for r in rows if r["sps"]), default=None)
    cells = []
    for r in rows:
        sps = "error" if r["sps"] is None else f"{r['sps']:,.0f}" + (" *" if r["sps"] == best else "")
        workers = str(r.get("num_workers", r.get("num_threads", 1)))
        cells.append([r["backend"], str(r["num_envs"]), workers, str(r["batch_size"]), sps])
    return cells


def best_line(best: dict[str, Any]) -> str:
    kind = "threads" if best["backend"] == "native" else "workers"
    count = best.get("num_threads", best.get("num_workers", 1))
    return (
        f"fastest: {best['backend']} num_envs={best['num_envs']} {kind}={count} "
        f"batch_size={best['batch_size']}: {best['sps']:,.0f} agent-steps/s"
    )
