"""The GPU probe on a real GPU: figures are positive, below their NVML ceilings, and ordered sensibly."""

from __future__ import annotations

import numpy as np
import pytest

from appliance.bench import probe
from appliance.config import resolve
from appliance.sysinfo import gpu_info

pytestmark = pytest.mark.gpu


def median(figures, name):
    (f,) = [f for f in figures if f.name == name]
    return float(np.median(f.samples)), f


def test_gpu_probe_figures_are_sane():
    gpus, _, _ = gpu_info()
    figures, skipped = probe.gpu_probe(gpus[0] if gpus else {}, runs=3, sizes=[1 << 20, 64 << 20])
    h2d, f = median(figures, "probe/gpu/h2d_pinned/64MiB")
    pageable, _ = median(figures, "probe/gpu/h2d_pageable/64MiB")
    d2d, d2d_f = median(figures, "probe/gpu/d2d/64MiB")
    assert h2d > 0 and pageable > 0 and d2d > h2d  # on-device copies beat the PCIe link
    if f.ceiling and "PCIe" in f.ceiling["source"]:
        assert h2d <= 1.05 * f.ceiling["value"]
    if d2d_f.ceiling and "bus" in d2d_f.ceiling["source"]:
        assert d2d <= 1.05 * d2d_f.ceiling["value"]
    fp32, _ = median(figures, "probe/gpu/matmul_fp32/8192")
    if not any(what.startswith("matmul bf16") for what, _ in skipped):
        bf16, _ = median(figures, "probe/gpu/matmul_bf16/8192")
        assert bf16 > fp32  # tensor cores
    launch, _ = median(figures, "probe/gpu/launch_torch_op")
    graph, _ = median(figures, "probe/gpu/graph_replay")
    assert 0 < launch < 1000 and 0 < graph < 1000  # microseconds


def test_policy_forward_on_the_gpu():
    cfg = resolve(env="breakout", profile="h100")
    f = probe.policy_forward(cfg, "cuda", runs=3)
    assert f.labels["batch"] == 8192 and min(f.samples) > 0


def test_a_budgeted_gpu_probe_skips_what_would_overrun_and_says_so():
    """A section budget far below what 256 MiB copies and 8192^2 matmuls take: they are skipped, with
    the reason in the skipped list; what was measured keeps at least MIN_RUNS samples."""
    gpus, _, _ = gpu_info()
    shown: list[str] = []
    sections = probe.Sections(0.05, shown.append)
    figures, skipped = probe.gpu_probe(
        gpus[0] if gpus else {}, runs=5, sections=sections, sizes=[4 << 10, 256 << 20]
    )
    assert any(what == "GPU copy bandwidth 256MiB" and "probe.budget_s" in why for what, why in skipped), (
        skipped
    )
    assert all(len(f.samples) >= probe.MIN_RUNS for f in figures)
    assert {"GPU copy bandwidth", "GPU matmul", "GPU launch latency"} <= set(sections.seconds)
    assert "GPU copy bandwidth 4KiB" in shown
