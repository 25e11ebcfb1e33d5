"""Machine fingerprint: what a benchmark number depends on, recorded with every report.

Nothing here may crash on an odd machine: each probe that fails leaves its field ``None`` (or an
empty GPU list with ``gpu_error`` saying why).

Two machines that both say "AMD EPYC, 2 cores" can differ 2-5x in speed, so the fingerprint goes
further than the CPU's name. :func:`fingerprint` puts together:

* :mod:`~appliance.sysinfo.cpu`: family/model/stepping, ISA, caches, clocks, SMT, NUMA, governor,
  cgroup quota and cpuset, the hypervisor;
* :mod:`~appliance.sysinfo.calibration`: integer, float and memory-copy loops (median of a few
  runs) that put a number on "how fast is this CPU right now";
* :mod:`~appliance.sysinfo.gpu`: on GPUs, clocks, power limit, ECC, MIG, PCIe, persistence and
  throttle reasons from NVML;
* :mod:`~appliance.sysinfo.software`: versions, the git commit, the compiler and flags of the C
  envs, the Docker image's wheels;

and :mod:`~appliance.sysinfo.facts` reads it back as rows for ``info``, reports and ``compare``.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from pathlib import Path
from typing import Any

import psutil

import appliance
from appliance.sysinfo.calibration import calibrate
from appliance.sysinfo.cpu import (
    ROOT,
    _cpu_model,
    _read,
    bf16_units,
    cgroup,
    cpu_details,
    cpu_kind,
    physical_cores,
)
from appliance.sysinfo.facts import machine_facts, summary
from appliance.sysinfo.gpu import SLOWDOWN_REASONS, gpu_info, gpu_throttle
from appliance.sysinfo.software import (
    WHEELS_ENV,
    _cupy_version,
    _dist_version,
    _git_commit,
    _torch_info,
    build_info,
    image_wheels,
)

__all__ = [
    "SLOWDOWN_REASONS",
    "WHEELS_ENV",
    "bf16_units",
    "build_info",
    "calibrate",
    "cgroup",
    "cpu_details",
    "cpu_kind",
    "fingerprint",
    "gpu_info",
    "gpu_throttle",
    "host_id",
    "image_wheels",
    "machine_facts",
    "physical_cores",
    "summary",
]


def host_id(root: Path = ROOT, hardware: str = "") -> tuple[str, list[str]]:
    """A 12-hex id that tells machines apart even when they share a hostname, and what it came from.

    ``/etc/machine-id`` is baked into some images (so clones share it), hence the boot id too; the
    id therefore changes when the machine reboots, which is the honest default for benchmarks.
    """
    parts, sources = [], []
    for rel, what in (("etc/machine-id", "/etc/machine-id"), ("proc/sys/kernel/random/boot_id", "boot id")):
        value = _read(root, rel)
        if value:
            parts.append(value)
            sources.append(what)
    if not parts:
        parts.append(socket.gethostname())
        sources.append("hostname")
    parts.append(hardware)
    sources.append("CPU model/stepping, cores and RAM")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12], sources


def fingerprint(
    nvml: Any | None = None, calibration: bool = True, root: Path = ROOT, pycpu: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Everything about this machine that a benchmark figure depends on.

    ``calibration=False`` skips the ~1 s calibration loops (tests); ``root`` and ``pycpu`` let tests
    fake /proc, /sys and py-cpuinfo.
    """
    gpus, driver, gpu_error = gpu_info(nvml)
    torch_info = _torch_info()
    for gpu, sms in zip(gpus, torch_info.get("sm_counts") or [], strict=False):
        gpu["sm_count"] = sms
    uname = platform.uname()
    git = _git_commit()
    details = cpu_details(root, pycpu)
    ram = psutil.virtual_memory().total
    logical = psutil.cpu_count(logical=True)
    hardware = (
        f"{details['vendor']} {details['family']} {details['model_number']} {details['stepping']} "
        f"{details['brand']} {logical} {ram}"
    )
    host_hash, host_from = host_id(root, hardware)
    return {
        "host_hash": host_hash,
        "host_id_from": host_from,
        "cpu": {
            "model": details["brand"] or _cpu_model(),
            "arch": uname.machine,
            "physical_cores": psutil.cpu_count(logical=False),
            "logical_cores": logical,
            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            **{k: v for k, v in details.items() if k != "brand"},
        },
        "calibration": calibrate() if calibration else None,
        "build": build_info(),
        "ram_bytes": ram,
        "os": {"system": uname.system, "release": uname.release, "platform": platform.platform()},
        "python": platform.python_version(),
        "versions": {
            "puffer_bench": appliance.__version__,
            "numpy": _dist_version("numpy"),
            "torch": torch_info.get("torch"),
            "cupy": _cupy_version(),
            "cuda_runtime": torch_info.get("cuda_runtime"),
            "torch_cpu_capability": torch_info.get("cpu_capability"),
            "torch_threads": torch_info.get("threads"),
            "cudnn": torch_info.get("cudnn"),
            "nccl": torch_info.get("nccl"),
            "nvidia_driver": driver,
        },
        "git": git,
        "cuda_available": torch_info.get("cuda_available", False),
        "gpus": gpus,
        "gpu_error": gpu_error,
        "image": image_wheels(),
    }
