#!/usr/bin/env python3
"""The float32 CPU rollout's LSTM products two ways, in turns: MKL's (``mm`` then ``addmm_``, as
``LSTM._host_step`` runs them) and ``host.lstm_products_i16`` (``train.rollout_int16``), at one
torch thread, for the older kind's LSTM of 64 over 4,096 agents; then how far the int16 products
are from float64 ones, against float32's own distance. Run it as it is and under a kind's caps
(``PUFFER_CPU_KIND=older`` with the kind's ``MKL_ENABLE_INSTRUCTIONS``, ``ATEN_CPU_CAPABILITY`` and
``ONEDNN_MAX_CPU_ISA``, which ``puffer-bench train`` sets itself). docs/lab/cpu-speed.md, "The
rollout's products in int16".

    python tools/results/cpu/speed/lstm_products_i16.py [--rounds 3] [--calls 300]
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
    parser.add_argument("--agents", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=64)
    args = parser.parse_args()
    if not host.available():
        raise SystemExit("the host extension is not built: python setup.py build_ext --inplace")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n, width = args.agents, args.hidden
    cell = torch.nn.LSTMCell(width, width)
    w_ih, w_hh = cell.weight_ih.detach(), cell.weight_hh.detach()
    x, h = torch.nn.functional.gelu(torch.randn(n, width)), torch.rand(n, width) * 2 - 1

    def float32() -> torch.Tensor:
        return torch.mm(x, w_ih.t().contiguous()).addmm_(h, w_hh.t().contiguous())

    def int16() -> torch.Tensor:
        return host.lstm_products_i16(x, h, w_ih, w_hh)

    def ms(step) -> float:
        for _ in range(20):  # warm-up: allocations, the libraries' first calls
            step()
        start = time.perf_counter()
        for _ in range(args.calls):
            step()
        return (time.perf_counter() - start) / args.calls * 1e3

    caps = library_caps()
    print(
        f"torch {torch.__version__}, caps {caps or 'none'}, SIMD build {host.simd_level()} "
        f"(2: AVX2, else SSE2 for the integer products), {n} agents, LSTM {width}, 1 thread"
    )
    for r in range(1, args.rounds + 1):
        a, b = ms(float32), ms(int16)
        print(f"round {r}: float32 products {a:.2f} ms, int16 {b:.2f} ms, float32/int16 {a / b:.2f}")
    exact = x.double() @ w_ih.double().T + h.double() @ w_hh.double().T
    scale = exact.abs().max().item()
    for name, step in (("float32", float32), ("int16", int16)):
        err = (step().double() - exact).abs()
        print(
            f"{name}: largest error {err.max().item() / scale:.1e}, mean {err.mean().item() / scale:.1e} of the largest product"
        )


if __name__ == "__main__":
    main()
