#!/usr/bin/env python3
"""The bf16 rollout's LSTM step (8,192 agents, input and hidden 96, bf16 weights under CPU autocast,
torch at two intra-op threads) with its bf16 product widened to a float32 copy before the gate pass
(the step until this change) and read as it is by the gate pass (the lstm core's step now), in turns;
then the gate pass alone both ways. The two give the same ``h`` and ``c`` to the bit.
docs/lab/cpu-speed.md, "The avx kind on an Intel host, and the gate pass reads the bf16 product".

    python tools/results/cpu/speed/lstm_gates_bf16.py [--rounds 5] [--calls 50]
"""

from __future__ import annotations

import argparse
import time

import torch

from appliance.gpu import host
from appliance.train.cores.lstm import LSTM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not host.available() or host.simd_level() < 2:
        raise SystemExit("needs the host extension's AVX2 build (python setup.py build_ext --inplace)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    agents, width = 8192, 96
    twin = LSTM(width).to(torch.bfloat16)
    cell = twin.cell
    xb = torch.randn(agents, width).bfloat16()
    state = (torch.randn(agents, width) * 0.5, torch.randn(agents, width))
    bf16 = torch.bfloat16

    def widened() -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state
        weight = torch.cat([cell.weight_ih, cell.weight_hh], 1).to(bf16).t().contiguous()
        gates = torch.mm(torch.cat([xb, h.to(bf16)], 1), weight).float()
        return host.lstm_gates(gates, c, cell.bias_ih.float() + cell.bias_hh.float())

    def as_is() -> tuple[torch.Tensor, torch.Tensor]:
        h, (_, c) = twin.step(xb, state)
        return h, c

    gates = torch.randn(agents, 4 * width).bfloat16()
    bias = torch.randn(4 * width)
    steps = {"step, product widened first": widened, "step, product read as it is": as_is}
    passes = {
        "gate pass on gates.float()": lambda: host.lstm_gates(gates.float(), state[1], bias),
        "gate pass on the bf16 gates": lambda: host.lstm_gates(gates, state[1], bias),
    }

    def ms(step) -> float:
        for _ in range(10):  # warm-up: allocations, oneDNN's first calls
            step()
        start = time.perf_counter()
        for _ in range(args.calls):
            step()
        return (time.perf_counter() - start) / args.calls * 1e3

    print(
        f"torch {torch.__version__}, {args.threads} intra-op threads, gate pass SIMD build "
        f"{host.simd_level()}, {agents} agents, LSTM {width}, bf16 weights under autocast"
    )
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        for variants in (steps, passes):
            times: dict[str, list[float]] = {name: [] for name in variants}
            for r in range(args.rounds):
                for name in list(variants) if r % 2 == 0 else list(reversed(variants)):
                    times[name].append(ms(variants[name]))
            (a_name, a), (b_name, b) = ((name, variants[name]()) for name in variants)
            same = all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
            for name in variants:
                print(f"{name:<30} ms: {' '.join(f'{t:.2f}' for t in times[name])}")
            ratios = " ".join(f"{x / y:.2f}" for x, y in zip(times[a_name], times[b_name], strict=True))
            print(f"  first / second per round: {ratios}; same h and c to the bit: {same}")


if __name__ == "__main__":
    main()
