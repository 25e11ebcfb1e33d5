"""Torch references of the fused kernels in ``kernels/``: the same signatures as
:mod:`appliance.gpu.kernels`, the same math as the trainer code each kernel replaces.

These run wherever the kernels do not (CPU, no cupy, ``PUFFER_KERNELS=reference``) and are what the
kernels are tested against: on the CPU through the ``.cuh`` bodies compiled with g++
(tests/test_kernels.py), on a GPU through ``puffer-bench gpu-check``. The advantage and the PPO loss
have no copy here: their definitions are the trainer's (``appliance.train.advantage``,
``appliance.train.losses``), and their kernels are tested against those.

Random draws come from Philox4x32-10 keyed on (seed, step, index, lane), implemented here with int64
tensor arithmetic so the reference reproduces the kernels' uniforms bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

# ---------------------------------------------------------------------------------------- Philox

_M0, _M1, _W0, _W1, _MASK = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF
PRIO_LANE = 0x80000000  # kernels/prio_sample.cuh: PB_PRIO_LANE


def philox(
    seed: int, step: int, index: torch.Tensor, lane: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32-10 of counter (index, lane, step lo, step hi) under key (seed lo, seed hi).

    ``index`` is an int64 tensor; returns four int64 tensors holding the 32-bit output words. Products
    wrap modulo 2^64 in int64, and masking recovers the exact high and low words."""
    x = index.to(torch.int64) & _MASK
    y = torch.full_like(x, lane & _MASK)
    z = torch.full_like(x, step & _MASK)
    w = torch.full_like(x, (step >> 32) & _MASK)
    k0, k1 = seed & _MASK, (seed >> 32) & _MASK
    for _ in range(10):
        p0, p1 = x * _M0, z * _M1
        x, y, z, w = ((p1 >> 32) & _MASK) ^ y ^ k0, p1 & _MASK, ((p0 >> 32) & _MASK) ^ w ^ k1, p0 & _MASK
        k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
    return x, y, z, w


def uniform24(word: torch.Tensor) -> torch.Tensor:
    """Float32 uniform in [0, 1) from the top 24 bits of a 32-bit word (exact)."""
    return (word >> 8).to(torch.float32) * (1.0 / 16777216.0)


def uniform53(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Float64 uniform in [0, 1) with 53 bits from two words (exact)."""
    return ((a >> 5).to(torch.float64) * 67108864.0 + (b >> 6).to(torch.float64)) * (1.0 / 9007199254740992.0)


# ---------------------------------------------------------------------------------------- ops


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
    """Decoder output ``[N, sum(nvec) + 1]`` (logits of every head, then the value) -> (action, logprob,
    value). ``action`` is int64 ``[N]`` for one head, ``[N, heads]`` otherwise; ``mask`` ``[N, sum(nvec)]``
    (nonzero = allowed) is optional, and a head with no allowed action samples unmasked.

    Replaces ``Policy.sample(out)`` (Categorical per head) plus the value head's squeeze in the rollout;
    the draws come from Philox(seed, step, key, head) instead of torch's generator, the key being the
    agent's id from ``ids`` (int64 ``[N]``; default its row), so an agent draws the same whichever batch
    or buffer it is stepped in. ``step`` may be an int64 tensor held on the device (the CUDA kernel
    reads it there, so a captured graph draws anew at each replay)."""
    n_agents, width = out.shape[0], sum(nvec)
    step = _scalar(step)
    agents = torch.arange(n_agents, device=out.device) if ids is None else ids.to(out.device, torch.int64)
    actions, heads = [], _heads(out, nvec, mask)
    for h, (logits, use, _mx, e, s) in enumerate(heads):
        u = uniform24(philox(seed, step, agents, h)[0])
        hit = (e.cumsum(1) > (u * s)[:, None]) & use
        last = logits.shape[1] - 1 - use.flip(1).to(torch.uint8).argmax(1)
        actions.append(torch.where(hit.any(1), hit.to(torch.uint8).argmax(1), last))
    act = actions[0] if len(nvec) == 1 else torch.stack(actions, 1)
    val = out[:, width].float()
    return _into(action, act), _into(logprob, _logprob(heads, act)), _into(value, val)


def _heads(
    out: torch.Tensor, nvec: Sequence[int], mask: torch.Tensor | None
) -> list[tuple[torch.Tensor, ...]]:
    """Per head of ``out``: (logits, the actions it may take, their max, exp(logit - max) where
    allowed, the sum of those)."""
    heads, offset = [], 0
    for n in nvec:
        logits = out[:, offset : offset + n].float()
        if mask is None:
            use = torch.ones_like(logits, dtype=torch.bool)
        else:
            allowed = mask[:, offset : offset + n].bool()
            use = allowed | ~allowed.any(1, keepdim=True)
        mx = torch.where(use, logits, float("-inf")).max(1, keepdim=True).values
        e = torch.where(use, torch.exp(logits - mx), 0.0)
        heads.append((logits, use, mx, e, e.sum(1)))
        offset += n
    return heads


def sampled_logprob(
    out: torch.Tensor, nvec: Sequence[int], action: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The masked log-probability of ``action`` (``[N]`` for one head, ``[N, heads]``) summed over the
    heads, as :func:`sample_logits` computes it: the CPU's host draws take theirs from here, so their
    log-probabilities are the reference's bit for bit."""
    return _logprob(_heads(out, nvec, mask), action)


def _logprob(heads: list[tuple[torch.Tensor, ...]], action: torch.Tensor) -> torch.Tensor:
    acts = action.reshape(action.shape[0], -1)
    total = torch.zeros(action.shape[0], dtype=torch.float32, device=action.device)
    for h, (logits, _, mx, _, s) in enumerate(heads):
        total += (logits.gather(1, acts[:, h : h + 1])[:, 0] - mx[:, 0]) - torch.log(s)
    return total


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
    """LSTM gate math after the GEMMs: ``gx = x W_ih^T + b_ih``, ``gh = h W_hh^T + b_hh`` ``[B, 4H]``
    (i, f, g, o), ``c [B, H]`` -> (h, c) in float32, as ``nn.LSTMCell`` computes them (the LSTM core's
    ``cell``, appliance/train/cores/lstm.py). Rows with ``done`` start from h = c = 0: gh is replaced by b_hh (needed then)."""
    if done is not None and b_hh is None:
        raise ValueError("lstm_step with done needs b_hh (the hidden bias a reset row's gates keep)")
    gates = gx.float() + gh.float()
    c_prev = c.float()
    if done is not None:
        reset = done.bool()[:, None]
        gates = torch.where(reset, gx.float() + b_hh.float(), gates)
        c_prev = torch.where(reset, 0.0, c_prev)
    i, f, g, o = gates.chunk(4, 1)
    c_new = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    h_new = torch.sigmoid(o) * torch.tanh(c_new)
    return _into(h_out, h_new), _into(c_out, c_new)


def mingru_step(
    kv: torch.Tensor, h: torch.Tensor, done: torch.Tensor | None = None, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """A layer of MinGRU.step after its GEMM: ``kv = x W^T`` ``[B, 2H]`` (k then v), ``h [B, H]`` ->
    new h. Rows with ``done`` start from h = 0 (the core's initial state)."""
    k, v = kv.float().chunk(2, dim=-1)
    h_prev = h.float() if done is None else torch.where(done.bool()[:, None], 0.0, h.float())
    z = torch.sigmoid(k)
    g = torch.where(v >= 0, v + 0.5, torch.sigmoid(v))
    return _into(out, (1 - z) * h_prev + z * g)


def mingru_scan(kv: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """A layer of MinGRU.sequence after its GEMM: ``kv [B, T, 2H]``, ``h0 [B, H]`` -> h ``[B, T, H]``,
    the log-space parallel scan of appliance/train/cores/mingru.py (differentiable through torch
    autograd); h0 = 0 (the initial state) is log 0, clamped to 1e-30."""
    k, v = kv.chunk(2, dim=-1)
    log_coeff = -torch.nn.functional.softplus(k)
    log_g = torch.where(v >= 0, torch.log(torch.relu(v) + 0.5), -torch.nn.functional.softplus(-v))
    log_values = -torch.nn.functional.softplus(-k) + log_g
    log_h0 = torch.log(h0.clamp_min(1e-30)).unsqueeze(1)
    a_star = torch.cumsum(log_coeff, dim=1)
    log_terms = torch.cat([log_h0, log_values - a_star], dim=1)
    return torch.exp(a_star + torch.logcumsumexp(log_terms, dim=1)[:, 1:])


class PPOLoss(NamedTuple):
    """What ``kernels.ppo_loss`` returns. stats: [loss, policy_loss, value_loss, entropy, approx_kl,
    clipfrac] (float32 [6]); ratio [N];
    grad_logits [N, A] and grad_value [N]: d(grad_scale * loss) / d logits, d value."""

    stats: torch.Tensor
    ratio: torch.Tensor
    grad_logits: torch.Tensor
    grad_value: torch.Tensor


PRIO_FLOOR = 1e-6  # added to every segment's summed |A| so that zero-|A| segments can still be drawn


def prio_keys(
    adv: torch.Tensor, alpha: float, seed: int, step: int | torch.Tensor, floor: float = PRIO_FLOOR
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each segment's priority (sum_t |A| + floor)^alpha and its sampling key log(u) / priority
    (float64 ``[segments]`` each), u = 1 - a Philox uniform keyed on (seed, step, segment), in (0, 1].
    The ``samples`` largest keys are a draw without replacement proportional to the priorities."""
    prio = (adv.double().abs().sum(1) + floor).pow(alpha)
    r = philox(seed, _scalar(step), torch.arange(adv.shape[0], device=adv.device), PRIO_LANE)
    key = torch.log(1.0 - uniform53(r[0], r[1])) / prio
    return prio, torch.where(prio > 0, key, float("-inf"))


def prio_sample(
    adv: torch.Tensor,
    alpha: float,
    beta: float | torch.Tensor,
    samples: int,
    seed: int,
    step: int | torch.Tensor,
    *,
    floor: float = PRIO_FLOOR,
    uniform: torch.Tensor | None = None,
    idx: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    replacement: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Trainer.train's segment sampling: ``adv [segments, horizon]`` -> (idx int64 [samples], importance
    float32 [samples]): ``samples`` distinct segments drawn one after another with P proportional to
    (sum_t |A| + floor)^alpha among those left (without replacement, as PufferLib 3.0), and the
    importance weights (S P)^-beta of the single-draw probabilities. Exponential keys and a top-k
    (:func:`prio_keys`) instead of ``torch.multinomial`` on the host: no sync, same draws on CPU and GPU.

    ``replacement`` (``train.prio_replacement``): ``samples`` independent draws by the same P, so a
    segment may come more than once (PufferLib 4.0's ``torch.multinomial(P, samples,
    replacement=True)``), with the same weights: :func:`draw_with_replacement` at the given uniforms
    (float64 [samples]) or at Philox's keyed on (seed, step, draw)."""
    segments = adv.shape[0]
    _check_samples(samples, segments, floor, replacement)
    if replacement:
        prio = (adv.double().abs().sum(1) + floor).pow(alpha)
        if uniform is None:
            r = philox(seed, _scalar(step), torch.arange(samples, device=adv.device), PRIO_LANE)
            uniform = uniform53(r[0], r[1])
        k = draw_with_replacement(prio, uniform)
        w = (segments * prio[k] / prio.sum()).pow(-beta).float()
        return _into(idx, k), _into(weight, w)
    if uniform is None:
        prio, key = prio_keys(adv, alpha, seed, step, floor)
    else:  # the caller's uniforms in [0, 1) (float64 [segments]) instead of Philox's
        prio = (adv.double().abs().sum(1) + floor).pow(alpha)
        key = torch.log1p(-uniform.double()) / prio
    k = key.topk(samples).indices
    w = (segments * prio[k] / prio.sum()).pow(-beta).float()
    return _into(idx, k), _into(weight, w)


def draw_with_replacement(prio: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """For each uniform u in [0, 1), the first index whose share of the cumulative priorities reaches
    u: independent draws proportional to ``prio``, torch.multinomial's CPU algorithm with replacement
    (the same indices from the same float64 uniforms), in torch ops that need no sync."""
    cdf = prio.cumsum(0)
    cdf = cdf / cdf[-1]
    return torch.searchsorted(cdf, uniform.to(cdf.dtype)).clamp_(max=prio.shape[0] - 1)


def _check_samples(samples: int, segments: int, floor: float, replacement: bool = False) -> None:
    if replacement and samples < 1:
        raise ValueError(f"prio_sample draws at least 1 segment, not {samples}")
    if not replacement and not 1 <= samples <= segments:
        raise ValueError(f"prio_sample draws 1 to {segments} distinct segments, not {samples}")
    if not floor > 0:
        raise ValueError(f"prio_sample's floor must be > 0 (zero-|A| segments stay drawable), got {floor}")


def _scalar(step: int | torch.Tensor) -> int:
    return int(step.reshape(-1)[0]) if isinstance(step, torch.Tensor) else int(step)


def _into(out: torch.Tensor | None, value: torch.Tensor) -> torch.Tensor:
    if out is None:
        return value
    out.copy_(value)
    return out


# ------------------------------------------------------------------------------- optim_step


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
    """kernels/optim_step.cuh's ``adam_elem`` over flat float32 buffers, in place: torch.optim.Adam's
    single-tensor step with ``scal = [lr / (1 - beta1^t), sqrt(1 - beta2^t)]``."""
    step_size, bc2_sqrt = scal.to(torch.float64).tolist()
    grad = g.add(p, alpha=weight_decay) if weight_decay != 0 else g
    m.lerp_(grad, 1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    p.addcdiv_(m, v.sqrt().div_(bc2_sqrt).add_(eps), value=-step_size)


def muon_momentum(g: torch.Tensor, buf: torch.Tensor, u: torch.Tensor, beta: float) -> None:
    """``muon_momentum_elem``: ``buf = buf * beta + g`` and ``u = g + beta * buf``, in place."""
    buf.mul_(beta).add_(g)
    torch.add(g, buf, alpha=beta, out=u)


def muon_apply(p: torch.Tensor, u: torch.Tensor, lr: torch.Tensor) -> None:
    """``muon_apply_elem``: ``p = p - lr * u`` with ``lr`` a 0-dim tensor, in place."""
    p.sub_(u * lr)
