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
    "mingru": ["core.linear.weight", "core.linear.bias"],
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
        ("mingru", lambda n: nn.Linear(n, 2 * n)),
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
        # bit for bit what the torch modules give
        cell = nn.LSTMCell(8, 8)
        cell.load_state_dict({k: getattr(core, f"{k}_l0") for k in cell.state_dict()})
        want_h, want_c = cell(x[:, 0], (h0, c0))
        assert torch.equal(h, want_h) and torch.equal(c_next, want_c)
        want_seq, _ = nn.LSTM.forward(core, x, (h0[None].contiguous(), c0[None].contiguous()))
        assert torch.equal(core.sequence(x, (h0, c0)), want_seq)


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


@pytest.mark.parametrize("grad", [True, False])
def test_mingru_core_is_the_minimal_gru(grad):
    torch.manual_seed(0)
    core = MinGRU(8)
    x, h0 = torch.randn(3, 5, 8), torch.rand(3, 8) + 0.05
    (start,) = core.initial_state(3)
    assert torch.equal(start, torch.full((3, 8), 0.5))
    with torch.set_grad_enabled(grad):
        k, v = core.linear(x[:, 0]).chunk(2, -1)
        z, g = torch.sigmoid(k), torch.where(v >= 0, v + 0.5, torch.sigmoid(v))
        h, (h_next,) = core.step(x[:, 0], (h0,))
        torch.testing.assert_close(h, (1 - z) * h0 + z * g)
        assert h is h_next
        # the step and the scan are the kernels' ops (on the CPU their bodies compiled for it, which
        # agree with the torch references to float32 rounding: tests/test_host_kernels.py)
        if not grad:  # inference steps through the kernels' op, training through the reference
            assert torch.equal(h, kernels.mingru_step(core.linear(x[:, 0]), h0))
        torch.testing.assert_close(h, reference.mingru_step(core.linear(x[:, 0]), h0))
        seq = core.sequence(x, (h0,))
        assert torch.equal(seq, kernels.mingru_scan(core.linear(x), h0))
        torch.testing.assert_close(seq, reference.mingru_scan(core.linear(x), h0))


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
