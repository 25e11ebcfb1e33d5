"""The trainer's optimizers: Adam, or Muon over every parameter as PufferLib 3.0 runs it.

Both can run inside a captured CUDA graph (``graph_safe``): the learning rate is then a 0-dim
tensor on the device that :func:`set_lr` fills in place (a graph replays with the value the tensor
holds at replay time, never a Python float frozen at capture), Adam runs with ``capturable=True``,
and Muon's step is torch ops only: no ``.item()``, no host branch on a tensor's value.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from appliance.gpu import kernels
from appliance.train.flat import FlatParams, flatten

if TYPE_CHECKING:
    from appliance.config import TrainConfig


class MultiOptimizer:
    """Optimizers stepped as one (one today; graphs.py and checkpoints see this face)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer], initial_lr: float | None = None) -> None:
        self.optimizers = optimizers
        for g in self.param_groups:  # the exact float (a float32 device tensor would round it)
            g.setdefault("initial_lr", float(g["lr"]) if initial_lr is None else initial_lr)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The optimizers' groups as they are now: loading a state replaces a torch optimizer's group
        dicts, so a list kept from before would set a learning rate no step reads."""
        return [g for o in self.optimizers for g in o.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> list[dict[str, Any]]:
        return [o.state_dict() for o in self.optimizers]

    def load_state_dict(self, states: list[dict[str, Any]]) -> None:
        """The saved states; the base learning rate stays this run's (``initial_lr``, from its
        config), and one held as a device tensor (a captured graph reads that tensor) stays the
        same tensor, taking the saved value until the next :func:`set_lr`."""
        for o, s in zip(self.optimizers, states, strict=True):
            held = [(g["lr"], g["initial_lr"]) for g in o.param_groups]
            o.load_state_dict(s)
            for g, (lr, initial) in zip(o.param_groups, held, strict=True):
                g["initial_lr"] = initial
                if isinstance(lr, torch.Tensor):
                    lr.fill_(float(g["lr"]))
                    g["lr"] = lr


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


def make_optimizer(policy: torch.nn.Module, hp: TrainConfig, graph_safe: bool = False) -> MultiOptimizer:
    """``train.optimizer adam``: Adam over every parameter; ``muon``: :class:`Muon` over every
    parameter (PufferLib 3.0's optimizer), momentum ``adam_beta1``, Newton-Schulz coefficients
    ``train.muon_ns``. ``graph_safe``: the learning rate is a device tensor and Adam is capturable."""
    device = next(policy.parameters()).device
    lr: float | torch.Tensor = (
        torch.tensor(float(hp.learning_rate), device=device) if graph_safe else hp.learning_rate
    )
    params = list(dict.fromkeys(policy.parameters()))  # shared weights (the LSTM cell's) once
    if getattr(hp, "fused_optimizer", False):  # train.fused_optimizer: one flat buffer, one pass a step
        flat = flatten(policy)
        if hp.optimizer == "adam":
            fused: torch.optim.Optimizer = FusedAdam(flat, lr, (hp.adam_beta1, hp.adam_beta2), hp.adam_eps)
        else:
            fused = FusedMuon(flat, lr, momentum=hp.adam_beta1, ns=hp.muon_ns)
        return MultiOptimizer([fused], hp.learning_rate)
    if hp.optimizer == "adam":
        kwargs: dict[str, Any] = {"betas": (hp.adam_beta1, hp.adam_beta2), "eps": hp.adam_eps}
        if graph_safe:  # torch allows capturable on accelerators only; a tensor lr off them needs foreach off
            kwargs.update(capturable=True) if device.type == "cuda" else kwargs.update(foreach=False)
        return MultiOptimizer([torch.optim.Adam(params, lr=lr, **kwargs)], hp.learning_rate)
    return MultiOptimizer([Muon(params, lr=lr, momentum=hp.adam_beta1, ns=hp.muon_ns)], hp.learning_rate)


class Muon(torch.optim.Optimizer):
    """Muon as PufferLib 3.0 runs it (heavyball 1.7.2's ``ForeachMuon``), for every parameter.

    Per parameter: Nesterov momentum as a running sum, ``m = beta * m + g`` and ``u = g + beta * m``;
    a tensor of two or more dims (viewed as ``[rows, rest]``) has ``u`` replaced by its
    orthogonalization (5 Newton-Schulz steps) times ``sqrt(max(1, rows / rest))``; vectors (biases)
    keep ``u`` as it is. Then ``p -= lr * u``; no weight decay, no second moment (PufferLib passes
    ``adam_beta2`` and ``adam_eps``, which this optimizer never reads).

    ``ns`` (``train.muon_ns``) picks the Newton-Schulz iteration: ``heavyball`` (the default) is
    heavyball's, one coefficient triple for every step (:meth:`orthogonalize`); ``pufferlib4`` is
    PufferLib 4.0's muon.py, five steps of five different triples (:meth:`orthogonalize_pufferlib4`).

    The Newton-Schulz matmuls run in bfloat16 on CUDA (as heavyball everywhere) and in float32
    elsewhere (``ns_dtype`` overrides): on a CPU without bf16 units the bf16 iteration made an
    optimizer step cost more than the rest of the update. ``pufferlib4`` runs them in float32 on
    every device, as its muon.py runs them in the gradient's dtype. ``lr`` may be a 0-dim tensor:
    the step is then torch ops on the device with nothing read back, so a CUDA graph can hold it.
    tests/test_train.py checks the steps against heavyball 1.7.2's, and ``pufferlib4``'s against
    the formulas of PufferLib 4.0's muon.py.
    """

    COEFFICIENTS = (3.4445, -4.7750, 2.0315)
    # PufferLib 4.0's muon.py: one (a, b, c) per step, x <- (a I + b S + c S^2) x with S = x x^T
    PUFFERLIB4_COEFFICIENTS = (
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    )
    NS_CHOICES = ("heavyball", "pufferlib4")

    def __init__(
        self,
        params: Any,
        lr: float | torch.Tensor,
        momentum: float = 0.95,
        steps: int = 5,
        ns_dtype: torch.dtype | None = None,
        ns: str = "heavyball",
    ) -> None:
        if not 0.0 <= float(momentum) < 1.0:
            raise ValueError(f"Muon momentum must be in [0, 1), got {momentum}")
        if ns not in self.NS_CHOICES:
            raise ValueError(f"unknown train.muon_ns {ns!r}; choose heavyball or pufferlib4")
        if ns == "pufferlib4" and steps != len(self.PUFFERLIB4_COEFFICIENTS):
            raise ValueError(f"train.muon_ns pufferlib4 takes exactly 5 Newton-Schulz steps, not {steps}")
        super().__init__(params, {"lr": lr, "momentum": momentum, "steps": steps, "ns_dtype": ns_dtype})
        # the config's choice, not a param group's: a checkpoint's groups replace those on load
        self.ns = ns

    @classmethod
    def orthogonalize(cls, g: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
        """``g`` [rows, cols] to about the nearest semi-orthogonal matrix, times sqrt(max(1, rows/cols))."""
        a, b, c = cls.COEFFICIENTS
        x = g.to(dtype)
        x = x / (x.norm() + 1e-7)
        tall = x.size(0) > x.size(1)
        if tall:
            x = x.T
        for _ in range(steps):
            gram = x @ x.T
            x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
        if tall:
            x = x.T
        return x.to(g.dtype) * math.sqrt(max(1.0, g.size(0) / g.size(1)))

    @classmethod
    def orthogonalize_pufferlib4(cls, g: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """:meth:`orthogonalize` as PufferLib 4.0's muon.py does it: ``g`` divided by its norm (at
        least 1e-7), the wide way round, then for each of its five triples (a, b, c)
        ``s = x x^T``, ``y = c s + b I``, ``y = y s + a I``, ``x = y x``; back the original way
        round, times sqrt(max(1, rows/cols))."""
        x = g.to(dtype)
        tall = x.size(0) > x.size(1)
        if tall:
            x = x.T
        x = x / x.norm().clamp(min=1e-7)
        for a, b, c in cls.PUFFERLIB4_COEFFICIENTS:
            s = x @ x.T
            y = s * c
            y.diagonal().add_(b)
            y = y @ s
            y.diagonal().add_(a)  # the identity's terms on the diagonal: no identity matrix made per step
            x = y @ x
        if tall:
            x = x.T
        return x.to(g.dtype) * math.sqrt(max(1.0, g.size(0) / g.size(1)))

    @torch.no_grad()
    def step(self) -> None:  # type: ignore[override]
        for group in self.param_groups:
            lr, beta = group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.mul_(beta).add_(p.grad)
                update = p.grad.add(buf, alpha=beta)
                if p.ndim >= 2 and self.ns == "pufferlib4":
                    flat = update.reshape(p.shape[0], -1)
                    update = self.orthogonalize_pufferlib4(flat, group["ns_dtype"] or torch.float32).view_as(
                        p
                    )
                elif p.ndim >= 2:
                    dtype = group["ns_dtype"] or (torch.bfloat16 if p.is_cuda else torch.float32)
                    flat = update.reshape(p.shape[0], -1)
                    update = self.orthogonalize(flat, group["steps"], dtype).view_as(p)
                if isinstance(lr, torch.Tensor):  # read on the device at (graph) replay time
                    p.sub_(update * lr)
                else:
                    p.add_(update, alpha=-lr)


class _Flat:
    """What the fused optimizers share: the flat buffers, gradients zeroed in place, and each
    parameter's state as views of flat state buffers (so checkpoints keep torch's per-parameter
    layout, and a loaded state is copied back into the flat buffers)."""

    flat: FlatParams
    state: Any
    param_groups: list[dict[str, Any]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero, never None: the gradients must stay views of the flat buffer (``set_to_none`` is
        ignored)."""
        self.flat.zero_grad()

    def _lr(self, group: dict[str, Any]) -> torch.Tensor:
        """The learning rate as a float32 0-dim tensor on the device (the group's own where it is one)."""
        lr = group["lr"]
        if isinstance(lr, torch.Tensor) and lr.dtype == torch.float32:
            return lr
        self._lr_t.fill_(float(lr))
        return self._lr_t

    def _check_groups(self) -> None:
        if len(self.param_groups) != 1 or len(self.param_groups[0]["params"]) != len(self.flat.params):
            raise ValueError("the fused optimizers take one group: every parameter of the flat buffer")


class FusedAdam(_Flat, torch.optim.Optimizer):
    """torch.optim.Adam (no amsgrad) over a :class:`FlatParams` buffer as one elementwise pass a step
    (kernels/optim_step.cuh ``adam_elem``: CUDA, or its host build on the CPU). The bias corrections
    and ``lr / (1 - beta1^t)`` are worked out on the device in float64 from a step counter held there,
    so the step holds no host value and a CUDA graph can replay it. State per parameter as
    torch.optim.Adam names it (``step``, ``exp_avg``, ``exp_avg_sq``), so checkpoints move between
    the two."""

    def __init__(
        self,
        flat: FlatParams,
        lr: float | torch.Tensor,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(flat.params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.flat = flat
        self._check_groups()
        device = flat.data.device
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.step_t = torch.zeros((), dtype=torch.float64, device=device)
        self.scal = torch.zeros(2, dtype=torch.float32, device=device)
        self._lr_t = torch.zeros((), dtype=torch.float32, device=device)
        self._bind()

    def _bind(self) -> None:
        for i, p in enumerate(self.flat.params):
            self.state[p] = {
                "step": self.step_t,
                "exp_avg": self.flat.slice(self.exp_avg, i),
                "exp_avg_sq": self.flat.slice(self.exp_avg_sq, i),
            }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._check_groups()
        with torch.no_grad():
            for i, p in enumerate(self.flat.params):
                s = self.state.get(p, {})
                if "exp_avg" in s:
                    self.flat.slice(self.exp_avg, i).copy_(s["exp_avg"])
                    self.flat.slice(self.exp_avg_sq, i).copy_(s["exp_avg_sq"])
                    self.step_t.fill_(float(s["step"]))
        self._bind()

    @torch.no_grad()
    def step(self) -> None:  # type: ignore[override]
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        self.step_t += 1
        lr = self._lr(group).to(torch.float64)
        step_size = lr / (1 - beta1**self.step_t)
        bc2_sqrt = torch.sqrt(1 - beta2**self.step_t)
        self.scal.copy_(torch.stack([step_size, bc2_sqrt]))
        kernels.adam_step(
            self.flat.data, self.flat.grad, self.exp_avg, self.exp_avg_sq, self.scal, beta1, beta2,
            group["eps"], group["weight_decay"],
        )  # fmt: skip


class FusedMuon(_Flat, Muon):
    """:class:`Muon` over a :class:`FlatParams` buffer: the momentum and Nesterov blend as one
    elementwise pass over every parameter into a flat update buffer, each matrix's slice of it
    orthogonalized in place by the same torch Newton-Schulz iteration, then ``p -= lr * u`` as one
    more pass (kernels/optim_step.cuh). Every parameter steps, as Muon does with gradients zeroed
    rather than dropped (the graphed update's case); ``momentum_buffer`` per parameter as Muon's."""

    def __init__(
        self,
        flat: FlatParams,
        lr: float | torch.Tensor,
        momentum: float = 0.95,
        steps: int = 5,
        ns_dtype: torch.dtype | None = None,
        ns: str = "heavyball",
    ) -> None:
        super().__init__(flat.params, lr, momentum, steps, ns_dtype, ns)
        self.flat = flat
        self._check_groups()
        self.buf = torch.zeros_like(flat.data)
        self.update = torch.zeros_like(flat.data)
        self._lr_t = torch.zeros((), dtype=torch.float32, device=flat.data.device)
        self._bind()

    def _bind(self) -> None:
        for i, p in enumerate(self.flat.params):
            self.state[p] = {"momentum_buffer": self.flat.slice(self.buf, i)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._check_groups()
        with torch.no_grad():
            for i, p in enumerate(self.flat.params):
                if "momentum_buffer" in self.state.get(p, {}):
                    self.flat.slice(self.buf, i).copy_(self.state[p]["momentum_buffer"])
        self._bind()

    @torch.no_grad()
    def step(self) -> None:  # type: ignore[override]
        group = self.param_groups[0]
        kernels.muon_momentum(self.flat.grad, self.buf, self.update, float(group["momentum"]))
        for i, p in enumerate(self.flat.params):
            if p.ndim < 2:
                continue
            u = self.flat.slice(self.update, i)
            rows = u.reshape(p.shape[0], -1)
            if self.ns == "pufferlib4":
                rows.copy_(self.orthogonalize_pufferlib4(rows, group["ns_dtype"] or torch.float32))
            else:
                dtype = group["ns_dtype"] or (torch.bfloat16 if p.is_cuda else torch.float32)
                rows.copy_(self.orthogonalize(rows, group["steps"], dtype))
        kernels.muon_apply(self.flat.data, self.update, self._lr(group))
