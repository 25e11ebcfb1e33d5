"""Generated reports for the publish tests: valid puffer-bench reports of made-up machines and
commits, built with :class:`appliance.bench.report.Report` (the committed results/ is not in every
tree: the Docker image leaves it out)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from appliance.bench import report as rpt

# the quick suite's spread: "repeats agree within this CV on a quiet machine" (bench/suites/quick.yaml)
SUITE_CV = 0.03
REPEATS = 3  # bench.repeats
METRIC = "env_sps/breakout/threads=1"


def fingerprint(
    commit: str,
    host: str = "host0",
    cpu: str = "Test CPU",
    cores: int = 2,
    gpu: str | None = None,
    speed: float = 1.0,
) -> dict[str, Any]:
    return {
        "host_hash": host,
        "cpu": {"model": cpu, "physical_cores": cores, "logical_cores": cores, "usable_cores": cores},
        "gpus": [{"name": gpu}] if gpu else [],
        "cuda_available": bool(gpu),
        "ram_bytes": 16 * 2**30,
        "calibration": {
            "int_mops": 8.0 * speed,
            "float_gflops": 3.0 * speed,
            "copy_gbs": 7.0 * speed,
            "cpu_share": 1.0,
        },
        "git": {"commit": commit, "dirty": False},
    }


def report(
    commit: str,
    day: int,
    metrics: dict[str, list[float]],
    busy: tuple[str, ...] = (),
    suite: str = "quick",
    **machine: Any,
) -> dict[str, Any]:
    r = rpt.Report({"name": suite}, {"name": "cpu"}, fingerprint(commit, **machine), {}, 0, REPEATS)
    r.data["created_utc"] = f"2026-10-{day:02d}T12:00:00Z"
    for name, samples in metrics.items():
        m = r.add(name, samples, "agent-steps/s")
        if name in busy:
            m["noise"] = {"busy": True, "reasons": ["others used 1.5 cores"]}
    return r.data


def commit_id(i: int) -> str:
    return f"{i:02d}" + "abcdef0123456789" * 2 + "abcdef"


def history_levels(levels: list[float], seed: int, cv: float = SUITE_CV) -> list[list[float]]:
    """Samples per commit: REPEATS log-normal samples of spread ``cv`` around each level."""
    rng = np.random.default_rng(seed)
    return [list(level * np.exp(rng.normal(0, cv, REPEATS))) for level in levels]


def write(folder: Path, data: dict[str, Any], name: str) -> Path:
    path = folder / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return path


def write_history(folder: Path, levels: list[float], seed: int = 0, **machine: Any) -> list[Path]:
    """One report per commit (day i + 1), ``METRIC`` at ``levels[i]``."""
    return [
        write(folder, report(commit_id(i), i + 1, {METRIC: samples}, **machine), f"r{i:02d}")
        for i, samples in enumerate(history_levels(levels, seed))
    ]
