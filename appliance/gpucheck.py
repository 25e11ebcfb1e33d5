"""``puffer-bench gpu-check``: every fused kernel against its torch reference on the GPU, and its speed
beside the eager torch composition it replaces, at breakout scale (8,192 agents, hidden 128). It sits
beside :mod:`appliance.gpu`, one layer above the benchmarks whose report and timer it uses.

Correctness runs in float32 and, where the kernel stores bfloat16, in bfloat16 (both sides read the
same bf16 values, so the tolerances are the same). Times are medians of CUDA-event timings after
warm-up (:func:`appliance.bench.probe.timed`). The result is a report in the usual schema
(:mod:`appliance.bench.report`) with ``kernel/<op>/<dtype>/{cuda,eager}`` in microseconds and
``kernel/<op>/<dtype>/speedup``; the pass/fail of each comparison is under ``analysis.kernels``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from appliance.errors import DeviceError
from appliance.redact import command_line

AGENTS, HIDDEN, HORIZON = 8192, 128, 64
NVEC_DISCRETE, NVEC_MULTI = [3], [3, 4, 5]
# (rtol, atol) per comparison; bf16 storage is read identically on both sides, so it shares them.
TOLERANCES = {
    "sample_logits": (1e-5, 1e-4),  # log-prob; actions must agree on >= 99.9 % of agents
    "advantage": (1e-4, 1e-4),
    "lstm_step": (1e-5, 1e-5),
    "mingru_step": (1e-5, 1e-5),
    "mingru_scan": (1e-4, 1e-4),  # linear-space kernel vs the log-space reference; grads too
    "ppo_loss": (1e-4, 1e-6),
    "prio_sample": (1e-5, 0.0),  # weights; indices must agree on >= 99.9 % of samples
}
MATCH_FRACTION = 0.999


def _close(name: str, got: torch.Tensor, want: torch.Tensor) -> tuple[bool, float]:
    rtol, atol = TOLERANCES[name]
    got, want = got.double(), want.double()
    err = float((got - want).abs().max()) if got.numel() else 0.0
    return bool(torch.allclose(got, want, rtol=rtol, atol=atol)), err


def run_check(
    out_dir: str | Path | None = None, runs: int = 20, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run every comparison and timing on cuda:0; write the report under ``out_dir`` if given; return it."""
    if not torch.cuda.is_available():
        raise DeviceError(
            f"gpu-check needs a CUDA device; torch {torch.__version__} sees none "
            f"(CUDA build: {torch.version.cuda or 'none'})"
        )
    try:
        import cupy
        from cupy.cuda import nvrtc
    except Exception as e:
        raise DeviceError(
            f"gpu-check needs cupy ({type(e).__name__}: {e}); install puffer-bench[cuda12]"
        ) from None
    versions = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cupy": cupy.__version__,
        "nvrtc": ".".join(map(str, nvrtc.getVersion())),
        "cuda_driver": cupy.cuda.runtime.driverGetVersion(),
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "device": torch.cuda.get_device_name(0),
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
    }
    log(" ".join(f"{k} {v};" for k, v in versions.items()))
    return measure(torch.device("cuda", 0), "cuda", runs, out_dir, log, versions)


def measure(
    device: torch.device,
    mode: str,
    runs: int,
    out_dir: str | Path | None,
    log: Callable[[str], None],
    versions: dict[str, Any],
    **sizes: int,
) -> dict[str, Any]:
    """The comparisons and timings with ``PUFFER_KERNELS=mode`` on ``device``, as a report. gpu-check runs
    it on CUDA; the CPU tests run it small with the reference, to check the plumbing."""
    from appliance.bench import metrics as reg
    from appliance.bench import report as rpt
    from appliance.bench.probe import timed
    from appliance.gpu import kernels, reference
    from appliance.sysinfo import fingerprint

    cuda = device.type == "cuda"
    before = os.environ.get(kernels.ENV)
    os.environ[kernels.ENV] = mode
    try:
        start = time.time()
        config = {"agents": AGENTS, "hidden": HIDDEN, "horizon": HORIZON, **sizes, "tolerances": TOLERANCES}
        report = rpt.Report(
            {"name": "gpu-check", "path": "appliance/gpucheck.py", "definition": {}},
            {"name": "kernels"},
            fingerprint(),
            config,
            seed=0,
            repeats=runs,
            command=command_line(),
        )
        report.analyse("versions", versions)
        results: list[dict[str, Any]] = []
        for case in _cases(kernels, reference, device, **sizes):
            ok, detail = case["compare"]()
            results.append({"op": case["op"], "dtype": case["dtype"], "passed": ok, **detail})
            fast = timed(case["kernel"], runs, cuda=cuda)
            slow = timed(case["eager"], runs, cuda=cuda)
            base = (case["op"], case["dtype"])
            k = report.record(reg.KERNEL, (*base, "cuda"), [s * 1e6 for s in fast], op=case["op"], impl=mode)
            e = report.record(
                reg.KERNEL, (*base, "eager"), [s * 1e6 for s in slow], op=case["op"], impl="eager"
            )
            report.record(
                reg.KERNEL, (*base, "speedup"), [e["median"] / k["median"]], "x", "higher", op=case["op"]
            )
            log(
                f"{case['op']:<20} {case['dtype']:<5} {'ok  ' if ok else 'FAIL'} max err {detail['max_err']:.3g}; "
                f"{k['median']:.1f} us vs eager {e['median']:.1f} us ({e['median'] / k['median']:.1f}x)"
            )
        if cuda:
            results.append(_graph_check(report, runs, log))
        report.analyse("kernels", results)
        report.analyse("kernel_origin", dict(kernels._MODULES.origin))
        report.analyse("passed", all(r["passed"] for r in results))
        report.set("duration_s", time.time() - start)
        if out_dir is not None:  # as run writes a report: a full disk keeps the JSON, named in one line
            from appliance.bench.suite.session import write_report

            report.set(
                "written", [str(p) for p in write_report(report.data, out_dir, "kernels", plots=False)]
            )
        return report.data
    finally:
        if before is None:
            os.environ.pop(kernels.ENV, None)
        else:
            os.environ[kernels.ENV] = before


def _cases(
    kernels: Any,
    reference: Any,
    dev: torch.device,
    agents: int = AGENTS,
    hidden: int = HIDDEN,
    horizon: int = HORIZON,
    rows: int = 32768,
) -> list[dict[str, Any]]:
    """(op, dtype, compare, kernel, eager) per check; sizes are parameters so the CPU tests can run the
    same list small, with the reference on both sides."""
    from appliance.train import advantage, losses

    g = torch.Generator(device=dev).manual_seed(0)
    cases: list[dict[str, Any]] = []

    def torch_loss(*args: Any, out: Any = None) -> tuple[torch.Tensor, ...]:
        return reference.PPOLoss(*losses.gradients(*args[:9], losses.Coefs(*args[9:])))

    def torch_advantage(*args: Any, out: Any = None) -> torch.Tensor:
        return advantage.advantage(*args)

    # the fused loss and advantage have no torch copy in the kernels' module: where the kernels do
    # not run (the CPU tests), the torch definitions stand on both sides
    fused = kernels.use_cuda(torch.zeros(1, device=dev))
    fused_loss = kernels.ppo_loss if fused else torch_loss
    fused_advantage = kernels.advantage if fused else torch_advantage

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, device=dev, generator=g) * scale

    def add(op: str, dtype: str, compare: Callable, kernel: Callable, eager: Callable) -> None:
        cases.append({"op": op, "dtype": dtype, "compare": compare, "kernel": kernel, "eager": eager})

    for dt_name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        # ---- sample_logits: Discrete and MultiDiscrete heads
        for nvec in (NVEC_DISCRETE, NVEC_MULTI):
            out = randn(agents, sum(nvec) + 1, scale=2.0).to(dt)
            bufs = kernels.sample_logits(out, nvec, 1, 0)

            def cmp_sample(out=out, nvec=nvec) -> tuple[bool, dict[str, Any]]:
                a, lp, v = kernels.sample_logits(out, nvec, 1, 5)
                ra, rlp, rv = reference.sample_logits(out, nvec, 1, 5)
                same = float((a == ra).reshape(agents, -1).all(1).float().mean())
                ok, err = _close("sample_logits", lp, rlp)
                ok = ok and same >= MATCH_FRACTION and torch.equal(v, rv)
                return ok, {"max_err": err, "action_match": same}

            def eager_sample(out=out, nvec=nvec) -> Any:  # Policy.sample + the value squeeze
                logits = out[:, :-1].float()
                dists = [torch.distributions.Categorical(logits=p) for p in torch.split(logits, nvec, -1)]
                acts = [d.sample() for d in dists]
                return sum(d.log_prob(a) for d, a in zip(dists, acts, strict=True)), out[:, -1].float()

            name = "sample_logits" if len(nvec) == 1 else "sample_logits_multi"
            add(
                name,
                dt_name,
                cmp_sample,
                lambda out=out, nvec=nvec, b=bufs: kernels.sample_logits(
                    out, nvec, 1, 0, action=b[0], logprob=b[1], value=b[2]
                ),
                eager_sample,
            )
        # ---- lstm_step / mingru_step
        gx, gh, c = randn(agents, 4 * hidden).to(dt), randn(agents, 4 * hidden).to(dt), randn(agents, hidden)
        b_hh, done = randn(4 * hidden).to(dt), (torch.rand(agents, device=dev, generator=g) < 0.05).float()
        h_out, c_out = torch.empty_like(c), torch.empty_like(c)

        def cmp_lstm(gx=gx, gh=gh, c=c, b_hh=b_hh, done=done) -> tuple[bool, dict[str, Any]]:
            got, want = kernels.lstm_step(gx, gh, c, done, b_hh), reference.lstm_step(gx, gh, c, done, b_hh)
            (ok1, e1), (ok2, e2) = _close("lstm_step", got[0], want[0]), _close("lstm_step", got[1], want[1])
            return ok1 and ok2, {"max_err": max(e1, e2)}

        add(
            "lstm_step",
            dt_name,
            cmp_lstm,
            lambda gx=gx, gh=gh, c=c, h=h_out, co=c_out: kernels.lstm_step(gx, gh, c, h_out=h, c_out=co),
            lambda gx=gx, gh=gh, c=c: reference.lstm_step(gx, gh, c),
        )
        kv, h = randn(agents, 2 * hidden).to(dt), torch.rand(agents, hidden, device=dev, generator=g) + 0.1

        def cmp_mingru(kv=kv, h=h, done=done) -> tuple[bool, dict[str, Any]]:
            ok, err = _close(
                "mingru_step", kernels.mingru_step(kv, h, done), reference.mingru_step(kv, h, done)
            )
            return ok, {"max_err": err}

        add(
            "mingru_step",
            dt_name,
            cmp_mingru,
            lambda kv=kv, h=h, o=h_out: kernels.mingru_step(kv, h, out=o),
            lambda kv=kv, h=h: reference.mingru_step(kv, h),
        )
        # ---- ppo_loss over a minibatch of `rows` rows (32,768 by default)
        for nvec in (NVEC_DISCRETE, NVEC_MULTI):
            logits = randn(rows, sum(nvec), scale=2.0).to(dt)
            acts = torch.stack([torch.randint(0, k, (rows,), device=dev, generator=g) for k in nvec], 1)
            acts = acts[:, 0].contiguous() if len(nvec) == 1 else acts
            value, old_value = randn(rows), randn(rows)
            old_lp, adv, ret = randn(rows, scale=0.3) - 1.0, randn(rows), randn(rows)
            mask = (torch.rand(rows, device=dev, generator=g) < 0.9).float()
            args = (logits, value, acts, old_lp, adv, ret, old_value, mask, nvec, 0.2, 0.2, 0.5, 0.01)

            def cmp_ppo(args=args) -> tuple[bool, dict[str, Any]]:
                got, want = fused_loss(*args), torch_loss(*args)
                checks = [_close("ppo_loss", a, b) for a, b in zip(got, want, strict=True)]
                return all(c[0] for c in checks), {"max_err": max(c[1] for c in checks)}

            name = "ppo_loss" if len(nvec) == 1 else "ppo_loss_multi"
            ppo_out = fused_loss(*args)
            add(
                name,
                dt_name,
                cmp_ppo,
                lambda a=args, o=ppo_out: fused_loss(*a, out=o),
                lambda a=args: torch_loss(*a),
            )

    # ---- float32-only kernels
    values, rewards = randn(agents, horizon), randn(agents, horizon)
    dones = (torch.rand(agents, horizon, device=dev, generator=g) < 0.02).float()
    ratios = torch.exp(randn(agents, horizon, scale=0.2))
    adv_out = torch.empty_like(values)
    gae = (values, rewards, dones, ratios, 0.99, 0.95, 1.0, 1.0)

    def cmp_adv() -> tuple[bool, dict[str, Any]]:  # both forms of train.vtrace_rho_on
        ok, err = _close("advantage", fused_advantage(*gae), torch_advantage(*gae))
        on_reward = (*gae, "reward")
        ok_r, err_r = _close("advantage", fused_advantage(*on_reward), torch_advantage(*on_reward))
        return ok and ok_r, {"max_err": max(err, err_r)}

    add(
        "advantage",
        "f32",
        cmp_adv,
        lambda: fused_advantage(*gae, out=adv_out),
        lambda: torch_advantage(*gae),
    )

    scan_batch = max(1, agents // 16)
    kv = randn(scan_batch, horizon, 2 * hidden).requires_grad_()
    h0 = (torch.rand(scan_batch, hidden, device=dev, generator=g) + 0.1).requires_grad_()
    grad = randn(scan_batch, horizon, hidden)

    def scan_grads(fn: Callable) -> list[torch.Tensor]:
        kv.grad = h0.grad = None
        h = fn(kv, h0)
        h.backward(grad)
        return [h.detach(), kv.grad, h0.grad]

    def cmp_scan() -> tuple[bool, dict[str, Any]]:
        checks = [
            _close("mingru_scan", a, b)
            for a, b in zip(scan_grads(kernels.mingru_scan), scan_grads(reference.mingru_scan), strict=True)
        ]
        return all(c[0] for c in checks), {"max_err": max(c[1] for c in checks)}

    add(
        "mingru_scan_fwd_bwd",
        "f32",
        cmp_scan,
        lambda: scan_grads(kernels.mingru_scan),
        lambda: scan_grads(reference.mingru_scan),
    )

    adv = randn(agents, horizon) * torch.rand(agents, 1, device=dev, generator=g) ** 2
    samples = min(512, agents)
    idx_buf = torch.randint(0, agents, (samples,), device=dev, generator=g)  # also the gather rows
    w_buf = torch.empty(samples, device=dev)
    cpu_gen = torch.Generator().manual_seed(0)

    def cmp_prio() -> tuple[bool, dict[str, Any]]:
        i, w = kernels.prio_sample(adv, 0.8, 0.4, samples, 3, 1)
        ri, rw = reference.prio_sample(adv, 0.8, 0.4, samples, 3, 1)
        same = float((i == ri).float().mean())
        ok, err = _close("prio_sample", w, rw)
        return ok and same >= MATCH_FRACTION, {"max_err": err, "index_match": same}

    def eager_prio() -> Any:  # the trainer's former composition: multinomial on the host, no replacement
        probs = (adv.abs().sum(1) + reference.PRIO_FLOOR).pow(0.8)
        probs = probs / probs.sum()
        idx = torch.multinomial(probs.cpu(), samples, replacement=False, generator=cpu_gen).to(dev)
        return idx, (agents * probs[idx]).pow(-0.4)

    add(
        "prio_sample",
        "f32",
        cmp_prio,
        lambda: kernels.prio_sample(adv, 0.8, 0.4, samples, 3, 1, idx=idx_buf, weight=w_buf),
        eager_prio,
    )

    return cases


def _graph_check(report: Any, epochs: int, log: Callable[[str], None]) -> dict[str, Any]:
    """The training update captured as CUDA graphs (train.graphs true) against the same update run
    eagerly: one epoch's update twice from the same state (weights, optimizer state, rollout), once
    replaying the captured minibatch graph and once calling its function, must give the same weights
    and losses within tolerance; then each update epoch's wall time beside a train.graphs false
    trainer's, interleaved."""
    from appliance import vector
    from appliance.config import resolve
    from appliance.train import Trainer
    from appliance.train.graphs import restore, update_state

    def trainer(graphs: bool) -> Trainer:
        cfg = resolve(
            env="breakout",
            overrides=[
                "--train.device", "cuda", "--train.graphs", str(graphs).lower(), "--vec.num-envs", "2048",
                "--train.bptt-horizon", "64", "--train.minibatch-size", "32768",
                "--train.max-minibatch-size", "32768", "--train.update-epochs", "2",
            ],
        )  # fmt: skip
        return Trainer(cfg, vector.make_from_config(cfg))

    def timed_train(t: Trainer) -> tuple[dict[str, float], float]:
        torch.cuda.synchronize()
        start = time.perf_counter()
        losses = t.train()
        torch.cuda.synchronize()
        return losses, time.perf_counter() - start

    graphed, eager = trainer(True), trainer(False)
    seconds: dict[str, list[float]] = {"graphs": [], "eager": []}
    try:
        for t in (graphed, eager):  # warm-up; the graphed trainer captures its minibatch here
            t.evaluate()
            t.train()
        graphed.evaluate()
        saved, epoch = update_state(graphed), graphed.epoch
        replayed, _ = timed_train(graphed)
        after_replay = [p.detach().clone() for p in graphed.policy.parameters()]
        restore(saved)
        graphed.epoch = epoch
        graphed.update_step.replay = False
        called, _ = timed_train(graphed)
        graphed.update_step.replay = True
        weights = max(
            float((p.detach() - q).abs().max())
            for p, q in zip(graphed.policy.parameters(), after_replay, strict=True)
        )
        worst = max(
            abs(replayed[k] - called[k]) / max(1e-6, abs(called[k]))
            for k in ("policy_loss", "value_loss", "entropy")
        )
        eager.evaluate()
        for _ in range(max(3, min(epochs, 8))):  # timing: each from its own state, interleaved
            restore(saved)
            seconds["graphs"].append(timed_train(graphed)[1])
            eager_saved = update_state(eager)
            seconds["eager"].append(timed_train(eager)[1])
            restore(eager_saved)
        captured = graphed.update_step.captured
    finally:
        graphed.close()
        eager.close()
    ok = captured and worst < 1e-3 and weights < 1e-4
    from appliance.bench.metrics import UPDATE

    g = report.record(UPDATE, ("breakout", "graphs"), [s * 1e3 for s in seconds["graphs"]])
    e = report.record(UPDATE, ("breakout", "eager"), [s * 1e3 for s in seconds["eager"]])
    report.record(UPDATE, ("breakout", "speedup"), [e["median"] / g["median"]], "x", "higher")
    log(
        f"{'update graphs':<20} {'f32':<5} {'ok  ' if ok else 'FAIL'} replay vs call: loss rel err {worst:.3g}, "
        f"weights max err {weights:.3g}; epoch {g['median']:.1f} ms vs train.graphs false {e['median']:.1f} ms "
        f"({e['median'] / g['median']:.2f}x)"
    )
    return {"op": "update_graphs", "dtype": "f32", "passed": ok, "max_err": worst, "weights_err": weights}
