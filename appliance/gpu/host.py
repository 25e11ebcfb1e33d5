"""The kernels' bodies compiled for the CPU (``kernels/host.cpp``, the extension
``appliance._hostkernels``): what :mod:`appliance.gpu.kernels` runs for CPU tensors.

The CUDA kernels run one thread per row; here the same C++ bodies loop over the rows, split over
torch's intra-op thread count, called through ctypes (which releases the GIL for the call). They
replace torch ops that cost the CPU trainer more than their arithmetic: the advantage's loop over the
horizon (a dozen small strided ops a step), and the minimal GRU's log-space scan. Each agrees with
:mod:`appliance.gpu.reference` to float32 rounding (tests/test_host_kernels.py).

``available()`` is False where the extension was not built (then callers use the torch
reference); ``PUFFER_KERNELS=reference`` makes :func:`use_host` False too, so the torch reference
runs everywhere.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from typing import Any

import torch

from appliance.gpu.launch import _nvec_tensor, mode

_P, _I, _L, _F, _D = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float, ctypes.c_double
_U64 = (1 << 64) - 1
SIGNATURES = {
    "pb_host_advantage": [_P, _P, _P, _P, _P, _I, _I, _F, _F, _F, _F, _I, _I],
    "pb_host_prio_keys_uniform": [_P, _P, _I, _I, _D, _D, _P, _P, _I],
    "pb_host_sample_logits": [_P, _L, _I, _P, _I, _P, ctypes.c_uint64, ctypes.c_uint64, _P, _I, _P, _P, _P],
    "pb_host_mingru_step": [_P, _P, _P, _I, _I, _P, _I],
    "pb_host_mingru_scan_fwd": [_P, _P, _P, _I, _I, _I, _I],
    "pb_host_mingru_scan_bwd": [_P, _P, _P, _P, _P, _P, _I, _I, _I, _I],
    "pb_host_adam_step": [_P, _P, _P, _P, _L, _P, _F, _F, _F, _F, _F, _I],
    "pb_host_muon_momentum": [_P, _P, _P, _L, _F, _I],
    "pb_host_muon_apply": [_P, _P, _L, _P, _I],
    "pb_host_lstm_gates": [_P, _P, _P, _L, _P, _P, _I, _I, _I, _I],
    "pb_host_lstm_gates_bf16": [_P, _P, _P, _L, _P, _P, _I, _I, _I, _I],
    "pb_host_lstm_products_i16": [_P, _L, _P, _L, _P, _P, _P, _I, _I, _I, _I, _I],
    "pb_host_lstm_step_i16": [_P, _L, _P, _L, _P, _P, _P, _P, _L, _P, _P, _I, _I, _I, _I, _I],
}


@functools.cache
def _lib() -> ctypes.CDLL | None:
    try:
        from appliance import _hostkernels
    except ImportError:
        return None
    lib = ctypes.CDLL(_hostkernels.__file__)
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, None
    return lib


def available() -> bool:
    """Whether the extension is built and loadable."""
    return _lib() is not None


def use_host(*tensors: torch.Tensor) -> bool:
    """Whether an op on these tensors runs here: float32 CPU tensors, the extension built, and
    ``PUFFER_KERNELS`` not ``reference``."""
    return (
        mode() != "reference"
        and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)
        and available()
    )


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _call(name: str, *args: Any) -> None:
    lib = _lib()
    assert lib is not None, "host kernels called without the extension (check use_host first)"
    getattr(lib, name)(*args, torch.get_num_threads())


def advantage(
    values: torch.Tensor,
    rewards: torch.Tensor,
    dones: torch.Tensor,
    ratios: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
    rho_on: str = "td_error",
) -> torch.Tensor:
    """:func:`appliance.train.advantage.advantage` for float32 CPU tensors ``[rows, horizon]``."""
    values, rewards, dones, ratios = (t.contiguous() for t in (values, rewards, dones, ratios))
    rows, horizon = values.shape
    out = torch.empty_like(values)
    _call(
        "pb_host_advantage", _ptr(values), _ptr(rewards), _ptr(dones), _ptr(ratios), _ptr(out),
        rows, horizon, gamma, gamma * gae_lambda, rho_clip, c_clip, int(rho_on == "reward"),
    )  # fmt: skip
    return out


def prio_keys(
    adv: torch.Tensor, uniform: torch.Tensor, alpha: float, floor: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment priorities ``(sum_t |A| + floor)^alpha`` and their keys ``log(1 - u) / prio`` (float64),
    as :func:`appliance.gpu.reference.prio_sample` computes them from given uniforms."""
    adv, uniform = adv.contiguous(), uniform.to(torch.float64).contiguous()
    segments, horizon = adv.shape
    prio = torch.empty(segments, dtype=torch.float64)
    key = torch.empty(segments, dtype=torch.float64)
    _call(
        "pb_host_prio_keys_uniform", _ptr(adv), _ptr(uniform), segments, horizon, alpha, floor,
        _ptr(prio), _ptr(key),
    )  # fmt: skip
    return prio, key


def sample_logits(
    out: torch.Tensor,
    nvec: tuple[int, ...] | list[int],
    seed: int,
    step: int,
    mask: torch.Tensor | None = None,
    ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`appliance.gpu.reference.sample_logits` for a float32 CPU ``out [N, sum(nvec) + 1]``: the
    same Philox draws, so the same actions."""
    out = out.contiguous()
    n, width, heads = out.shape[0], sum(nvec), len(nvec)
    action = torch.empty((n,) if heads == 1 else (n, heads), dtype=torch.int64)
    logprob, value = torch.empty(n), torch.empty(n)
    mask = None if mask is None else mask.to(torch.uint8).contiguous()
    ids = None if ids is None else ids.to(torch.int64).contiguous()
    _call(
        "pb_host_sample_logits", _ptr(out), out.stride(0), width, _ptr(_nvec_tensor(nvec, out.device)), heads, _ptr(mask),
        seed & _U64, step & _U64, _ptr(ids), n, _ptr(action), _ptr(logprob), _ptr(value),
    )  # fmt: skip
    return action, logprob, value


def mingru_step(kv: torch.Tensor, h: torch.Tensor, done: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`appliance.gpu.reference.mingru_step` (inference: no gradient) for float32 CPU tensors."""
    kv, h = kv.contiguous(), h.contiguous()
    done = None if done is None else done.float().contiguous()
    batch, hidden = h.shape
    out = torch.empty_like(h)
    _call("pb_host_mingru_step", _ptr(kv), _ptr(h), _ptr(done), batch, hidden, _ptr(out))
    return out


def i16_missing() -> str | None:
    """Why :func:`lstm_products_i16` would not run as SIMD code in this process, in words (None
    where it would): its SSE2 and AVX2 builds are x86's, and elsewhere (an Arm CPU, say) it is a
    scalar loop, slower than torch's float32 products; so the trainer leaves
    ``train.rollout_int16`` off where this says why."""
    if mode() == "reference":
        return "PUFFER_KERNELS=reference runs torch's own ops"
    if not available():
        return "appliance._hostkernels, which holds them, is not built"
    machine = platform.machine()
    if machine.lower() not in ("x86_64", "amd64"):
        return f"they have SIMD code for x86 CPUs only, and this one is {machine or 'not x86'}"
    return None


def simd_level() -> int:
    """The gate math's SIMD build for this process: 2 (AVX2 and FMA) where the CPU has them and
    torch's own kernels run at AVX2 or above, 1 (AVX) on a CPU of the avx kind or one whose torch
    kernels are capped below AVX2, 0 (SSE2) on the older kind or without AVX. ``PUFFER_CPU_KIND``
    emulating a lesser CPU caps this to that kind's build, as ``ATEN_CPU_CAPABILITY`` does."""
    lib = _lib()
    return 0 if lib is None else _simd_level(lib)


def widest_simd() -> int:
    """The widest build of the gate math this CPU can run (:func:`simd_level`'s numbers), whatever
    kind it acts as; 0 without the extension."""
    lib = _lib()
    if lib is None:
        return 0
    fn = lib.pb_host_lstm_gates_isa
    fn.argtypes, fn.restype = [], ctypes.c_int
    return int(fn())


@functools.cache
def _simd_level(lib: ctypes.CDLL) -> int:
    from appliance.sysinfo.cpu import cpu_kind

    allowed = 2 if torch.backends.cpu.get_cpu_capability() != "DEFAULT" else 0 if cpu_kind() == "older" else 1
    return min(allowed, widest_simd())


def lstm_gates(
    gates: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LSTM cell's output from its pre-activations: ``gates [B, 4H]`` (torch's i, f, g, o order,
    both products in), ``bias [4H]`` (both biases' sum; none: zero) and ``c [B, H]`` -> ``(h, c')``,
    float32 CPU tensors; the cell's arithmetic to float32 rounding (tests/test_host_kernels.py).
    ``gates`` may be bfloat16 (the bf16 rollout's product): read as it is where the AVX2 build runs,
    the same results as on ``gates.float()``, which other builds are given."""
    if gates.dtype not in (torch.float32, torch.bfloat16) or c.dtype != torch.float32:
        raise ValueError(
            f"lstm_gates: gates {gates.dtype} and c {c.dtype}; it takes float32 or bfloat16 gates and "
            "a float32 c"
        )
    if gates.dtype == torch.bfloat16 and simd_level() < 2:
        gates = gates.float()
    gates = gates.contiguous()
    if c.stride(1) != 1:
        c = c.contiguous()
    batch, hidden = c.shape
    bias = torch.zeros(4 * hidden) if bias is None else bias.float().contiguous()
    if bias.shape != (4 * hidden,) or gates.shape != (batch, 4 * hidden):
        raise ValueError(
            f"lstm_gates: gates {tuple(gates.shape)}, bias {tuple(bias.shape)} and c {tuple(c.shape)} "
            f"do not fit one cell of {hidden} units (gates [B, {4 * hidden}], bias [{4 * hidden}])"
        )
    h_out, c_out = torch.empty(batch, hidden), torch.empty(batch, hidden)
    name = "pb_host_lstm_gates_bf16" if gates.dtype == torch.bfloat16 else "pb_host_lstm_gates"
    _call(
        name, _ptr(gates), _ptr(bias), _ptr(c), c.stride(0), _ptr(h_out), _ptr(c_out),
        batch, hidden, simd_level(),
    )  # fmt: skip
    return h_out, c_out


def _i16_operands(
    name: str, x: torch.Tensor, h: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """The int16 products' operands checked (float32 CPU tensors that fit one cell) and made
    contiguous where the kernels need it; a clear error names ``name`` otherwise."""
    tensors = (x, h, w_ih, w_hh)
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):
        raise ValueError(
            f"{name}: float32 CPU tensors only, got " + ", ".join(f"{t.dtype} on {t.device}" for t in tensors)
        )
    batch, hidden = h.shape
    if x.shape[0] != batch or w_ih.shape != (4 * hidden, x.shape[1]) or w_hh.shape != (4 * hidden, hidden):
        raise ValueError(
            f"{name}: x {tuple(x.shape)}, h {tuple(h.shape)}, w_ih {tuple(w_ih.shape)} and "
            f"w_hh {tuple(w_hh.shape)} do not fit one cell (w_ih [4H, in], w_hh [4H, H])"
        )
    x, h = (t if t.stride(1) == 1 else t.contiguous() for t in (x, h))
    return x, h, w_ih.contiguous(), w_hh.contiguous()


def lstm_products_i16(
    x: torch.Tensor, h: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor
) -> torch.Tensor:
    """The LSTM cell's two products, ``x @ w_ih.T + h @ w_hh.T`` (``[B, 4H]``, no biases), in 16-bit
    integers: each row of ``x`` and of ``h`` and each weight row scaled to the int16 range, summed in
    int32 and scaled back, about 1e-4 of the largest term from the float32 product
    (tests/test_host_kernels.py). Float32 CPU tensors, the weights in ``nn.LSTMCell``'s layout
    (``[4H, in]``, ``[4H, H]``). For the float32 CPU rollout (``train.rollout_int16``), where the
    integer multiply-add sums twice the pairs a float one does (docs/lab/cpu-speed.md)."""
    x, h, w_ih, w_hh = _i16_operands("lstm_products_i16", x, h, w_ih, w_hh)
    batch, hidden = h.shape
    gates = torch.empty(batch, 4 * hidden)
    _call(
        "pb_host_lstm_products_i16", _ptr(x), x.stride(0), _ptr(h), h.stride(0), _ptr(w_ih), _ptr(w_hh),
        _ptr(gates), batch, x.shape[1], hidden, simd_level(),
    )  # fmt: skip
    return gates


def lstm_step_i16(
    x: torch.Tensor,
    h: torch.Tensor,
    c: torch.Tensor,
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LSTM cell's step with :func:`lstm_products_i16`'s products and :func:`lstm_gates`'
    arithmetic in one pass: ``(h', c')`` from ``x``, ``(h, c)`` and both biases' sum ``bias [4H]``,
    each block of rows' pre-activations kept in a small tile while the gate math reads them, never
    written out whole. The same values as ``lstm_gates(lstm_products_i16(...), c, bias)``
    (tests/test_host_kernels.py)."""
    x, h, w_ih, w_hh = _i16_operands("lstm_step_i16", x, h, w_ih, w_hh)
    batch, hidden = h.shape
    if c.dtype != torch.float32 or c.shape != (batch, hidden) or bias.shape != (4 * hidden,):
        raise ValueError(
            f"lstm_step_i16: c {c.dtype} {tuple(c.shape)} and bias {tuple(bias.shape)} do not fit h "
            f"{tuple(h.shape)} (c float32 [B, H], bias [4H])"
        )
    if c.stride(1) != 1:
        c = c.contiguous()
    bias = bias.float().contiguous()
    h_out, c_out = torch.empty(batch, hidden), torch.empty(batch, hidden)
    _call(
        "pb_host_lstm_step_i16", _ptr(x), x.stride(0), _ptr(h), h.stride(0), _ptr(w_ih), _ptr(w_hh),
        _ptr(bias), _ptr(c), c.stride(0), _ptr(h_out), _ptr(c_out), batch, x.shape[1], hidden,
        simd_level(),
    )  # fmt: skip
    return h_out, c_out


class Scan:
    """The mingru_scan bodies as a backend of :class:`appliance.gpu.kernels.MinGRUScan`."""

    @staticmethod
    def forward(kv: torch.Tensor, h0: torch.Tensor, h: torch.Tensor) -> None:
        b, t, hidden = h.shape
        _call("pb_host_mingru_scan_fwd", _ptr(kv), _ptr(h0), _ptr(h), b, t, hidden)

    @staticmethod
    def backward(kv, h0, h, grad_h, grad_kv, grad_h0) -> None:  # type: ignore[no-untyped-def]
        b, t, hidden = h.shape
        _call(
            "pb_host_mingru_scan_bwd", _ptr(kv), _ptr(h0), _ptr(h), _ptr(grad_h), _ptr(grad_kv),
            _ptr(grad_h0), b, t, hidden,
        )  # fmt: skip


# optim_step.cuh over the flat buffers of appliance.train.flat (float32, contiguous, CPU): in place.


def adam_step(p, g, m, v, scal, beta1: float, beta2: float, eps: float, weight_decay: float = 0.0) -> None:  # type: ignore[no-untyped-def]
    """:func:`appliance.gpu.reference.adam_step` with the kernel's body."""
    _call(
        "pb_host_adam_step", _ptr(p), _ptr(g), _ptr(m), _ptr(v), p.numel(), _ptr(scal), 1 - beta1, beta2,
        1 - beta2, eps, weight_decay,
    )  # fmt: skip


def muon_momentum(g: torch.Tensor, buf: torch.Tensor, u: torch.Tensor, beta: float) -> None:
    """:func:`appliance.gpu.reference.muon_momentum` with the kernel's body."""
    _call("pb_host_muon_momentum", _ptr(g), _ptr(buf), _ptr(u), g.numel(), beta)


def muon_apply(p: torch.Tensor, u: torch.Tensor, lr: torch.Tensor) -> None:
    """:func:`appliance.gpu.reference.muon_apply` with the kernel's body (``lr`` a float32 0-dim tensor)."""
    _call("pb_host_muon_apply", _ptr(p), _ptr(u), p.numel(), _ptr(lr))
