"""The policy's parameters and their gradients as views into one flat buffer each.

:func:`flatten` copies every parameter (each shared one once, as the optimizers list them) into one
contiguous float32 tensor and points the parameter at its slice; each ``.grad`` becomes a slice of a
second flat tensor, so backward accumulates into it in place and an optimizer step over the whole
model is one elementwise pass (kernels/optim_step.cuh) instead of one per parameter. The model's
outputs are unchanged: the values are the same, only their storage moves.

Gradients must stay views: zero them with :meth:`FlatParams.zero_grad` (in place), never with
``zero_grad(set_to_none=True)``, which would drop the views (backward would then allocate new
gradient tensors the flat buffer never sees). :meth:`FlatParams.check` says whether they still are.
Used by ``train.fused_optimizer`` (appliance.train.optim.FusedAdam, FusedMuon).
"""

from __future__ import annotations

import torch


class FlatParams:
    """``data`` and ``grad``: flat tensors; ``params``: the parameters, in order, each a view of
    ``data[offsets[i] : offsets[i] + numel]`` and its ``.grad`` the same slice of ``grad``."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = list(dict.fromkeys(params))  # a shared weight once
        if not self.params:
            raise ValueError("flatten: the module has no parameters")
        devices = {p.device for p in self.params}
        dtypes = {p.dtype for p in self.params}
        if len(devices) != 1 or dtypes != {torch.float32}:
            raise ValueError(f"flatten wants float32 parameters on one device, got {dtypes} on {devices}")
        device = self.params[0].device
        self.offsets: list[int] = []
        total = 0
        for p in self.params:
            self.offsets.append(total)
            total += p.numel()
        self.data = torch.empty(total, dtype=torch.float32, device=device)
        self.grad = torch.zeros(total, dtype=torch.float32, device=device)
        with torch.no_grad():
            for p, o in zip(self.params, self.offsets, strict=True):
                view = self.data[o : o + p.numel()].view_as(p)
                view.copy_(p)
                old_grad = p.grad
                p.data = view  # the same Parameter object: modules, hooks and names still hold it
                p.grad = self.grad[o : o + p.numel()].view_as(p)
                if old_grad is not None:
                    p.grad.copy_(old_grad)

    def slice(self, flat: torch.Tensor, i: int) -> torch.Tensor:
        """Parameter ``i``'s part of a buffer laid out like ``data`` (a view, in its shape)."""
        p = self.params[i]
        return flat[self.offsets[i] : self.offsets[i] + p.numel()].view_as(p)

    def zero_grad(self) -> None:
        """Every gradient to zero in place (the views stay)."""
        self.grad.zero_()

    def check(self) -> bool:
        """Whether every parameter and gradient is still its view of the flat buffers."""
        for i, p in enumerate(self.params):
            want = self.offsets[i] * 4
            if p.data_ptr() != self.data.data_ptr() + want or not p.is_contiguous():
                return False
            if p.grad is None or p.grad.data_ptr() != self.grad.data_ptr() + want:
                return False
        return True


def flatten(module: torch.nn.Module) -> FlatParams:
    """``module``'s parameters and gradients moved into one flat buffer each (see the module doc)."""
    return FlatParams(list(module.parameters()))
