"""train.fused_optimizer on a CUDA device: kernels/optim_step.cu against the torch references of
appliance/gpu/reference.py, and the graphed update with the switch on, replayed against called and
against the switch off. Runs only with a GPU (`pytest -m gpu tests/gpu`); not yet run on one."""

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
    torch.testing.assert_close(buf, buf2, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(u, u2, rtol=1e-6, atol=1e-7)
    p2 = p.clone()
    kernels.muon_apply(p, u, lr)
    reference.muon_apply(p2, u2, lr)
    torch.testing.assert_close(p, p2, rtol=1e-6, atol=1e-7)


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


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_the_graphed_update_with_the_fused_optimizer(optimizer: str) -> None:
    """Captured with the switch on, the update replays as it is called, keeps the gradients in the
    flat buffer, and moves the weights as the switch off does from the same state."""
    _cuda()
    fused = _trainer("--train.optimizer", optimizer, "--train.fused-optimizer", "true")
    plain = _trainer("--train.optimizer", optimizer)
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

        # the switch off from the same weights, optimizer state aside: one epoch on the same rollout
        restore(saved)
        fused.epoch = epoch
        with torch.no_grad():
            for p, q in zip(plain.policy.parameters(), fused.policy.parameters(), strict=True):
                p.copy_(q)
        plain.evaluate()
        for name, value in vars(fused.rollout).items():
            if isinstance(value, torch.Tensor):
                getattr(plain.rollout, name).copy_(value)
            elif isinstance(value, tuple) and all(isinstance(t, torch.Tensor) for t in value):
                for mine, theirs in zip(getattr(plain.rollout, name), value, strict=True):
                    mine.copy_(theirs)
        plain.epoch = fused.epoch
        plain.global_step = fused.global_step
        with torch.no_grad():  # both from fresh moments (in place: the captured graph reads these)
            for t in (getattr(opt, n) for n in ("exp_avg", "exp_avg_sq", "step_t", "buf") if hasattr(opt, n)):
                t.zero_()
        a, b = fused.train(), plain.train()
        for k in ("policy_loss", "value_loss", "entropy"):
            assert a[k] == pytest.approx(b[k], rel=1e-3, abs=1e-5), k
        for p, q in zip(fused.policy.parameters(), plain.policy.parameters(), strict=True):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-3, atol=1e-4)
    finally:
        fused.close()
        plain.close()
