#!/usr/bin/env python3
"""Two rollout buffers' work at once against one alone: the encoder's GELU and the LSTM cell's first
product at breakout's rollout shape on the AVX2, AVX and older kinds (4,096 agents, an LSTM of 64:
GELU over [4096, 64], [4096, 64] @ [64, 256]), torch at one intra-op thread, on one Python thread and
then on two at once, in turns. Were the machine's two cores two cores' worth of these ops, two
streams would take about the wall time of one. docs/lab/cpu-speed.md, "The older kind: where a
rollout step goes".

    python tools/results/cpu/speed/two_streams.py [--rounds 3] [--calls 300]
"""

from __future__ import annotations

import argparse
import threading
import time

import torch


def stream(calls: int, out: list[tuple[float, float]], i: int) -> None:
    x, w = torch.randn(4096, 64), torch.randn(64, 256)
    for _ in range(20):  # warm-up: allocations, MKL's first call
        torch.nn.functional.gelu(x)
        torch.mm(x, w)
    gelu = mm = 0.0
    for _ in range(calls):
        t0 = time.perf_counter()
        torch.nn.functional.gelu(x)
        t1 = time.perf_counter()
        torch.mm(x, w)
        mm += time.perf_counter() - t1
        gelu += t1 - t0
    out[i] = (gelu / calls * 1e3, mm / calls * 1e3)


def run(streams: int, calls: int) -> tuple[float, list[tuple[float, float]]]:
    out: list[tuple[float, float]] = [(0.0, 0.0)] * streams
    threads = [threading.Thread(target=stream, args=(calls, out, i)) for i in range(streams)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, ATen {torch.backends.cpu.get_cpu_capability()}, {args.calls} calls a stream"
    )
    for r in range(args.rounds):
        for n in (1, 2):
            wall, per = run(n, args.calls)
            ops = ", ".join(f"GELU {g:.3f} ms, product {m:.3f} ms" for g, m in per)
            print(f"round {r + 1}, {n} stream{'s' if n > 1 else ''}: wall {wall:.2f} s ({ops})")


if __name__ == "__main__":
    main()
