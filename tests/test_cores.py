"""Policy cores: the names checkpoints give their weights, the random draws of their init, and each
core's step and sequence against the formulas it computes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from appliance.gpu import kernels, reference
from appliance.train.cores import CORES, LSTM, MLP, MinGRU, layer_init
from appliance.train.policy import Policy

HEADS = ["decoder.weight", "decoder.bias", "value.weight", "value.bias"]
CORE_KEYS = {
    "mlp": ["core.0.weight", "core.0.bias"],
    "lstm": [
        *("core.weight_ih_l0", "core.weight_hh_l0", "core.bias_ih_l0", "core.bias_hh_l0"),
        *("cell.weight_ih", "cell.weight_hh", "cell.bias_ih", "cell.bias_hh"),  # the same tensors
    ],
    "mingru": ["core.layers.0.weight"],
}


@pytest.mark.parametrize("core", ["mlp", "lstm", "mingru"])
def test_checkpoint_keys_and_parameter_order_are_pinned(core):
    """Checkpoints load across versions only with these names; Muon and the optimizer state see the
    parameters in this order."""
    obs = spaces.Box(-1, 1, (6,), np.float32)
    discrete = Policy(obs, spaces.Discrete(3), core=core, hidden_size=8)
    assert list(discrete.state_dict()) == ["encoder.0.weight", "encoder.0.bias", *CORE_KEYS[core], *HEADS]
    box = Policy(obs, spaces.Box(-1, 1, (2,), np.float32), core=core, hidden_size=8)
    norm = ["obs_norm.count", "obs_norm.mean", "obs_norm.var"]
    keys = ["log_std", *norm, "encoder.0.weight", "encoder.0.bias", *CORE_KEYS[core], *HEADS]
    assert list(box.state_dict()) == keys
    shared = [k for k in keys if k not in norm and not k.startswith("cell.")]
    assert [name for name, _ in box.named_parameters()] == shared


@pytest.mark.parametrize(
    ("core", "by_hand"),
    [
        ("mlp", lambda n: nn.Sequential(layer_init(nn.Linear(n, n)), nn.GELU())),
        ("lstm", lambda n: (nn.LSTM(n, n, batch_first=True), nn.LSTMCell(n, n))[0]),
        ("mingru", lambda n: nn.Linear(n, 3 * n, bias=False)),
    ],
)
def test_cores_init_draws_what_torch_modules_draw(core, by_hand):
    """Each core's weights come from the torch modules it is made of, in the same order, and take
    as many random draws (the LSTM's cell too, whose own weights are dropped for the LSTM's), so a
    seed gives the same policy it always gave."""
    torch.manual_seed(0)
    made = CORES[core](8)
    after_made = torch.rand(4)
    torch.manual_seed(0)
    want = by_hand(8)
    after_want = torch.rand(4)
    assert torch.equal(after_made, after_want)
    for got, expected in zip(made.parameters(), want.parameters(), strict=True):
        assert torch.equal(got, expected)


def test_mlp_core_is_linear_then_gelu():
    torch.manual_seed(0)
    core = MLP(8)
    x = torch.randn(3, 5, 8)
    want = F.gelu(x @ core[0].weight.T + core[0].bias)
    assert core.initial_state(3) == ()
    torch.testing.assert_close(core.sequence(x, ()), want)
    h, state = core.step(x[:, 0], ())
    torch.testing.assert_close(h, want[:, 0])
    assert state == ()


def test_lstm_core_steps_the_shared_cell_and_runs_the_lstm_over_sequences():
    torch.manual_seed(0)
    core = LSTM(8)
    assert core.cell.weight_ih is core.weight_ih_l0 and core.cell.bias_hh is core.bias_hh_l0
    x = torch.randn(3, 5, 8)
    h0, c0 = torch.randn(3, 8), torch.randn(3, 8)
    assert all(not s.any() and s.shape == (3, 8) for s in core.initial_state(3))
    with torch.no_grad():
        # the gate formula, i f g o
        gates = x[:, 0] @ core.weight_ih_l0.T + core.bias_ih_l0 + h0 @ core.weight_hh_l0.T + core.bias_hh_l0
        i, f, g, o = gates.chunk(4, 1)
        c1 = torch.sigmoid(f) * c0 + torch.sigmoid(i) * torch.tanh(g)
        h1 = torch.sigmoid(o) * torch.tanh(c1)
        h, (h_next, c_next) = core.step(x[:, 0], (h0, c0))
        torch.testing.assert_close((h, h_next, c_next), (h1, h1, c1))
        # what the torch modules give: in inference on the CPU to float32 rounding (the host step),
        # under autograd bit for bit (the cell itself)
        cell = nn.LSTMCell(8, 8)
        cell.load_state_dict({k: getattr(core, f"{k}_l0") for k in cell.state_dict()})
        want_h, want_c = cell(x[:, 0], (h0, c0))
        torch.testing.assert_close((h, c_next), (want_h, want_c), rtol=1e-6, atol=1e-6)
        want_seq, _ = nn.LSTM.forward(core, x, (h0[None].contiguous(), c0[None].contiguous()))
        assert torch.equal(core.sequence(x, (h0, c0)), want_seq)
    h, (_, c_next) = core.step(x[:, 0], (h0, c0))
    assert h.requires_grad and torch.equal(h, cell(x[:, 0], (h0, c0))[0])


def test_lstm_core_host_step_is_the_cell_at_the_rollouts_sizes(monkeypatch):
    """The CPU rollout's step (both products into one buffer, the gates in place) against
    ``nn.LSTMCell`` at breakout's cpu size, and the cell itself where the host step does not apply."""
    torch.manual_seed(0)
    core = LSTM(96)
    x, state = torch.randn(512, 96), (torch.randn(512, 96), torch.randn(512, 96))
    calls, orig = [], LSTM._host_step
    monkeypatch.setattr(LSTM, "_host_step", lambda self, *a: calls.append(1) or orig(self, *a))
    with torch.no_grad():
        want = core.cell(x, state)
        h, (h_next, c_next) = core.step(x, state)
        assert calls == [1] and h is h_next
        torch.testing.assert_close((h, c_next), want, rtol=1e-6, atol=2e-6)
        twin = LSTM(96).double()  # other dtypes step the cell (bf16 its own step, below)
        twin.step(x.double(), tuple(s.double() for s in state))
    assert calls == [1]


def test_lstm_core_int16_step_is_the_cell_within_the_products_rounding():
    """``train.rollout_int16``: the float32 CPU rollout's step with its products in int16 stays
    within about 1e-3 of the cell (the gates' bound, tests/test_host_kernels.py), and the update's
    forward (gradients on) is the cell exactly; a trainer turns it on only for a float32 CPU run."""
    import warnings

    from conftest import small_config

    from appliance import vector
    from appliance.gpu import host
    from appliance.train import Trainer
    from appliance.train.session import header

    if not host.available():
        pytest.skip("appliance._hostkernels is not built")
    torch.manual_seed(0)
    core = LSTM(64)
    core.rollout_int16 = True
    x, state = torch.randn(515, 64) * 2, (torch.rand(515, 64) * 2 - 1, torch.randn(515, 64))
    with torch.no_grad():
        want = core.cell(x, state)
        h, (_, c_next) = core.step(x, state)
    assert not torch.equal(h, want[0])  # the int16 products, not the float32 ones
    torch.testing.assert_close((h, c_next), want, rtol=0, atol=2e-3)
    assert torch.equal(core.step(x, state)[0], core.cell(x, state)[0])  # with gradients: the cell
    for precision, on in (("float32", True), ("bfloat16", False)):
        cfg = small_config(
            "squared",
            "--policy.core",
            "lstm",
            "--train.rollout-int16",
            "true",
            "--train.precision",
            precision,
        )
        vec = vector.make_from_config(cfg)
        try:
            with warnings.catch_warnings():  # bf16 on a CPU without bf16 units warns; not the point here
                warnings.simplefilter("ignore")
                trainer = Trainer(cfg, vec)
                assert trainer.policy.core.rollout_int16 is on
                assert ("products in int16" in header(cfg, trainer)) is on  # the run's first line says so
        finally:
            vec.close()


@pytest.mark.parametrize("where", ["aarch64", "reference"])
def test_rollout_int16_is_left_off_where_its_products_have_no_simd_code(where, monkeypatch, capsys):
    """``train.rollout_int16`` (breakout's older-kind profile, which an Arm CPU also gets) has SIMD
    code for x86 only: on another CPU, or under ``PUFFER_KERNELS=reference``, the trainer leaves it
    off and says why in one line, so the rollout keeps torch's float32 products (a scalar int16 loop
    would be slower) and the first line does not claim int16."""
    import platform

    from conftest import small_config

    from appliance import vector
    from appliance.gpu import host
    from appliance.train import Trainer
    from appliance.train.session import header

    if where == "reference":
        monkeypatch.setenv("PUFFER_KERNELS", "reference")
    elif not host.available():
        pytest.skip("appliance._hostkernels is not built (then it is left off for that reason)")
    else:
        monkeypatch.setattr(platform, "machine", lambda: where)
    cfg = small_config("squared", "--policy.core", "lstm", "--train.rollout-int16", "true")
    vec = vector.make_from_config(cfg)
    try:
        trainer = Trainer(cfg, vec)
        assert trainer.rollout_int16 is False and trainer.policy.core.rollout_int16 is False
        assert "int16" not in header(cfg, trainer)
    finally:
        vec.close()
    err = capsys.readouterr().err
    assert "note: train.rollout_int16 left off" in err
    assert (where if where != "reference" else "PUFFER_KERNELS=reference") in err
    assert host.i16_missing() is not None


def test_lstm_core_bf16_step_keeps_the_cell_state_in_float32(monkeypatch):
    """The bf16 CPU rollout's step (the rollout's bf16 copy of the weights under autocast, as
    ``Trainer.policy_step`` runs it): one bf16 product of ``[x, h]`` and the gates in float32 through
    the host pass. ``h`` within bf16 rounding of the float32 cell, and ``c`` kept in float32, nearer
    the float32 cell than ``nn.LSTMCell``'s under autocast (which takes ``c`` in bf16); without
    autocast a bf16 ``h`` for the next bf16 layer."""
    from appliance.gpu import host

    torch.manual_seed(0)
    core = LSTM(96)
    twin = LSTM(96).to(torch.bfloat16)
    twin.load_state_dict(core.state_dict())
    x, state = torch.randn(512, 96), (torch.randn(512, 96) * 0.5, torch.randn(512, 96))
    calls, orig = [], host.lstm_gates
    monkeypatch.setattr(host, "lstm_gates", lambda *a: calls.append(1) or orig(*a))
    with torch.no_grad():
        want_h, want_c = core.cell(x, state)
        with torch.autocast("cpu", torch.bfloat16):
            h, (_, c) = twin.step(x.bfloat16(), state)
            _, cell_c = twin.cell(x.bfloat16(), state)
        assert calls == ([1] if host.use_host(want_c) else [])
        assert h.dtype == c.dtype == torch.float32
        torch.testing.assert_close(h, want_h, rtol=0, atol=0.01)
        assert (c - want_c).abs().mean() < 0.75 * (cell_c.float() - want_c).abs().mean()
        h_plain, (_, c_plain) = twin.step(x.bfloat16(), state)  # no autocast: bf16 weights alone
        assert h_plain.dtype == torch.bfloat16 and c_plain.dtype == torch.float32
        torch.testing.assert_close(c_plain, c, rtol=0, atol=0)


def test_lstm_core_kernel_path_is_the_cell(monkeypatch):
    """In inference on CUDA the step is the cell's two GEMMs and ``kernels.lstm_step``, here with the
    reference standing in for the kernel."""
    torch.manual_seed(0)
    core = LSTM(8)
    x, state = torch.randn(4, 8), (torch.randn(4, 8), torch.randn(4, 8))
    with torch.no_grad():
        want = core.step(x, state)
        monkeypatch.setattr(kernels, "use_cuda", lambda t: True)
        monkeypatch.setattr(kernels, "lstm_step", reference.lstm_step)
        got = core.step(x, state)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def puffernet_by_hand(core: MinGRU, x: torch.Tensor, state: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """PufferNet written out step by step in float64: per layer k, v, p = x W^T; the minimal GRU
    h = (1 - sigmoid(k)) h + sigmoid(k) g(v); the highway y = sigmoid(p) out + (1 - sigmoid(p)) x,
    out = h W_o^T (h itself with expansion factor 1); y feeds the next layer."""
    hs, ys = [s.double() for s in state], []
    for t in range(x.shape[1]):
        y = x[:, t].double()
        for i, layer in enumerate(core.layers):
            k, v, p = (y @ layer.weight.double().T).split((core.inner, core.inner, core.size), -1)
            g = torch.where(v >= 0, v + 0.5, torch.sigmoid(v))
            hs[i] = (1 - torch.sigmoid(k)) * hs[i] + torch.sigmoid(k) * g
            out = hs[i] if core.out is None else hs[i] @ core.out[i].weight.double().T
            y = torch.sigmoid(p) * out + (1 - torch.sigmoid(p)) * y
        ys.append(y)
    return torch.stack(ys, 1)


@pytest.mark.parametrize(("layers", "factor"), [(1, 1), (2, 1), (3, 2)])
def test_mingru_core_is_puffernet(layers, factor):
    """Steps, the scan over a sequence and its gradients equal PufferNet written out by hand, for
    one layer, PufferLib 4.0's breakout shape (two) and an expanded state; each layer's state starts
    at zero and holds that layer's h."""
    torch.manual_seed(0)
    core = MinGRU(8, num_layers=layers, expansion_factor=factor)
    assert [s.shape for s in core.initial_state(3)] == [(3, 8 * factor)] * layers
    assert not any(s.any() for s in core.initial_state(3))
    x = torch.randn(3, 5, 8, requires_grad=True)
    state = tuple(torch.rand(3, 8 * factor) + 0.05 for _ in range(layers))
    want = puffernet_by_hand(core, x, state)
    seq = core.sequence(x, state)  # the host build of the scan kernel on a CPU
    torch.testing.assert_close(seq.double(), want, rtol=1e-5, atol=1e-5)
    weights = torch.randn(3, 5, 8)
    got_grads = torch.autograd.grad((seq * weights).sum(), [x, *core.parameters()])
    want_grads = torch.autograd.grad((want * weights.double()).sum(), [x, *core.parameters()])
    for got, expected in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got.double(), expected.double(), rtol=1e-4, atol=1e-5)
    for grad in (True, False):  # training steps through the reference, inference through the kernel op
        with torch.set_grad_enabled(grad):
            s, steps = state, []
            for t in range(5):
                y, s = core.step(x[:, t], s)
                steps.append(y)
        torch.testing.assert_close(torch.stack(steps, 1).double(), want, rtol=1e-5, atol=1e-5)
    # the state steps hand on is each layer's h: a scan from it goes on where the steps stopped
    with torch.no_grad():
        s = state
        for t in range(2):
            _, s = core.step(x[:, t], s)
        rest = core.sequence(x[:, 2:], s)
    torch.testing.assert_close(rest.double(), want[:, 2:], rtol=1e-5, atol=1e-5)


def test_mingru_scan_under_bf16_autocast_runs_the_float32_host_build(monkeypatch):
    """train.precision bfloat16 on a CPU: the scan's inputs come out of bf16 matmuls, and the scan
    runs in float32 on the host build, as the fused kernel does on CUDA (the bf16 torch reference
    it fell to before took 3.8-7.6x as long for the core's forward and backward at PufferLib 4.0's
    breakout shape; docs/lab/cpu-speed.md). Steps in inference likewise."""
    from appliance.gpu import host

    if not host.available():
        pytest.skip("the host build of the kernels is not built here")
    calls = []
    real_forward = host.Scan.forward
    monkeypatch.setattr(host.Scan, "forward", lambda *a: (calls.append(a[0].dtype), real_forward(*a))[1])
    monkeypatch.setattr(reference, "mingru_scan", lambda *a: pytest.fail("the bf16 reference scan ran"))
    torch.manual_seed(0)
    core = MinGRU(8, num_layers=2)
    x = torch.randn(3, 5, 8, requires_grad=True)
    state = core.initial_state(3)
    want = core.sequence(x, state)  # float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = core.sequence(x, state)
    got.float().sum().backward()
    assert calls == [torch.float32] * 4  # two layers, float32 and bf16 runs
    torch.testing.assert_close(got.float(), want.detach(), rtol=0.05, atol=0.05)
    assert torch.isfinite(x.grad).all()
    bf16 = MinGRU(8, num_layers=2).to(torch.bfloat16)  # the rollout's bf16 copy of the weights
    with torch.no_grad():
        y, new = bf16.step(x[:, 0].detach().bfloat16(), bf16.initial_state(3))
    assert all(h.dtype == torch.float32 for h in new) and torch.isfinite(y.float()).all()


def test_mingru_core_from_zero_state_has_finite_gradients():
    """The zero initial state (log 0 in the scan's log space) gives finite values and gradients."""
    torch.manual_seed(0)
    core = MinGRU(8, num_layers=2)
    x = torch.randn(4, 6, 8, requires_grad=True)
    y = core.sequence(x, core.initial_state(4))
    y.square().sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in core.parameters())


def test_layer_options_are_refused_where_a_core_has_none():
    obs, act = spaces.Box(-1, 1, (6,), np.float32), spaces.Discrete(3)
    with pytest.raises(ValueError, match="lstm core has one layer"):
        Policy(obs, act, core="lstm", hidden_size=8, num_layers=2)
    with pytest.raises(ValueError, match="only the mingru core"):
        Policy(obs, act, core="mlp", hidden_size=8, expansion_factor=2)
    mlp = Policy(obs, act, core="mlp", hidden_size=8, num_layers=3)
    assert sum(isinstance(m, nn.Linear) for m in mlp.core) == 3


@pytest.mark.parametrize("core", ["mlp", "lstm", "mingru"])
def test_policy_is_encoder_core_heads(core):
    """Policy.step and Policy.sequence are the core's step and sequence between the encoder and the heads."""
    torch.manual_seed(0)
    policy = Policy(
        spaces.Box(-1, 1, (6,), np.float32), spaces.MultiDiscrete([3, 4]), core=core, hidden_size=8
    )
    obs = torch.randn(3, 5, 6)
    state = tuple(s + 0.1 for s in policy.initial_state(3))
    with torch.no_grad():
        h, next_state = policy.core.step(policy.encode(obs[:, 0]), state)
        logits, value, got_state = policy.step(obs[:, 0], state)
        assert torch.equal(logits, policy.decoder(h)) and torch.equal(value, policy.value(h)[:, 0])
        assert all(torch.equal(a, b) for a, b in zip(got_state, next_state, strict=True))
        h = policy.core.sequence(policy.encode(obs), state)
        logits, value = policy.sequence(obs, state)
        assert torch.equal(logits, policy.decoder(h)) and torch.equal(value, policy.value(h)[..., 0])
