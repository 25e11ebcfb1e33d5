"""From measured figures to a diagnosis: what limits training speed, and which knob to turn.

* :func:`roofline` puts the probe's figures in RL units for one env: the bytes an agent-step moves,
  the agent-steps/s that PCIe, the env threads and the policy forward each allow; the smallest is
  the bottleneck.
* :func:`diagnose_training` reads a training run's phase breakdown, names the phase that dominates
  and suggests the knobs that address it, quoting the figures that led there (with the rollout
  engine's per-buffer shares, :func:`buffer_advice` names the buffer and thread counts to try).
"""

from __future__ import annotations

from typing import Any

# phase sections of appliance.train.timings grouped by what they cost
CATEGORIES = {
    "env": ("evaluate.env",),
    "forward": ("evaluate.forward", "train.forward"),
    "copy": ("evaluate.copy", "train.copy"),
    "learn": ("train.learn",),
    "overhead": ("evaluate.misc", "train.misc"),
}
MEMORY_BOUND = 0.85  # peak GPU memory over total beyond which memory is the constraint


def _rate(value: float) -> str:
    """'1.2M ' style rates, to be followed by the unit."""
    for scale, suffix in ((1e9, "G "), (1e6, "M "), (1e3, "K ")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g} "


def step_bytes(obs_space: Any, action_space: Any, agents: int = 1) -> int:
    """Bytes one agent-step moves between env and policy: obs, action, reward, terminal, truncation."""
    import numpy as np

    obs = int(np.prod(obs_space.shape)) * np.dtype(obs_space.dtype).itemsize
    action = max(1, int(np.prod(action_space.shape or (1,)))) * 4
    return obs + action + 4 + 1 + 1


def roofline(env: str, bytes_per_step: int, limits: dict[str, tuple[float, str]]) -> dict[str, Any]:
    """``limits``: name -> (agent-steps/s it allows, how that figure was obtained)."""
    known = {k: v for k, v in limits.items() if v[0]}
    parts = [f"{name} allows {_rate(v[0])}agent-steps/s ({v[1]})" for name, v in known.items()]
    bottleneck = min(known, key=lambda k: known[k][0]) if known else None
    summary = f"{env}: {bytes_per_step} B/agent-step; " + "; ".join(parts)
    summary += f"; the bottleneck is {bottleneck}." if bottleneck else "; nothing measured."
    return {
        "env": env,
        "bytes_per_step": bytes_per_step,
        "limits": {k: {"sps": v[0], "source": v[1]} for k, v in known.items()},
        "bottleneck": bottleneck,
        "summary": summary,
    }


def diagnose_training(
    env: str,
    shares: dict[str, float],
    sps: float,
    cfg: dict[str, Any],
    figures: dict[str, Any],
) -> dict[str, Any]:
    """``shares``: phase section -> share of wall time; ``figures``: facts for the suggestions
    (bytes_per_step, obs_dtype, env_sps_single, usable_cores, forward_sps, memory_peak, memory_total,
    buffers: the rollout engine's per-buffer shares)."""
    totals = {cat: sum(shares.get(s, 0.0) for s in secs) for cat, secs in CATEGORIES.items()}
    top = max(totals, key=lambda k: totals[k])
    vec, train = cfg.get("vec", {}), cfg.get("train", {})
    pct = {k: f"{100 * v:.0f}%" for k, v in totals.items()}
    breakdown = ", ".join(f"{k} {pct[k]}" for k in sorted(totals, key=lambda k: -totals[k]))
    suggestions: list[str] = []
    # bf16 is a knob only where the run is float32 (auto already picks bf16 where the hardware has it)
    bf16_hint = (
        "use train.precision auto (bfloat16 on a GPU or a CPU with AVX512-BF16/AMX), "
        if train.get("precision", "float32") == "float32"
        else ""
    )
    mem_peak, mem_total = figures.get("memory_peak"), figures.get("memory_total")
    if mem_peak and mem_total and mem_peak / mem_total > MEMORY_BOUND:
        top = "memory"
        suggestions.append(
            f"memory-bound: training peaked at {mem_peak / 2**30:.1f} of {mem_total / 2**30:.1f} GiB GPU memory; "
            f"set train.cpu_offload true (observations in pinned host memory) or lower train.minibatch_size "
            f"(now {train.get('minibatch_size')})"
        )
    if top == "env":
        single = figures.get("env_sps_single")
        cores = figures.get("usable_cores")
        threads = vec.get("num_threads")
        fact = f"; one core steps {_rate(single)}agent-steps/s" if single else ""
        suggestions.append(
            f"env-bound: stepping envs took {pct['env']} of wall time{fact}; raise vec.num_threads "
            f"(now {threads}, {cores} usable cores) or vec.num_workers, or make the env's step cheaper"
        )
    elif top == "forward":
        fwd = figures.get("forward_sps")
        fact = f"; the policy forward alone runs at {_rate(fwd)}agent-steps/s" if fwd else ""
        suggestions.append(
            f"forward-bound: policy forward passes took {pct['forward']}{fact}; raise vec.num_envs "
            f"(now {vec.get('num_envs')}) for bigger batches, " + bf16_hint + "or train.compile true"
        )
    elif top == "copy":
        suggestions.append(
            f"copy-bound: copies took {pct['copy']}; one agent-step moves {figures.get('bytes_per_step')} B "
            f"(obs dtype {figures.get('obs_dtype')}); keep vec.zero_copy true, use a smaller obs dtype "
            f"(uint8 instead of float32) and pinned memory"
        )
    elif top == "learn":
        suggestions.append(
            f"learn-bound: backward passes and optimizer steps took {pct['learn']} (minibatch "
            f"{train.get('minibatch_size')}, {train.get('update_epochs')} update epochs); "
            + bf16_hint
            + "train.compile true on a GPU, fewer train.update_epochs or a larger minibatch"
        )
    elif top == "overhead":
        suggestions.append(
            f"overhead-bound: time outside the named sections took {pct['overhead']} (Python and launch "
            f"overhead); larger batches (vec.num_envs, train.minibatch_size) amortize it, CUDA graphs remove it"
        )
    suggestions += buffer_advice(top, figures.get("buffers") or [], vec, train)
    summary = f"{env} trains at {_rate(sps)}agent-steps/s; time went to {breakdown}. The bottleneck is {top}."
    return {
        "env": env,
        "bottleneck": top,
        "categories": totals,
        "summary": summary,
        "suggestions": suggestions,
    }


GIL_BOUND = (
    0.10  # share of wall time the engine's buffers waited for the Python lock beyond which it is named
)


def buffer_advice(
    top: str, buffers: list[dict[str, float]], vec: dict[str, Any], train: dict[str, Any]
) -> list[str]:
    """What the rollout engine's buffer and thread counts can do about the bottleneck ``top``.
    ``buffers``: per buffer the share of wall time in its policy step, GIL wait and env step (empty
    when the plain loop ran)."""
    if not buffers:
        if top in ("env", "forward") and vec.get("backend") == "native" and train.get("engine") == "off":
            return [
                "the rollout ran the plain Python loop (train.engine off): train.engine auto steps native envs "
                "in C threads, in train.buffers groups that overlap env steps with policy steps"
            ]
        return []
    count = len(buffers)
    mean = {k: sum(b.get(k, 0.0) for b in buffers) / count for k in ("policy", "gil", "env")}
    fact = (
        f"each of the {count} rollout buffer(s) spent {100 * mean['policy']:.0f}% of wall time in its policy step, "
        f"{100 * mean['env']:.0f}% stepping envs and {100 * mean['gil']:.0f}% waiting for the GIL"
    )
    gpu = train.get("device") == "cuda"
    out = []
    if mean["gil"] > GIL_BOUND:
        out.append(
            f"GIL-bound: {fact}; use fewer train.buffers (now {count}) or CUDA graphs (no Python per step)"
        )
    elif top == "env":
        out.append(
            f"{fact}; raise train.buffers (now {count}, e.g. {2 * count}) so one buffer's env step overlaps "
            f"another's policy step, and vec.num_threads (now {vec.get('num_threads')}, shared out over the buffers)"
        )
    elif top == "forward":
        out.append(
            f"{fact}; "
            + (
                f"raise train.buffers (now {count}, e.g. {2 * count}): each buffer's policy runs on its own CUDA "
                "stream while the others step envs"
                if gpu
                else "on a CPU the buffers' policy steps share the cores: train.buffers 1 unless env steps "
                "take about as long as policy steps"
            )
        )
    return out


# ----------------------------------------------------------------------------- from a report


def _ocean_spaces(env: str, cfg: Any) -> tuple[Any, Any] | None:
    """Observation and action space of an Ocean env (None for other envs)."""
    from appliance import ocean
    from appliance.vector.sources import resolve_source

    if env not in ocean.names():
        return None
    source = resolve_source(env, **dict(cfg.env))
    return source.observation_space, source.action_space


def roofline_from_report(env: str, cfg: Any, report: dict[str, Any]) -> dict[str, Any]:
    """The roofline of a probed Ocean env from every figure a suite measured into ``report``."""
    import torch

    obs_space, action_space = _ocean_spaces(env, cfg) or (None, None)
    nbytes = step_bytes(obs_space, action_space)
    limits: dict[str, tuple[float, str]] = {}
    metrics = report["metrics"]
    pinned = [m for n, m in metrics.items() if n.startswith("probe/gpu/h2d_pinned/") and m.get("median")]
    if pinned:
        best = max(m["median"] for m in pinned)
        limits["PCIe"] = (best * 1e9 / nbytes, f"best pinned host-to-device copy, {best:.1f} GB/s")
    env_rows = [m for n, m in metrics.items() if n.startswith(f"env_sps/{env}/") and m.get("median")]
    single = metrics.get(f"probe/cpu/env_step/{env}", {}).get("median")
    if env_rows:
        best_row = max(env_rows, key=lambda m: m["median"])
        limits["env threads"] = (best_row["median"], f"measured at {best_row['labels']['threads']} threads")
    elif single:
        cores = report["fingerprint"]["cpu"].get("usable_cores") or 1
        limits["env threads"] = (
            single * cores,
            f"one core's {single / 1e6:.3g} M x {cores} cores, estimated",
        )
    device = "gpu" if torch.cuda.is_available() else "cpu"
    fwd = metrics.get(f"probe/{device}/policy_forward/{env}", {})
    if fwd.get("median"):
        limits["policy forward"] = (
            fwd["median"],
            f"{fwd['labels']['core']} policy, batch {fwd['labels']['batch']} on the {device.upper()}",
        )
    train = metrics.get(f"train_sps/{env}", {})
    learn = metrics.get(f"train_phase/{env}/train.learn", {})
    if train.get("median") and learn.get("median"):
        limits["PPO update"] = (
            train["median"] / learn["median"],
            f"training ran {train['median'] / 1e3:.3g}K agent-steps/s with {100 * learn['median']:.0f}% "
            "of its time in backward passes and optimizer steps",
        )
    return roofline(env, nbytes, limits)


def diagnosis_from_report(env: str, cfg: Any, report: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The training diagnosis of ``env`` from a suite's phase shares and probe figures; ``run`` holds
    the last training measurement's memory figures."""
    metrics = report["metrics"]
    shares = {
        m["labels"]["phase"]: m["median"] for n, m in metrics.items() if n.startswith(f"train_phase/{env}/")
    }
    figures: dict[str, Any] = {
        "memory_peak": run.get("memory_peak"),
        "memory_total": run.get("memory_total"),
        "usable_cores": report["fingerprint"]["cpu"].get("usable_cores"),
        "env_sps_single": (metrics.get(f"probe/cpu/env_step/{env}") or {}).get("median"),
        "forward_sps": (
            metrics.get(f"probe/gpu/policy_forward/{env}")
            or metrics.get(f"probe/cpu/policy_forward/{env}")
            or {}
        ).get("median"),
    }
    buffers: dict[int, dict[str, float]] = {}
    for n, m in metrics.items():
        if n.startswith(f"train_buffer/{env}/"):
            buffers.setdefault(int(m["labels"]["buffer"]), {})[m["labels"]["part"]] = m["median"]
    figures["buffers"] = [buffers[b] for b in sorted(buffers)]
    spaces = _ocean_spaces(env, cfg)
    if spaces is not None:
        figures["bytes_per_step"] = step_bytes(*spaces)
        figures["obs_dtype"] = str(spaces[0].dtype)
    return diagnose_training(env, shares, metrics[f"train_sps/{env}"]["median"], cfg.to_dict(), figures)
