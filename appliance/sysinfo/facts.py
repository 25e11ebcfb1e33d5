"""The fingerprint as readable rows: :func:`summary` for ``puffer-bench info``, :func:`machine_facts`
for the reports' "Machine fingerprint" table and for ``compare`` (what differs between two machines).
"""

from __future__ import annotations

from typing import Any


def _size(n: Any) -> str | None:
    if not isinstance(n, int | float):
        return None
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _yes(value: Any) -> str | None:
    return None if value is None else ("yes" if value else "no")


def _caps(caps: dict[str, str], mkl_ignored: bool = False) -> str:
    """``sysinfo.cpu.library_caps`` as ``VARIABLE=value`` words ("" for none), and whether MKL ran
    past its cap (``sysinfo.cpu.mkl_cap_ignored``)."""
    words = " ".join(f"{k}={v}" for k, v in caps.items())
    return f"{words} (MKL's ignored: not an Intel CPU)" if words and mkl_ignored else words


def machine_facts(fp: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint as (label -> value), the facts that can change a speed; None = not recorded.

    Shared by the report (its "Machine fingerprint" table) and ``compare`` (what differs)."""
    cpu = fp.get("cpu") or {}
    versions = fp.get("versions") or {}
    isa = cpu.get("isa") or {}
    caches = cpu.get("caches") or {}
    group = cpu.get("cgroup") or {}
    virt = cpu.get("virtualization") or {}
    cal = fp.get("calibration") or {}
    build = fp.get("build") or {}
    fms = (
        f"{cpu.get('vendor')} family {cpu.get('family')} model {cpu.get('model_number')} "
        f"stepping {cpu.get('stepping')}"
        if cpu.get("family") is not None
        else None
    )
    facts: dict[str, Any] = {
        "CPU": cpu.get("model"),
        "CPU family/model/stepping": fms,
        "microarchitecture": cpu.get("codename"),
        "microcode": cpu.get("microcode"),
        "AVX": _yes(isa.get("avx")),
        "AVX2": _yes(isa.get("avx2")),
        "AVX-512": _yes(isa.get("avx512")),
        "AMX": _yes(isa.get("amx")),
        "CPU kind": (
            f"{cpu['emulated_kind']} (emulated; its own: {cpu.get('kind')})"
            if cpu.get("emulated_kind")
            else cpu.get("kind")
        ),
        "ISA caps (torch's libraries)": (
            (_caps(cpu["library_caps"], bool(cpu.get("mkl_cap_ignored"))) or "none")
            if cpu.get("library_caps") is not None
            else None
        ),
        "ISA flags": " ".join(cpu["flags"]) if cpu.get("flags") is not None else None,
        "caches": ", ".join(f"{k} {_size(v)}" for k, v in sorted(caches.items()) if v) or None,
        "base clock MHz": cpu.get("base_mhz"),
        "advertised clock MHz": cpu.get("advertised_mhz"),
        "max clock MHz": cpu.get("max_mhz"),
        "current clock MHz": round(cpu["current_mhz"]) if cpu.get("current_mhz") else None,
        "physical cores": cpu.get("physical_cores"),
        "logical cores": cpu.get("logical_cores"),
        "usable cores": cpu.get("usable_cores"),
        "SMT active": _yes(cpu.get("smt_active")),
        "NUMA nodes": cpu.get("numa_nodes"),
        "cgroup CPU quota (cores)": (
            (group.get("quota_cores") or "unlimited") if group.get("quota_source") else None
        ),
        "cpuset": group.get("cpuset"),
        "virtual machine": virt.get("vm") or ("hypervisor" if virt.get("hypervisor_flag") else None)
        if virt
        else None,
        "container": virt.get("container"),
        "kernel": (fp.get("os") or {}).get("release"),
        "CPU governor": cpu.get("governor"),
        "C envs compiler": build.get("compiler"),
        "C envs flags": build.get("flags"),
        "calibration int (M ops/s)": _round(cal.get("int_mops")),
        "calibration float (GFLOP/s)": _round(cal.get("float_gflops")),
        "calibration copy (GB/s)": _round(cal.get("copy_gbs")),
        "calibration CPU share": cal.get("cpu_share"),
        "RAM GiB": round(fp["ram_bytes"] / 2**30) if fp.get("ram_bytes") else None,
    }
    for i, g in enumerate(fp.get("gpus") or []):
        p = f"GPU {i} "
        facts.update(
            {
                p + "name": g.get("name"),
                p + "SMs": g.get("sm_count"),
                p + "memory": _size(g.get("memory_total_bytes")),
                p + "SM clock MHz (current/max)": f"{g.get('sm_clock_mhz')}/{g.get('sm_clock_max_mhz')}",
                p
                + "memory clock MHz (current/max)": f"{g.get('mem_clock_mhz')}/{g.get('mem_clock_max_mhz')}",
                p + "power limit W": g.get("power_limit_w"),
                p + "ECC": _yes(g.get("ecc_enabled")),
                p + "MIG": _yes(g.get("mig_enabled")),
                p + "PCIe (current/max)": f"gen{g.get('pcie_gen')} x{g.get('pcie_width')} / "
                f"gen{g.get('pcie_max_gen')} x{g.get('pcie_max_width')}",
                p + "persistence mode": _yes(g.get("persistence_mode")),
                p + "throttle reasons": ", ".join(g["throttle_reasons"]) or "none"
                if g.get("throttle_reasons") is not None
                else None,
            }
        )
    facts.update(
        {
            "NVIDIA driver": versions.get("nvidia_driver"),
            "CUDA runtime": versions.get("cuda_runtime"),
            "cuDNN": versions.get("cudnn"),
            "NCCL": versions.get("nccl"),
            "torch": versions.get("torch"),
            "torch CPU kernels": versions.get("torch_cpu_capability"),
            "torch threads": versions.get("torch_threads"),
            "cupy": versions.get("cupy"),
            "numpy": versions.get("numpy"),
            "python": fp.get("python"),
            "puffer-bench": versions.get("puffer_bench"),
            "git commit": (fp.get("git") or {}).get("commit"),
            "host id": fp.get("host_hash"),
            "host id derived from": ", ".join(fp.get("host_id_from") or ["hostname (older report)"]),
        }
    )
    return facts


def _round(x: Any) -> Any:
    return round(x, 3 - len(str(int(abs(x)))) if abs(x) >= 1 else 3) if isinstance(x, int | float) else x


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
    caps = cpu.get("library_caps")
    if caps:  # set by PUFFER_CPU_KIND or the user: torch's libraries run capped here
        rows.append(("ISA caps", _caps(caps, bool(cpu.get("mkl_cap_ignored")))))
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
