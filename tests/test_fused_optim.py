"""train.fused_optimizer: the policy's parameters and gradients as views of one flat buffer each
(appliance/train/flat.py), and the optimizer step over it as one elementwise pass
(kernels/optim_step.cuh, compiled for the CPU as appliance._hostkernels), against torch.optim.Adam
and our Muon stepped per parameter."""

from __future__ import annotations

import copy
import os
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from appliance.gpu import host, kernels, reference
from appliance.train import optim
from appliance.train.flat import flatten

needs_host = pytest.mark.skipif(
    not host.available() and not os.environ.get("CI"),
    reason="appliance._hostkernels is not built (pip install -e . builds it)",
)


class Net(nn.Module):
    """Matrices, a conv, biases, and a weight shared by two modules (as the LSTM core shares its cell's)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.a = nn.Linear(12, 16)
        self.b = nn.Linear(16, 5)
        self.tied = nn.Linear(5, 5)
        self.tied_again = nn.Linear(5, 5)
        self.tied_again.weight = self.tied.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).flatten(1)
        return self.tied_again(torch.tanh(self.tied(self.b(torch.tanh(self.a(h))))))


def loss_of(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return net(x).square().mean()


def test_every_parameter_and_gradient_is_a_view_of_the_flat_buffers() -> None:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(4, 2, 4, 4)
    before = net(x).detach()
    flat = flatten(net)
    params = list(dict.fromkeys(net.parameters()))
    assert flat.params == params and flat.data.numel() == sum(p.numel() for p in params)
    assert flat.check()
    for p in params:  # each parameter's storage is the flat buffer's
        assert p.untyped_storage().data_ptr() == flat.data.untyped_storage().data_ptr()
        assert p.grad.untyped_storage().data_ptr() == flat.grad.untyped_storage().data_ptr()
    torch.testing.assert_close(net(x), before, rtol=0, atol=0)  # outputs unchanged, bit for bit

    loss_of(net, x).backward()
    want = copy.deepcopy(net)  # the gradients as autograd computes them, on a copy of the weights
    for p in want.parameters():
        p.grad = None
    loss_of(want, x).backward()
    got = torch.cat([p.grad.reshape(-1) for p in params])
    torch.testing.assert_close(flat.grad, got, rtol=0, atol=0)  # accumulated into the flat buffer
    assert flat.grad.abs().sum() > 0
    torch.testing.assert_close(
        flat.grad, torch.cat([p.grad.reshape(-1) for p in dict.fromkeys(want.parameters())]), rtol=0, atol=0
    )
    flat.zero_grad()
    assert flat.check() and all(p.grad.abs().sum() == 0 for p in params)
    with torch.no_grad():  # a write through the flat buffer is a write to the parameter
        flat.data.zero_()
    assert all(p.abs().sum() == 0 for p in params)


def test_a_dropped_gradient_is_seen() -> None:
    net = Net()
    flat = flatten(net)
    net.a.weight.grad = None
    assert not flat.check()


def _pair() -> tuple[nn.Module, nn.Module, torch.Tensor]:
    torch.manual_seed(1)
    net = Net()
    return net, copy.deepcopy(net), torch.randn(8, 2, 4, 4)


def _run(net, opt, x, steps, zero_set_to_none=True):  # type: ignore[no-untyped-def]
    for step in range(steps):
        opt.zero_grad(set_to_none=zero_set_to_none)
        loss_of(net, x * (1 + 0.1 * step)).backward()
        opt.step()


@needs_host
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("betas,eps", [((0.95, 0.999), 1e-12), ((0.9, 0.99), 1e-8), ((0.3, 0.9), 1e-6)])
def test_fused_adam_matches_torch_adam(betas, eps, weight_decay) -> None:  # type: ignore[no-untyped-def]
    net, twin, x = _pair()
    want = torch.optim.Adam(list(dict.fromkeys(twin.parameters())), lr=3e-3, betas=betas, eps=eps,
                            weight_decay=weight_decay, foreach=False)  # fmt: skip
    fused = optim.FusedAdam(flatten(net), 3e-3, betas, eps, weight_decay)
    calls = []
    real = host.adam_step
    with pytest.MonkeyPatch.context() as mp:  # the host build runs, not the torch reference
        mp.setattr(host, "adam_step", lambda *a: calls.append(1) or real(*a))
        _run(net, fused, x, 6)
    _run(twin, want, x, 6)
    assert len(calls) == 6
    for p, q in zip(dict.fromkeys(net.parameters()), dict.fromkeys(twin.parameters()), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(
            fused.state[p]["exp_avg_sq"], want.state[q]["exp_avg_sq"], rtol=1e-6, atol=1e-12
        )


@needs_host
@pytest.mark.parametrize("ns", ["heavyball", "pufferlib4"])
@pytest.mark.parametrize("tensor_lr", [False, True])
def test_fused_muon_matches_our_muon(ns: str, tensor_lr: bool) -> None:
    net, twin, x = _pair()
    lr = torch.tensor(0.02) if tensor_lr else 0.02
    want = optim.Muon(list(dict.fromkeys(twin.parameters())), lr=lr, momentum=0.95, ns=ns)
    fused = optim.FusedMuon(flatten(net), lr, momentum=0.95, ns=ns)
    _run(net, fused, x, 5)
    _run(twin, want, x, 5, zero_set_to_none=False)  # zeroed, not dropped: the fused step's case
    for p, q in zip(dict.fromkeys(net.parameters()), dict.fromkeys(twin.parameters()), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(fused.state[p]["momentum_buffer"], want.state[q]["momentum_buffer"])


@needs_host
def test_the_host_build_and_the_torch_reference_agree_on_one_step() -> None:
    g = torch.Generator().manual_seed(3)
    n = 200_003  # past the host build's thread split
    p, grad, m = (torch.randn(n, generator=g) for _ in range(3))
    v = torch.rand(n, generator=g)
    scal = torch.tensor([1e-3 / (1 - 0.9**3), (1 - 0.999**3) ** 0.5])
    got = [t.clone() for t in (p, m, v)]
    host.adam_step(got[0], grad, got[1], got[2], scal, 0.9, 0.999, 1e-8, 0.01)
    reference.adam_step(p, grad, m, v, scal, 0.9, 0.999, 1e-8, 0.01)
    # the moments bit for bit; the parameter to an ulp or so: torch's vectorized CPU sqrt is not IEEE's
    torch.testing.assert_close(got[1], m, rtol=0, atol=0)
    torch.testing.assert_close(got[2], v, rtol=0, atol=0)
    torch.testing.assert_close(got[0], p, rtol=3e-7, atol=1e-9)  # 1e-6 of the step
    buf, u, lr = torch.randn(n, generator=g), torch.empty(n), torch.tensor(0.05)
    buf2, u2, p2 = buf.clone(), torch.empty(n), p.clone()
    host.muon_momentum(grad, buf, u, 0.95)
    reference.muon_momentum(grad, buf2, u2, 0.95)
    torch.testing.assert_close(buf, buf2), torch.testing.assert_close(u, u2)
    host.muon_apply(p, u, lr)
    reference.muon_apply(p2, u2, lr)
    torch.testing.assert_close(p, p2)


def test_reference_mode_runs_the_torch_reference(monkeypatch) -> None:
    monkeypatch.setenv("PUFFER_KERNELS", "reference")
    calls = []
    monkeypatch.setattr(reference, "muon_apply", lambda *a: calls.append(1))
    kernels.muon_apply(torch.zeros(3), torch.zeros(3), torch.tensor(1.0))
    assert calls == [1]


@pytest.mark.parametrize("which", ["adam", "muon"])
def test_make_optimizer_uses_the_flat_buffer_only_when_asked_and_checkpoints_round_trip(which: str) -> None:
    hp = SimpleNamespace(optimizer=which, learning_rate=1e-3, adam_beta1=0.9, adam_beta2=0.999,
                         adam_eps=1e-8, muon_ns="heavyball", fused_optimizer=False)  # fmt: skip
    net, twin, x = _pair()
    plain = optim.make_optimizer(net, hp)
    assert not isinstance(plain.optimizers[0], optim.FusedAdam | optim.FusedMuon)
    hp.fused_optimizer = True
    fused = optim.make_optimizer(twin, hp)
    assert isinstance(fused.optimizers[0], optim.FusedAdam if which == "adam" else optim.FusedMuon)
    _run(twin, fused, x, 3)
    saved = copy.deepcopy(fused.state_dict())
    # a fresh run resumed from the checkpoint continues exactly as the first one
    resumed_net = copy.deepcopy(twin)
    resumed = optim.make_optimizer(resumed_net, hp)
    resumed.load_state_dict(saved)
    _run(twin, fused, x, 2)
    _run(resumed_net, resumed, x, 2)
    for p, q in zip(twin.parameters(), resumed_net.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


@needs_host
@pytest.mark.parametrize("which", ["adam", "muon"])
def test_the_trainer_with_fused_optimizer_trains_as_without(which: str) -> None:
    """Off by default; on, the trainer's update (zeroing, accumulation over chunks, clipping, the step)
    keeps the gradients in the flat buffer and moves the weights as the per-parameter optimizer does."""
    from conftest import small_config

    from appliance import vector
    from appliance.train.trainer import Trainer

    def run(*flags: str) -> tuple[Trainer, list]:
        cfg = small_config("breakout", "--policy.core", "lstm", "--policy.hidden-size", "32",
                           "--train.max-minibatch-size", "32", "--train.optimizer", which, *flags)  # fmt: skip
        trainer = Trainer(cfg, vector.make_from_config(cfg))
        try:
            return trainer, [trainer.evaluate() or trainer.train() for _ in range(3)]
        finally:
            trainer.close()

    plain, plain_losses = run()
    assert small_config("breakout").train.fused_optimizer is False  # off by default
    assert not isinstance(plain.optimizer.optimizers[0], optim.FusedAdam | optim.FusedMuon)
    fused, fused_losses = run("--train.fused-optimizer", "true")
    opt = fused.optimizer.optimizers[0]
    assert isinstance(opt, optim.FusedAdam if which == "adam" else optim.FusedMuon)
    assert opt.flat.check(), "a gradient left the flat buffer during training"
    for a, b in zip(plain_losses, fused_losses, strict=True):
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-5), key
    for p, q in zip(plain.policy.parameters(), fused.policy.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
