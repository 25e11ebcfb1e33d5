"""From measured figures to a diagnosis: what limits training speed, and which knob to turn.

* :func:`roofline` puts the probe's figures in RL units for one env: the bytes an agent-step moves,
  the agent-steps/s that PCIe, the env threads and the policy forward each allow; the smallest is
  the bottleneck.
* :func:`diagnose_training` reads a training run's phase breakdown, names the phase that dominates
  and suggests the knobs that address it, quoting the figures that led there (with the rollout
  engine's per-buffer shares, :func:`buffer_advice` names the buffer and thread counts to try).
  Work replayed as CUDA graphs is its own phase ("graphed update", "graphed rollout"), never
  "overhead"; reports older than that timing get it from :func:`graphed_shares`.

The advice fits the machine the run trained on (:class:`Machine`): GPU knobs (CUDA graphs,
``train.compile``, larger minibatches, pinned memory, buffers on streams) only where it trained on
CUDA, bf16 only where the hardware computes it; it never names a knob already set (graphs, compile,
precision, cpu_offload, zero_copy, the engine) nor a value below the schema's minimum (fewer than 1
update epoch: a replay ratio below 1 instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appliance.bench import metrics as reg
from appliance.config.schema import RANGES
from appliance.sysinfo.cpu import bf16_units

if TYPE_CHECKING:
    from appliance.config import Config

# phase sections of appliance.train.timings grouped by what they cost
CATEGORIES = {
    "env": ("evaluate.env",),
    "forward": ("evaluate.forward", "train.forward"),
    "copy": ("evaluate.copy", "train.copy"),
    "learn": ("train.learn",),
    "graphed update": ("train.graphed",),  # the update's minibatches replayed as CUDA graphs
    "graphed rollout": ("evaluate.graphed",),  # the rollout engine's policy steps as CUDA graphs
    "overhead": ("evaluate.misc", "train.misc"),
}
MEMORY_BOUND = 0.85  # peak GPU memory over total beyond which memory is the constraint
BATCH_GAIN = 1.1  # the forward at twice the batch must run this much faster for "more envs" to be advice
MIN_UPDATE_EPOCHS = int(RANGES[("train", "update_epochs")].low or 1)  # the schema's minimum


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


@dataclass(frozen=True)
class Machine:
    """What the advice may name: the run's device (GPU knobs only where it trained on CUDA) and
    whether this CPU has bfloat16 instructions (``precision auto`` picks bf16 only there)."""

    gpu: bool
    cpu_bf16: bool
    cores: int | None

    @staticmethod
    def of(train: dict[str, Any], figures: dict[str, Any]) -> Machine:
        device = str(train.get("device", "auto"))
        gpu = device == "cuda" or (device == "auto" and bool(figures.get("cuda_available")))
        return Machine(gpu, bool(figures.get("cpu_bf16")), figures.get("usable_cores"))


def _passes(train: dict[str, Any]) -> float | None:
    """Passes over the batch per epoch: ``replay_ratio``, or ``update_epochs`` when it is auto."""
    ratio = train.get("replay_ratio", "auto")
    value = train.get("update_epochs") if ratio in ("auto", None) else ratio
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _fewer_passes(train: dict[str, Any]) -> str:
    """The knob that makes the update cheaper per agent-step by replaying the batch less, never a
    value the run already has or one below the schema's minimum."""
    passes = _passes(train)
    if train.get("replay_ratio", "auto") not in ("auto", None) and passes is not None:
        return f"a lower train.replay_ratio (now {passes:g} passes over the batch)"
    epochs = train.get("update_epochs")
    if not isinstance(epochs, int):
        return "fewer passes over the batch (train.update_epochs, or train.replay_ratio below it)"
    if epochs > MIN_UPDATE_EPOCHS:
        return f"fewer train.update_epochs (now {epochs})"
    return (
        f"train.replay_ratio below 1 (train.update_epochs is {epochs}, its minimum: one pass over the batch; "
        "fewer minibatches trade sample reuse for speed)"
    )


def _precision_hint(train: dict[str, Any], machine: Machine) -> str | None:
    """bf16 is a knob only where the run is float32 and this machine computes bf16 natively."""
    if train.get("precision", "float32") != "float32":
        return None
    if machine.gpu:
        return "train.precision auto (bfloat16 where this GPU has it)"
    if machine.cpu_bf16:
        return "train.precision auto (bfloat16: this CPU has AVX512-BF16/AMX)"
    return None


def _graphs_hint(train: dict[str, Any], machine: Machine) -> str | None:
    """CUDA graphs or torch.compile, on a GPU only and only where neither is on (compile makes
    graphs of its own, so it is named only where train.graphs is off too)."""
    if not machine.gpu or train.get("compile"):
        return None
    if not train.get("graphs"):
        return "train.graphs true (minibatches and rollout policy steps as CUDA graphs) or train.compile true"
    return None


def _larger_minibatch(cfg: dict[str, Any]) -> str | None:
    """Fewer, larger kernels per epoch (GPU): the minibatch's chunks first, then the minibatch, up to
    the batch (at least ``num_envs x bptt_horizon``)."""
    vec, train = cfg.get("vec", {}), cfg.get("train", {})
    mb, chunk = train.get("minibatch_size"), train.get("max_minibatch_size")
    if isinstance(mb, int) and isinstance(chunk, int) and chunk < mb:
        return f"a larger train.max_minibatch_size (now {chunk}: each minibatch of {mb} runs in chunks)"
    batch = train.get("batch_size")
    if not isinstance(batch, int):
        envs, horizon = vec.get("num_envs"), train.get("bptt_horizon")
        batch = envs * horizon if isinstance(envs, int) and isinstance(horizon, int) else None
    if not isinstance(mb, int) or (batch is not None and mb >= batch):
        return None
    return f"a larger train.minibatch_size (now {mb}: fewer, larger kernels)"


def _join(parts: list[str | None]) -> str:
    kept = [p for p in parts if p]
    return ", ".join(kept[:-1]) + (" or " if len(kept) > 1 else "") + kept[-1] if kept else ""


def _advice(top: str, pct: dict[str, str], cfg: dict[str, Any], figures: dict[str, Any], m: Machine) -> str:
    """The one line for the bottleneck ``top``: the figures that led there and the knobs that fit
    this machine and are not already set."""
    vec, train, policy = cfg.get("vec", {}), cfg.get("train", {}), cfg.get("policy", {})
    if top == "env":
        single, threads = figures.get("env_sps_single"), vec.get("num_threads")
        fact = f"; one core steps {_rate(single)}agent-steps/s" if single else ""
        at_cores = threads == "auto" or (isinstance(threads, int) and bool(m.cores) and threads >= m.cores)
        cores = f", {m.cores} usable cores" if m.cores else ""
        knob = (
            f"vec.num_threads already uses every usable core ({m.cores}): make the env's step cheaper or "
            "use a machine with more cores"
            if at_cores and m.cores
            else f"raise vec.num_threads (now {threads}{cores}) or vec.num_workers, or make the env's step cheaper"
        )
        return f"env-bound: stepping envs took {pct['env']} of wall time{fact}; {knob}"
    if top == "forward":
        fwd, fwd_2x = figures.get("forward_sps"), figures.get("forward_sps_2x")
        fact = f"; the policy forward alone runs at {_rate(fwd)}agent-steps/s" if fwd else ""
        more_envs: str | None = f"raise vec.num_envs (now {vec.get('num_envs')}) for bigger batches"
        smaller = None
        if fwd and fwd_2x:  # the probe measured what a batch twice as big does on this machine
            fact += f", {_rate(fwd_2x)}at twice the batch"
            if fwd_2x < BATCH_GAIN * fwd:
                fact += " (a bigger batch does not make it faster here)"
                more_envs = None
                hidden = policy.get("hidden_size")
                smaller = (
                    f"a smaller policy (policy.hidden_size now {hidden})" if hidden else "a smaller policy"
                )
            else:
                more_envs = f"raise vec.num_envs (now {vec.get('num_envs')}): twice the batch ran faster"
        knobs = _join([more_envs, _precision_hint(train, m), _graphs_hint(train, m), smaller])
        return f"forward-bound: policy forward passes took {pct['forward']}{fact}; {knobs}"
    if top == "copy":
        knobs = (
            _join(
                [
                    None if vec.get("zero_copy", True) else "vec.zero_copy true",
                    f"a smaller obs dtype (uint8 instead of {figures.get('obs_dtype')})"
                    if figures.get("obs_dtype") not in (None, "uint8", "int8")
                    else None,
                    "pinned host memory (train.cpu_offload keeps observations there)"
                    if m.gpu and not train.get("cpu_offload")
                    else None,
                ]
            )
            or "fewer bytes per agent-step from the env"
        )
        return (
            f"copy-bound: copies took {pct['copy']}; one agent-step moves {figures.get('bytes_per_step')} B "
            f"(obs dtype {figures.get('obs_dtype')}); {knobs}"
        )
    if top == "learn":
        knobs = _join(
            [
                _precision_hint(train, m),
                _graphs_hint(train, m),
                "train.compile true" if m.gpu and train.get("graphs") and not train.get("compile") else None,
                _fewer_passes(train),
                _larger_minibatch(cfg) if m.gpu else None,
            ]
        )
        return (
            f"learn-bound: backward passes and optimizer steps took {pct['learn']} (minibatch "
            f"{train.get('minibatch_size')}, {train.get('update_epochs')} update epochs); {knobs}"
        )
    if top == "graphed update":
        knobs = _join(
            [
                _precision_hint(train, m),
                _fewer_passes(train),
                _larger_minibatch(cfg),
                f"a smaller policy (policy.hidden_size now {policy.get('hidden_size')})"
                if policy.get("hidden_size")
                else None,
            ]
        )
        return (
            f"graphed-update-bound: the update, one CUDA graph replayed per minibatch, took {pct['graphed update']} "
            f"of wall time; its launches are already gone, what is left is its work: {knobs}"
        )
    if top == "graphed rollout":
        knobs = _join(
            [
                _precision_hint(train, m),
                f"raise vec.num_envs (now {vec.get('num_envs')}) for bigger batches per graph",
                f"a smaller policy (policy.hidden_size now {policy.get('hidden_size')})"
                if policy.get("hidden_size")
                else None,
            ]
        )
        return (
            f"graphed-rollout-bound: the rollout's policy steps, one CUDA graph per buffer and step, took "
            f"{pct['graphed rollout']} of wall time; {knobs}"
        )
    # overhead: time outside every named section (Python, launches, waits)
    graphs = _graphs_hint(train, m)
    tail = f"; {graphs} removes the launches" if graphs else ""
    return (
        f"overhead-bound: time outside the named sections took {pct['overhead']} (Python and launch overhead); "
        f"larger batches (vec.num_envs, train.minibatch_size) amortize it{tail}"
    )


def diagnose_training(
    env: str,
    shares: dict[str, float],
    sps: float,
    cfg: dict[str, Any],
    figures: dict[str, Any],
) -> dict[str, Any]:
    """``shares``: phase section -> share of wall time; ``figures``: facts for the suggestions
    (bytes_per_step, obs_dtype, env_sps_single, usable_cores, forward_sps, memory_peak, memory_total,
    buffers: the rollout engine's per-buffer shares; cuda_available and cpu_bf16: the machine, so
    the advice names only knobs that exist there)."""
    totals = {cat: sum(shares.get(s, 0.0) for s in secs) for cat, secs in CATEGORIES.items()}
    top = max(totals, key=lambda k: totals[k])
    vec, train = cfg.get("vec", {}), cfg.get("train", {})
    machine = Machine.of(train, figures)
    pct = {k: f"{100 * v:.0f}%" for k, v in totals.items()}
    shown = [k for k in sorted(totals, key=lambda k: -totals[k]) if totals[k] > 0] or [top]
    breakdown = ", ".join(f"{k} {pct[k]}" for k in shown)
    suggestions: list[str] = []
    mem_peak, mem_total = figures.get("memory_peak"), figures.get("memory_total")
    if mem_peak and mem_total and mem_peak / mem_total > MEMORY_BOUND:
        top = "memory"
        offload = (
            None
            if train.get("cpu_offload")
            else "set train.cpu_offload true (observations in pinned host memory)"
        )
        suggestions.append(
            f"memory-bound: training peaked at {mem_peak / 2**30:.1f} of {mem_total / 2**30:.1f} GiB GPU memory; "
            + _join([offload, f"lower train.minibatch_size (now {train.get('minibatch_size')})"])
        )
    else:
        suggestions.append(_advice(top, pct, cfg, figures, machine))
    suggestions += buffer_advice(top, figures.get("buffers") or [], vec, train)
    name = f"the {top}" if top.startswith("graphed") else top
    summary = (
        f"{env} trains at {_rate(sps)}agent-steps/s; time went to {breakdown}. The bottleneck is {name}."
    )
    return {
        "env": env,
        "bottleneck": top,
        "categories": totals,
        "summary": summary,
        "suggestions": suggestions,
    }


def graphed_shares(
    shares: dict[str, float], train: dict[str, Any], buffers: list[dict[str, float]]
) -> dict[str, float]:
    """Phase shares with graphed work under its own name, for reports written before the trainer
    timed it (no ``*.graphed`` share). A replayed graph runs none of the eager sections, so a run on
    CUDA with ``train.graphs`` whose update sections all read 0 spent its ``train.misc`` in the
    graphed update, and one whose engine buffers never copied (the eager policy step always does)
    spent its rollout ``forward`` in graphed policy steps."""
    if (
        any(k.endswith(".graphed") for k in shares)
        or train.get("device") != "cuda"
        or not train.get("graphs")
    ):
        return shares
    if train.get("compile"):
        return shares  # torch.compile's own graphs: the trainer captures none
    out = dict(shares)
    if not any(shares.get(f"train.{s}", 0.0) for s in ("forward", "learn", "copy")):
        out["train.graphed"], out["train.misc"] = shares.get("train.misc", 0.0), 0.0
    if buffers and not any(b.get("copy", 0.0) for b in buffers):
        out["evaluate.graphed"] = shares.get("evaluate.forward", 0.0) + shares.get("evaluate.copy", 0.0)
        out["evaluate.forward"] = out["evaluate.copy"] = 0.0
    return out


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
        graphs = " or train.graphs true (no Python per step)" if gpu and not train.get("graphs") else ""
        out.append(f"GIL-bound: {fact}; use fewer train.buffers (now {count}){graphs}")
    elif top == "env":
        out.append(
            f"{fact}; raise train.buffers (now {count}, e.g. {2 * count}) so one buffer's env step overlaps "
            f"another's policy step, and vec.num_threads (now {vec.get('num_threads')}, shared out over the buffers)"
        )
    elif top == "forward" and gpu:
        out.append(
            f"{fact}; raise train.buffers (now {count}, e.g. {2 * count}): each buffer's policy runs on its own "
            "CUDA stream while the others step envs"
        )
    elif top == "forward" and count > 1:  # (one buffer on a CPU is already the advice)
        out.append(
            f"{fact}; on a CPU the buffers' policy steps share the cores: train.buffers 1 unless env steps "
            "take about as long as policy steps"
        )
    return out


# ----------------------------------------------------------------------------- from a report


def _ocean_spaces(env: str, cfg: Config) -> tuple[Any, Any] | None:
    """Observation and action space of an Ocean env (None for other envs)."""
    from appliance import ocean
    from appliance.vector.sources import resolve_source

    if env not in ocean.names():
        return None
    source = resolve_source(env, **dict(cfg.env))
    return source.observation_space, source.action_space


def roofline_from_report(env: str, cfg: Config, report: dict[str, Any]) -> dict[str, Any]:
    """The roofline of a probed Ocean env from every figure a suite measured into ``report``."""
    import torch

    obs_space, action_space = _ocean_spaces(env, cfg) or (None, None)
    nbytes = step_bytes(obs_space, action_space)
    limits: dict[str, tuple[float, str]] = {}
    metrics = report["metrics"]
    pinned = [m for _, m in reg.below(metrics, reg.PROBE_GPU, "h2d_pinned") if m.get("median")]
    if pinned:
        best = max(m["median"] for m in pinned)
        limits["PCIe"] = (best * 1e9 / nbytes, f"best pinned host-to-device copy, {best:.1f} GB/s")
    env_rows = [m for _, m in reg.below(metrics, reg.ENV_SPS, env) if m.get("median")]
    single = metrics.get(reg.PROBE_CPU.name("env_step", env), {}).get("median")
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
    fwd = metrics.get((reg.PROBE_GPU if device == "gpu" else reg.PROBE_CPU).name("policy_forward", env), {})
    if fwd.get("median"):
        limits["policy forward"] = (
            fwd["median"],
            f"{fwd['labels']['core']} policy, batch {fwd['labels']['batch']} on the {device.upper()}",
        )
    train = metrics.get(reg.TRAIN_SPS.name(env), {})
    shares = phase_shares(env, cfg.to_dict().get("train", {}), report)
    learn = shares.get("train.learn", 0.0) + shares.get("train.graphed", 0.0)
    if train.get("median") and learn:
        how = (
            "replaying the update's CUDA graphs"
            if shares.get("train.graphed")
            else "in backward passes and optimizer steps"
        )
        limits["PPO update"] = (
            train["median"] / learn,
            f"training ran {train['median'] / 1e3:.3g}K agent-steps/s with {100 * learn:.0f}% of its time {how}",
        )
    return roofline(env, nbytes, limits)


def _buffer_shares(env: str, metrics: dict[str, Any]) -> list[dict[str, float]]:
    """Per rollout-engine buffer its shares (policy, copy, gil, env) from ``train_buffer/<env>/`` metrics."""
    buffers: dict[int, dict[str, float]] = {}
    for _, m in reg.below(metrics, reg.TRAIN_BUFFER, env):
        buffers.setdefault(int(m["labels"]["buffer"]), {})[m["labels"]["part"]] = m["median"]
    return [buffers[b] for b in sorted(buffers)]


def phase_shares(env: str, train: dict[str, Any], report: dict[str, Any]) -> dict[str, float]:
    """``env``'s training phase shares in ``report``, graphed work under its own name (older reports
    included: :func:`graphed_shares`)."""
    metrics = report["metrics"]
    shares = {m["labels"]["phase"]: m["median"] for _, m in reg.below(metrics, reg.TRAIN_PHASE, env)}
    return graphed_shares(shares, train, _buffer_shares(env, metrics))


def diagnosis_from_report(
    env: str, cfg: Config, report: dict[str, Any], run: dict[str, Any]
) -> dict[str, Any]:
    """The training diagnosis of ``env`` from a suite's phase shares and probe figures; ``run`` holds
    the last training measurement's memory figures."""
    metrics = report["metrics"]
    data = cfg.to_dict()
    shares = phase_shares(env, data.get("train", {}), report)
    fp = report["fingerprint"]
    probe = reg.PROBE_GPU if reg.PROBE_GPU.name("policy_forward", env) in metrics else reg.PROBE_CPU
    figures: dict[str, Any] = {
        "memory_peak": run.get("memory_peak"),
        "memory_total": run.get("memory_total"),
        "usable_cores": fp["cpu"].get("usable_cores"),
        "cuda_available": bool(fp.get("cuda_available")),
        "cpu_bf16": bf16_units(fp["cpu"]),
        "env_sps_single": (metrics.get(reg.PROBE_CPU.name("env_step", env)) or {}).get("median"),
        # the forward on the GPU where the probe had one, and at twice the batch where it took that
        "forward_sps": (metrics.get(probe.name("policy_forward", env)) or {}).get("median"),
        "forward_sps_2x": (metrics.get(probe.name("policy_forward_2x", env)) or {}).get("median"),
    }
    figures["buffers"] = _buffer_shares(env, metrics)
    spaces = _ocean_spaces(env, cfg)
    if spaces is not None:
        figures["bytes_per_step"] = step_bytes(*spaces)
        figures["obs_dtype"] = str(spaces[0].dtype)
    return diagnose_training(env, shares, metrics[reg.TRAIN_SPS.name(env)]["median"], data, figures)
