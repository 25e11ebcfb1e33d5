"""Hardware probe: what this machine can move and compute, in the units RL training needs.

CPU: memory copy bandwidth, single-core Ocean env speed, and the policy's forward throughput on the
CPU. GPU (when torch sees CUDA): host<->device copy bandwidth for pinned and pageable memory from
4 KiB to 256 MiB, device-to-device bandwidth, matmul throughput (fp32, tf32, bf16), the launch cost of
an empty cupy kernel, of a small torch op and of a CUDA-graph replay, and the policy forward on the
GPU. Each figure is a list of timed runs taken after warm-up (CUDA events on the GPU), summarized by
the report as median/min/max; ceilings come from NVML (PCIe generation x width, memory clock x bus
width) where it knows them, else from the probe's own best figure.

A suite may give each probe section a wall-clock budget (``probe.budget_s``: ``quick`` does, ``full``
does not), so the probe fits the machine it runs on (:class:`Sections`, :class:`Budget`): a figure
keeps at least ``MIN_RUNS`` samples and takes more only while the next one is predicted to fit; a
size sweep (copy sizes, matmul sizes) skips the sizes whose predicted time, from the previous size's
measured per-call time scaled by how much more the next one moves (:func:`timed_cost`), would overrun
the section, and says so in the report's skipped list. Each section announces itself through
``progress`` and its seconds are kept.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from appliance.bench import envsps

if TYPE_CHECKING:
    from appliance.config import Config

COPY_SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]
MATMUL_SIZES = [4096, 8192]
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}  # per lane, per direction
MIN_RUNS = 3  # samples a figure keeps however tight its section's budget: a median and a spread
WARMUP = 3  # untimed calls before timed() measures
COPY_TARGET_S, MATMUL_TARGET_S = 0.02, 0.1  # timed(): each run lasts about this long
FORWARD_SAMPLE_S = 0.2  # a CPU policy-forward sample: several calls, so one slow call weighs less


@dataclass
class Figure:
    """One probed figure before it goes into a report."""

    name: str
    samples: list[float]
    unit: str
    better: str = "higher"
    ceiling: dict[str, Any] | None = None
    labels: dict[str, Any] = field(default_factory=dict)


def size_label(n: int) -> str:
    return f"{n >> 20}MiB" if n >= 1 << 20 else f"{n >> 10}KiB"


# ---------------------------------------------------------------------- budgets: the probe fits the machine


class Budget:
    """The wall-clock seconds one probe section may still take (``seconds`` None: no limit)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds, self.clock = seconds, clock
        self.start = clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.elapsed()

    def fits(self, predicted_s: float) -> bool:
        return predicted_s <= self.left()


def timed_cost(call_s: float, runs: int, target_s: float, warmup: int = WARMUP) -> float:
    """Seconds :func:`timed` takes for a call of ``call_s``: the warm-up and sizing calls, then
    ``runs`` runs of about ``target_s`` each (or of one call, when a call is longer)."""
    return (warmup + 1) * call_s + runs * max(target_s, call_s)


def copy_seconds(calls: list[float], alloc_s: float, ratio: float) -> float:
    """Predicted seconds of the GPU copy sweep's next size, ``ratio`` times the last one: each kind's
    timed copies (MIN_RUNS runs) at the last size's per-call ``calls`` scaled by ``ratio``, and the
    buffers' allocation (pinning host memory) scaled alike."""
    return sum(timed_cost(c * ratio, MIN_RUNS, COPY_TARGET_S) for c in calls) + alloc_s * ratio


def runs_that_fit(call_s: float, runs: int, target_s: float, left_s: float) -> int:
    """How many of ``runs`` timed runs fit in ``left_s`` after the warm-up, never fewer than MIN_RUNS."""
    if math.isinf(left_s) or runs <= MIN_RUNS:
        return runs
    fit = int((left_s - (WARMUP + 1) * call_s) // max(target_s, call_s, 1e-9))
    return max(MIN_RUNS, min(runs, fit))


class Sections:
    """The probe's sections: each announced through ``progress`` as it starts, given a :class:`Budget`
    of ``budget_s`` seconds (None: unlimited) and timed; ``seconds`` holds each section's wall time."""

    def __init__(
        self,
        budget_s: float | None = None,
        progress: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.budget_s, self.clock = budget_s, clock
        self.progress = progress or (lambda _: None)
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[Budget]:
        self.progress(name)
        budget = Budget(self.budget_s, self.clock)
        try:
            yield budget
        finally:
            self.seconds[name] = budget.elapsed()


def _bound(sample: Callable[[int], float], i: int) -> Callable[[], float]:
    return lambda: sample(i)


def sampled(sample: Callable[[int], float], runs: int, budget: Budget | None, take: Any) -> list[float]:
    """``sample(i)`` for i in ``range(runs)``, each through ``take`` (the speed gate, which may take it
    again); with a budget, more than MIN_RUNS only while another one, as long as the mean so far
    (gate waits included), fits what is left."""
    out: list[float] = []
    spent = 0.0
    while len(out) < runs:
        if budget is not None and len(out) >= MIN_RUNS and not budget.fits(spent / len(out)):
            break
        start = budget.clock() if budget is not None else 0.0
        out.append(take(_bound(sample, len(out))))
        spent += budget.clock() - start if budget is not None else 0.0
    return out


# ---------------------------------------------------------------------- CPU


Take = Callable[[Callable[[], float]], float]  # takes one sample (the runner's speed gate)


def _direct(sample: Callable[[], float]) -> float:
    return sample()


def cpu_memory_bandwidth(
    runs: int = 5, size: int = 256 << 20, take: Take = _direct, budget: Budget | None = None
) -> Figure:
    """GB/s of a large numpy copy, counting bytes read plus bytes written."""
    src = np.ones(size, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm-up: fault the pages in

    def sample(_: int) -> float:
        start = time.perf_counter()
        np.copyto(dst, src)
        return 2 * size / (time.perf_counter() - start) / 1e9

    samples = sampled(sample, runs, budget, take)
    return Figure("probe/cpu/memory_bandwidth", samples, "GB/s", labels={"kind": "cpu_memory"})


def env_single_core(
    env: str,
    num_envs: int,
    runs: int,
    seconds: float,
    params: dict[str, Any],
    take: Take = _direct,
    budget: Budget | None = None,
) -> Figure:
    def sample(seed: int) -> float:
        return envsps.measure(env, num_envs=num_envs, num_threads=1, seconds=seconds, seed=seed, **params)[
            "sps"
        ]

    samples = sampled(sample, runs, budget, take)
    return Figure(f"probe/cpu/env_step/{env}", samples, "agent-steps/s", labels={"env": env})


def policy_forward(
    cfg: Config,
    device: str,
    runs: int,
    batch: int | None = None,
    budget: Budget | None = None,
    take: Take = _direct,
) -> Figure:
    """Agent-steps/s of the configured policy's inference step (forward + sampling) at the run's batch.
    On the GPU: :func:`timed` runs (CUDA events). On the CPU: ``runs`` samples of about
    ``FORWARD_SAMPLE_S`` each, one by one through ``take`` (the suite's speed gate, as the other CPU
    sections): samples taken back to back within a fraction of a second agree with each other more
    than with the same probe a few seconds later, and their spread would understate the figure's
    (docs/lab/noise.md)."""
    import torch

    from appliance.train.make import make_policy, resolve_precision
    from appliance.train.policy import inference_copy
    from appliance.vector import native

    with native.make(cfg.env_name, num_envs=1, seed=0, **dict(cfg.env)) as vec:
        policy = make_policy(cfg, vec).to(device).eval()
        rows = batch or int(cfg.vec.num_envs) * vec.num_agents
        obs_np = _random_obs(vec, rows)
    obs = torch.as_tensor(obs_np, device=device)
    state = policy.initial_state(rows, device)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    # the precision the trainer's rollout would step in (auto: bf16 where the hardware has it)
    precision = resolve_precision(str(cfg.train.precision), dev)
    bf16 = precision == "bfloat16"
    # as the trainer's rollout: a bf16 copy of the weights steps, the float32 policy samples
    stepper = inference_copy(policy, torch.bfloat16) if bf16 else policy

    def step() -> None:
        with torch.no_grad():
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                out, _, _ = stepper.step(obs, state)
            policy.sample(out.float())

    if cuda:
        speeds = [rows / s for s in timed(step, runs, cuda=True, target_s=0.05, budget=budget)]
    else:
        speeds = _cpu_forward_samples(step, rows, runs, budget, take)
    label = "gpu" if cuda else "cpu"
    return Figure(
        f"probe/{label}/policy_forward/{cfg.env_name}",
        speeds,
        "agent-steps/s",
        labels={
            "env": cfg.env_name,
            "batch": rows,
            "core": cfg.policy.core,
            "device": label,
            "precision": precision,
        },
    )


def _cpu_forward_samples(
    step: Callable[[], None], rows: int, runs: int, budget: Budget | None, take: Take
) -> list[float]:
    """Agent-steps/s of ``step`` on the CPU: warm-up, one call to size a sample, then :func:`sampled`
    samples of about FORWARD_SAMPLE_S (whole calls, at least one), each through ``take``."""
    _, inner = warm_and_size(step, cuda=False, target_s=FORWARD_SAMPLE_S)

    def sample(_: int) -> float:
        t0 = time.perf_counter()
        for _ in range(inner):
            step()
        return rows * inner / (time.perf_counter() - t0)

    return sampled(sample, runs, budget, take)


def policy_forward_scaling(
    cfg: Config, device: str, runs: int, budget: Budget | None = None, take: Take = _direct
) -> list[Figure]:
    """The policy forward at the run's batch and, where the section's budget fits it, at twice that
    batch (``probe/<device>/policy_forward_2x/<env>``): whether a bigger batch (more envs) would make
    the forward faster per agent-step on this machine, the bottleneck advice's evidence."""
    started = budget.elapsed() if budget is not None else 0.0
    first = policy_forward(cfg, device, runs, budget=budget, take=take)
    rows = int(first.labels["batch"])
    if budget is not None:
        call_s = rows / statistics.median(first.samples)
        if device == "cuda":
            predicted = timed_cost(2 * call_s, MIN_RUNS, 0.05)
        else:  # a sample lasts about as long at either batch; the gate's checks around it alike
            per_sample = (budget.elapsed() - started) / len(first.samples)
            predicted = (WARMUP + 1) * 2 * call_s + MIN_RUNS * max(per_sample, 2 * call_s)
        if not budget.fits(predicted):
            return [first]
    double = policy_forward(cfg, device, runs, batch=2 * rows, budget=budget, take=take)
    double.name = double.name.replace("/policy_forward/", "/policy_forward_2x/")
    return [first, double]


def _random_obs(vec: Any, rows: int) -> np.ndarray:
    space = vec.single_observation_space
    rng = np.random.default_rng(0)
    low = np.nan_to_num(np.broadcast_to(space.low, space.shape).astype(np.float64), neginf=-1.0)
    high = np.nan_to_num(np.broadcast_to(space.high, space.shape).astype(np.float64), posinf=1.0)
    return rng.uniform(low, high, size=(rows, *space.shape)).astype(space.dtype)


def warm_and_size(
    fn: Callable[[], Any], cuda: bool, target_s: float, warmup: int = WARMUP
) -> tuple[float, int]:
    """``warmup`` untimed calls, then one timed: (seconds of that call, how many back-to-back calls
    last about ``target_s``, at least one)."""
    import torch

    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    call = time.perf_counter() - start
    return call, max(1, min(10_000, int(target_s / max(call, 1e-7))))


def timed(
    fn: Callable[[], Any],
    runs: int,
    cuda: bool,
    target_s: float = COPY_TARGET_S,
    warmup: int = WARMUP,
    budget: Budget | None = None,
) -> list[float]:
    """Seconds per call: ``runs`` timings (with a budget, as many as fit: :func:`runs_that_fit`), each
    of enough back-to-back calls to last ~``target_s``."""
    import torch

    call, inner = warm_and_size(fn, cuda, target_s, warmup)
    if budget is not None:
        runs = runs_that_fit(call, runs, target_s, budget.left())
    out = []
    for _ in range(runs):
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            out.append(begin.elapsed_time(end) / 1000 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            out.append((time.perf_counter() - t0) / inner)
    return out


def wall_per_call(fn: Callable[[], Any], runs: int, inner: int = 1000) -> list[float]:
    """Host wall time per call of back-to-back asynchronous launches, synchronized at the end."""
    import torch

    for _ in range(inner // 10):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / inner)
    return out


def cpu_probe(
    cfg: Config,
    runs: int,
    seconds: float,
    sections: Sections | None = None,
    take: Take = _direct,
) -> list[Figure]:
    """Memory bandwidth, single-core env steps and the policy forward on the CPU, each sample through
    ``take`` (the suite's speed gate); one section each."""
    sections = sections or Sections()
    with sections("CPU memory bandwidth") as budget:
        figures = [cpu_memory_bandwidth(runs, take=take, budget=budget)]
    with sections(f"single-core {cfg.env_name} steps") as budget:
        figures.append(
            env_single_core(cfg.env_name, int(cfg.vec.num_envs), runs, seconds, dict(cfg.env), take, budget)
        )
    with sections(f"{cfg.env_name} policy forward on the CPU") as budget:
        figures += policy_forward_scaling(cfg, "cpu", runs, budget=budget, take=take)
    return figures


# ---------------------------------------------------------------------- GPU


def pcie_ceiling(gpu: dict[str, Any]) -> dict[str, Any] | None:
    gen, width = gpu.get("pcie_max_gen"), gpu.get("pcie_max_width")
    if gen not in PCIE_LANE_GBPS or not width:
        return None
    return {"value": PCIE_LANE_GBPS[gen] * width, "source": f"PCIe gen{gen} x{width} theoretical (NVML)"}


def dram_ceiling(gpu: dict[str, Any]) -> dict[str, Any] | None:
    clock, bus = gpu.get("mem_clock_max_mhz"), gpu.get("memory_bus_width")
    if not clock or not bus:
        return None
    # double data rate: two transfers per clock on a bus of `bus` bits; a copy reads and writes
    return {"value": 2 * clock * 1e6 * bus / 8 / 1e9, "source": f"{bus}-bit bus at {clock} MHz x2 (NVML)"}


def _over_budget(what: str, predicted: float, budget: Budget, basis: str) -> tuple[str, str]:
    """The skipped-list entry of a sweep item that would overrun its section's budget."""
    return (
        what,
        f"would take about {predicted:.1f} s ({basis}) and the probe section has {max(0.0, budget.left()):.1f} s "
        f"of its {budget.seconds:g} s left (the suite's probe.budget_s); the full suite measures it",
    )


def gpu_probe(
    gpu: dict[str, Any],
    runs: int,
    sections: Sections | None = None,
    sizes: list[int] | None = None,
) -> tuple[list[Figure], list[tuple[str, str]]]:
    """Copy, matmul and launch figures on cuda:0; also (what, why) pairs for parts that were skipped
    (sizes a section's budget had no room for among them)."""
    import torch

    sections = sections or Sections()
    figures: list[Figure] = []
    skipped: list[tuple[str, str]] = []
    dev = torch.device("cuda", 0)
    pcie, dram = pcie_ceiling(gpu), dram_ceiling(gpu)
    with sections("GPU copy bandwidth") as budget:
        last: tuple[int, float, list[float], float] | None = None  # size, its seconds, per-call s, alloc s
        for n in sizes or COPY_SIZES:
            label = size_label(n)
            if last is not None:
                predicted = copy_seconds(last[2], last[3], n / last[0])
                if not budget.fits(predicted):
                    basis = f"{size_label(last[0])} took {last[1]:.1f} s"
                    skipped.append(_over_budget(f"GPU copy bandwidth {label}", predicted, budget, basis))
                    continue
            sections.progress(f"GPU copy bandwidth {label}")
            began = budget.clock()
            host_pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            host_pageable = torch.empty(n, dtype=torch.uint8)
            device_a = torch.empty(n, dtype=torch.uint8, device=dev)
            device_b = torch.empty(n, dtype=torch.uint8, device=dev)
            alloc = budget.clock() - began
            copies: list[tuple[str, Callable[[], Any], int, dict[str, Any] | None]] = [
                ("h2d_pinned", lambda a=device_a, h=host_pinned: a.copy_(h, non_blocking=True), n, pcie),
                ("h2d_pageable", lambda a=device_a, h=host_pageable: a.copy_(h), n, pcie),
                ("d2h_pinned", lambda a=device_a, h=host_pinned: h.copy_(a, non_blocking=True), n, pcie),
                ("d2h_pageable", lambda a=device_a, h=host_pageable: h.copy_(a), n, pcie),
                ("d2d", lambda a=device_a, b=device_b: b.copy_(a), 2 * n, dram),  # read + write
            ]
            calls = []
            for kind, fn, moved, ceiling in copies:
                seconds = timed(fn, runs, cuda=True, budget=budget)
                calls.append(float(np.median(seconds)))
                figures.append(
                    Figure(
                        f"probe/gpu/{kind}/{label}",
                        [moved / s / 1e9 for s in seconds],
                        "GB/s",
                        ceiling=ceiling,
                        labels={"kind": kind, "bytes": n},
                    )
                )
            del host_pinned, host_pageable, device_a, device_b
            last = (n, budget.clock() - began, calls, alloc)
        torch.cuda.empty_cache()

    tf32_before = torch.backends.cuda.matmul.allow_tf32
    with sections("GPU matmul") as budget:
        call_at: dict[int, tuple[float, str]] = {}  # size -> per-call seconds of the last dtype, and it
        try:
            for dtype_name, dtype, tf32 in (
                ("fp32", torch.float32, False),
                ("tf32", torch.float32, True),
                ("bf16", torch.bfloat16, False),
            ):
                if dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
                    skipped.append((f"matmul {dtype_name}", "this GPU has no bf16 support"))
                    continue
                torch.backends.cuda.matmul.allow_tf32 = tf32
                for n in MATMUL_SIZES:
                    known = call_at.get(n) or next(
                        (
                            (c * (n / m) ** 3, f"{w} scaled by ({n}/{m})^3")
                            for m, (c, w) in sorted(call_at.items(), reverse=True)
                            if m < n
                        ),
                        None,
                    )  # the same size's last figure (fp32 is the slowest), else a smaller one's scaled by n^3
                    if known is not None and not budget.fits(
                        predicted := timed_cost(known[0], MIN_RUNS, MATMUL_TARGET_S)
                    ):
                        basis = f"{known[1]}: {1e3 * known[0]:.1f} ms a call"
                        skipped.append(_over_budget(f"matmul {dtype_name} {n}x{n}", predicted, budget, basis))
                        continue
                    sections.progress(f"GPU matmul {dtype_name} {n}x{n}")
                    a = torch.randn(n, n, device=dev).to(dtype)
                    b = torch.randn(n, n, device=dev).to(dtype)
                    seconds = timed(
                        lambda a=a, b=b: a @ b, runs, cuda=True, target_s=MATMUL_TARGET_S, budget=budget
                    )
                    call_at[n] = (float(np.median(seconds)), f"matmul {dtype_name} {n}x{n}")
                    figures.append(
                        Figure(
                            f"probe/gpu/matmul_{dtype_name}/{n}",
                            [2 * n**3 / s / 1e12 for s in seconds],
                            "TFLOPS",
                            labels={"kind": f"matmul_{dtype_name}", "n": n},
                        )
                    )
                    del a, b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32_before

    with sections("GPU launch latency"):
        figures += _launch_latency(dev, runs, skipped)
    for kind in ("h2d_pinned", "d2h_pinned", "d2d", "matmul_fp32", "matmul_tf32", "matmul_bf16"):
        best = [f for f in figures if f.labels.get("kind") == kind]
        if best and not any(f.ceiling for f in best):
            peak = max(float(np.median(f.samples)) for f in best)
            for f in best:
                f.ceiling = {"value": peak, "source": "best figure of this probe"}
    return figures, skipped


def _launch_latency(dev: Any, runs: int, skipped: list[tuple[str, str]]) -> list[Figure]:
    """Host wall time per launch: a small torch op, an empty cupy kernel, a one-op CUDA graph's replay."""
    import torch

    figures: list[Figure] = []
    x = torch.zeros(1, device=dev)
    figures.append(
        Figure(
            "probe/gpu/launch_torch_op",
            [s * 1e6 for s in wall_per_call(lambda: x.add_(1), runs)],
            "us",
            "lower",
        )
    )
    try:
        import cupy

        kernel = cupy.RawKernel('extern "C" __global__ void empty_kernel() {}', "empty_kernel")
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            seconds = wall_per_call(lambda: kernel((1,), (1,), ()), runs)
        figures.append(Figure("probe/gpu/launch_cupy_empty", [s * 1e6 for s in seconds], "us", "lower"))
    except Exception as e:  # cupy missing, or its CUDA runtime does not match the driver
        skipped.append(("empty cupy kernel launch", f"{type(e).__name__}: {e}"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            x.add_(1)  # warm up on the side stream before capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        x.add_(1)
    figures.append(
        Figure("probe/gpu/graph_replay", [s * 1e6 for s in wall_per_call(graph.replay, runs)], "us", "lower")
    )
    return figures


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    """The probe's figures as table cells: figure, median, range, unit, ceiling, share of the ceiling."""
    from appliance.bench.report import fmt

    rows = []
    for name, m in report["metrics"].items():
        ceiling = m.get("ceiling") or {}
        share = (
            f"{100 * m['median'] / ceiling['value']:.0f}%" if ceiling.get("value") and m.get("median") else ""
        )
        rows.append(
            [
                name.removeprefix("probe/"),
                fmt(m["median"], m["unit"]),
                f"{fmt(m['min'], m['unit'])} - {fmt(m['max'], m['unit'])}",
                m["unit"],
                f"{fmt(ceiling.get('value'), m['unit'])} {ceiling.get('source', '')}" if ceiling else "",
                share,
            ]
        )
    return rows
