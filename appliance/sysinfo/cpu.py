"""The CPU side of the fingerprint: what tells two CPUs apart when both say "AMD EPYC, 2 cores".

Family/model/stepping and the ISA features that matter (AVX2, AVX-512, AMX) from ``py-cpuinfo`` and
``/proc/cpuinfo``; caches, clocks, SMT, NUMA, governor, cgroup quota and cpuset from ``/sys`` and
``/proc``; the hypervisor. Every reader takes a ``root`` folder so tests can fake ``/proc`` and ``/sys``.

The CPU's kind (:data:`CPU_KINDS`: bf16, avx512, avx2, avx, older), by which the cpu profile's per-env
settings are chosen, and ``PUFFER_CPU_KIND``, which makes a CPU act as a lesser kind to measure it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


ROOT = Path("/")
# ISA features recorded (Linux /proc/cpuinfo names); the headline ones are summarized as yes/no
ISA_FLAGS = (
    "sse4_2", "avx", "fma", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "sha_ni", "vaes",
)  # fmt: skip
# headline ISA: any of its flags. bf16: bfloat16 arithmetic in hardware (AVX512-BF16 or AMX), where
# train.precision bfloat16 pays on a CPU (without it, bf16 is converted to float32 and back: slower)
HEADLINE_ISA = {
    "avx": ("avx",),
    "avx2": ("avx2",),
    "avx512": ("avx512f",),
    "amx": ("amx_tile",),
    "bf16": ("avx512_bf16", "amx_bf16"),
}
# The kinds of CPU the cpu profile tells apart, fastest arithmetic first: bf16 (AVX512-BF16 or AMX:
# train.precision auto is bfloat16), avx512 (AVX-512 without them), avx2, avx (AVX without AVX2: most
# x86 CPUs of 2011-2014), older (none of these: SSE4 at most, or not x86). An env's YAML may refine the
# cpu profile per kind (profiles.cpu.avx2, ...).
CPU_KINDS = ("bf16", "avx512", "avx2", "avx", "older")
KIND_VARIABLE = "PUFFER_CPU_KIND"
# torch's kernels capped to each lesser kind's ISA when a CPU acts as that kind: ATen's own kernels,
# oneDNN's and MKL's (MKL honours its variable on Intel CPUs only). ATen builds no AVX-only kernels:
# below AVX2 it runs its baseline ones
TORCH_CAPS = {
    "ATEN_CPU_CAPABILITY": {"avx512": "avx512", "avx2": "avx2", "avx": "default", "older": "default"},
    "ONEDNN_MAX_CPU_ISA": {"avx512": "AVX512_CORE", "avx2": "AVX2", "avx": "AVX", "older": "SSE41"},
    "MKL_ENABLE_INSTRUCTIONS": {"avx512": "AVX512", "avx2": "AVX2", "avx": "AVX", "older": "SSE4_2"},
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


def headline_isa(flags: set[str]) -> dict[str, bool]:
    """The headline ISA features (:data:`HEADLINE_ISA`) of a CPU with these /proc/cpuinfo flags."""
    return {name: any(f in flags for f in names) for name, names in HEADLINE_ISA.items()}


def kind_of(isa: dict[str, bool]) -> str:
    """The CPU kind (:data:`CPU_KINDS`) of a CPU with these headline ISA features."""
    if isa.get("bf16"):
        return "bf16"
    if isa.get("avx512"):
        return "avx512"
    if isa.get("avx2"):
        return "avx2"
    return "avx" if isa.get("avx") else "older"


def emulated_kind(real: str, environ: dict[str, str] | None = None) -> str | None:
    """The kind ``PUFFER_CPU_KIND`` asks a CPU of kind ``real`` to act as (None: not set, or its own
    kind). A CPU can act as a lesser kind (its bf16 or AVX-512 left unused), never as a greater one."""
    from appliance.errors import ConfigError

    value = _asked(environ)
    if not value:
        return None
    if value not in CPU_KINDS:
        raise ConfigError(f"{KIND_VARIABLE}={value}: not a CPU kind; the kinds are {', '.join(CPU_KINDS)}")
    if CPU_KINDS.index(value) < CPU_KINDS.index(real):
        lesser = ", ".join(CPU_KINDS[CPU_KINDS.index(real) :])
        raise ConfigError(
            f"{KIND_VARIABLE}={value}: this CPU is of the {real} kind and can act only as {lesser}, "
            "not as a kind with features it lacks"
        )
    return value if value != real else None


def _asked(environ: Any = None) -> str:
    """``PUFFER_CPU_KIND`` as given ("" where unset), lower case."""
    return (os.environ if environ is None else environ).get(KIND_VARIABLE, "").strip().lower()


_REAL_KIND: str | None = None
_REAL_VENDOR: list[str | None] = []


def real_kind() -> str:
    """This CPU's own kind, from /proc/cpuinfo's flags (py-cpuinfo's where /proc has none); read once."""
    global _REAL_KIND
    if _REAL_KIND is None:
        flags = set((_proc_cpuinfo(ROOT).get("flags") or "").split()) or set(_py_cpuinfo().get("flags") or [])
        _REAL_KIND = kind_of(headline_isa(flags))
    return _REAL_KIND


def real_vendor() -> str | None:
    """This CPU's vendor id (GenuineIntel, AuthenticAMD, ...; None where /proc and py-cpuinfo have
    none); read once."""
    if not _REAL_VENDOR:
        _REAL_VENDOR.append(_proc_cpuinfo(ROOT).get("vendor_id") or _py_cpuinfo().get("vendor_id_raw"))
    return _REAL_VENDOR[0]


def mkl_cap_ignored(caps: dict[str, str], vendor: str | None) -> bool:
    """Whether MKL runs past its cap in ``caps`` (:func:`library_caps`) on a CPU of ``vendor``: it
    honours ``MKL_ENABLE_INSTRUCTIONS`` on Intel's CPUs only, so on another vendor's an emulated
    kind's matrix products run MKL's own choice of code for that CPU, not the kind's."""
    return "MKL_ENABLE_INSTRUCTIONS" in caps and vendor is not None and vendor != "GenuineIntel"


_ACTING: list[str] = []


def cpu_kind(environ: dict[str, str] | None = None) -> str:
    """The kind this CPU trains as: its own, or the lesser one ``PUFFER_CPU_KIND`` names (inside
    :func:`acting_as`, that one's)."""
    if _ACTING:
        return _ACTING[-1]
    real = real_kind()
    return emulated_kind(real, environ) or real


@contextlib.contextmanager
def acting_as(kind: str) -> Iterator[None]:
    """Resolve configs as on a CPU of ``kind``, whatever this one is (the config audit resolves the
    cpu profile on every kind); nothing runs on it."""
    _ACTING.append(kind)
    try:
        yield
    finally:
        _ACTING.pop()


def cap_torch(environ: Any = None) -> None:
    """Where ``PUFFER_CPU_KIND`` names a lesser kind, cap torch's kernels to its ISA: each variable of
    :data:`TORCH_CAPS` (read once, at the libraries' first use) that the user has not set. Called by
    the command line before torch is imported; a bad value is left to :func:`cpu_kind` to refuse."""
    environ = os.environ if environ is None else environ
    value = _asked(environ)
    for variable, caps in TORCH_CAPS.items():
        if value in caps and not environ.get(variable):
            environ[variable] = caps[value]


def library_caps(environ: Any = None) -> dict[str, str]:
    """The ISA caps torch's libraries run under (:data:`TORCH_CAPS`' variables that are set), whether
    an emulated kind or the user set them: a report made under them is slower for it."""
    environ = os.environ if environ is None else environ
    return {variable: environ[variable] for variable in TORCH_CAPS if environ.get(variable)}


def bf16_units(details: dict[str, Any]) -> bool:
    """Whether a CPU (:func:`cpu_details`, a fingerprint's ``cpu``) trains with bfloat16 units: it has
    them and does not act as a lesser kind."""
    isa = details.get("isa") or {}
    return bool(isa.get("bf16")) and details.get("emulated_kind") in (None, "bf16")


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
    isa = headline_isa(flags)
    kind = kind_of(isa)
    caps = library_caps()
    return {
        "vendor": vendor,
        "family": family,
        "model_number": model,
        "stepping": _int(info.get("stepping")) if "stepping" in info else py.get("stepping"),
        "microcode": info.get("microcode"),
        "codename": codename(vendor, family, model),
        "brand": py.get("brand_raw") or info.get("model name"),
        "isa": isa,
        "kind": kind,  # the CPU's own kind; emulated_kind: the one PUFFER_CPU_KIND made it act as
        "emulated_kind": emulated_kind(kind),
        "library_caps": caps,
        "mkl_cap_ignored": mkl_cap_ignored(caps, vendor),
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


def physical_cores() -> int:
    """Physical cores this process may use (at least 1)."""
    physical = psutil.cpu_count(logical=False) or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else physical
    return max(1, min(physical, usable))
