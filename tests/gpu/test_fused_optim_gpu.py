"""train.fused_optimizer on a CUDA device: kernels/optim_step.cu against the torch references of
appliance/gpu/reference.py, and the graphed update with the switch on, replayed against called and
against the switch off. Runs only with a GPU (`pytest -m gpu tests/gpu`)."""

from __future__ import annotations

import pytest
import torch

from appliance import vector
from appliance.config import resolve
from appliance.gpu import kernels, reference
from appliance.train import Trainer
from appliance.train.graphs import restore, update_state

pytestmark = pytest.mark.gpu


def _cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_the_optim_step_kernels_match_the_references(weight_decay: float) -> None:
    _cuda()
    g = torch.Generator(device="cuda").manual_seed(0)
    n = 1_000_003  # past one grid's worth: the grid-stride loop
    p, grad, m = (torch.randn(n, device="cuda", generator=g) for _ in range(3))
    v = torch.rand(n, device="cuda", generator=g)
    scal = torch.tensor([1e-3 / (1 - 0.95**4), (1 - 0.999**4) ** 0.5], device="cuda")
    got = [t.clone() for t in (p, m, v)]
    kernels.adam_step(got[0], grad, got[1], got[2], scal, 0.95, 0.999, 1e-12, weight_decay)
    reference.adam_step(p, grad, m, v, scal, 0.95, 0.999, 1e-12, weight_decay)
    for a, b in zip(got, (p, m, v), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)
    buf = torch.randn(n, device="cuda", generator=g)
    buf2, u, u2, lr = (
        buf.clone(),
        torch.empty_like(buf),
        torch.empty_like(buf),
        torch.tensor(0.02, device="cuda"),
    )
    kernels.muon_momentum(grad, buf, u, 0.95)
    reference.muon_momentum(grad, buf2, u2, 0.95)
    # a kernel's a * b + c is one fused multiply-add where torch rounds the product first: the two
    # differ by up to an ulp of the larger term (2.4e-7 for terms of 2-4, randn's reach), which is all
    # of the result where g and beta * buf nearly cancel (seen on an H200: 1.1e-7 at |u| of 5e-4)
    for a, b in ((buf, buf2), (u, u2)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        assert (a - b).norm() / b.norm() < 1e-6
    p2 = p.clone()
    kernels.muon_apply(p, u, lr)
    reference.muon_apply(p2, u2, lr)
    torch.testing.assert_close(p, p2, rtol=1e-6, atol=1e-6)


def _trainer(*extra: str) -> Trainer:
    cfg = resolve(
        env="breakout",
        overrides=[
            "--train.device", "cuda", "--train.graphs", "true", "--vec.num-envs", "256",
            "--train.bptt-horizon", "16", "--train.minibatch-size", "1024", "--train.max-minibatch-size", "512",
            "--train.update-epochs", "2", *extra,
        ],
    )  # fmt: skip
    return Trainer(cfg, vector.make_from_config(cfg))


def _epochs(*flags: str) -> tuple[list[dict], list[torch.Tensor]]:
    """Three epochs of a trainer made now (its seed resets torch's generators, the CUDA one that draws
    the minibatches' segments too): each epoch's losses, and the weights at the end."""
    trainer = _trainer(*flags)
    try:
        losses = [trainer.evaluate() or trainer.train() for _ in range(3)]
        return losses, [p.detach().clone() for p in trainer.policy.parameters()]
    finally:
        trainer.close()


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_the_graphed_update_with_the_fused_optimizer(optimizer: str) -> None:
    """Captured with the switch on, the update replays as it is called and keeps the gradients in the
    flat buffer; and three epochs with the switch on move the weights as three with it off do."""
    _cuda()
    fused = _trainer("--train.optimizer", optimizer, "--train.fused-optimizer", "true")
    try:
        opt = fused.optimizer.optimizers[0]
        assert hasattr(opt, "flat") and fused.update_step.capture
        for _ in range(2):
            fused.evaluate()
            fused.train()
        assert fused.update_step.captured and opt.flat.check()
        fused.evaluate()
        saved, epoch = update_state(fused), fused.epoch
        replayed = fused.train()
        weights = [p.detach().clone() for p in fused.policy.parameters()]
        restore(saved)
        fused.epoch = epoch
        fused.update_step.replay = False
        called = fused.train()
        fused.update_step.replay = True
        for k in ("policy_loss", "value_loss", "entropy"):
            assert replayed[k] == pytest.approx(called[k], rel=1e-4, abs=1e-6), k
        for p, q in zip(fused.policy.parameters(), weights, strict=True):
            torch.testing.assert_close(p.detach(), q, rtol=1e-5, atol=1e-6)
    finally:
        fused.close()

    # the switch on and off, each from a trainer of its own made in turn from the same seed: the same
    # rollouts and the same minibatches (a second trainer brought level with the first in mid-run drew
    # other segments, its generator and the priorities' annealing elsewhere: on the CPU, with torch's
    # optimizer on both sides, their losses parted by 1-3 %, as the two optimizers' did on an H200)
    on, on_weights = _epochs("--train.optimizer", optimizer, "--train.fused-optimizer", "true")
    off, off_weights = _epochs("--train.optimizer", optimizer)
    for a, b in zip(on, off, strict=True):
        for k in ("policy_loss", "value_loss", "entropy"):
            assert a[k] == pytest.approx(b[k], rel=1e-3, abs=1e-5), k
    for p, q in zip(on_weights, off_weights, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)
