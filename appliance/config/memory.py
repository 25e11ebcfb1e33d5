"""The memory a run's buffers would take, checked against what the machine has before any env starts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from appliance.config.schema import AUTO
from appliance.errors import ConfigError


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def _gpu_present() -> bool:
    """An NVIDIA device node: training buffers may then live in GPU memory, not here."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


def estimate_memory(env: str, data: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Bytes an Ocean env's run would allocate: ``vector`` (observations, actions, rewards, flags and the
    envs themselves) and ``training`` (the trainer's experience: one row per agent and horizon step).
    Checks the env's parameters against their ranges on the way (a ConfigError naming the parameter)."""
    from appliance import ocean

    info = ocean.describe(env, **dict(data["env"]))
    v, t = data["vec"], data["train"]
    num_envs = int(v["num_envs"])
    agents = num_envs * int(info["agents_per_env"])
    obs = int(info["obs_size"]) * (4 if info["obs_dtype"] == "float32" else 1)
    dims = len(info["action_nvec"])
    vector = agents * (obs + 4 * dims + 4 + 3) + num_envs * int(info.get("env_bytes", 0))
    horizon = int(t["bptt_horizon"])
    rows = agents * horizon if t["batch_size"] == AUTO else max(int(t["batch_size"]), agents * horizon)
    hidden = int(data["policy"]["hidden_size"])
    # per row: observation, int64 action, six float32 (logprob, value, reward, done, ratio, mask);
    # per agent: the recurrent state (h and c) twice (current and at each segment start)
    training = rows * (obs + 8 * dims + 6 * 4) + agents * 4 * hidden * 4
    return {"vector": vector, "training": training}


def check_memory(env: str, data: Mapping[str, Mapping[str, Any]], available: int | None = None) -> None:
    """Refuse, with the figures, a config whose buffers cannot fit in the memory available now."""
    import psutil

    need = estimate_memory(env, data)
    t = data["train"]
    on_host = t["device"] == "cpu" or t["cpu_offload"] or (t["device"] == AUTO and not _gpu_present())
    total = need["vector"] + (need["training"] if on_host else 0)
    available = psutil.virtual_memory().available if available is None else available
    if total <= available:
        return
    num_envs = int(data["vec"]["num_envs"])
    fits = max(0, int(num_envs * available / total))
    parts = f"vector {_gib(need['vector'])}"
    if on_host:
        parts += f" + training buffers {_gib(need['training'])}"
    raise ConfigError(
        f"vec.num_envs {num_envs:,} of {env} needs about {_gib(total)} of memory ({parts}) but "
        f"{_gib(available)} is available; use at most about {fits:,} envs"
    )
