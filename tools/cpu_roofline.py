#!/usr/bin/env python3
"""How close the trainer's matrix work runs to what this CPU can do: GFLOP/s of a large GEMM (the
machine's practical ceiling) beside the same torch calls the breakout parity settings make.

    python tools/cpu_roofline.py [--dtype bfloat16] [--seconds 2] [--hidden 128] [--segments 512]
        [--out results/cpu/roofline.json]

Shapes default to those of bench/parity/breakout.yaml (LSTM 128, 4,096 agents a rollout step,
minibatches of 32,768 agent-steps as 512 segments of 64); ``--hidden 64 --segments 128`` are
breakout's cpu profile (an LSTM of 64, minibatches of 8,192 as 128 segments). Timed: the rollout's
one policy step (encoder, LSTM cell, heads; with ``--int16`` also the trainer's own LSTM step with
its products in int16, its multiply-adds counted as the float ones they stand for) and the update's
LSTM over a minibatch, forward and backward. Each is timed for ``--seconds`` after a warm-up, all
threads torch has; FLOPs are counted as 2 per multiply-add of the matrix products only (element-wise
gate math is not counted), so the figures are a lower bound on the work done. Under ``PUFFER_CPU_KIND`` torch's libraries are capped
to that kind's ISA, as ``puffer-bench`` caps them, so the ceiling is the emulated kind's. The
output names the fingerprint (host, CPU kind, caps). docs/lab/cpu-speed.md reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from appliance.sysinfo.cpu import cap_torch  # imports no torch

cap_torch()  # PUFFER_CPU_KIND: the libraries capped before torch loads them, as the command line does

import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package  # noqa: E402

OBS, ACTIONS, AGENTS, HORIZON = 118, 3, 4096, 64


def timed(fn, seconds: float) -> float:
    """Seconds per call of ``fn``: a warm-up of three calls, then as many as ``seconds`` holds."""
    for _ in range(3):
        fn()
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or n < 3:
        fn()
        n += 1
    return elapsed / n


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--seconds", type=tool_cli.number(0, 1e4, low_open=True), default=2.0)
    ap.add_argument(
        "--hidden", type=tool_cli.number(1, 4096, integer=True), default=128, help="the LSTM's size"
    )
    ap.add_argument(
        "--int16",
        action="store_true",
        help="also time the trainer's LSTM step with its products in int16 (train.rollout_int16), float32 only",
    )
    ap.add_argument(
        "--segments",
        type=tool_cli.number(1, 65536, integer=True),
        default=512,
        help="segments of 64 steps a minibatch",
    )
    ap.add_argument("--out", type=tool_cli.path, default=None)
    a = ap.parse_args(argv)
    return tool_cli.guarded(lambda: run_command(a, argv))


def run_command(a: argparse.Namespace, argv: list[str] | None) -> int:
    if a.out is not None:
        tool_cli.check_output(a.out, ours=tool_cli.written_by("cpu_roofline"))
    dtype = getattr(torch, a.dtype)
    if a.int16 and dtype != torch.float32:
        raise tool_cli.ToolError(
            "--int16 times the float32 rollout's int16 products: give --dtype float32 with it"
        )
    hidden, segments = a.hidden, a.segments
    torch.manual_seed(0)
    rows: dict[str, dict[str, float]] = {}

    def record(name: str, flops: float, fn) -> None:
        s = timed(fn, a.seconds)
        rows[name] = {"seconds_per_call": s, "gflop_per_call": flops / 1e9, "gflop_per_s": flops / s / 1e9}
        print(f"{name:<40} {s * 1e3:9.2f} ms  {flops / s / 1e9:8.1f} GFLOP/s", flush=True)

    with torch.no_grad():
        big_a = torch.randn(4096, 4096, dtype=dtype)
        big_b = torch.randn(4096, 4096, dtype=dtype)
        record("gemm 4096x4096x4096 (ceiling)", 2 * 4096**3, lambda: big_a @ big_b)
        rows_in = segments * HORIZON
        gx = torch.randn(rows_in, hidden, dtype=dtype)
        w = torch.randn(4 * hidden, hidden, dtype=dtype)
        record(
            f"gemm {rows_in}x{hidden} @ {hidden}x{4 * hidden}",
            2 * rows_in * hidden * 4 * hidden,
            lambda: gx @ w.T,
        )

        encoder = nn.Sequential(nn.Linear(OBS, hidden), nn.GELU()).to(dtype)
        cell = nn.LSTMCell(hidden, hidden).to(dtype)
        heads = nn.Linear(hidden, ACTIONS + 1).to(dtype)
        obs = torch.rand(AGENTS, OBS, dtype=dtype)
        h = torch.zeros(AGENTS, hidden, dtype=dtype)
        c = torch.zeros(AGENTS, hidden, dtype=dtype)
        step_macs = AGENTS * (OBS * hidden + 2 * hidden * 4 * hidden + hidden * (ACTIONS + 1))
        record(
            "rollout step: encoder, LSTM cell, heads",
            2 * step_macs,
            lambda: heads(cell(encoder(obs), (h, c))[0]),
        )
        record("rollout step: LSTM cell alone", 2 * AGENTS * 2 * hidden * 4 * hidden, lambda: cell(h, (h, c)))
        if a.int16:
            from appliance.gpu import host
            from appliance.train.cores.lstm import LSTM

            if (why := host.i16_missing()) is not None:
                raise tool_cli.ToolError(f"--int16: the extension's int16 products cannot run here ({why})")
            core = LSTM(hidden)
            core.rollout_int16 = True
            record(
                "rollout step: the trainer's LSTM core, int16 products",
                2 * AGENTS * 2 * hidden * 4 * hidden,
                lambda: core.step(h, (h, c)),
            )

    lstm = nn.LSTM(hidden, hidden, batch_first=True)
    x = torch.randn(segments, HORIZON, hidden, requires_grad=True)
    state = (torch.zeros(1, segments, hidden), torch.zeros(1, segments, hidden))
    seq_macs = segments * HORIZON * 2 * hidden * 4 * hidden
    autocast = torch.autocast("cpu", torch.bfloat16, enabled=dtype == torch.bfloat16)

    def forward():
        with torch.no_grad(), autocast:
            lstm(x, state)

    def forward_backward():
        with autocast:
            out, _ = lstm(x, state)
        out.float().sum().backward()

    record("update LSTM forward (a minibatch)", 2 * seq_macs, forward)
    record("update LSTM forward+backward", 3 * 2 * seq_macs, forward_backward)

    from appliance.sysinfo import fingerprint

    seen = fingerprint(calibration=False)
    data = {
        "dtype": a.dtype,
        "hidden": hidden,
        "segments": segments,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "fingerprint": {k: v for k, v in seen.items() if k in ("cpu", "git", "load", "host_hash")},
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "command": "python tools/cpu_roofline.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "rows": rows,
    }
    ceiling = rows["gemm 4096x4096x4096 (ceiling)"]["gflop_per_s"]
    for row in rows.values():
        row["share_of_ceiling"] = row["gflop_per_s"] / ceiling
    if a.out:
        from appliance.errors import ApplianceError
        from appliance.safe_files import write_or_keep

        try:
            write_or_keep(a.out, (json.dumps(data, indent=1) + "\n").encode(), "--out")
        except ApplianceError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
