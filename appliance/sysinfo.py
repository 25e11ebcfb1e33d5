"""Machine fingerprint: what a benchmark number depends on, recorded with every report.

Nothing here may crash on an odd machine: each probe that fails leaves its field ``None`` (or an
empty GPU list with ``gpu_error`` saying why).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import psutil

import appliance
from appliance.paths import checkout_root


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _git_commit() -> dict[str, Any] | None:
    root = checkout_root()
    if root is None:
        return None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(dirty)}


def _torch_info() -> dict[str, Any]:
    info: dict[str, Any] = {"torch": _dist_version("torch"), "cuda_runtime": None, "cuda_available": False}
    if info["torch"] is None:
        return info
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda_runtime"] = torch.version.cuda
        info["cuda_available"] = bool(torch.cuda.is_available())
    except Exception as e:  # a broken torch install must not break the fingerprint
        info["torch_error"] = f"{type(e).__name__}: {e}"
    return info


def _cupy_version() -> str | None:
    return _dist_version("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")


def _decode(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _nvml_call(fn: Any, *args: Any) -> Any:
    """One NVML query; fields a GPU does not support come back as None."""
    try:
        return _decode(fn(*args))
    except Exception:
        return None


def gpu_info(nvml: Any | None = None) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """Return (gpus, driver, error). ``nvml`` may be passed in (tests fake it); default pynvml."""
    if nvml is None:
        try:
            import pynvml as nvml  # provided by nvidia-ml-py
        except ImportError:
            return [], None, "nvidia-ml-py (pynvml) is not installed"
    try:
        nvml.nvmlInit()
    except Exception as e:
        return (
            [],
            None,
            f"NVML unavailable (no NVIDIA driver?): {_decode(getattr(e, 'args', [e])[0]) if e.args else e}",
        )
    try:
        driver = _nvml_call(nvml.nvmlSystemGetDriverVersion)
        count = nvml.nvmlDeviceGetCount()
        gpus = []
        for index in range(count):
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = _nvml_call(nvml.nvmlDeviceGetMemoryInfo, h)
            power_mw = _nvml_call(nvml.nvmlDeviceGetPowerManagementLimit, h)
            gpus.append(
                {
                    "index": index,
                    "name": _nvml_call(nvml.nvmlDeviceGetName, h),
                    "uuid": _nvml_call(nvml.nvmlDeviceGetUUID, h),
                    "memory_total_bytes": getattr(memory, "total", None),
                    "pcie_max_gen": _nvml_call(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    "pcie_max_width": _nvml_call(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                    "pcie_gen": _nvml_call(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "pcie_width": _nvml_call(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                    "sm_clock_max_mhz": _nvml_call(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
                    "mem_clock_max_mhz": _nvml_call(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM),
                    "sm_clock_mhz": _nvml_call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
                    "mem_clock_mhz": _nvml_call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
                    # absent from older nvidia-ml-py releases: None then, like any unsupported field
                    "memory_bus_width": _nvml_call(getattr(nvml, "nvmlDeviceGetMemoryBusWidth", None), h),
                    "power_limit_w": power_mw / 1000.0 if isinstance(power_mw, int | float) else None,
                }
            )
        error = None if gpus else "NVML found no GPU"
        return gpus, driver, error
    except Exception as e:
        return [], None, f"NVML query failed: {type(e).__name__}: {e}"
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


# Set by the Docker images (images/*.Dockerfile) to the lock of the wheelhouse they were built from.
WHEELS_ENV = "PUFFER_BENCH_WHEELS"


def image_wheels(path: str | None = None) -> dict[str, Any] | None:
    """The wheels a Docker image was built from (``$PUFFER_BENCH_WHEELS``, made by images/wheelhouse.sh).

    ``None`` outside such an image. Otherwise the lock file, its sha256 (one hash naming the whole
    set) and each wheel as ``name==version`` -> sha256; ``error`` instead if the file is unreadable.
    """
    path = path or os.environ.get(WHEELS_ENV)
    if not path:
        return None
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        return {"lock": path, "error": f"{type(e).__name__}: {e}"}
    wheels = {}
    for line in text.splitlines():
        requirement, _, digest = line.split("#", 1)[0].partition("--hash=sha256:")
        if requirement.strip():
            wheels[requirement.strip()] = digest.strip() or None
    return {"lock": path, "sha256": hashlib.sha256(text.encode()).hexdigest(), "wheels": wheels}


def fingerprint(nvml: Any | None = None) -> dict[str, Any]:
    """Everything about this machine that a benchmark figure depends on."""
    gpus, driver, gpu_error = gpu_info(nvml)
    torch_info = _torch_info()
    uname = platform.uname()
    git = _git_commit()
    return {
        "host_hash": hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12],
        "cpu": {
            "model": _cpu_model(),
            "arch": uname.machine,
            "physical_cores": psutil.cpu_count(logical=False),
            "logical_cores": psutil.cpu_count(logical=True),
            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        },
        "ram_bytes": psutil.virtual_memory().total,
        "os": {"system": uname.system, "release": uname.release, "platform": platform.platform()},
        "python": platform.python_version(),
        "versions": {
            "puffer_bench": appliance.__version__,
            "numpy": _dist_version("numpy"),
            "torch": torch_info.get("torch"),
            "cupy": _cupy_version(),
            "cuda_runtime": torch_info.get("cuda_runtime"),
            "nvidia_driver": driver,
        },
        "git": git,
        "cuda_available": torch_info.get("cuda_available", False),
        "gpus": gpus,
        "gpu_error": gpu_error,
        "image": image_wheels(),
    }


def physical_cores() -> int:
    """Physical cores this process may use (at least 1)."""
    physical = psutil.cpu_count(logical=False) or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else physical
    return max(1, min(physical, usable))
