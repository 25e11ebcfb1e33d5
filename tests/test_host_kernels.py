"""The kernels' bodies compiled for the CPU as the extension appliance._hostkernels (kernels/host.cpp):
what the CPU trainer runs for the advantage, the segment priorities, the minimal GRU and the rollout's
action draws, against the torch definitions they replace, at every thread split, and the dispatch
that picks them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from appliance.gpu import host, kernels, reference
from appliance.train import advantage

pytestmark = pytest.mark.skipif(
    not host.available() and not os.environ.get("CI"),
    reason="appliance._hostkernels is not built (pip install -e . builds it)",
)


@pytest.fixture(params=[1, 2, 3], ids=lambda n: f"{n}threads")
def threads(request: pytest.FixtureRequest):
    """Each case at 1, 2 and 3 threads: rows split unevenly must give the same numbers."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def test_the_extension_is_built() -> None:
    assert host.available(), "appliance._hostkernels did not load: the CPU trainer would fall back to torch"


def test_the_extension_runs_on_torchs_own_openmp_runtime() -> None:
    """The kernels split their rows over OpenMP's team, which is torch's only if the process holds
    one OpenMP runtime: a second (another libgomp, LLVM's or Intel's) would start threads of its
    own beside torch's workers, which spin on the same cores after each of torch's ops."""
    assert host.available()
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("no /proc/self/maps on this system")
    names = ("libgomp", "libomp", "libiomp")
    runtimes = {
        line.split()[-1]
        for line in maps.read_text().splitlines()
        if any(n in line.rsplit("/", 1)[-1] for n in names)
    }
    assert len(runtimes) == 1, f"OpenMP runtimes in this process: {sorted(runtimes)}"


def rollout_like(segments: int, horizon: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(segments, horizon, generator=g)
    rewards = torch.randn(segments, horizon, generator=g)
    dones = (torch.rand(segments, horizon, generator=g) < 0.05).float()
    ratios = torch.rand(segments, horizon, generator=g) + 0.5
    return values, rewards, dones, ratios


@pytest.mark.parametrize("rho_on", ["td_error", "reward"])
@pytest.mark.parametrize("segments", [1, 7, 2049])
def test_advantage_matches_the_torch_definition(threads: int, segments: int, rho_on: str) -> None:
    v, r, d, rho = rollout_like(segments, 33)
    want = advantage.advantage(v, r, d, rho, 0.9997, 0.75, 0.79, 2.88, rho_on)
    got = host.advantage(v, r, d, rho, 0.9997, 0.75, 0.79, 2.88, rho_on)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_the_trainer_reaches_the_host_advantage_and_reference_mode_turns_it_off(monkeypatch) -> None:
    calls = []
    real = host.advantage
    monkeypatch.setattr(host, "advantage", lambda *a: calls.append(1) or real(*a))
    v, r, d, rho = rollout_like(16, 8)
    advantage.compute(v, r, d, rho, advantage.Coefs(0.99, 0.95))
    assert calls == [1]
    monkeypatch.setenv("PUFFER_KERNELS", "reference")
    advantage.compute(v, r, d, rho, advantage.Coefs(0.99, 0.95))
    assert calls == [1]
    # bfloat16 or float64 tensors are not the kernels' storage: the torch definition takes them
    monkeypatch.delenv("PUFFER_KERNELS")
    advantage.compute(v.double(), r.double(), d.double(), rho.double(), advantage.Coefs(0.99, 0.95))
    assert calls == [1]


@pytest.mark.parametrize("nvec", [[3], [3, 5, 2]])
@pytest.mark.parametrize("masked", [False, True])
def test_action_draws_are_the_references_draws(threads: int, nvec: list[int], masked: bool) -> None:
    """The same Philox draws, so the same actions and values, keyed by agent id; rows split over
    threads unevenly (9,001 rows) give the same numbers."""
    g = torch.Generator().manual_seed(2)
    n = 9001
    out = torch.randn(n, sum(nvec) + 1, generator=g) * 3
    out[:64, :-1] *= 1e4  # extreme logits
    ids = torch.randperm(n, generator=g)
    mask = None
    if masked:
        mask = torch.rand(n, sum(nvec), generator=g) < 0.6
        mask[:32] = False  # a head with nothing allowed samples unmasked
    step = (1 << 40) + 17  # both words of the step
    got = host.sample_logits(out, nvec, 5, step, mask, ids)
    want = reference.sample_logits(out, nvec, 5, step, mask, ids=ids)
    assert torch.equal(got[0], want[0]) and torch.equal(got[2], want[2])
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_the_rollout_reaches_the_host_action_draws_and_reference_mode_turns_them_off(monkeypatch) -> None:
    calls = []
    real = host.sample_logits
    monkeypatch.setattr(host, "sample_logits", lambda *a: calls.append(1) or real(*a))
    out = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))  # C log-probs differ here
    into = (torch.empty(64, dtype=torch.int64), torch.empty(64), torch.empty(64))
    action, logprob, value = kernels.sample_logits(
        out, [3], 1, torch.tensor([9]), action=into[0], logprob=into[1], value=into[2]
    )
    assert calls == [1] and all(a is b for a, b in zip((action, logprob, value), into, strict=True))
    want = reference.sample_logits(out, [3], 1, 9)
    assert torch.equal(action, want[0]) and torch.equal(logprob, want[1]) and torch.equal(value, want[2])
    monkeypatch.setenv("PUFFER_KERNELS", "reference")
    kernels.sample_logits(out, [3], 1, 9)
    monkeypatch.delenv("PUFFER_KERNELS")
    kernels.sample_logits(out.double(), [3], 1, 9)  # not the kernels' storage: the reference
    with pytest.raises(RuntimeError):  # a mask of the wrong width: the reference's error, no stray read
        kernels.sample_logits(out, [3], 1, 9, torch.ones(64, 2, dtype=torch.bool))
    assert calls == [1]


def test_prioritized_draw_matches_the_reference_from_the_same_uniforms(threads: int) -> None:
    adv = advantage.advantage(*rollout_like(4096, 16), 0.99, 0.9)
    uniform = torch.rand(4096, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want_idx, want_w = reference.prio_sample(adv, 0.8, 0.3, 512, 0, 0, uniform=uniform)
    got_idx, got_w = kernels.prio_sample(adv, 0.8, 0.3, 512, 0, 0, uniform=uniform)
    assert torch.equal(got_idx, want_idx)
    torch.testing.assert_close(got_w, want_w, rtol=1e-6, atol=0)
    # outputs into the caller's buffers, as the trainer's CUDA-graph path passes them
    idx, w = torch.empty(512, dtype=torch.int64), torch.empty(512)
    kernels.prio_sample(adv, 0.8, 0.3, 512, 0, 0, uniform=uniform, idx=idx, weight=w)
    assert torch.equal(idx, want_idx)


def test_prioritized_draw_keeps_the_references_checks() -> None:
    adv = torch.zeros(8, 4)
    with pytest.raises(ValueError):
        kernels.prio_sample(adv, 0.8, 0.3, 9, 0, 0, uniform=torch.rand(8, dtype=torch.float64))


def test_mingru_scan_forward_and_gradients_match_the_log_space_reference(threads: int) -> None:
    g = torch.Generator().manual_seed(2)
    kv = (3 * torch.randn(37, 20, 2 * 24, generator=g)).requires_grad_()
    h0 = (torch.rand(37, 24, generator=g) + 0.05).requires_grad_()
    want = reference.mingru_scan(kv, h0)
    got = kernels.mingru_scan(kv, h0)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    grad = torch.randn(want.shape, generator=g)
    want_grads = torch.autograd.grad(want, (kv, h0), grad)
    got_grads = torch.autograd.grad(got, (kv, h0), grad)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_mingru_step_matches_the_reference_with_and_without_resets(threads: int) -> None:
    g = torch.Generator().manual_seed(3)
    kv, h = 3 * torch.randn(300, 2 * 16, generator=g), torch.rand(300, 16, generator=g)
    done = (torch.rand(300, generator=g) < 0.3).float()
    with torch.no_grad():
        for d in (None, done):
            torch.testing.assert_close(
                kernels.mingru_step(kv, h, d), reference.mingru_step(kv, h, d), rtol=1e-6, atol=1e-6
            )
        out = torch.empty(300, 16)
        assert kernels.mingru_step(kv, h, done, out=out) is out


def _cell(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.LSTMCell's gate math in float64: the exact answer the float32 kernels round."""
    i, f, g, o = gates.double().chunk(4, 1)
    c_new = torch.sigmoid(f) * c.double() + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


@pytest.mark.parametrize("simd", [2, 1, 0], ids=["avx2", "avx", "sse2"])
@pytest.mark.parametrize("batch,hidden", [(2049, 96), (7, 13), (3, 3)])
def test_lstm_gates_round_the_cells_math_as_torch_does(
    threads: int, simd: int, batch: int, hidden: int, monkeypatch
) -> None:
    """Every SIMD build (and the scalar tail of a hidden size that is not a multiple of the lanes),
    over pre-activations from -30 to 30 (saturated gates, tanh's small-argument polynomial, cancelling
    cell states), are as near the float64 answer as torch's own float32 ops."""
    if simd > host.widest_simd():
        pytest.skip("this CPU has no such SIMD build (AVX2 and FMA: 2, AVX: 1)")
    monkeypatch.setattr(host, "simd_level", lambda: simd)
    g = torch.Generator().manual_seed(batch)
    gates = (
        torch.randn(batch, 4 * hidden, generator=g)
        * torch.tensor([0.01, 1.0, 10.0])[torch.randint(3, (batch, 1), generator=g)]
    )
    gates[0, :] = torch.linspace(-30, 30, 4 * hidden)
    c = torch.randn(batch, hidden, generator=g) * 3
    exact_h, exact_c = _cell(gates, c)
    i, f, gg, o = gates.chunk(4, 1)
    torch_c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
    torch_h = torch.sigmoid(o) * torch.tanh(torch_c)
    h, c_new = host.lstm_gates(gates, c)
    for got, ref, exact in ((h, torch_h, exact_h), (c_new, torch_c, exact_c)):
        err, torch_err = (got.double() - exact).abs(), (ref.double() - exact).abs()
        assert err.max() <= 2 * torch_err.max() + 1e-7, (err.max(), torch_err.max())
    wide = torch.randn(batch, hidden + 5, generator=g)  # c at a row stride of its own
    torch.testing.assert_close(
        host.lstm_gates(gates, wide[:, :hidden])[1],
        host.lstm_gates(gates, wide[:, :hidden].contiguous())[1],
        rtol=0,
        atol=0,
    )


def test_lstm_gates_avx_build_is_the_sse2_builds_arithmetic_to_the_bit(monkeypatch) -> None:
    """The AVX build (a CPU of the avx kind) does SSE2's multiply-then-add on eight lanes: the same
    results to the bit, so a run's learning does not depend on which of the two a CPU takes."""
    if host.widest_simd() < 1:
        pytest.skip("this CPU has no AVX")
    g = torch.Generator().manual_seed(7)
    gates, c = torch.randn(4096, 4 * 64, generator=g) * 4, torch.randn(4096, 64, generator=g) * 3
    bias = torch.randn(4 * 64, generator=g)
    out = {}
    for simd in (1, 0):
        monkeypatch.setattr(host, "simd_level", lambda simd=simd: simd)
        out[simd] = host.lstm_gates(gates, c, bias)
    torch.testing.assert_close(out[1], out[0], rtol=0, atol=0)


@pytest.mark.parametrize("simd", [2, 1, 0], ids=["avx2", "avx", "sse2"])
@pytest.mark.parametrize("batch,hidden", [(2049, 96), (7, 13)])
def test_lstm_gates_read_bf16_gates_as_their_float32_widening(
    threads: int, simd: int, batch: int, hidden: int, monkeypatch
) -> None:
    """The bf16 rollout hands its product to the gate pass unwidened: the AVX2 build widens each
    value as it loads it (the scalar tail too), the other builds get ``gates.float()``; h and c equal
    the float32 pass's on the widened gates to the bit, NaN and saturation included."""
    if simd > host.widest_simd():
        pytest.skip("this CPU has no such SIMD build (AVX2 and FMA: 2, AVX: 1)")
    monkeypatch.setattr(host, "simd_level", lambda: simd)
    g = torch.Generator().manual_seed(hidden)
    gates = (torch.randn(batch, 4 * hidden, generator=g) * 6).bfloat16()
    gates[0, 1], gates[1, :] = float("nan"), float("inf")
    c, bias = torch.randn(batch, hidden, generator=g) * 3, torch.randn(4 * hidden, generator=g)
    got, want = host.lstm_gates(gates, c, bias), host.lstm_gates(gates.float(), c, bias)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def test_lstm_gates_refuse_other_dtypes_in_one_line() -> None:
    if host._lib() is None:
        pytest.skip("the host extension is not built")
    with pytest.raises(ValueError, match="float32 or bfloat16 gates and a float32 c"):
        host.lstm_gates(torch.zeros(2, 8, dtype=torch.float16), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="float32 or bfloat16 gates and a float32 c"):
        host.lstm_gates(torch.zeros(2, 8), torch.zeros(2, 2, dtype=torch.float64))


def test_lstm_gates_bf16_entry_without_simd_is_the_scalar_cell(threads: int) -> None:
    """The bf16 entry's loop for a build below AVX2 (a CPU that is not x86): the cell's scalar text on
    the widened values, the float32 pass's results within an ulp."""
    if host._lib() is None:
        pytest.skip("the host extension is not built")
    g = torch.Generator().manual_seed(3)
    batch, hidden = 33, 24
    gates = (torch.randn(batch, 4 * hidden, generator=g) * 4).bfloat16()
    c, bias = torch.randn(batch, hidden, generator=g), torch.randn(4 * hidden, generator=g)
    h, c_new = torch.empty(batch, hidden), torch.empty(batch, hidden)
    host._call(
        "pb_host_lstm_gates_bf16", gates.data_ptr(), bias.data_ptr(), c.data_ptr(), hidden,
        h.data_ptr(), c_new.data_ptr(), batch, hidden, 0,
    )  # fmt: skip
    want_h, want_c = host.lstm_gates(gates.float(), c, bias)
    torch.testing.assert_close((h, c_new), (want_h, want_c), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize(
    ("kind", "capability", "want"),
    [("avx2", "AVX2", 2), ("avx2", "DEFAULT", 1), ("avx", "DEFAULT", 1), ("older", "DEFAULT", 0)],
)
def test_the_gate_builds_follow_the_cpus_kind(kind, capability, want, monkeypatch) -> None:
    """A CPU acting as a lesser kind (``PUFFER_CPU_KIND``) runs that kind's build of the gate math:
    AVX2 only where torch's kernels run at AVX2, AVX on the avx kind, SSE2 on the older kind."""
    from appliance.sysinfo import cpu as syscpu

    if host._lib() is None:
        pytest.skip("the host extension is not built")
    monkeypatch.setattr(syscpu, "cpu_kind", lambda environ=None: kind)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    host._simd_level.cache_clear()
    try:
        assert host.simd_level() == min(want, host.widest_simd())
    finally:
        host._simd_level.cache_clear()


@pytest.mark.parametrize("simd", [2, 1, 0], ids=["avx2", "avx", "sse2"])
def test_lstm_gates_keep_nan_and_saturate_at_infinity(simd: int, monkeypatch) -> None:
    """A NaN pre-activation (a NaN observation through the encoder) stays NaN in h and c, as in
    torch's ops, so the trainer's NaN check still fires; +-inf saturate as the cell does."""
    if simd > host.widest_simd():
        pytest.skip("this CPU has no such SIMD build (AVX2 and FMA: 2, AVX: 1)")
    monkeypatch.setattr(host, "simd_level", lambda: simd)
    hidden = 16
    gates, c = torch.zeros(4, 4 * hidden), torch.zeros(4, hidden)
    gates[0, 3] = float("nan")  # the input gate of unit 3
    gates[1, 2 * hidden + 5] = float("nan")  # the candidate of unit 5
    gates[2] = float("inf")
    gates[3] = -float("inf")
    h, c_new = host.lstm_gates(gates, c)
    assert h[0, 3].isnan() and c_new[0, 3].isnan() and h[1, 5].isnan() and c_new[1, 5].isnan()
    assert torch.isfinite(h[0, :3]).all() and torch.isfinite(h[1, :5]).all()
    i, f, g, o = gates[2:].chunk(4, 1)
    want_c = torch.sigmoid(f) * c[2:] + torch.sigmoid(i) * torch.tanh(g)
    torch.testing.assert_close((h[2:], c_new[2:]), (torch.sigmoid(o) * torch.tanh(want_c), want_c))


@pytest.mark.parametrize("simd", [2, 1, 0], ids=["avx2", "avx", "sse2"])
def test_lstm_gates_add_the_bias_to_every_row(simd: int, monkeypatch) -> None:
    """The rollout's products leave the biases out (no broadcast copy of them a step): the gate pass
    adds them, per gate column, to every row, the tail of a hidden size off the lanes included."""
    if simd > host.widest_simd():
        pytest.skip("this CPU has no such SIMD build (AVX2 and FMA: 2, AVX: 1)")
    monkeypatch.setattr(host, "simd_level", lambda: simd)
    g = torch.Generator().manual_seed(5)
    batch, hidden = 33, 13
    gates, c = torch.randn(batch, 4 * hidden, generator=g), torch.randn(batch, hidden, generator=g)
    bias = torch.randn(4 * hidden, generator=g) * 3
    exact_h, exact_c = _cell(gates.double() + bias.double(), c)
    h, c_new = host.lstm_gates(gates, c, bias)
    torch.testing.assert_close((h.double(), c_new.double()), (exact_h, exact_c), rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match="do not fit one cell of 13 units"):
        host.lstm_gates(gates, c, bias[:-1])


def _i16_bound(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The most the int16 products may be off from ``a @ w.T`` in each element: with a row scaled
    so that its largest magnitude A is the limit q, and a weight row's W likewise, each of the depth
    K's terms is off by at most A W / q (half a step of each factor, and their product), so the sum
    by K A W / q; float32 rounding of the scaling adds a hair (the 1 % margin)."""
    depth = a.shape[1] + a.shape[1] % 2
    q = min(16383.0, float(int(((2**31 - 1) / depth) ** 0.5)))
    rows, cols = a.abs().amax(1, keepdim=True), w.abs().amax(1)[None, :]
    return 1.01 * depth * rows * cols / q + 1e-6 * rows * cols


@pytest.mark.parametrize("simd", [2, 1, 0], ids=["avx2", "avx", "sse2"])
@pytest.mark.parametrize("batch,inputs,hidden", [(1029, 64, 64), (7, 5, 3), (33, 118, 96), (4, 2, 1)])
def test_int16_lstm_products_are_the_float_products_within_their_rounding(
    threads: int, simd: int, batch: int, inputs: int, hidden: int, monkeypatch
) -> None:
    """``x @ w_ih.T + h @ w_hh.T`` in 16-bit integers, every build, split over threads at rows that
    are not a multiple of the kernel's four, odd depths (zero-padded) and gate counts that are not a
    multiple of its column block: each element within the quantization's bound of the float64
    product, where rows and weights of very different magnitudes share a call."""
    if simd > host.widest_simd():
        pytest.skip("this CPU has no such SIMD build (AVX2 and FMA: 2, AVX: 1)")
    monkeypatch.setattr(host, "simd_level", lambda: simd)
    g = torch.Generator().manual_seed(batch + inputs)
    scale = torch.tensor([1e-3, 1.0, 30.0])
    x = torch.randn(batch, inputs, generator=g) * scale[torch.randint(3, (batch, 1), generator=g)]
    h = torch.rand(batch, hidden, generator=g) * 2 - 1
    w_ih = (
        torch.randn(4 * hidden, inputs, generator=g) * scale[torch.randint(3, (4 * hidden, 1), generator=g)]
    )
    w_hh = torch.randn(4 * hidden, hidden, generator=g) * 0.3
    x[0] = 0.0  # an all-zero row: its part adds nothing
    exact = x.double() @ w_ih.double().T + h.double() @ w_hh.double().T
    got = host.lstm_products_i16(x, h, w_ih, w_hh)
    assert got.shape == (batch, 4 * hidden)
    bound = _i16_bound(x.double(), w_ih.double()) + _i16_bound(h.double(), w_hh.double())
    assert ((got.double() - exact).abs() <= bound).all(), ((got.double() - exact).abs() / bound).max()
    # and far nearer than the bound on typical rows: the rounding errors cancel
    assert (got.double() - exact).abs().max() <= 1e-3 * exact.abs().max()
    wide = torch.cat([x, torch.randn(batch, 3, generator=g)], 1)  # x at a row stride of its own
    assert torch.equal(host.lstm_products_i16(wide[:, :inputs], h, w_ih, w_hh), got)


@pytest.mark.parametrize("simd", [2, 1, 0], ids=["avx2", "avx", "sse2"])
@pytest.mark.parametrize("batch,inputs,hidden", [(1029, 64, 64), (7, 5, 3), (33, 118, 96), (4, 2, 1)])
def test_the_fused_int16_lstm_step_is_the_products_then_the_gate_pass(
    threads: int, simd: int, batch: int, inputs: int, hidden: int, monkeypatch
) -> None:
    """``lstm_step_i16`` runs the gate pass on each block of rows' products while they sit in a
    tile: the same numbers to the bit as ``lstm_gates(lstm_products_i16(...))``, every build and
    thread split, with blocks cut short at the batch's end and a cell state at a row stride of its
    own."""
    if simd > host.widest_simd():
        pytest.skip("this CPU has no such SIMD build (AVX2 and FMA: 2, AVX: 1)")
    monkeypatch.setattr(host, "simd_level", lambda: simd)
    g = torch.Generator().manual_seed(batch * 7 + hidden)
    x, h = torch.randn(batch, inputs, generator=g), torch.rand(batch, hidden, generator=g) * 2 - 1
    c = torch.randn(batch, hidden + 2, generator=g)[:, 1 : hidden + 1]  # a view, rows 2 apart
    w_ih, w_hh = (
        torch.randn(4 * hidden, inputs, generator=g) * 0.3,
        torch.randn(4 * hidden, hidden, generator=g) * 0.3,
    )
    bias = torch.randn(4 * hidden, generator=g)
    want = host.lstm_gates(host.lstm_products_i16(x, h, w_ih, w_hh), c, bias)
    got = host.lstm_step_i16(x, h, c, w_ih, w_hh, bias)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    exact_h, exact_c = _cell(x.double() @ w_ih.double().T + h.double() @ w_hh.double().T + bias.double(), c)
    torch.testing.assert_close((got[0].double(), got[1].double()), (exact_h, exact_c), rtol=0, atol=1e-2)


def test_the_fused_int16_lstm_step_keeps_nan_and_refuses_bad_input_in_one_line() -> None:
    """A NaN input row comes out as a NaN row of ``h`` and ``c``; other rows stay finite; a cell
    state or bias that does not fit, or another dtype, is refused in one line."""
    g = torch.Generator().manual_seed(4)
    x, h, c = torch.randn(9, 8, generator=g), torch.randn(9, 4, generator=g), torch.randn(9, 4, generator=g)
    w_ih, w_hh, bias = (
        torch.randn(16, 8, generator=g),
        torch.randn(16, 4, generator=g),
        torch.randn(16, generator=g),
    )
    x[6, 3] = float("nan")
    h_new, c_new = host.lstm_step_i16(x, h, c, w_ih, w_hh, bias)
    assert h_new[6].isnan().all() and c_new[6].isnan().all()
    assert torch.isfinite(h_new[[r for r in range(9) if r != 6]]).all()
    with pytest.raises(ValueError, match="float32 CPU tensors only"):
        host.lstm_step_i16(x, h.double(), c, w_ih, w_hh, bias)
    with pytest.raises(ValueError, match="do not fit h"):
        host.lstm_step_i16(x, h, c[:, :3], w_ih, w_hh, bias)
    with pytest.raises(ValueError, match="do not fit h"):
        host.lstm_step_i16(x, h, c, w_ih, w_hh, bias[:-1])


def test_int16_lstm_products_keep_nan_and_refuse_bad_input_in_one_line() -> None:
    """A NaN or infinite input row, or weight row, makes NaN of what it reaches (so the trainer's
    checks still see it), and nothing else; other dtypes and shapes are refused in one line."""
    g = torch.Generator().manual_seed(3)
    x, h = torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)
    w_ih, w_hh = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
    x[1, 2], h[3, 0] = float("nan"), float("inf")
    w_hh[5, 1] = float("nan")
    got = host.lstm_products_i16(x, h, w_ih, w_hh)
    assert got[1].isnan().all() and got[3].isnan().all() and got[:, 5].isnan().all()
    others = [r for r in range(6) if r not in (1, 3)]
    assert torch.isfinite(got[others][:, [c for c in range(16) if c != 5]]).all()
    with pytest.raises(ValueError, match="float32 CPU tensors only"):
        host.lstm_products_i16(x.double(), h, w_ih, w_hh)
    with pytest.raises(ValueError, match="do not fit one cell"):
        host.lstm_products_i16(x, h, w_ih[:, :7], w_hh)
