"""The memory a run's buffers would take, checked against what the machine has before any env starts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from appliance.config.schema import AUTO
from appliance.errors import ConfigError


def gib(n: float) -> str:
    """Bytes in GiB with one decimal, or MiB or KiB below a GiB (a small vector is not "0.0 GiB")."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 2**10:,.1f} KiB"


def _gpu_present() -> bool:
    """An NVIDIA device node: training buffers may then live in GPU memory, not here."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


def estimate_memory(
    env: str, data: Mapping[str, Mapping[str, Any]], info: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """Bytes a run would allocate: ``vector`` (observations, actions, rewards, flags and the envs
    themselves) and ``training`` (the trainer's experience: one row per agent and horizon step; 0
    where ``data`` has no train section: a vector made alone).
    ``info``: the env's layout as :func:`source_layout` gives it; by default the Ocean env's own
    (``ocean.describe``, which checks the env's parameters against their ranges on the way: a
    ConfigError naming the parameter)."""
    if info is None:
        from appliance import ocean

        info = ocean.describe(env, **dict(data["env"]))
    v = data["vec"]
    num_envs = int(v["num_envs"])
    agents = num_envs * int(info["agents_per_env"])
    obs = int(info["obs_size"]) * np.dtype(info["obs_dtype"]).itemsize
    dims = len(info["action_nvec"])
    vector = agents * (obs + 4 * dims + 4 + 3) + num_envs * int(info.get("env_bytes", 0))
    if "train" not in data:
        return {"vector": vector, "training": 0}
    t = data["train"]
    horizon = int(t["bptt_horizon"])
    rows = agents * horizon if t["batch_size"] == AUTO else max(int(t["batch_size"]), agents * horizon)
    hidden = int(data["policy"]["hidden_size"])
    # per row: observation, int64 action, six float32 (logprob, value, reward, done, ratio, mask);
    # per agent: the recurrent state (h and c) twice (current and at each segment start)
    training = rows * (obs + 8 * dims + 6 * 4) + agents * 4 * hidden * 4
    return {"vector": vector, "training": training}


def source_layout(source: Any) -> dict[str, Any]:
    """An env source's layout in :func:`estimate_memory`'s terms (``appliance.vector.sources.EnvSource``):
    its observation size and type, one entry per action dimension, its agents, and ``env_bytes``, what
    one env object holds (measured on the first env made; 0 where nothing was measured)."""
    space = source.observation_space
    return {
        "agents_per_env": source.agents_per_env,
        "obs_size": int(np.prod(space.shape)),
        "obs_dtype": str(space.dtype),
        "action_nvec": [0] * max(1, int(np.prod(source.action_shape))),
        "env_bytes": source.env_bytes,
    }


def available_memory() -> int:
    """Bytes this process may still allocate: what the machine has available, capped by a cgroup v2
    memory limit (``docker --memory``) less what the cgroup already uses."""
    import psutil

    available = int(psutil.virtual_memory().available)
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
    except OSError:
        return available
    if limit.isdigit() and used.isdigit():
        available = min(available, max(0, int(limit) - int(used)))
    return available


def training_on_host(data: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the trainer's buffers live in this machine's memory (not a GPU's)."""
    t = data.get("train")
    return t is not None and bool(
        t["device"] == "cpu" or t["cpu_offload"] or (t["device"] == AUTO and not _gpu_present())
    )


def check_memory(
    env: str,
    data: Mapping[str, Mapping[str, Any]],
    available: int | None = None,
    info: Mapping[str, Any] | None = None,
    ranks: int = 1,
) -> None:
    """Refuse, with the figures, a config whose buffers cannot fit in the memory available now.
    ``info``: the env's layout (:func:`estimate_memory`); ``ranks``: how many processes on this
    machine each allocate as much (the ranks of ``train --nproc``, each with ``vec.num_envs``)."""
    need = estimate_memory(env, data, info)
    on_host = training_on_host(data)
    total = need["vector"] + (need["training"] if on_host else 0)
    available = available_memory() if available is None else available
    if total * ranks <= available:
        return
    num_envs = int(data["vec"]["num_envs"])
    fits = max(0, int(num_envs * available / ranks / total))
    parts = f"vector {gib(need['vector'])}"
    if info is not None and info.get("env_bytes"):
        parts += f" including {gib(num_envs * int(info['env_bytes']))} of env objects"
    if on_host:
        parts += f" + training buffers {gib(need['training'])}"
    each = f" in each of {ranks} ranks" if ranks > 1 else ""
    raise ConfigError(
        f"vec.num_envs {num_envs:,} of {env} needs about {gib(total)} of memory{each} ({parts}) but "
        f"{gib(available)} is available; use at most about {fits:,} envs"
    )
