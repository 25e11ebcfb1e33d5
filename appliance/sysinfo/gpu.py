"""The GPU side of the fingerprint, from NVML: clocks, power limit, ECC, MIG, PCIe, persistence
and throttle reasons. ``nvml`` may be passed in everywhere (tests fake it); the default is pynvml.
"""

from __future__ import annotations

import contextlib
from typing import Any


def _decode(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _nvml_call(fn: Any, *args: Any) -> Any:
    """One NVML query; fields a GPU does not support come back as None."""
    try:
        return _decode(fn(*args))
    except Exception:
        return None


# NVML clock-event (throttle) reason bits; the "slowdown" ones mean the GPU ran below its clocks
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
SLOWDOWN_REASONS = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


def throttle_names(mask: Any) -> list[str] | None:
    """The NVML throttle-reason bitmask as names (None when unknown)."""
    if not isinstance(mask, int):
        return None
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def gpu_throttle(nvml: Any, handle: Any) -> list[str] | None:
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    return throttle_names(_nvml_call(fn, handle)) if fn else None


def _pair(value: Any, index: int) -> Any:
    return value[index] if isinstance(value, list | tuple) and len(value) > index else None


def _gpu_state(nvml: Any, h: Any) -> dict[str, Any]:
    """ECC, MIG, persistence, throttle reasons and CUDA cores (None where an NVML lacks the call)."""
    ecc = _nvml_call(getattr(nvml, "nvmlDeviceGetEccMode", None), h)
    mig = _nvml_call(getattr(nvml, "nvmlDeviceGetMigMode", None), h)
    persistence = _nvml_call(getattr(nvml, "nvmlDeviceGetPersistenceMode", None), h)
    return {
        "cuda_cores": _nvml_call(getattr(nvml, "nvmlDeviceGetNumGpuCores", None), h),
        "ecc_enabled": None if _pair(ecc, 0) is None else bool(_pair(ecc, 0)),
        "mig_enabled": None if _pair(mig, 0) is None else bool(_pair(mig, 0)),
        "persistence_mode": None if persistence is None else bool(persistence),
        "throttle_reasons": gpu_throttle(nvml, h),
    }


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
                    **_gpu_state(nvml, h),
                }
            )
        error = None if gpus else "NVML found no GPU"
        return gpus, driver, error
    except Exception as e:
        return [], None, f"NVML query failed: {type(e).__name__}: {e}"
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def cuda_devices(torch: Any | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """The CUDA devices torch can use, as (devices, error): each device's name, memory, SM count and
    compute capability from ``torch.cuda.get_device_properties``. NVML may see a GPU torch cannot use
    (a CPU-only torch wheel, a driver older than its CUDA): then the list is empty and ``error`` says
    why. ``torch`` may be passed in (tests fake it)."""
    if torch is None:
        try:
            import torch
        except ImportError:
            return [], "torch is not installed"
    try:
        if not torch.cuda.is_available():
            built = getattr(getattr(torch, "version", None), "cuda", None)
            return [], "torch.cuda is not available" + (
                "" if built else " (this torch is built without CUDA)"
            )
        devices = []
        for index in range(int(torch.cuda.device_count())):
            p = torch.cuda.get_device_properties(index)
            devices.append(
                {
                    "index": index,
                    "name": _decode(getattr(p, "name", None)),
                    "memory_total_bytes": getattr(p, "total_memory", None),
                    "sm_count": getattr(p, "multi_processor_count", None),
                    "compute_capability": f"{p.major}.{p.minor}",
                }
            )
    except Exception as e:  # a broken driver raises from is_available or the properties
        return (
            [],
            f"torch.cuda failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": "),
        )
    return devices, None if devices else "torch.cuda sees no device"
