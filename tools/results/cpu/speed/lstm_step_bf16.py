#!/usr/bin/env python3
"""One rollout step of breakout's bf16 LSTM (8,192 agents, input and hidden 96, the rollout's bf16
copy of the weights under CPU autocast, torch at two intra-op threads) two ways, in turns:
``nn.LSTMCell`` as the rollout ran it until 2026-12-01, and the lstm core's step as it runs now (one
bf16 product of ``[x, h]``, then the extension's gate pass in float32). Also how far each one's
``h`` and ``c`` are from the float32 cell's. docs/lab/cpu-speed.md, "The bf16 rollout's LSTM step".

    python tools/results/cpu/speed/lstm_step_bf16.py [--rounds 5] [--calls 50]
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
    if not host.available():
        raise SystemExit("the host extension is not built: python setup.py build_ext --inplace")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    agents, width = 8192, 96
    core = LSTM(width)
    twin = LSTM(width).to(torch.bfloat16)
    twin.load_state_dict(core.state_dict())
    x = torch.randn(agents, width)
    state = (torch.randn(agents, width) * 0.5, torch.randn(agents, width))
    xb = x.bfloat16()

    def cell() -> tuple[torch.Tensor, torch.Tensor]:
        return twin.cell(xb, state)

    def core_step() -> tuple[torch.Tensor, torch.Tensor]:
        h, (_, c) = twin.step(xb, state)
        return h, c

    variants = {"nn.LSTMCell (autocast)": cell, "core step (one product, host gates)": core_step}

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
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.no_grad():
        want_h, want_c = core.cell(x, state)  # float32, no autocast
        with torch.autocast("cpu", torch.bfloat16):
            for r in range(args.rounds):
                order = list(variants) if r % 2 == 0 else list(reversed(variants))
                for name in order:
                    times[name].append(ms(variants[name]))
            results = {name: step() for name, step in variants.items()}
        for name, (h, c) in results.items():
            print(
                f"{name:<38} ms a step: {' '.join(f'{t:.2f}' for t in times[name])}; "
                f"against the float32 cell: h mean {(h.float() - want_h).abs().mean():.2e}, "
                f"c mean {(c.float() - want_c).abs().mean():.2e}"
            )
    first, second = (times[name] for name in variants)
    print(
        "cell / core step per round: " + " ".join(f"{a / b:.2f}" for a, b in zip(first, second, strict=True))
    )


if __name__ == "__main__":
    main()
