"""What a trainer is made of, from a config: the torch device and the policy."""

from __future__ import annotations

from typing import Any

import torch

from appliance.config import Config
from appliance.errors import DeviceError
from appliance.train.policy import Policy


def resolve_device(name: str) -> torch.device:
    if name == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                "--train.device cuda was asked for, but torch sees no CUDA device "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); use --train.device cpu"
            )
        return torch.device("cuda")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device("cpu")


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` does bfloat16 arithmetic in hardware: a CUDA GPU with native bf16 (compute
    capability 8.0 or newer), a CPU with AVX512-BF16 or AMX that does not act as a lesser kind
    (``PUFFER_CPU_KIND``)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    from appliance import sysinfo

    return sysinfo.bf16_units(sysinfo.cpu_details())


def resolve_precision(name: str, device: torch.device) -> str:
    """``train.precision``: ``auto`` is bfloat16 where :func:`native_bf16` and float32 elsewhere; the
    others are themselves."""
    if name != "auto":
        return name
    return "bfloat16" if native_bf16(device) else "float32"


def make_policy(cfg: Config, vec: Any) -> Policy:
    p = cfg.policy
    return Policy(
        vec.single_observation_space,
        vec.single_action_space,
        core=p.core,
        hidden_size=p.hidden_size,
        encoder=p.encoder,
        obs_codec=getattr(vec, "obs_codec", None),
        init=p.init,
        obs_norm={"on": True, "off": False}.get(p.obs_norm, "auto"),
        obs_scale=p.obs_scale,
        num_layers=p.num_layers,
        expansion_factor=p.expansion_factor,
        encoder_activation=p.encoder_activation,
        separate_value=p.separate_value,
        log_std_init=p.log_std_init,
        action_mask=getattr(vec, "action_mask", 0),
    )
