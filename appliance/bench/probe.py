"""Hardware probe: what this machine can move and compute, in the units RL training needs.

CPU: memory copy bandwidth, single-core Ocean env speed, and the policy's forward throughput on the
CPU. GPU (when torch sees CUDA): host<->device copy bandwidth for pinned and pageable memory from
4 KiB to 256 MiB, device-to-device bandwidth, matmul throughput (fp32, tf32, bf16), the launch cost of
an empty cupy kernel, of a small torch op and of a CUDA-graph replay, and the policy forward on the
GPU. Each figure is a list of timed runs taken after warm-up (CUDA events on the GPU), summarized by
the report as median/min/max; ceilings come from NVML (PCIe generation x width, memory clock x bus
width) where it knows them, else from the probe's own best figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.bench import envsps

COPY_SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]
MATMUL_SIZES = [4096, 8192]
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}  # per lane, per direction


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


# ---------------------------------------------------------------------- CPU


Take = Callable[[Callable[[], float]], float]  # takes one sample (the runner's speed gate)


def _direct(sample: Callable[[], float]) -> float:
    return sample()


def cpu_memory_bandwidth(runs: int = 5, size: int = 256 << 20, take: Take = _direct) -> Figure:
    """GB/s of a large numpy copy, counting bytes read plus bytes written."""
    src = np.ones(size, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm-up: fault the pages in

    def sample() -> float:
        start = time.perf_counter()
        np.copyto(dst, src)
        return 2 * size / (time.perf_counter() - start) / 1e9

    samples = [take(sample) for _ in range(runs)]
    return Figure("probe/cpu/memory_bandwidth", samples, "GB/s", labels={"kind": "cpu_memory"})


def env_single_core(
    env: str, num_envs: int, runs: int, seconds: float, params: dict[str, Any], take: Take = _direct
) -> Figure:
    samples = [
        take(
            lambda i=i: envsps.measure(
                env, num_envs=num_envs, num_threads=1, seconds=seconds, seed=i, **params
            )["sps"]
        )
        for i in range(runs)
    ]
    return Figure(f"probe/cpu/env_step/{env}", samples, "agent-steps/s", labels={"env": env})


def policy_forward(cfg: Any, device: str, runs: int, batch: int | None = None) -> Figure:
    """Agent-steps/s of the configured policy's inference step (forward + sampling) at the run's batch."""
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

    seconds = timed(step, runs, cuda=cuda, target_s=0.05)
    label = "gpu" if cuda else "cpu"
    return Figure(
        f"probe/{label}/policy_forward/{cfg.env_name}",
        [rows / s for s in seconds],
        "agent-steps/s",
        labels={
            "env": cfg.env_name,
            "batch": rows,
            "core": cfg.policy.core,
            "device": label,
            "precision": precision,
        },
    )


def _random_obs(vec: Any, rows: int) -> np.ndarray:
    space = vec.single_observation_space
    rng = np.random.default_rng(0)
    low = np.nan_to_num(np.broadcast_to(space.low, space.shape).astype(np.float64), neginf=-1.0)
    high = np.nan_to_num(np.broadcast_to(space.high, space.shape).astype(np.float64), posinf=1.0)
    return rng.uniform(low, high, size=(rows, *space.shape)).astype(space.dtype)


def timed(
    fn: Callable[[], Any], runs: int, cuda: bool, target_s: float = 0.02, warmup: int = 3
) -> list[float]:
    """Seconds per call: ``runs`` timings, each of enough back-to-back calls to last ~``target_s``."""
    import torch

    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    inner = max(1, min(10_000, int(target_s / max(time.perf_counter() - start, 1e-7))))
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
    cfg: Any,
    runs: int,
    seconds: float,
    progress: Callable[[str], None] | None = None,
    take: Take = _direct,
) -> list[Figure]:
    """Memory bandwidth and single-core env steps (each sample through ``take``: the suite's speed
    gate), and the policy forward on the CPU (short timed calls, not gated)."""
    progress = progress or (lambda _: None)
    progress("CPU memory bandwidth")
    figures = [cpu_memory_bandwidth(runs, take=take)]
    progress(f"single-core {cfg.env_name} steps")
    figures.append(env_single_core(cfg.env_name, int(cfg.vec.num_envs), runs, seconds, dict(cfg.env), take))
    progress(f"{cfg.env_name} policy forward on the CPU")
    figures.append(policy_forward(cfg, "cpu", runs))
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


def gpu_probe(
    gpu: dict[str, Any],
    runs: int,
    progress: Callable[[str], None] | None = None,
    sizes: list[int] | None = None,
) -> tuple[list[Figure], list[tuple[str, str]]]:
    """Copy, matmul and launch figures on cuda:0; also (what, why) pairs for parts that were skipped."""
    import torch

    progress = progress or (lambda _: None)
    figures: list[Figure] = []
    skipped: list[tuple[str, str]] = []
    dev = torch.device("cuda", 0)
    pcie, dram = pcie_ceiling(gpu), dram_ceiling(gpu)
    for n in sizes or COPY_SIZES:
        label = size_label(n)
        progress(f"copy bandwidth {label}")
        host_pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        host_pageable = torch.empty(n, dtype=torch.uint8)
        device_a = torch.empty(n, dtype=torch.uint8, device=dev)
        device_b = torch.empty(n, dtype=torch.uint8, device=dev)
        copies: list[tuple[str, Callable[[], Any], int, dict[str, Any] | None]] = [
            ("h2d_pinned", lambda a=device_a, h=host_pinned: a.copy_(h, non_blocking=True), n, pcie),
            ("h2d_pageable", lambda a=device_a, h=host_pageable: a.copy_(h), n, pcie),
            ("d2h_pinned", lambda a=device_a, h=host_pinned: h.copy_(a, non_blocking=True), n, pcie),
            ("d2h_pageable", lambda a=device_a, h=host_pageable: h.copy_(a), n, pcie),
            ("d2d", lambda a=device_a, b=device_b: b.copy_(a), 2 * n, dram),  # read + write
        ]
        for kind, fn, moved, ceiling in copies:
            seconds = timed(fn, runs, cuda=True)
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
    torch.cuda.empty_cache()

    tf32_before = torch.backends.cuda.matmul.allow_tf32
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
                progress(f"matmul {dtype_name} {n}x{n}")
                a = torch.randn(n, n, device=dev).to(dtype)
                b = torch.randn(n, n, device=dev).to(dtype)
                seconds = timed(lambda a=a, b=b: a @ b, runs, cuda=True, target_s=0.1)
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

    progress("launch latency")
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
    for kind in ("h2d_pinned", "d2h_pinned", "d2d", "matmul_fp32", "matmul_tf32", "matmul_bf16"):
        best = [f for f in figures if f.labels.get("kind") == kind]
        if best and not any(f.ceiling for f in best):
            peak = max(float(np.median(f.samples)) for f in best)
            for f in best:
                f.ceiling = {"value": peak, "source": "best figure of this probe"}
    return figures, skipped


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
