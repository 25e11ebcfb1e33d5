"""How a fused kernel runs: the dispatch between a cupy kernel and the torch reference
(``PUFFER_KERNELS``), the kernels' modules (a shipped cubin or one NVRTC compile per source file),
scratch buffers kept per shape, and the launch on torch's current stream. The ops themselves, with
their argument checks, are :mod:`appliance.gpu.kernels`.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from appliance.errors import ConfigError, DeviceError

ENV = "PUFFER_KERNELS"
MODES = ("auto", "reference", "cuda")
THREADS = 256


# ------------------------------------------------------------------------------------ dispatch


def mode() -> str:
    """``PUFFER_KERNELS``: auto (kernels for CUDA tensors when cupy is there), reference or cuda."""
    value = os.environ.get(ENV, "").strip().lower() or "auto"
    if value not in MODES:
        raise ConfigError(f"{ENV}={os.environ[ENV]!r} is not one of {', '.join(MODES)}")
    return value


@functools.cache
def _cupy_error() -> str | None:
    try:
        import cupy  # noqa: F401
    except Exception as e:
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return None


def use_cuda(tensor: torch.Tensor) -> bool:
    """Whether an op on ``tensor`` runs the cupy kernel (True) or the torch reference (False)."""
    m = mode()
    if m == "reference":
        return False
    if m == "cuda":
        if not tensor.is_cuda:
            raise DeviceError(
                f"{ENV}=cuda, but the tensors are on {tensor.device} "
                f"(torch sees {'a' if torch.cuda.is_available() else 'no'} CUDA device); unset {ENV} to use the torch reference"
            )
        if err := _cupy_error():
            raise DeviceError(
                f"{ENV}=cuda, but cupy cannot be imported ({err}); install puffer-bench[cuda12]"
            )
        return True
    return tensor.is_cuda and _cupy_error() is None


# ------------------------------------------------------------------------------------ loading


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "puffer-bench" / "kernels"


class _Modules:
    """One cupy.RawModule per (device, source file), from a shipped cubin or compiled once."""

    def __init__(self) -> None:
        self._modules: dict[tuple[int, str], Any] = {}
        self._functions: dict[tuple[int, str], Any] = {}
        self._streams: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.origin: dict[str, str] = {}  # source -> "cubin <path>" or "nvrtc <path>", for gpu-check

    def cubin_path(self, source: str, arch: str) -> Path:
        from appliance.gpu import warm

        shipped = warm.cubin_dir()
        manifest = shipped / warm.MANIFEST
        path = shipped / f"sm_{arch}" / f"{source}.cubin"
        digest = warm.source_hash()
        try:
            fresh = json.loads(manifest.read_text()).get("source_hash") == digest
        except (OSError, ValueError):
            fresh = False
        if fresh and path.is_file():
            self.origin[source] = f"cubin {path}"
            return path
        cached = _cache_dir() / digest[:16] / f"sm_{arch}" / f"{source}.cubin"
        if not cached.is_file():
            cubin, _ = warm.compile_source(warm.kernels_dir() / f"{source}.cu", arch, verbose=False)
            cached.parent.mkdir(parents=True, exist_ok=True)
            warm._write_atomic(cached, cubin)
        self.origin[source] = f"nvrtc {cached}"
        return cached

    def function(self, source: str, name: str, device: torch.device) -> Any:
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = (index, name)
        fn = self._functions.get(key)
        if fn is not None:
            return fn
        import cupy

        with self._lock, cupy.cuda.Device(index):
            module = self._modules.get((index, source))
            if module is None:
                major, minor = torch.cuda.get_device_capability(index)
                module = cupy.RawModule(path=str(self.cubin_path(source, f"{major}{minor}")))
                self._modules[(index, source)] = module
            fn = self._functions[key] = module.get_function(name)
        return fn

    def stream(self) -> Any:
        import cupy

        ptr = torch.cuda.current_stream().cuda_stream
        s = self._streams.get(ptr)
        if s is None:
            s = self._streams[ptr] = cupy.cuda.ExternalStream(ptr)
        return s


_MODULES = _Modules()
_SCRATCH: dict[tuple[Any, ...], torch.Tensor] = {}


def _scratch(key: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    k = (key, shape, dtype, device)
    t = _SCRATCH.get(k)
    if t is None:
        t = _SCRATCH[k] = torch.empty(shape, dtype=dtype, device=device)
    return t


def _nvec_tensor(nvec: Sequence[int], device: torch.device) -> torch.Tensor:
    k = ("nvec", tuple(int(n) for n in nvec), torch.int32, device)
    t = _SCRATCH.get(k)
    if t is None:
        t = _SCRATCH[k] = torch.tensor(list(k[1]), dtype=torch.int32, device=device)
    return t


def _ptr(t: torch.Tensor | None) -> np.uint64:
    return np.uint64(0 if t is None else t.data_ptr())


def _launch(
    source: str, name: str, device: torch.device, n: int, args: tuple[Any, ...], block: int = THREADS
) -> None:
    fn = _MODULES.function(source, name, device)
    grid = max(1, min((n + block - 1) // block, 65535 * 32))
    with _MODULES.stream():
        fn((grid,), (block,), args)


def _suffix(t: torch.Tensor) -> str:
    if t.dtype == torch.float32:
        return "f32"
    if t.dtype == torch.bfloat16:
        return "bf16"
    raise ConfigError(f"the kernels store float32 or bfloat16, got {t.dtype}")


def _check(t: torch.Tensor, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    if not t.is_contiguous():
        raise ConfigError(f"{name} must be contiguous for the CUDA kernels (got strides {t.stride()})")
    if dtype is not None and t.dtype != dtype:
        raise ConfigError(f"{name} must be {dtype} for the CUDA kernels, got {t.dtype}")
    return t
