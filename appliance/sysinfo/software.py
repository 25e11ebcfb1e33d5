"""What the figures were produced with: library versions, the git commit, the compiler and flags of
the C envs (read from the built extension) and, inside a Docker image, the wheels it was built from.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Any

from appliance.paths import checkout_root


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
