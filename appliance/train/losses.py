"""The PPO loss, in plain torch: the one definition of what the trainer minimizes.

:func:`ppo_loss` takes the log-probabilities and entropies of the rollout's actions under the new
policy (``Policy.evaluate_actions``: categorical heads or a Gaussian, the loss does not care), the
new values, and the rollout's columns; it returns the loss and its six logged terms. The trainer
calls it on every device for Box actions and, for discrete actions, everywhere the fused CUDA loss
(``kernels.ppo_loss``, the same math with hand-written gradients in one kernel) does not run. The
fused kernel is an acceleration of this function: :func:`check_fused` compares the two on one
minibatch when a trainer starts on a GPU, and refuses to train if they differ.

Changing the loss: edit :func:`ppo_loss`; run with ``PUFFER_KERNELS=reference`` on a GPU (or on a
CPU, where it always runs); then port the change to ``kernels/ppo_loss.cuh`` until the start-up
check passes (docs/architecture.md, "How to change the loss or the advantage").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from appliance.errors import TrainingError
from appliance.gpu import kernels

STAT_NAMES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
FUSED_TOLERANCE = (1e-4, 1e-6)  # (relative, absolute): the fused loss against this one, in float32


class Coefs(NamedTuple):
    """The loss's coefficients (``train.*``)."""

    clip_coef: float
    vf_clip_coef: float
    vf_coef: float
    ent_coef: float


class Loss(NamedTuple):
    """``loss`` (to minimize, with its graph); ``stats``: the terms of :data:`STAT_NAMES`, detached;
    ``ratio``: the new/old probability ratios, detached."""

    loss: torch.Tensor
    stats: torch.Tensor
    ratio: torch.Tensor


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def ppo_loss(
    new_logprob: torch.Tensor,
    entropy: torch.Tensor,
    value: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_value: torch.Tensor,
    mask: torch.Tensor,
    coefs: Coefs,
) -> Loss:
    """Clipped policy loss, clipped value loss and entropy bonus, averaged over the unmasked steps.
    All arguments have one shape (a chunk's ``[B, T]``, or flattened); ``advantages`` come
    normalized and weighted by the prioritized sampling's importance."""
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    clip = coefs.clip_coef
    pg_loss = masked_mean(torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip)), mask)
    v_clipped = old_value + (value - old_value).clamp(-coefs.vf_clip_coef, coefs.vf_clip_coef)
    v_loss = 0.5 * masked_mean(torch.max((value - returns) ** 2, (v_clipped - returns) ** 2), mask)
    ent = masked_mean(entropy, mask)
    loss = pg_loss + coefs.vf_coef * v_loss - coefs.ent_coef * ent
    with torch.no_grad():
        kl = masked_mean((ratio - 1) - logratio, mask)
        clipfrac = masked_mean(((ratio - 1).abs() > clip).float(), mask)
        stats = torch.stack([loss, pg_loss, v_loss, ent, kl, clipfrac]).detach()
    return Loss(loss, stats, ratio.detach())


def categorical(
    logits: torch.Tensor, actions: torch.Tensor, nvec: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities and entropies of ``actions`` (``[N]`` or ``[N, heads]``) under categorical
    heads of sizes ``nvec`` side by side in ``logits [N, sum(nvec)]``. Unvalidated: NaN logits give
    a NaN loss, which the trainer reports."""
    act = actions.reshape(len(logits), -1)
    dists = [
        torch.distributions.Categorical(logits=p, validate_args=False)
        for p in torch.split(logits, list(nvec), dim=-1)
    ]
    return sum(d.log_prob(act[:, i]) for i, d in enumerate(dists)), sum(d.entropy() for d in dists)


def gradients(
    logits: torch.Tensor,
    value: torch.Tensor,
    actions: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_value: torch.Tensor,
    mask: torch.Tensor,
    nvec: Sequence[int],
    coefs: Coefs,
    grad_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the fused kernel returns, from :func:`ppo_loss` and autograd: (stats, ratio, d(grad_scale
    * loss)/d logits, d(grad_scale * loss)/d value), over ``N`` flattened rows."""
    lg = logits.detach().float().requires_grad_(True)
    nv = value.detach().float().requires_grad_(True)
    new_logprob, entropy = categorical(lg, actions, nvec)
    res = ppo_loss(
        new_logprob, entropy, nv, old_logprob.float(), advantages.float(), returns.float(),
        old_value.float(), mask.float(), coefs,
    )  # fmt: skip
    grad_logits, grad_value = torch.autograd.grad(res.loss * grad_scale, [lg, nv])
    return res.stats, res.ratio, grad_logits, grad_value


def check_fused(
    fused: Callable[..., Sequence[torch.Tensor]],
    nvec: Sequence[int],
    coefs: Coefs,
    device: torch.device | str,
    rows: int = 4096,
    seed: int = 0,
) -> None:
    """Run the fused loss ``fused`` (``kernels.ppo_loss``'s signature) and :func:`gradients` on one
    random minibatch of ``rows`` rows; a :class:`TrainingError` naming the first output that differs
    beyond :data:`FUSED_TOLERANCE`."""
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def draw(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(device)

    width = sum(nvec)
    actions = torch.stack([torch.randint(n, (rows,), generator=gen) for n in nvec], 1).to(device)
    actions = actions.squeeze(1) if len(nvec) == 1 else actions
    logits, value = draw(rows, width), draw(rows)
    old_logprob = categorical(logits, actions, nvec)[0] + draw(rows, scale=0.1)  # ratios near 1, some clipped
    args = (
        logits, value, actions, old_logprob, draw(rows), value + draw(rows, scale=0.3),
        value + draw(rows, scale=0.3), (torch.rand(rows, generator=gen) > 0.1).float().to(device),
    )  # fmt: skip
    got = fused(*args, nvec, *coefs, grad_scale=0.5)
    want = gradients(*args, nvec, coefs, grad_scale=0.5)
    rtol, atol = FUSED_TOLERANCE
    for name, a, b in zip(("stats", "ratio", "grad_logits", "grad_value"), got, want, strict=True):
        a, b = a.float().reshape(b.shape), b.float()
        if not torch.allclose(a, b, rtol=rtol, atol=atol):
            err = float((a - b).abs().max())
            raise TrainingError(
                f"the fused CUDA loss differs from the torch loss (appliance/train/losses.py) in {name} "
                f"by up to {err:.3g} on a test minibatch: port the change to kernels/ppo_loss.cuh, or run "
                "with PUFFER_KERNELS=reference to train with the torch loss"
            )


def check_at_start(nvec: Sequence[int] | None, coefs: Coefs, device: torch.device) -> None:
    """:func:`check_fused` with ``kernels.ppo_loss`` where a trainer on ``device`` will run it
    (discrete actions, ``kernels.use_cuda``); nothing elsewhere."""
    if nvec is not None and kernels.use_cuda(torch.zeros(1, device=device)):
        check_fused(kernels.ppo_loss, nvec, coefs, device)
