#!/usr/bin/env python3
"""The rollout's LSTM gate pass (appliance/gpu/host.py ``lstm_gates``, kernels/host.cpp) in each SIMD
build this CPU can run, at breakout's rollout shape on the AVX2, AVX and older kinds (4,096 agents,
an LSTM of 64: gates [4096, 256]), one thread, in turns. docs/lab/cpu-speed.md, "The avx kind".

    python tools/results/cpu/speed/lstm_gates_simd.py [--rows 4096] [--hidden 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time

import torch

from appliance.gpu import host

NAMES = {2: "AVX2 and FMA", 1: "AVX", 0: "SSE2"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    if host._lib() is None:
        raise SystemExit("the host extension is not built: python setup.py build_ext --inplace")
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    gates = torch.randn(args.rows, 4 * args.hidden, generator=g) * 3
    c, bias = torch.randn(args.rows, args.hidden, generator=g), torch.randn(4 * args.hidden, generator=g)
    builds = list(range(host.widest_simd(), -1, -1))
    times: dict[int, list[float]] = {b: [] for b in builds}
    for _ in range(args.rounds):
        for build in builds:
            host.simd_level = lambda build=build: build  # type: ignore[assignment]
            for _ in range(20):
                host.lstm_gates(gates, c, bias)
            start = time.perf_counter()
            for _ in range(args.calls):
                host.lstm_gates(gates, c, bias)
            times[build].append((time.perf_counter() - start) / args.calls * 1e3)
    print(f"gates [{args.rows}, {4 * args.hidden}], one thread, {args.rounds} rounds in turns (ms a call):")
    for build in builds:
        print(f"  {NAMES[build]:13s} " + " ".join(f"{t:.3f}" for t in times[build]))


if __name__ == "__main__":
    main()
