"""The fused kernels' one entry point: ``appliance.gpu.kernels.<op>(...)``.

For CUDA tensors each op launches its cupy kernel (``kernels/<op>.cu``) on torch's current stream
(``cupy.cuda.ExternalStream``) with raw pointers: no DLPack conversion and, when the caller passes
the output buffers, no allocation (scratch space is allocated once per shape and kept). Everywhere
else (CPU tensors, no cupy) it runs the torch reference of :mod:`appliance.gpu.reference`, which has
the same signature, or for float32 CPU tensors the same kernel bodies compiled for the CPU where they
beat torch (:mod:`appliance.gpu.host`: sample_logits, mingru_step, mingru_scan, the priorities of
prio_sample, the advantage); ``advantage`` and ``ppo_loss`` have no reference here: they accelerate the
trainer's own torch code (``appliance.train.advantage``, ``appliance.train.losses``), which the
trainer runs itself where the kernels do not. ``PUFFER_KERNELS=reference`` forces the reference, ``PUFFER_KERNELS=cuda`` the
kernels (an error, in one line, where they cannot run).

Kernels come from cubins built by ``python -m appliance.gpu.warm --out DIR`` for the running GPU's
architecture (``PUFFER_KERNELS_CUBINS``, default ``kernels/cubin`` in the data tree), loaded with
``cupy.RawModule(path=...)``; when there is none for this GPU, or it was built from other sources,
NVRTC compiles them once at run time into ``~/.cache/puffer-bench/kernels``.

cupy is optional (the ``cuda*`` extras); nothing here imports it until a CUDA tensor arrives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from appliance.errors import ConfigError, DeviceError
from appliance.gpu import host, reference
from appliance.gpu.launch import (  # noqa: F401  (ENV, MODES, mode, _Modules, _MODULES: callers use them from here)
    _MODULES,
    ENV,
    MODES,
    _check,
    _launch,
    _Modules,
    _nvec_tensor,
    _ptr,
    _scratch,
    _suffix,
    mode,
    use_cuda,
)
from appliance.gpu.reference import PPOLoss

__all__ = [
    "PPOLoss",
    "adam_step",
    "advantage",
    "lstm_step",
    "mingru_scan",
    "mingru_step",
    "mode",
    "muon_apply",
    "muon_momentum",
    "ppo_loss",
    "prio_sample",
    "sample_logits",
]


def _cuda_only(op: str, tensor: torch.Tensor, definition: str) -> None:
    """The ops that accelerate a torch definition of the trainer's run only where :func:`use_cuda`
    says kernels run; the trainer calls the definition itself everywhere else."""
    if not use_cuda(tensor):
        raise DeviceError(
            f"kernels.{op} runs on CUDA tensors with cupy only (here: {tensor.device}, {ENV}={mode()}); "
            f"the torch definition is {definition}"
        )


# ------------------------------------------------------------------------------------ ops


def sample_logits(
    out: torch.Tensor,
    nvec: Sequence[int],
    seed: int,
    step: int,
    mask: torch.Tensor | None = None,
    *,
    ids: torch.Tensor | None = None,
    action: torch.Tensor | None = None,
    logprob: torch.Tensor | None = None,
    value: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not use_cuda(out):
        n, width = out.shape[0], sum(nvec)
        if (
            host.use_host(out)
            and out.shape[1:] == (width + 1,)
            and (mask is None or mask.shape == (n, width))
            and (ids is None or ids.numel() == n)
        ):  # other shapes go to the reference (which says what is wrong with them)
            # the draws from the host build, the log-probability as the reference computes it (bit for
            # bit: the C loop's expf and sums round otherwise, and runs would part ways)
            act, _, val = host.sample_logits(out, nvec, seed, reference._scalar(step), mask, ids)
            lp = reference.sampled_logprob(out, nvec, act, mask)
            into = (action, logprob, value)
            return tuple(reference._into(o, g) for o, g in zip(into, (act, lp, val), strict=True))  # type: ignore[return-value]
        return reference.sample_logits(
            out, nvec, seed, step, mask, ids=ids, action=action, logprob=logprob, value=value
        )
    n, width = out.shape[0], sum(nvec)
    if out.stride(1) != 1 or out.shape[1] < width + 1:
        raise ConfigError(f"out must be [N, sum(nvec) + 1] = [N, {width + 1}] with unit column stride")
    heads = len(nvec)
    action = (
        action if action is not None else out.new_empty((n,) if heads == 1 else (n, heads), dtype=torch.int64)
    )
    logprob = logprob if logprob is not None else out.new_empty(n, dtype=torch.float32)
    value = value if value is not None else out.new_empty(n, dtype=torch.float32)
    if mask is not None:
        _check(mask, "mask", torch.uint8 if mask.dtype != torch.bool else torch.bool)
    args = (
        _ptr(out), np.int64(out.stride(0)), np.int32(width), _ptr(_nvec_tensor(nvec, out.device)),
        np.int32(heads), _ptr(mask), np.uint64(seed), *_step_args(step), _ptr(_ids(ids, n)), np.int32(n),
        _ptr(_check(action, "action", torch.int64)), _ptr(_check(logprob, "logprob", torch.float32)),
        _ptr(_check(value, "value", torch.float32)),
    )  # fmt: skip
    _launch("sample_logits", f"sample_logits_{_suffix(out)}", out.device, n, args)
    return action, logprob, value


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
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    _cuda_only("advantage", values, "appliance.train.advantage.advantage")
    rows, horizon = values.shape
    for name, t in (("values", values), ("rewards", rewards), ("dones", dones), ("ratios", ratios)):
        _check(t, name, torch.float32)
    out = out if out is not None else torch.empty_like(values)
    args = (
        _ptr(values), _ptr(rewards), _ptr(dones), _ptr(ratios), _ptr(_check(out, "out", torch.float32)),
        np.int32(rows), np.int32(horizon), np.float32(gamma), np.float32(gamma * gae_lambda),
        np.float32(rho_clip), np.float32(c_clip), np.int32(rho_on == "reward"),
    )  # fmt: skip
    _launch("advantage", "advantage_f32", values.device, rows, args)
    return out


def lstm_step(
    gx: torch.Tensor,
    gh: torch.Tensor,
    c: torch.Tensor,
    done: torch.Tensor | None = None,
    b_hh: torch.Tensor | None = None,
    *,
    h_out: torch.Tensor | None = None,
    c_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if not use_cuda(gx):
        return reference.lstm_step(gx, gh, c, done, b_hh, h_out=h_out, c_out=c_out)
    if done is not None and b_hh is None:
        raise ValueError("lstm_step with done needs b_hh (the hidden bias a reset row's gates keep)")
    batch, hidden = c.shape
    h_out = h_out if h_out is not None else c.new_empty(batch, hidden, dtype=torch.float32)
    c_out = c_out if c_out is not None else c.new_empty(batch, hidden, dtype=torch.float32)
    _check(gx, "gx"), _check(gh, "gh", gx.dtype), _check(c, "c", torch.float32)
    if b_hh is not None:
        _check(b_hh, "b_hh", gx.dtype)
    if done is not None:
        _check(done, "done", torch.float32)
    args = (
        _ptr(gx), _ptr(gh), _ptr(b_hh), _ptr(c), _ptr(done), np.int32(batch), np.int32(hidden),
        _ptr(_check(h_out, "h_out", torch.float32)), _ptr(_check(c_out, "c_out", torch.float32)),
    )  # fmt: skip
    _launch("lstm_step", f"lstm_step_{_suffix(gx)}", gx.device, batch * hidden, args)
    return h_out, c_out


def mingru_step(
    kv: torch.Tensor, h: torch.Tensor, done: torch.Tensor | None = None, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    if not use_cuda(kv):
        kv32 = kv.float()  # bf16 rollouts: the host build takes float32 (a no-op for float32 kv)
        if host.use_host(kv32, h) and not torch.is_grad_enabled():
            h_new = host.mingru_step(kv32.contiguous(), h, done)
            return h_new if out is None else out.copy_(h_new)
        return reference.mingru_step(kv, h, done, out=out)
    batch, hidden = h.shape
    out = out if out is not None else h.new_empty(batch, hidden, dtype=torch.float32)
    _check(kv, "kv"), _check(h, "h", torch.float32)
    if done is not None:
        _check(done, "done", torch.float32)
    args = (
        _ptr(kv),
        _ptr(h),
        _ptr(done),
        np.int32(batch),
        np.int32(hidden),
        _ptr(_check(out, "out", torch.float32)),
    )
    _launch("mingru_step", f"mingru_step_{_suffix(kv)}", kv.device, batch * hidden, args)
    return out


class CudaScan:
    """The mingru_scan kernels as a backend of :class:`MinGRUScan` (float32, CUDA tensors)."""

    @staticmethod
    def forward(kv: torch.Tensor, h0: torch.Tensor, h: torch.Tensor) -> None:
        b, t, hidden = h.shape
        args = (_ptr(kv), _ptr(h0), _ptr(h), np.int32(b), np.int32(t), np.int32(hidden))
        _launch("mingru_scan", "mingru_scan_fwd_f32", kv.device, b * hidden, args)

    @staticmethod
    def backward(kv, h0, h, grad_h, grad_kv, grad_h0) -> None:  # type: ignore[no-untyped-def]
        b, t, hidden = h.shape
        args = (
            _ptr(kv), _ptr(h0), _ptr(h), _ptr(grad_h), _ptr(grad_kv), _ptr(grad_h0),
            np.int32(b), np.int32(t), np.int32(hidden),
        )  # fmt: skip
        _launch("mingru_scan", "mingru_scan_bwd_f32", kv.device, b * hidden, args)


class MinGRUScan(torch.autograd.Function):
    """h = scan(kv, h0) with the kernels' analytic backward; ``backend`` runs the two passes (CudaScan
    on the GPU, :class:`appliance.gpu.host.Scan` on the CPU; the CPU tests also pass their own g++
    build of the bodies)."""

    @staticmethod
    def forward(ctx: Any, kv: torch.Tensor, h0: torch.Tensor, backend: Any) -> torch.Tensor:
        kv, h0 = kv.contiguous(), h0.contiguous()
        b, t, two_h = kv.shape
        h = kv.new_empty(b, t, two_h // 2)
        backend.forward(kv, h0, h)
        ctx.save_for_backward(kv, h0, h)
        ctx.backend = backend
        return h

    @staticmethod
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        kv, h0, h = ctx.saved_tensors
        grad_kv, grad_h0 = torch.empty_like(kv), torch.empty_like(h0)
        ctx.backend.backward(kv, h0, h, grad_h.contiguous(), grad_kv, grad_h0)
        return grad_kv, grad_h0, None


def mingru_scan(kv: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    if not use_cuda(kv):
        kv32, h32 = kv.float(), h0.float()  # under bf16 autocast too: the scan runs in float32, as on CUDA
        if host.use_host(kv32, h32):
            return MinGRUScan.apply(kv32, h32, host.Scan)
        return reference.mingru_scan(kv, h0)
    return MinGRUScan.apply(kv.float(), h0.float(), CudaScan)


def ppo_loss(
    logits: torch.Tensor,
    value: torch.Tensor,
    actions: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_value: torch.Tensor,
    mask: torch.Tensor,
    nvec: Sequence[int],
    clip_coef: float,
    vf_clip_coef: float,
    vf_coef: float,
    ent_coef: float,
    grad_scale: float = 1.0,
    *,
    out: PPOLoss | None = None,
) -> PPOLoss:
    _cuda_only("ppo_loss", logits, "appliance.train.losses.ppo_loss")
    rows, width = logits.shape[0], sum(nvec)
    if logits.stride(1) != 1:
        raise ConfigError("logits must have unit column stride for the CUDA kernels")
    for name, t in (
        ("value", value), ("old_logprob", old_logprob), ("advantages", advantages),
        ("returns", returns), ("old_value", old_value), ("mask", mask),
    ):  # fmt: skip
        _check(t, name, torch.float32)
    _check(actions, "actions", torch.int64)
    dev = logits.device
    terms = _scratch("ppo_terms", (rows, 6), torch.float32, dev)
    if out is None:
        out = PPOLoss(
            torch.empty(6, dtype=torch.float32, device=dev),
            torch.empty(rows, dtype=torch.float32, device=dev),
            torch.empty(rows, width, dtype=torch.float32, device=dev),
            torch.empty(rows, dtype=torch.float32, device=dev),
        )
    for name, t in zip(PPOLoss._fields, out, strict=True):
        _check(t, f"out.{name}", torch.float32)
    stats, ratio, grad_logits, grad_value = out
    args = (
        _ptr(logits), np.int64(logits.stride(0)), _ptr(_nvec_tensor(nvec, dev)), np.int32(len(nvec)),
        _ptr(actions), _ptr(old_logprob), _ptr(advantages), _ptr(returns), _ptr(value), _ptr(old_value),
        _ptr(mask), np.float32(clip_coef), np.float32(vf_clip_coef), np.float32(vf_coef),
        np.float32(ent_coef), np.float32(grad_scale), np.int32(rows), _ptr(terms), _ptr(ratio),
        _ptr(grad_logits), _ptr(grad_value),
    )  # fmt: skip
    _launch("ppo_loss", f"ppo_loss_rows_{_suffix(logits)}", dev, rows, args)
    args = (
        _ptr(terms), np.int32(rows), np.int32(width), np.float32(vf_coef), np.float32(ent_coef),
        _ptr(stats), _ptr(grad_logits), _ptr(grad_value),
    )  # fmt: skip
    _launch("ppo_loss", "ppo_loss_reduce", dev, 1, args, block=256)  # one block: PB_REDUCE_THREADS
    return out


def prio_sample(
    adv: torch.Tensor,
    alpha: float,
    beta: float | torch.Tensor,
    samples: int,
    seed: int,
    step: int | torch.Tensor,
    *,
    floor: float = reference.PRIO_FLOOR,
    uniform: torch.Tensor | None = None,
    idx: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    replacement: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    if replacement:  # a cumulative sum and a binary search: torch ops on any device, no kernel
        return reference.prio_sample(
            adv, alpha, beta, samples, seed, step, floor=floor, uniform=uniform, idx=idx, weight=weight,
            replacement=True,
        )  # fmt: skip
    if uniform is not None and host.use_host(adv):  # the CPU trainer's draw: its generator's uniforms
        reference._check_samples(samples, adv.shape[0], floor)
        prio, key = host.prio_keys(adv, uniform, alpha, floor)
        k = key.topk(samples).indices
        w = (adv.shape[0] * prio[k] / prio.sum()).pow(-beta).float()
        return reference._into(idx, k), reference._into(weight, w)
    if not use_cuda(adv) or uniform is not None:  # given uniforms: torch ops on the device, no kernel
        return reference.prio_sample(
            adv, alpha, beta, samples, seed, step, floor=floor, uniform=uniform, idx=idx, weight=weight
        )
    segments, horizon = _check(adv, "adv", torch.float32).shape
    reference._check_samples(samples, segments, floor)
    dev = adv.device
    prio = _scratch("prio", (segments,), torch.float64, dev)
    key = _scratch("prio_key", (segments,), torch.float64, dev)
    args = (
        _ptr(adv), np.int32(segments), np.int32(horizon), np.float64(alpha), np.float64(floor),
        np.uint64(seed), *_step_args(step), _ptr(prio), _ptr(key),
    )  # fmt: skip
    _launch("prio_sample", "prio_keys", dev, segments, args)
    k = key.topk(samples).indices  # on the device: no host sync
    w = (segments * prio[k] / prio.sum()).pow(-beta).float()
    return (k if idx is None else idx.copy_(k)), (w if weight is None else weight.copy_(w))


def _step_args(step: int | torch.Tensor) -> tuple[np.uint64, np.uint64]:
    """A step given as an int, or as an int64 tensor on the device (read by the kernel, so a captured
    graph sees the value at replay): the kernels' (step, step_ptr) pair."""
    if isinstance(step, torch.Tensor):
        return np.uint64(0), _ptr(_check(step, "step", torch.int64))
    return np.uint64(step), np.uint64(0)


def _ids(ids: torch.Tensor | None, n: int) -> torch.Tensor | None:
    if ids is not None and (ids.dtype != torch.int64 or ids.numel() != n):
        raise ConfigError(f"ids must be int64 with one id per row ({n}), got {ids.dtype} {tuple(ids.shape)}")
    return ids


# ------------------------------------------------------------------ optim_step (flat buffers)
# The optimizers' elementwise work over appliance.train.flat's buffers, in place: the kernel on
# CUDA, the same body compiled for the CPU (appliance.gpu.host) for float32 CPU tensors, else torch.


def adam_step(
    p: torch.Tensor,
    g: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    scal: torch.Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float = 0.0,
) -> None:
    if not use_cuda(p):
        impl = host if host.use_host(p, g, m, v, scal) else reference
        return impl.adam_step(p, g, m, v, scal, beta1, beta2, eps, weight_decay)
    for name, t in (("p", p), ("g", g), ("m", m), ("v", v), ("scal", scal)):
        _check(t, name, torch.float32)
    args = (
        _ptr(p), _ptr(g), _ptr(m), _ptr(v), np.int64(p.numel()), _ptr(scal), np.float32(1 - beta1),
        np.float32(beta2), np.float32(1 - beta2), np.float32(eps), np.float32(weight_decay),
    )  # fmt: skip
    _launch("optim_step", "adam_step_f32", p.device, p.numel(), args)
    return None


def muon_momentum(g: torch.Tensor, buf: torch.Tensor, u: torch.Tensor, beta: float) -> None:
    if not use_cuda(g):
        impl = host if host.use_host(g, buf, u) else reference
        return impl.muon_momentum(g, buf, u, beta)
    for name, t in (("g", g), ("buf", buf), ("u", u)):
        _check(t, name, torch.float32)
    args = (_ptr(g), _ptr(buf), _ptr(u), np.int64(g.numel()), np.float32(beta))
    _launch("optim_step", "muon_momentum_f32", g.device, g.numel(), args)
    return None


def muon_apply(p: torch.Tensor, u: torch.Tensor, lr: torch.Tensor) -> None:
    if not use_cuda(p):
        impl = host if host.use_host(p, u, lr) else reference
        return impl.muon_apply(p, u, lr)
    for name, t in (("p", p), ("u", u), ("lr", lr)):
        _check(t, name, torch.float32)
    _launch(
        "optim_step", "muon_apply_f32", p.device, p.numel(), (_ptr(p), _ptr(u), np.int64(p.numel()), _ptr(lr))
    )
    return None
