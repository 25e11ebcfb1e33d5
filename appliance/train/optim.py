"""The trainer's optimizers: Muon for the hidden 2-D weights, Adam for the rest, stepped as one.

Both can run inside a captured CUDA graph (``graph_safe``): the learning rate is then a 0-dim
tensor on the device that :func:`set_lr` fills in place (a graph replays with the value the tensor
holds at replay time, never a Python float frozen at capture), Adam runs with ``capturable=True``,
and Muon's step is torch ops only: no ``.item()``, no host branch on a tensor's value.
"""

from __future__ import annotations

import math
from typing import Any

import torch


class MultiOptimizer:
    """Several optimizers stepped as one (Muon for hidden 2-D weights, Adam for the rest)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer], initial_lr: float | None = None) -> None:
        self.optimizers = optimizers
        self.param_groups = [g for o in optimizers for g in o.param_groups]
        for g in self.param_groups:  # the exact float (a float32 device tensor would round it)
            g.setdefault("initial_lr", float(g["lr"]) if initial_lr is None else initial_lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> list[dict[str, Any]]:
        return [o.state_dict() for o in self.optimizers]

    def load_state_dict(self, states: list[dict[str, Any]]) -> None:
        for o, s in zip(self.optimizers, states, strict=True):
            o.load_state_dict(s)


def set_lr(optimizer: MultiOptimizer, scale: float) -> float:
    """Every group's learning rate to ``initial_lr * scale`` (in place where it is a device tensor,
    so a captured graph sees it); returns the first group's new value."""
    for g in optimizer.param_groups:
        value = g["initial_lr"] * scale
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].fill_(value)
        else:
            g["lr"] = value
    return optimizer.param_groups[0]["initial_lr"] * scale


def make_optimizer(policy: torch.nn.Module, hp: Any, graph_safe: bool = False) -> MultiOptimizer:
    """Adam, or (``train.optimizer muon``) Muon for the hidden 2-D weights and Adam for the biases,
    embeddings and the two heads. ``graph_safe``: learning rates as device tensors, Adam capturable."""
    device = next(policy.parameters()).device

    def lr() -> float | torch.Tensor:
        return torch.tensor(float(hp.learning_rate), device=device) if graph_safe else hp.learning_rate

    def adam(params: Any) -> torch.optim.Adam:
        kwargs: dict[str, Any] = {"betas": (hp.adam_beta1, hp.adam_beta2), "eps": hp.adam_eps}
        if graph_safe:  # torch allows capturable on accelerators only; a tensor lr off them needs foreach off
            kwargs.update(capturable=True) if device.type == "cuda" else kwargs.update(foreach=False)
        return torch.optim.Adam(params, lr=lr(), **kwargs)

    if hp.optimizer == "adam":
        return MultiOptimizer([adam(policy.parameters())], hp.learning_rate)
    heads = {id(p) for p in (*policy.decoder.parameters(), *policy.value.parameters())}
    seen: set[int] = set()
    matrices, others = [], []
    for p in policy.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        (matrices if p.ndim == 2 and id(p) not in heads else others).append(p)
    opts: list[torch.optim.Optimizer] = [adam(others)]
    if matrices:
        opts.append(Muon(matrices, lr=lr()))
    return MultiOptimizer(opts, hp.learning_rate)


class Muon(torch.optim.Optimizer):
    """Muon for 2-D weights: Nesterov momentum, then the update orthogonalized by 5 Newton-Schulz
    steps, scaled to AdamW's update RMS (``lr * 0.2 * sqrt(max(A, B))``), no weight decay.

    The same update as ``torch.optim.Muon(adjust_lr_fn="match_rms_adamw", weight_decay=0)``, but
    the Newton-Schulz matmuls run in bfloat16 only on CUDA: on a CPU without bf16 units torch's
    bf16 iteration made an optimizer step cost more than the whole rest of the update. ``lr`` may
    be a 0-dim tensor (graph-safe: the step is torch ops on the device, nothing read back).
    """

    COEFFICIENTS = (3.4445, -4.7750, 2.0315)

    def __init__(self, params: Any, lr: float | torch.Tensor, momentum: float = 0.95, steps: int = 5) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "steps": steps})

    @torch.no_grad()
    def step(self) -> None:  # type: ignore[override]
        a, b, c = self.COEFFICIENTS
        for group in self.param_groups:
            lr = group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - group["momentum"])
                update = p.grad.lerp(buf, group["momentum"])
                x = update.to(torch.bfloat16 if p.is_cuda else torch.float32)
                tall = x.size(0) > x.size(1)
                if tall:
                    x = x.T
                x = x / x.norm().clamp_min(1e-7)
                for _ in range(group["steps"]):
                    gram = x @ x.T
                    x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
                if tall:
                    x = x.T
                scale = 0.2 * math.sqrt(max(p.shape[0], p.shape[1]))
                if isinstance(lr, torch.Tensor):  # read on the device at (graph) replay time
                    p.sub_(x.to(p.dtype) * (lr * scale))
                else:
                    p.add_(x.to(p.dtype), alpha=-lr * scale)
