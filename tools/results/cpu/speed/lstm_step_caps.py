#!/usr/bin/env python3
"""One rollout step of the older kind's LSTM (4,096 agents, input and hidden 64, float32, torch at
one intra-op thread) four ways, in turns: the two matrix products alone (``mm`` then ``addmm_``), the
CPU rollout's step (those products, then the extension's gate pass at :func:`simd_level`'s build),
``nn.LSTMCell`` whole, and oneDNN's fused LSTM over a sequence of one step. Run it once as it is and
once under the older kind's caps (with ``PUFFER_CPU_KIND=older`` for the gate pass's build) to see
what the caps cost each. docs/lab/cpu-speed.md, "The older kind with MKL capped".

    python tools/results/cpu/speed/lstm_step_caps.py [--rounds 3] [--calls 300]
"""

from __future__ import annotations

import argparse
import time

import torch

from appliance.gpu import host
from appliance.sysinfo.cpu import library_caps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    agents, width = 4096, 64
    x, h, c = torch.randn(agents, width), torch.randn(agents, width), torch.randn(agents, width)
    cell, lstm = torch.nn.LSTMCell(width, width), torch.nn.LSTM(width, width)
    w_ih, w_hh = cell.weight_ih.t().contiguous(), cell.weight_hh.t().contiguous()

    def products() -> None:
        torch.mm(x, w_ih).addmm_(h, w_hh)

    bias = cell.bias_ih + cell.bias_hh

    def rollout_step() -> None:
        host.lstm_gates(torch.mm(x, w_ih).addmm_(h, w_hh), c, bias)

    def whole_cell() -> None:
        cell(x, (h, c))

    def fused() -> None:
        lstm(x.unsqueeze(0), (h.unsqueeze(0), c.unsqueeze(0)))

    def ms(step) -> float:
        for _ in range(20):  # warm-up: allocations, the libraries' first calls
            step()
        start = time.perf_counter()
        for _ in range(args.calls):
            step()
        return (time.perf_counter() - start) / args.calls * 1e3

    caps = library_caps()
    if not host.available():
        raise SystemExit("the host extension is not built: python setup.py build_ext --inplace")
    print(
        f"torch {torch.__version__}, caps {caps or 'none'}, gate pass SIMD build {host.simd_level()} "
        f"(0 SSE2, 1 AVX, 2 AVX2), {args.calls} calls a way"
    )
    flops = 2 * 2 * agents * width * 4 * width  # the two products
    with torch.no_grad():
        for r in range(1, args.rounds + 1):
            p, s, w, f = ms(products), ms(rollout_step), ms(whole_cell), ms(fused)
            print(
                f"round {r}: products {p:.3f} ms ({flops / p / 1e6:.1f} GFLOP/s), with the gate pass "
                f"{s:.3f} ms, LSTMCell {w:.3f} ms, oneDNN LSTM step {f:.3f} ms"
            )


if __name__ == "__main__":
    main()
