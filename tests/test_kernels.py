"""The fused kernels' bodies (kernels/*.cuh) compiled with g++ and compared with the torch references
(appliance/gpu/reference.py), which are in turn compared with the trainer and policy code they
replace; plus the dispatch of appliance.gpu.kernels. No GPU needed: tests/gpu/ runs the kernels."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from appliance.errors import ConfigError, DeviceError
from appliance.gpu import kernels, reference
from appliance.paths import data_dir
from appliance.train import advantage, losses
from appliance.train.cores import MinGRU

HERE = __import__("pathlib").Path(__file__).resolve().parent

# argument kinds: p pointer (tensor or None), i int32, l int64, L uint64, I uint32, f float, d double
SIGNATURES = {
    "host_philox": "LLIIp",
    "host_to_bf16": "ppi",
    "host_sample_logits_f32": "plipipLLpippp",
    "host_sample_logits_bf16": "plipipLLpippp",
    "host_advantage": "pppppiiffffi",
    "host_lstm_step_f32": "pppppiipp",
    "host_lstm_step_bf16": "pppppiipp",
    "host_mingru_step_f32": "pppiip",
    "host_mingru_step_bf16": "pppiip",
    "host_mingru_scan_fwd_f32": "pppiii",
    "host_mingru_scan_fwd_f64": "pppiii",
    "host_mingru_scan_bwd_f32": "ppppppiii",
    "host_mingru_scan_bwd_f64": "ppppppiii",
    "host_ppo_loss_f32": "plpipppppppfffffippppp",
    "host_ppo_loss_bf16": "plpipppppppfffffippppp",
    "host_prio_keys": "piiddLLpp",
}
CTYPES = {
    "p": ctypes.c_void_p,
    "i": ctypes.c_int,
    "l": ctypes.c_longlong,
    "L": ctypes.c_ulonglong,
    "I": ctypes.c_uint,
    "f": ctypes.c_float,
    "d": ctypes.c_double,
}


class Host:
    """The g++ build of tests/kernels_host.cpp: call(name, *args) with tensors for pointers."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        for name, sig in SIGNATURES.items():
            getattr(lib, name).argtypes = [CTYPES[c] for c in sig]
            getattr(lib, name).restype = None

    def __call__(self, name: str, *args):
        conv = []
        for a in args:
            if isinstance(a, torch.Tensor):
                assert a.is_contiguous() and a.device.type == "cpu"
                conv.append(a.data_ptr())
            else:
                conv.append(a)
        getattr(self.lib, name)(*conv)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        if os.environ.get("CI"):  # CI must compare the kernel bodies: a missing g++ is a failure there
            pytest.fail("no C++ compiler (g++/c++) on the CI machine to build the kernel bodies")
        pytest.skip("no C++ compiler (g++/c++) to build the kernel bodies for the CPU")
    out = tmp_path_factory.mktemp("kernels") / "kernels_host.so"
    cmd = [cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"]
    cmd += [f"-I{data_dir('kernels')}", str(HERE / "kernels_host.cpp"), "-o", str(out)]
    subprocess.run(cmd, check=True)
    return Host(ctypes.CDLL(str(out)))


def bf16(x: torch.Tensor) -> torch.Tensor:
    """bfloat16 storage as the kernels see it: the raw bits in an int16 tensor of the same shape."""
    return x.to(torch.bfloat16).contiguous().view(torch.int16)


# ------------------------------------------------------------------------------------ Philox, bf16


def test_philox_known_answers_and_reference(host: Host) -> None:
    # Random123's known-answer vectors for philox4x32-10 (counter, key) -> output
    out = torch.zeros(4, dtype=torch.int32)
    host("host_philox", 0, 0, 0, 0, out)
    assert [x & 0xFFFFFFFF for x in out.tolist()] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    host("host_philox", 2**64 - 1, 2**64 - 1, 0xFFFFFFFF, 0xFFFFFFFF, out)
    assert [x & 0xFFFFFFFF for x in out.tolist()] == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    # the torch reference reproduces the C++ bit for bit, large seeds and steps included
    for seed, step, lane in ((0, 0, 0), (12345, 7, 3), (2**40 + 5, 2**33 + 1, reference.PRIO_LANE)):
        index = torch.tensor([0, 1, 2**31 - 1, 2**32 - 1])
        ref = reference.philox(seed, step, index, lane)
        for i, k in enumerate(index.tolist()):
            host("host_philox", seed, step, k, lane, out)
            assert [x & 0xFFFFFFFF for x in out.tolist()] == [int(r[i]) for r in ref]


def test_bf16_rounding_matches_torch(host: Host) -> None:
    x = torch.cat(
        [
            torch.randn(10000) * 10 ** torch.randint(-30, 30, (10000,)).float(),
            torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1.00390625, 1.01171875, 3.4e38]),
        ]
    )
    got = torch.zeros(len(x), dtype=torch.int16)
    host("host_to_bf16", x, got, len(x))
    assert torch.equal(got, bf16(x))
    nan = torch.zeros(1, dtype=torch.int16)
    host("host_to_bf16", torch.tensor([float("nan")]), nan, 1)
    assert torch.isnan(nan.view(torch.bfloat16).float()).all()


# ------------------------------------------------------------------------------------ sample_logits


def _host_sample(host: Host, out: torch.Tensor, nvec, seed, step, mask=None, storage="f32", ids=None):
    n = out.shape[0]
    heads = len(nvec)
    action = torch.zeros(n, heads, dtype=torch.int64)
    logprob, value = torch.zeros(n), torch.zeros(n)
    data = out if storage == "f32" else bf16(out)
    m = None if mask is None else mask.to(torch.uint8).contiguous()
    host(
        f"host_sample_logits_{storage}", data, out.shape[1], sum(nvec), torch.tensor(nvec, dtype=torch.int32),
        heads, m, seed, step, ids, n, action, logprob, value,
    )  # fmt: skip
    return (action[:, 0] if heads == 1 else action), logprob, value


@pytest.mark.parametrize("storage", ["f32", "bf16"])
@pytest.mark.parametrize("nvec", [[4], [3, 5, 2]])
@pytest.mark.parametrize("masked", [False, True])
def test_sample_logits_matches_reference(host: Host, storage: str, nvec: list[int], masked: bool) -> None:
    g = torch.Generator().manual_seed(1)
    n = 4096
    out = torch.randn(n, sum(nvec) + 1, generator=g) * 3
    out[:64, :-1] *= 1e4  # extreme logits: max-shift keeps them finite
    out[64:128, 0] = 80.0  # one dominant action
    mask = None
    if masked:
        mask = torch.rand(n, sum(nvec), generator=g) < 0.6
        mask[:32] = False  # every action masked: samples as if unmasked
    if storage == "bf16":
        out = out.to(torch.bfloat16)
    a, lp, v = _host_sample(host, out.float(), nvec, 7, 11, mask, storage)
    ra, rlp, rv = reference.sample_logits(out, nvec, 7, 11, mask)
    assert torch.equal(a, ra)
    assert torch.equal(v, rv)
    torch.testing.assert_close(lp, rlp, rtol=1e-5, atol=1e-4)
    assert torch.isfinite(lp).all()
    if masked:  # no masked action is ever chosen where the head allows any
        acts = a.reshape(n, -1)
        offset = 0
        for h, k in enumerate(nvec):
            head_mask = mask[:, offset : offset + k]
            chosen = head_mask.gather(1, acts[:, h : h + 1])[:, 0]
            assert chosen[head_mask.any(1)].all()
            offset += k


def test_sample_logits_draws_follow_the_softmax() -> None:
    n, logits = 200_000, torch.tensor([1.0, 0.0, -1.0, 2.0, -30.0])
    out = torch.cat([logits, torch.zeros(1)]).expand(n, -1).contiguous()
    a, lp, _ = reference.sample_logits(out, [5], seed=3, step=0)
    freq = torch.bincount(a, minlength=5).float() / n
    torch.testing.assert_close(freq, torch.softmax(logits, 0), atol=4e-3, rtol=0)
    torch.testing.assert_close(lp, torch.log_softmax(logits, 0)[a])
    # another step or seed gives other draws, the same (seed, step) the same ones
    assert not torch.equal(a, reference.sample_logits(out, [5], seed=3, step=1)[0])
    assert torch.equal(a, reference.sample_logits(out, [5], seed=3, step=0)[0])


def test_sample_logits_draws_are_keyed_by_agent_id_not_by_row(host: Host) -> None:
    """An agent draws the same action whichever batch, order or buffer it is stepped in (the rollout
    engine splits agents into buffers), and a device-held step tensor draws as the int does."""
    g = torch.Generator().manual_seed(4)
    out = torch.randn(64, 7, generator=g)
    whole = reference.sample_logits(out, [3, 3], 5, 17)
    perm = torch.randperm(64, generator=g)
    part = perm[:20]
    sub = reference.sample_logits(out[part], [3, 3], 5, 17, ids=part)
    for a, b in zip(sub, whole, strict=True):
        assert torch.equal(a, b[part])
    host_sub = _host_sample(host, out[part].contiguous(), [3, 3], 5, 17, ids=part)
    for a, b in zip(host_sub, sub, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    on_device = reference.sample_logits(out, [3, 3], 5, torch.tensor([17]))
    assert all(torch.equal(a, b) for a, b in zip(on_device, whole, strict=True))


# ------------------------------------------------------------------------------------ advantage


@pytest.mark.parametrize("rho_on", ["td_error", "reward"])
def test_advantage_kernel_body_matches_the_reference(host: Host, rho_on: str) -> None:
    """The definition is the trainer's own advantage (train/advantage.py; test_train checks it against
    plain loops); here the CUDA body, compiled by g++, must match it, with the clipped ratio on the
    TD error or on the reward alone (train.vtrace_rho_on)."""
    g = torch.Generator().manual_seed(2)
    rows, horizon = 257, 64
    values = torch.randn(rows, horizon, generator=g)
    rewards = torch.randn(rows, horizon, generator=g)
    dones = (torch.rand(rows, horizon, generator=g) < 0.05).float()  # dones mid-row
    ratios = torch.exp(torch.randn(rows, horizon, generator=g) * 0.3)  # some clipped by rho/c
    args = (0.99, 0.95, 1.0, 0.9)
    ref = advantage.advantage(values, rewards, dones, ratios, *args, rho_on=rho_on)
    got = torch.zeros(rows, horizon)
    host(
        "host_advantage", values, rewards, dones, ratios, got, rows, horizon, 0.99, 0.99 * 0.95, 1.0, 0.9,
        int(rho_on == "reward"),
    )  # fmt: skip
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ recurrent steps


@pytest.mark.parametrize("storage", ["f32", "bf16"])
def test_lstm_step_matches_lstm_cell(host: Host, storage: str) -> None:
    torch.manual_seed(3)
    batch, hidden = 64, 32
    cell = torch.nn.LSTMCell(hidden, hidden)
    x, h, c = torch.randn(batch, hidden), torch.randn(batch, hidden), torch.randn(batch, hidden)
    done = (torch.rand(batch) < 0.3).float()
    with torch.no_grad():
        gx = F.linear(x, cell.weight_ih, cell.bias_ih)
        gh = F.linear(h, cell.weight_hh, cell.bias_hh)
        keep = (1 - done)[:, None]
        want_h, want_c = cell(x, (h * keep, c * keep))  # a done row starts from zeros
        b_hh = cell.bias_hh.detach().clone()
    if storage == "bf16":
        gx, gh, b_hh = (t.to(torch.bfloat16) for t in (gx, gh, b_hh))
    ref_h, ref_c = reference.lstm_step(gx, gh, c, done, b_hh)
    tol = {"rtol": 1e-5, "atol": 1e-5} if storage == "f32" else {"rtol": 0.03, "atol": 0.03}
    torch.testing.assert_close(ref_h, want_h, **tol)
    torch.testing.assert_close(ref_c, want_c, **tol)
    got_h, got_c = torch.zeros(batch, hidden), torch.zeros(batch, hidden)
    data = (gx, gh, b_hh) if storage == "f32" else (bf16(gx), bf16(gh), bf16(b_hh))
    host(f"host_lstm_step_{storage}", *data, c, done, batch, hidden, got_h, got_c)
    torch.testing.assert_close(got_h, ref_h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_c, ref_c, rtol=1e-5, atol=1e-6)


def test_policy_lstm_step_on_the_kernel_path_equals_the_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Policy.step's CUDA branch (two GEMMs, then kernels.lstm_step) with the reference standing in for
    the kernel: the same h and c as nn.LSTMCell, the path taken on a CPU."""
    from gymnasium import spaces

    from appliance.train.policy import Policy

    torch.manual_seed(2)
    policy = Policy(spaces.Box(0, 1, (6,), np.float32), spaces.Discrete(3), core="lstm", hidden_size=16)
    obs, state = torch.rand(32, 6), (torch.randn(32, 16), torch.randn(32, 16))
    with torch.no_grad():
        want = policy.step(obs, state)
        monkeypatch.setattr(kernels, "use_cuda", lambda t: True)
        monkeypatch.setattr(kernels, "lstm_step", reference.lstm_step)
        got = policy.step(obs, state)
    for a, b in ((got[0], want[0]), (got[1], want[1]), *zip(got[2], want[2], strict=True)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("storage", ["f32", "bf16"])
def test_mingru_step_matches_policy(host: Host, storage: str) -> None:
    torch.manual_seed(4)
    batch, hidden = 64, 32
    core = MinGRU(hidden)
    x, h = torch.randn(batch, hidden) * 2, torch.rand(batch, hidden) + 0.1
    done = (torch.rand(batch) < 0.3).float()
    with torch.no_grad():
        kv = core.layers[0](x)[:, : 2 * hidden].contiguous()
        _, (want,) = core.step(x, (torch.where(done.bool()[:, None], 0.0, h),))  # a done row: from h = 0
    if storage == "bf16":
        kv = kv.to(torch.bfloat16)
    ref = reference.mingru_step(kv, h, done)
    torch.testing.assert_close(ref, want, **({} if storage == "f32" else {"rtol": 0.03, "atol": 0.03}))
    got = torch.zeros(batch, hidden)
    host(f"host_mingru_step_{storage}", kv if storage == "f32" else bf16(kv), h, done, batch, hidden, got)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------ mingru_scan


class HostScan:
    """The g++ scan bodies as a backend of kernels.MinGRUScan (float32 or float64)."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def _suffix(self, t: torch.Tensor) -> str:
        return {torch.float32: "f32", torch.float64: "f64"}[t.dtype]

    def forward(self, kv, h0, h) -> None:
        b, t, hidden = h.shape
        self.host(f"host_mingru_scan_fwd_{self._suffix(kv)}", kv, h0, h, b, t, hidden)

    def backward(self, kv, h0, h, grad_h, grad_kv, grad_h0) -> None:
        b, t, hidden = h.shape
        self.host(
            f"host_mingru_scan_bwd_{self._suffix(kv)}", kv, h0, h, grad_h, grad_kv, grad_h0, b, t, hidden
        )


def test_mingru_scan_forward_backward_match_reference(host: Host) -> None:
    torch.manual_seed(5)
    b, t, hidden = 8, 32, 16
    core = MinGRU(hidden)
    x, h0 = torch.randn(b, t, hidden) * 2, torch.rand(b, hidden) + 0.05
    with torch.no_grad():
        kv, p = core.layers[0](x).split((2 * hidden, hidden), dim=-1)
        scanned = core.sequence(x, (h0,))  # the policy's scan, then its highway
        want_y = torch.lerp(x, reference.mingru_scan(kv, h0), torch.sigmoid(p))
        torch.testing.assert_close(want_y, scanned)
    kv_r, h0_r = kv.clone().requires_grad_(), h0.clone().requires_grad_()
    kv_k, h0_k = kv.clone().requires_grad_(), h0.clone().requires_grad_()
    want = reference.mingru_scan(kv_r, h0_r)
    got = kernels.MinGRUScan.apply(kv_k, h0_k, HostScan(host))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad)
    torch.testing.assert_close(kv_k.grad, kv_r.grad, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(h0_k.grad, h0_r.grad, rtol=1e-3, atol=1e-4)


def test_mingru_scan_gradcheck(host: Host) -> None:
    torch.manual_seed(6)
    kv = (torch.randn(3, 7, 8, dtype=torch.float64) * 2).requires_grad_()
    kv.data[0, 0, 4:] = -kv.data[0, 0, 4:].abs()  # both branches of g(v)
    h0 = (torch.rand(3, 4, dtype=torch.float64) + 0.1).requires_grad_()
    backend = HostScan(host)
    assert torch.autograd.gradcheck(lambda a, b: kernels.MinGRUScan.apply(a, b, backend), (kv, h0))
    assert torch.autograd.gradcheck(reference.mingru_scan, (kv, h0))
    with torch.no_grad():
        torch.testing.assert_close(kernels.MinGRUScan.apply(kv, h0, backend), reference.mingru_scan(kv, h0))


# ------------------------------------------------------------------------------------ ppo_loss


def _trainer_loss(out, new_value, actions, old_logprob, adv, returns, old_value, mask, nvec, t):
    """Trainer._update_minibatch's loss, written as there (Policy.evaluate_actions + the clipped terms)."""
    dists = [torch.distributions.Categorical(logits=p) for p in torch.split(out, nvec, dim=-1)]
    if len(nvec) == 1:
        new_logprob, entropy = dists[0].log_prob(actions), dists[0].entropy()
    else:
        new_logprob = sum(d.log_prob(actions[..., i]) for i, d in enumerate(dists))
        entropy = sum(d.entropy() for d in dists)

    def mm(x):
        return (x * mask).sum() / mask.sum().clamp_min(1.0)

    ratio = (new_logprob - old_logprob).exp()
    pg = mm(torch.max(-adv * ratio, -adv * ratio.clamp(1 - t["clip"], 1 + t["clip"])))
    v_clipped = old_value + (new_value - old_value).clamp(-t["vf_clip"], t["vf_clip"])
    v = 0.5 * mm(torch.max((new_value - returns) ** 2, (v_clipped - returns) ** 2))
    return pg + t["vf_coef"] * v - t["ent_coef"] * mm(entropy)


@pytest.mark.parametrize("storage", ["f32", "bf16"])
@pytest.mark.parametrize("nvec", [[6], [3, 4]])
def test_ppo_loss_matches_the_torch_loss(host: Host, storage: str, nvec: list[int]) -> None:
    g = torch.Generator().manual_seed(7)
    n, width = 2048, sum(nvec)
    logits = torch.randn(n, width, generator=g) * 2
    logits[:16] *= 500  # extreme logits
    if storage == "bf16":
        logits = logits.to(torch.bfloat16).float()
    actions = torch.stack([torch.randint(0, k, (n,), generator=g) for k in nvec], 1)
    if len(nvec) == 1:
        actions = actions[:, 0]
    value = torch.randn(n, generator=g)
    old_value = value + torch.randn(n, generator=g) * 0.3  # some beyond vf_clip
    old_logprob = torch.log_softmax(logits[:, : nvec[0]], 1).gather(1, actions.reshape(n, -1)[:, :1])[:, 0]
    old_logprob = old_logprob + torch.randn(n, generator=g) * 0.3  # ratios inside and outside the clip
    adv, returns = torch.randn(n, generator=g), torch.randn(n, generator=g)
    mask = (torch.rand(n, generator=g) < 0.8).float()
    coefs = {"clip": 0.2, "vf_clip": 0.2, "vf_coef": 0.5, "ent_coef": 0.01}
    args = (logits, value, actions, old_logprob, adv, returns, old_value, mask, nvec, *coefs.values())
    ref = reference.PPOLoss(*losses.gradients(*args[:9], losses.Coefs(*args[9:]), grad_scale=0.5))

    lg, nv = logits.clone().requires_grad_(), value.clone().requires_grad_()
    loss = _trainer_loss(lg, nv, actions, old_logprob, adv, returns, old_value, mask, nvec, coefs)
    (loss * 0.5).backward()
    torch.testing.assert_close(ref.stats[0], loss.detach())
    torch.testing.assert_close(ref.grad_logits, lg.grad)
    torch.testing.assert_close(ref.grad_value, nv.grad)

    terms, ratio, grad_logits, grad_value, stats = (
        torch.zeros(n, 6), torch.zeros(n), torch.zeros(n, width), torch.zeros(n), torch.zeros(6)
    )  # fmt: skip
    host(
        f"host_ppo_loss_{storage}", logits if storage == "f32" else bf16(logits), width,
        torch.tensor(nvec, dtype=torch.int32), len(nvec), actions.reshape(n, -1).contiguous(), old_logprob,
        adv, returns, value, old_value, mask, *coefs.values(), 0.5, n, terms, ratio, grad_logits,
        grad_value, stats,
    )  # fmt: skip
    torch.testing.assert_close(stats, ref.stats, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ratio, ref.ratio, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad_logits, ref.grad_logits, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(grad_value, ref.grad_value, rtol=1e-4, atol=1e-7)


# ------------------------------------------------------------------------------------ prio_sample


def _host_prio(host, adv, alpha, seed, step, floor=reference.PRIO_FLOOR):
    segments, horizon = adv.shape
    prio, key = torch.zeros(segments, dtype=torch.float64), torch.zeros(segments, dtype=torch.float64)
    host("host_prio_keys", adv, segments, horizon, alpha, floor, seed, step, prio, key)
    return prio, key


def test_prio_sample_matches_reference_and_trainer_weights(host: Host) -> None:
    g = torch.Generator().manual_seed(8)
    segments, horizon, samples = 1000, 16, 256
    adv = torch.randn(segments, horizon, generator=g) * torch.rand(segments, 1, generator=g) ** 3
    adv[:100] = 0.0  # rows only the priority floor keeps drawable
    prio, key = _host_prio(host, adv, 0.8, 5, 9)
    ref_prio, ref_key = reference.prio_keys(adv, 0.8, 5, 9)
    torch.testing.assert_close(prio, ref_prio, rtol=1e-14, atol=0)
    torch.testing.assert_close(key, ref_key, rtol=1e-12, atol=0)
    idx, weight = reference.prio_sample(adv, 0.8, 0.4, samples, 5, 9)
    assert torch.equal(idx, key.topk(samples).indices), "the kernel body's keys pick the same segments"
    assert len(idx.unique()) == samples, "distinct segments (without replacement)"
    assert (idx >= 100).all(), "zero-|A| rows are (almost) never drawn while others are left"
    probs = (adv.abs().sum(1) + reference.PRIO_FLOOR).pow(0.8)
    probs = probs / probs.sum()
    torch.testing.assert_close(weight, (segments * probs[idx]).pow(-0.4), rtol=1e-5, atol=0)
    # another step or seed draws other segments, the same ones the same
    assert not torch.equal(idx, reference.prio_sample(adv, 0.8, 0.4, samples, 5, 10)[0])
    assert torch.equal(idx, reference.prio_sample(adv, 0.8, 0.4, samples, 5, torch.tensor([9]))[0])


def test_prio_sample_first_draw_follows_the_priorities() -> None:
    """The largest key is one draw proportional to the priorities (the rest follow, without replacement)."""
    sums = torch.tensor([0.0, 1.0, 2.0, 4.0, 8.0])
    adv = torch.stack([sums, torch.zeros(5)], 1)
    probs = (sums + reference.PRIO_FLOOR).pow(0.8)
    probs = probs / probs.sum()
    first = torch.tensor([int(reference.prio_sample(adv, 0.8, 0.4, 1, 3, step)[0]) for step in range(20_000)])
    freq = torch.bincount(first, minlength=5).double() / len(first)
    torch.testing.assert_close(freq, probs.double(), atol=0.012, rtol=0)


def test_prio_sample_all_zero_is_uniform(host: Host) -> None:
    adv = torch.zeros(50, 8)
    _, key = _host_prio(host, adv, 0.8, 2, 3)
    idx, weight = reference.prio_sample(adv, 0.8, 0.5, 50, 2, 3)
    assert torch.equal(idx, key.topk(50).indices)
    assert sorted(idx.tolist()) == list(range(50)), "a full draw takes every segment once"
    torch.testing.assert_close(weight, torch.ones(50))


def test_prio_sample_with_given_uniforms_is_the_same_draw() -> None:
    """The trainer passes torch's uniforms (see Trainer._update_minibatch): the same keys and top-k."""
    g = torch.Generator().manual_seed(3)
    adv = torch.randn(64, 8, generator=g)
    u = torch.rand(64, generator=g, dtype=torch.float64)
    idx, w = kernels.prio_sample(adv, 0.8, 0.4, 16, 0, 0, uniform=u)
    prio = (adv.double().abs().sum(1) + reference.PRIO_FLOOR).pow(0.8)
    assert torch.equal(idx, (torch.log1p(-u) / prio).topk(16).indices)
    torch.testing.assert_close(w, (64 * prio[idx] / prio.sum()).pow(-0.4).float())


def test_prio_sample_refuses_bad_counts() -> None:
    with pytest.raises(ValueError, match="draws 1 to 4 distinct segments, not 5"):
        reference.prio_sample(torch.zeros(4, 2), 0.8, 0.4, 5, 0, 0)
    with pytest.raises(ValueError, match="floor must be > 0"):
        reference.prio_sample(torch.zeros(4, 2), 0.8, 0.4, 2, 0, 0, floor=0.0)


# ------------------------------------------------------------------------------------ dispatch


def test_dispatch_runs_the_reference_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    values = torch.randn(4, 8)
    args = (values, torch.randn(4, 8), torch.zeros(4, 8), torch.ones(4, 8), 0.99, 0.95)
    for m in ("", "auto", "reference", "REFERENCE"):
        monkeypatch.setenv(kernels.ENV, m)
        assert not kernels.use_cuda(values)
        assert torch.equal(
            advantage.compute(*args[:4], advantage.Coefs(*args[4:])), advantage.advantage(*args)
        )
    out = torch.randn(16, 5)
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            kernels.sample_logits(out, [4], 1, 2), reference.sample_logits(out, [4], 1, 2), strict=True
        )
    )


def test_the_fused_loss_and_advantage_have_no_cpu_copy() -> None:
    """Their one definition is the trainer's torch code; the kernels refuse to stand in for it."""
    n = 16
    with pytest.raises(DeviceError, match="appliance.train.advantage.advantage"):
        kernels.advantage(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 4), 0.9, 0.9)
    args = (torch.randn(n, 3), torch.randn(n), torch.randint(0, 3, (n,)), *[torch.randn(n) for _ in range(4)])
    with pytest.raises(DeviceError, match="appliance.train.losses.ppo_loss"):
        kernels.ppo_loss(*args, torch.ones(n), [3], 0.2, 0.2, 0.5, 0.01)


def test_dispatch_forcing_cuda_without_a_gpu_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernels.ENV, "cuda")
    with pytest.raises(DeviceError, match="PUFFER_KERNELS=cuda, but the tensors are on cpu") as e:
        kernels.advantage(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 4), 0.9, 0.9)
    assert "\n" not in str(e.value)
    monkeypatch.setenv(kernels.ENV, "gpu")
    with pytest.raises(ConfigError, match="PUFFER_KERNELS='gpu' is not one of auto, reference, cuda"):
        kernels.mode()


def test_gpu_check_cases_run_on_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-check's list of comparisons and eager compositions, small and on the CPU (reference on both
    sides): the plumbing a GPU machine runs, checked on every commit."""
    from appliance import gpucheck as check

    monkeypatch.setenv(kernels.ENV, "reference")
    cases = check._cases(kernels, reference, torch.device("cpu"), agents=64, hidden=8, horizon=16, rows=256)
    assert {c["op"] for c in cases} >= {
        "sample_logits", "advantage", "lstm_step", "mingru_step", "mingru_scan_fwd_bwd", "ppo_loss",
        "prio_sample",
    }  # fmt: skip
    for case in cases:
        ok, detail = case["compare"]()
        assert ok, (case["op"], case["dtype"], detail)


@pytest.mark.slow
def test_gpu_check_report_is_written_in_the_report_schema(tmp_path) -> None:
    from appliance import gpucheck as check
    from appliance.bench import report as rpt

    sizes = {"agents": 64, "hidden": 8, "horizon": 16, "rows": 256}
    data = check.measure(
        torch.device("cpu"), "reference", 2, tmp_path, lambda _: None, {"torch": "x"}, **sizes
    )
    assert data["analysis"]["passed"] and data["config"]["agents"] == 64
    (path,) = (tmp_path / "kernels").glob("*.json")
    saved = rpt.load(path)
    assert saved["metrics"]["kernel/advantage/f32/speedup"]["unit"] == "x"
    assert "## Fused kernels" in path.with_suffix(".md").read_text()


# ------------------------------------------------------------------------------------ build and check

PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_good' for 'sm_90'
ptxas info    : Function properties for k_good
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compiling entry function 'k_spills' for 'sm_90'
ptxas info    : Function properties for k_spills
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
"""


def test_ptxas_report_is_parsed_and_limits_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.gpu import warm

    usage = warm.parse_ptxas(PTXAS_LOG)
    assert usage["k_good"] == {"registers": 32, "stack": 0, "spill_stores": 0, "spill_loads": 0}
    assert usage["k_spills"] == {"registers": 255, "stack": 16, "spill_stores": 8, "spill_loads": 4}
    monkeypatch.setattr(warm, "compile_source", lambda path, arch, verbose=True: (b"", PTXAS_LOG))
    lines: list[str] = []
    problems = warm.check(["90"], log=lines.append)
    sources = len(warm.kernel_sources())
    assert len(lines) == 2 * sources and any("k_good" in line and " 32 registers" in line for line in lines)
    assert all("k_spills" in p for p in problems) and len(problems) == 3 * sources  # spills, stack, registers
    monkeypatch.setattr(warm, "compile_source", lambda path, arch, verbose=True: (b"", "no report"))
    assert all("no ptxas report" in p for p in warm.check(["90"], log=lines.append))


def _nvrtc_or_skip() -> None:
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as e:  # cupy is the optional `kernels` extra (make kernels-check installs it)
        pytest.skip(f"NVRTC through cupy is not available: {e}")


def test_compile_error_is_reported(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    _nvrtc_or_skip()
    from appliance.gpu import warm

    (tmp_path / "broken.cu").write_text('extern "C" __global__ void broken(float* x) { x[0] = y; }\n')
    monkeypatch.setattr(warm, "kernels_dir", lambda: tmp_path)
    problems = warm.check(["80"], log=lambda _: None)
    assert len(problems) == 1 and "broken.cu for sm_80" in problems[0] and "identifier" in problems[0]


def test_cubins_are_built_and_loaded_by_hash(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build step writes sm_<arch>/<kernel>.cubin and a manifest; the loader takes a cubin only when
    its manifest's source hash is current, and otherwise compiles once into the user cache."""
    _nvrtc_or_skip()
    from appliance.gpu import warm

    out = tmp_path / "cubins"
    monkeypatch.setenv(warm.CUBIN_ENV, str(out))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert warm.main(["--archs", "90"]) == 0
    assert sorted(p.name for p in (out / "sm_90").iterdir()) == sorted(
        p.stem + ".cubin" for p in warm.kernel_sources()
    )
    assert (out / "sm_90" / "advantage.cubin").read_bytes()[:4] == b"\x7fELF"
    modules = kernels._Modules()
    assert modules.cubin_path("advantage", "90") == out / "sm_90" / "advantage.cubin"
    manifest = json.loads((out / warm.MANIFEST).read_text())
    (out / warm.MANIFEST).write_text(json.dumps({**manifest, "source_hash": "stale"}))
    path = modules.cubin_path("advantage", "90")
    assert str(path).startswith(str(tmp_path / "cache")) and path.read_bytes()[:4] == b"\x7fELF"
    assert modules.origin["advantage"].startswith("nvrtc ")


_PTX_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)", re.S)
_PTX_TYPES = {
    "u64": "u64",
    "s64": "u64",
    "b64": "u64",
    "u32": "u32",
    "s32": "u32",
    "b32": "u32",
    "f32": "f32",
    "f64": "f64",
}
_NP_TYPES = {"uint64": "u64", "int64": "u64", "int32": "u32", "float32": "f32", "float64": "f64"}


def test_launch_arguments_match_the_kernel_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cupy launch in appliance.gpu.kernels passes as many arguments as its kernel takes, each of
    the parameter's width and kind (read from the PTX NVRTC makes), so a GPU never sees a shifted one."""
    _nvrtc_or_skip()
    from cupy.cuda import nvrtc

    from appliance.gpu import warm

    params: dict[str, list[str]] = {}
    for path in warm.kernel_sources():
        prog = nvrtc.createProgram(path.read_text(), path.name, [], [])
        nvrtc.compileProgram(prog, [*warm.OPTIONS, "-arch=compute_80", f"--include-path={path.parent}"])
        for name, body in _PTX_ENTRY.findall(nvrtc.getPTX(prog).decode()):
            params[name] = [_PTX_TYPES[t] for t in re.findall(r"\.param\s+\.(\w+)", body)]
        nvrtc.destroyProgram(prog)

    launched: list[tuple[str, tuple]] = []
    monkeypatch.setattr(kernels, "use_cuda", lambda t: True)
    monkeypatch.setattr(
        kernels, "_launch", lambda src, name, dev, n, args, block=256: launched.append((name, args))
    )
    n, h = 8, 4
    for dt in (torch.float32, torch.bfloat16):
        kernels.sample_logits(torch.zeros(n, 4, dtype=dt), [3], 1, 2, torch.ones(n, 3, dtype=torch.bool))
        kernels.lstm_step(torch.zeros(n, 4 * h, dtype=dt), torch.zeros(n, 4 * h, dtype=dt), torch.zeros(n, h),
                          torch.zeros(n), torch.zeros(4 * h, dtype=dt))  # fmt: skip
        kernels.mingru_step(torch.zeros(n, 2 * h, dtype=dt), torch.zeros(n, h), torch.zeros(n))
        kernels.ppo_loss(torch.zeros(n, 3, dtype=dt), *[torch.zeros(n)] * 1, torch.zeros(n, dtype=torch.int64),
                         *[torch.zeros(n)] * 5, [3], 0.2, 0.2, 0.5, 0.01)  # fmt: skip
    kernels.advantage(*[torch.zeros(n, 5)] * 4, 0.99, 0.95)
    kernels.mingru_scan(torch.zeros(2, 3, 2 * h).requires_grad_(), torch.ones(2, h)).sum().backward()
    kernels.prio_sample(torch.zeros(n, 5), 0.8, 0.4, 6, 1, 2)
    kernels.adam_step(*[torch.zeros(n)] * 4, torch.zeros(4), 0.9, 0.999, 1e-8, 0.0)
    kernels.muon_momentum(*[torch.zeros(n)] * 3, 0.95)
    kernels.muon_apply(torch.zeros(n), torch.zeros(n), torch.zeros(1))
    assert {name for name, _ in launched} == set(params), "every kernel is launched somewhere, and only those"
    for name, args in launched:
        kinds = [_NP_TYPES[np.asarray(a).dtype.name] for a in args]
        assert kinds == params[name], name


def test_build_step_without_nvrtc_says_what_to_install(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from appliance.gpu import warm

    def no_nvrtc(*args, **kwargs):
        raise ImportError("No module named 'cupy'")

    monkeypatch.setattr(warm, "compile_source", no_nvrtc)
    assert warm.main(["--check", "--archs", "80"]) == 1
    assert "pip install -e '.[kernels]'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        warm.main(["--archs", "sm_80"])
