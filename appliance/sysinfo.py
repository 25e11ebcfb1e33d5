"""Machine fingerprint: what a benchmark number depends on, recorded with every report.

Nothing here may crash on an odd machine: each probe that fails leaves its field ``None`` (or an
empty GPU list with ``gpu_error`` saying why).

Two machines that both say "AMD EPYC, 2 cores" can differ 2-5x in speed, so the fingerprint goes
further: CPU family/model/stepping and the ISA features that matter (AVX2, AVX-512, AMX) from
``py-cpuinfo`` and ``/proc/cpuinfo``; caches, clocks, SMT, NUMA, governor, cgroup quota and cpuset
from ``/sys`` and ``/proc``; the hypervisor; the compiler and flags of the C envs (read from the
built extension); a short calibration (integer, float and memory-copy loops, median of a few runs)
that puts a number on "how fast is this CPU right now"; and on GPUs clocks, power limit, ECC, MIG,
PCIe, persistence and throttle reasons from NVML. Every reader takes a ``root`` folder so tests can
fake ``/proc`` and ``/sys``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import socket
import statistics
import subprocess
import time
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


# ---------------------------------------------------------------------- CPU details (issue 17)

ROOT = Path("/")
# ISA features recorded (Linux /proc/cpuinfo names); the headline ones are summarized as yes/no
ISA_FLAGS = (
    "sse4_2", "avx", "fma", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "sha_ni", "vaes",
)  # fmt: skip
# headline ISA: any of its flags. bf16: bfloat16 arithmetic in hardware (AVX512-BF16 or AMX), where
# train.precision bfloat16 pays on a CPU (without it, bf16 is converted to float32 and back: slower)
HEADLINE_ISA = {
    "avx2": ("avx2",),
    "avx512": ("avx512f",),
    "amx": ("amx_tile",),
    "bf16": ("avx512_bf16", "amx_bf16"),
}
# (vendor, family, first model, last model) -> microarchitecture; enough to tell common server CPUs apart
CODENAMES = (
    ("AuthenticAMD", 23, 0x00, 0x2F, "Zen / Zen+ (Naples)"),
    ("AuthenticAMD", 23, 0x30, 0x3F, "Zen 2 (Rome)"),
    ("AuthenticAMD", 25, 0x00, 0x0F, "Zen 3 (Milan)"),
    ("AuthenticAMD", 25, 0x10, 0x1F, "Zen 4 (Genoa)"),
    ("AuthenticAMD", 25, 0xA0, 0xAF, "Zen 4c (Bergamo)"),
    ("AuthenticAMD", 26, 0x00, 0x1F, "Zen 5 (Turin)"),
    ("GenuineIntel", 6, 0x55, 0x55, "Skylake-SP / Cascade Lake"),
    ("GenuineIntel", 6, 0x6A, 0x6C, "Ice Lake-SP"),
    ("GenuineIntel", 6, 0x8F, 0x8F, "Sapphire Rapids"),
    ("GenuineIntel", 6, 0xCF, 0xCF, "Emerald Rapids"),
    ("GenuineIntel", 6, 0xAD, 0xAE, "Granite Rapids"),
)


def _read(root: Path, rel: str) -> str | None:
    try:
        return (root / rel).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: Any) -> int | None:
    try:
        return int(str(text).strip(), 0)
    except (TypeError, ValueError):
        return None


def _proc_cpuinfo(root: Path) -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo, keys lower-cased."""
    block: dict[str, str] = {}
    for line in (_read(root, "proc/cpuinfo") or "").splitlines():
        if not line.strip():
            if block:
                break
            continue
        key, _, value = line.partition(":")
        block[key.strip().lower()] = value.strip()
    return block


def _py_cpuinfo() -> dict[str, Any]:
    """py-cpuinfo's view (brand string, advertised clock, caches via CPUID); {} if it fails."""
    global _PY_CPUINFO
    if _PY_CPUINFO is None:
        try:
            import cpuinfo  # py-cpuinfo

            _PY_CPUINFO = dict(cpuinfo.get_cpu_info())
        except Exception:
            _PY_CPUINFO = {}
    return _PY_CPUINFO


_PY_CPUINFO: dict[str, Any] | None = None


def _size_bytes(text: str | None) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text or "")
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


def _caches(root: Path) -> dict[str, int | None]:
    """Cache sizes seen by cpu0 (bytes per instance): L1d, L1i, L2, L3 from /sys."""
    out: dict[str, int | None] = {}
    base = root / "sys/devices/system/cpu/cpu0/cache"
    for index in sorted(base.glob("index*")) if base.is_dir() else []:
        level, kind = _read(index, "level"), _read(index, "type") or ""
        if level is None:
            continue
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[name] = _size_bytes(_read(index, "size"))
    return out


def cgroup(root: Path = ROOT) -> dict[str, Any]:
    """CPU quota (in cores; None = unlimited) and cpuset actually granted, cgroup v2 or v1."""
    rel = "/"
    for line in (_read(root, "proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[0] == "0" or "cpu" in parts[1].split(",")):
            rel = parts[2] or "/"
            if parts[0] == "0":
                break
    quota: float | None = None
    source = None
    for base in {rel.strip("/"), ""}:
        v2 = _read(root, f"sys/fs/cgroup/{base}/cpu.max".replace("//", "/"))
        if v2:
            q, _, period = v2.partition(" ")
            quota = None if q == "max" else int(q) / int(period or 100000)
            source = "cgroup v2 cpu.max"
            break
        for folder in ("cpu", "cpu,cpuacct"):
            q1 = _int(_read(root, f"sys/fs/cgroup/{folder}/{base}/cpu.cfs_quota_us".replace("//", "/")))
            p1 = _int(_read(root, f"sys/fs/cgroup/{folder}/{base}/cpu.cfs_period_us".replace("//", "/")))
            if q1 is not None:
                quota = q1 / p1 if q1 > 0 and p1 else None
                source = "cgroup v1 cpu.cfs_quota_us"
                break
        if source:
            break
    cpuset = (
        _read(root, f"sys/fs/cgroup/{rel.strip('/')}/cpuset.cpus.effective".replace("//", "/"))
        or _read(root, "sys/fs/cgroup/cpuset.cpus.effective")
        or _read(root, "sys/fs/cgroup/cpuset/cpuset.effective_cpus")
        or _read(root, "sys/fs/cgroup/cpuset/cpuset.cpus")
    )
    return {"quota_cores": quota, "quota_source": source, "cpuset": cpuset or None}


def _detect_virt(flag: str) -> str | None:
    try:
        out = subprocess.run(
            ["systemd-detect-virt", flag], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def _virtualization(root: Path, flags: set[str]) -> dict[str, Any]:
    vm = _detect_virt("--vm") if root == ROOT else None
    container = _detect_virt("--container") if root == ROOT else None
    return {
        "hypervisor_flag": "hypervisor" in flags,  # CPUID says we run under a hypervisor
        "vm": vm if vm != "none" else None,
        "container": container if container != "none" else None,
        "product": _read(root, "sys/class/dmi/id/product_name"),
        "sys_vendor": _read(root, "sys/class/dmi/id/sys_vendor"),
    }


def codename(vendor: str | None, family: int | None, model: int | None) -> str | None:
    for v, f, lo, hi, name in CODENAMES:
        if vendor == v and family == f and model is not None and lo <= model <= hi:
            return name
    return None


def cpu_details(root: Path = ROOT, pycpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """Vendor, family/model/stepping, ISA, caches, clocks, SMT, NUMA, quota, virtualisation, governor."""
    info = _proc_cpuinfo(root)
    py = _py_cpuinfo() if pycpu is None else pycpu
    flags = set((info.get("flags") or " ".join(py.get("flags") or [])).split())
    vendor = info.get("vendor_id") or py.get("vendor_id_raw")
    family = _int(info.get("cpu family")) if "cpu family" in info else py.get("family")
    model = _int(info.get("model")) if "model" in info else py.get("model")
    cpufreq = "sys/devices/system/cpu/cpu0/cpufreq"
    base_khz = _int(_read(root, f"{cpufreq}/base_frequency"))
    max_khz = _int(_read(root, f"{cpufreq}/cpuinfo_max_freq"))
    cur_khz = _int(_read(root, f"{cpufreq}/scaling_cur_freq"))
    advertised = (py.get("hz_advertised") or [None])[0]
    current_mhz = cur_khz / 1000 if cur_khz else _float(info.get("cpu mhz"))
    nodes = [p for p in (root / "sys/devices/system/node").glob("node[0-9]*")]
    smt_active = _read(root, "sys/devices/system/cpu/smt/active")
    return {
        "vendor": vendor,
        "family": family,
        "model_number": model,
        "stepping": _int(info.get("stepping")) if "stepping" in info else py.get("stepping"),
        "microcode": info.get("microcode"),
        "codename": codename(vendor, family, model),
        "brand": py.get("brand_raw") or info.get("model name"),
        "isa": {name: any(f in flags for f in names) for name, names in HEADLINE_ISA.items()},
        "flags": sorted(f for f in ISA_FLAGS if f in flags),
        "caches": _caches(root),
        "base_mhz": base_khz / 1000 if base_khz else None,
        "advertised_mhz": advertised / 1e6 if advertised else None,  # py-cpuinfo: brand string or cpu MHz
        "max_mhz": max_khz / 1000 if max_khz else None,
        "current_mhz": current_mhz,
        "bogomips": _float(info.get("bogomips")),
        "smt_active": None if smt_active is None else smt_active == "1",
        "numa_nodes": len(nodes) or None,
        "governor": _read(root, f"{cpufreq}/scaling_governor"),
        "cgroup": cgroup(root),
        "virtualization": _virtualization(root, flags),
    }


def _float(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


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


def _elf_sections(path: Path, names: set[str]) -> dict[str, bytes]:
    """The named sections of a 64-bit ELF file ({} for anything else)."""
    import struct

    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return {}
    end = "<" if data[5] == 1 else ">"
    shoff = struct.unpack_from(end + "Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)

    def header(i: int) -> tuple[int, ...]:
        return struct.unpack_from(end + "IIQQQQIIQQ", data, shoff + i * shentsize)

    strings = header(shstrndx)[4]
    out = {}
    for i in range(shnum):
        name_at, _, _, _, offset, size, *_ = header(i)
        start = strings + name_at
        name = data[start : data.index(b"\0", start)].decode(errors="replace")
        if name in names:
            out[name] = data[offset : offset + size]
    return out


def build_info() -> dict[str, Any]:
    """Compiler and flags the C envs (appliance._ocean) were built with, read from the extension.

    The compiler is the ELF ``.comment`` the compiler stamps; the flags come from the
    ``.GCC.command.line`` section that ``-frecord-gcc-switches`` (setup.py) records. ``cc`` is
    Python's sysconfig CC, the compiler setuptools calls by default.
    """
    import sysconfig

    out: dict[str, Any] = {
        "extension": None,
        "compiler": None,
        "flags": None,
        "cc": sysconfig.get_config_var("CC"),
    }
    try:
        spec = importlib.util.find_spec("appliance._ocean")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return out
    path = Path(spec.origin)
    out["extension"] = path.name
    sections = _elf_sections(path, {".comment", ".GCC.command.line"})

    def strings(name: str) -> list[str]:
        seen: list[str] = []
        for s in sections.get(name, b"").decode(errors="replace").split("\0"):
            if s.strip() and s.strip() not in seen:
                seen.append(s.strip())
        return seen

    out["compiler"] = "; ".join(strings(".comment")) or None
    flags = strings(".GCC.command.line")
    out["flags"] = " ".join(flags) if flags else None
    if not flags:
        out["flags_note"] = "not recorded in the extension (built without -frecord-gcc-switches)"
    return out


# ---------------------------------------------------------------------- calibration

CALIBRATION_RUNS = 5


CALIBRATION_LOOPS = ("int_mops", "float_gflops", "copy_gbs")


def calibrate(runs: int = CALIBRATION_RUNS, loops: tuple[str, ...] = CALIBRATION_LOOPS) -> dict[str, Any]:
    """How fast this CPU is right now: three fixed loops, the median of ``runs`` runs each (~1 s).

    ``int_mops``: a pure-Python integer loop (one core, interpreter-bound; compare at equal Python);
    ``float_gflops``: numpy multiply-add on cache-resident arrays (one core, SIMD and clock);
    ``copy_gbs``: numpy copy of 64 MiB (memory bandwidth of one core). ``cpu_share`` is the
    process CPU time over wall time while calibrating: well below 1 means the process waited for
    a core (a busy or throttled machine) and the figures are low for that reason.
    """
    import numpy as np

    def int_loop() -> float:
        n, x = 200_000, 1
        t = time.perf_counter()
        for _ in range(n):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        return n / (time.perf_counter() - t) / 1e6

    a, b = np.full(8192, 1.0001), np.full(8192, 0.9999)
    c = np.empty_like(a)

    def float_loop() -> float:
        reps = 400
        t = time.perf_counter()
        for _ in range(reps):
            np.multiply(a, b, out=c)
            np.add(c, a, out=c)
        return 2 * reps * a.size / (time.perf_counter() - t) / 1e9

    src = np.ones(64 * 2**20 // 8 if "copy_gbs" in loops else 1)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in before timing

    def copy_loop() -> float:
        reps = 3
        t = time.perf_counter()
        for _ in range(reps):
            np.copyto(dst, src)
        return reps * src.nbytes / (time.perf_counter() - t) / 1e9

    wall0, cpu0 = time.perf_counter(), time.process_time()
    results = {name: [fn() for _ in range(runs)] for name, fn in (
        ("int_mops", int_loop), ("float_gflops", float_loop), ("copy_gbs", copy_loop)) if name in loops}  # fmt: skip
    share = (time.process_time() - cpu0) / max(1e-9, time.perf_counter() - wall0)
    out: dict[str, Any] = {k: statistics.median(v) for k, v in results.items()}
    out["samples"] = results
    out["runs"] = runs
    out["cpu_share"] = round(share, 3)
    return out


# ---------------------------------------------------------------------- versions and GPU


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
        with contextlib.suppress(
            Exception
        ):  # the SIMD level torch's CPU kernels dispatch to: AVX2, AVX512...
            info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        info["threads"] = torch.get_num_threads()
        if info["cuda_available"]:
            info["cudnn"] = torch.backends.cudnn.version()
            with contextlib.suppress(Exception):
                nccl = torch.cuda.nccl.version()
                info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
            info["sm_counts"] = [
                torch.cuda.get_device_properties(i).multi_processor_count
                for i in range(torch.cuda.device_count())
            ]
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
    """Fields added for issue 17: ECC, MIG, persistence, throttle reasons, CUDA cores."""
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


def physical_cores() -> int:
    """Physical cores this process may use (at least 1)."""
    physical = psutil.cpu_count(logical=False) or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else physical
    return max(1, min(physical, usable))


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def summary(fp: dict[str, Any]) -> list[tuple[str, str]]:
    """The fingerprint as (field, value) lines for ``puffer-bench info``."""
    cpu, git = fp["cpu"], fp["git"]
    rows = [
        ("CPU", f"{cpu['model']} ({cpu['arch']})"),
        (
            "cores",
            f"{cpu['physical_cores']} physical, {cpu['logical_cores']} logical, {cpu['usable_cores']} usable",
        ),
        ("RAM", _gib(fp["ram_bytes"])),
        ("OS", fp["os"]["platform"]),
        ("Python", fp["python"]),
        *((name, str(version) if version else "-") for name, version in fp["versions"].items()),
        ("git", f"{git['commit'][:12]}{' (dirty)' if git['dirty'] else ''}" if git else "- (not a checkout)"),
        ("host", fp["host_hash"]),
    ]
    image = fp.get("image")
    if image:  # inside a puffer-bench Docker image: the locked wheels it was built from
        wheels = image.get("error") or f"{len(image['wheels'])} locked, sha256 {image['sha256'][:12]}"
        rows.append(("image wheels", f"{wheels} ({image['lock']})"))
    for gpu in fp["gpus"]:
        link = f"PCIe gen{gpu['pcie_gen']} x{gpu['pcie_width']} (max gen{gpu['pcie_max_gen']} x{gpu['pcie_max_width']})"
        rows.append(
            (
                f"GPU {gpu['index']}",
                f"{gpu['name']}, {_gib(gpu['memory_total_bytes'])}, {link}, "
                f"SM {gpu['sm_clock_max_mhz']} MHz max, {gpu['power_limit_w']} W limit",
            )
        )
    if not fp["gpus"]:
        rows.append(("GPU", f"none ({fp['gpu_error']})"))
    return rows
