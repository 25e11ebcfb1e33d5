"""Compile every ``kernels/*.cu`` to cubins with NVRTC: the build step, and ``make kernels-check``.

NVRTC (``cupy.cuda.nvrtc`` over the ``nvidia-cuda-nvrtc-cu12`` wheel's libnvrtc.so) compiles for a named
architecture with no GPU and no driver, so this runs on any build or CI machine:

    python -m appliance.gpu.warm [--out DIR] [--archs 80 86 89 90] # cubins + manifest.json into DIR
    python -m appliance.gpu.warm --check [--archs ...]             # compile, print registers, enforce limits

Each compile passes ``--ptxas-options=-v``; NVRTC returns ptxas's report in the program log ("Used N
registers", "N bytes stack frame, N bytes spill stores, N bytes spill loads" per kernel), which
:func:`parse_ptxas` reads. The check fails on a compile error, on any register spill, on a stack frame
above :data:`MAX_STACK_BYTES` or on more than :data:`MAX_REGISTERS` registers (more would cap the
occupancy of these memory-bound kernels).

The cubin folder holds ``sm_<arch>/<kernel>.cubin`` and ``manifest.json`` (the archs and a hash of the
sources); :mod:`appliance.gpu.kernels` loads a cubin with ``cupy.RawModule(path=...)`` when the hash
matches and otherwise compiles at run time. A wheel build can call :func:`build_cubins` (see
kernels/README.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from appliance.paths import data_dir

ARCHS = ("80", "86", "89", "90")  # A100, RTX 30xx/A10, RTX 40xx/L4/L40, H100/H200
OPTIONS = ("-std=c++17",)  # no fast math: the kernels must match the references
MAX_REGISTERS = 128
MAX_STACK_BYTES = 0
MANIFEST = "manifest.json"
CUBIN_ENV = "PUFFER_KERNELS_CUBINS"  # where the cubins are (default: kernels/cubin in the data tree)


class KernelBuildError(RuntimeError):
    """A kernel failed to compile, or broke a resource limit."""


def kernels_dir() -> Path:
    return data_dir("kernels")


def cubin_dir() -> Path:
    """Where the build step writes cubins and the kernels look for them."""
    return Path(os.environ[CUBIN_ENV]) if os.environ.get(CUBIN_ENV) else kernels_dir() / "cubin"


def kernel_sources() -> list[Path]:
    return sorted(kernels_dir().glob("*.cu"))


def source_hash(folder: Path | None = None) -> str:
    """sha256 over every .cu and .cuh (name and text): a cubin built from other sources is stale."""
    folder = folder or kernels_dir()
    h = hashlib.sha256()
    for path in sorted([*folder.glob("*.cu"), *folder.glob("*.cuh")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(" ".join(OPTIONS).encode())
    return h.hexdigest()


def compile_source(path: Path, arch: str, verbose: bool = True) -> tuple[bytes, str]:
    """(cubin, NVRTC log) of one .cu for sm_<arch>; raises KernelBuildError with the log on failure."""
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(path.read_text(), path.name, [], [])
    options = [*OPTIONS, f"-arch=sm_{arch}", f"--include-path={path.parent}"]
    if verbose:
        options.append("--ptxas-options=-v")
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as e:
            raise KernelBuildError(f"{path.name} for sm_{arch}: {e}\n{nvrtc.getProgramLog(prog)}") from None
        return nvrtc.getCUBIN(prog), nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


def parse_ptxas(log: str) -> dict[str, dict[str, int]]:
    """ptxas -v output -> {kernel: {registers, stack, spill_stores, spill_loads}}."""
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            name = m.group(1)
            out[name] = {"registers": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
        elif name and (m := _FRAME.search(line)):
            out[name].update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif name and (m := _REGS.search(line)):
            out[name]["registers"] = int(m[1])
    return out


def check(archs: Sequence[str] = ARCHS, log: Callable[[str], None] = print) -> list[str]:
    """Compile every kernel for every arch; log registers per kernel; return the broken limits."""
    problems: list[str] = []
    sources = kernel_sources()
    if not sources:
        return [f"no kernels/*.cu under {kernels_dir()}"]
    for path in sources:
        for arch in archs:
            try:
                _, text = compile_source(path, arch)
            except KernelBuildError as e:
                problems.append(str(e))
                continue
            usage = parse_ptxas(text)
            if not usage:
                problems.append(f"{path.name} sm_{arch}: no ptxas report in the NVRTC log")
            for name, u in sorted(usage.items()):
                log(
                    f"sm_{arch}  {name:<24} {u['registers']:>3} registers  {u['stack']:>4} B stack  "
                    f"{u['spill_stores']} B spill stores  {u['spill_loads']} B spill loads"
                )
                if u["spill_stores"] or u["spill_loads"]:
                    problems.append(f"{name} sm_{arch}: register spills ({u})")
                if u["stack"] > MAX_STACK_BYTES:
                    problems.append(f"{name} sm_{arch}: {u['stack']} B stack > {MAX_STACK_BYTES}")
                if u["registers"] > MAX_REGISTERS:
                    problems.append(f"{name} sm_{arch}: {u['registers']} registers > {MAX_REGISTERS}")
    return problems


def build_cubins(out: Path, archs: Sequence[str] = ARCHS, log: Callable[[str], None] = print) -> int:
    """Write ``out/sm_<arch>/<kernel>.cubin`` and ``out/manifest.json``; return the number of cubins.
    Files are written to a temporary name and renamed, so a reader never sees half a cubin."""
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for path in kernel_sources():
        for arch in archs:
            start = time.perf_counter()
            cubin, _ = compile_source(path, arch, verbose=False)
            folder = out / f"sm_{arch}"
            folder.mkdir(exist_ok=True)
            _write_atomic(folder / (path.stem + ".cubin"), cubin)
            log(f"compiled {path.name} for sm_{arch} in {time.perf_counter() - start:.2f} s")
            count += 1
    manifest = {"archs": list(archs), "source_hash": source_hash(), "options": list(OPTIONS)}
    _write_atomic(out / MANIFEST, json.dumps(manifest, indent=2).encode())
    return count


def build_wheel_cubins(
    data_kernels: Path, archs: Sequence[str] = ARCHS, log: Callable[[str], None] = print
) -> int:
    """The wheel's build hook: cubins into ``<build_lib>/appliance/_data/kernels/cubin`` when NVRTC is
    there (the ``kernels`` extra), else a note and none (the kernels then compile at first use)."""
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as e:
        log(f"no NVRTC ({type(e).__name__}: {e}); the wheel ships no cubins, kernels compile at first use")
        return 0
    return build_cubins(Path(data_kernels) / "cubin", archs, log)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", nargs="+", default=list(ARCHS), help="compute capabilities, e.g. 80 90")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--out",
        type=Path,
        help=f"folder for sm_<arch>/<kernel>.cubin and manifest.json (default: ${CUBIN_ENV} or kernels/cubin)",
    )
    group.add_argument("--check", action="store_true", help="compile, print registers, enforce the limits")
    args = parser.parse_args(argv)
    bad = [a for a in args.archs if not a.isdigit()]
    if bad:
        parser.error(f"--archs takes compute capabilities such as 80 or 90, got {' '.join(bad)}")
    try:
        if args.check:
            problems = check(args.archs)
            for p in problems:
                print(f"error: {p}", file=sys.stderr)
            if problems:
                return 1
            print(
                f"kernels-check: {len(kernel_sources())} sources x {len(args.archs)} archs compiled; "
                f"no spills, stack <= {MAX_STACK_BYTES} B, registers <= {MAX_REGISTERS}"
            )
        else:
            build_cubins(args.out or cubin_dir(), args.archs)
    except ImportError as e:
        print(
            f"error: NVRTC through cupy is not available ({e}); pip install -e '.[kernels]'", file=sys.stderr
        )
        return 1
    except KernelBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
