#!/usr/bin/env python3
"""The update's LSTM at one minibatch's shape, forward and backward: oneDNN's RNN (what torch runs on
the CPU) against torch's own per-step LSTM (`torch.backends.mkldnn.flags(enabled=False)`: MKL's GEMM
a step and ATen's gate ops), in turns, under each CPU kind's caps (PUFFER_CPU_KIND's variables,
appliance/sysinfo/cpu.py), one process a kind. docs/lab/cpu-speed.md, "Tried and not kept".

    python tools/results/cpu/speed/lstm_onednn_native.py [--hidden 64] [--rows 8192] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = """
import json, sys, time, torch
hidden, rows, horizon, rounds, threads = map(int, sys.argv[1:6])
torch.set_num_threads(threads)
torch.manual_seed(0)
lstm = torch.nn.LSTM(hidden, hidden, batch_first=True)
x = torch.randn(rows // horizon, horizon, hidden, requires_grad=True)
h0 = (torch.zeros(1, rows // horizon, hidden), torch.zeros(1, rows // horizon, hidden))
def once():
    out, _ = lstm(x, h0)
    out.square().sum().backward()
def grads(enabled):
    with torch.backends.mkldnn.flags(enabled=enabled):
        lstm.zero_grad(); x.grad = None; once()
        return [p.grad.clone() for p in lstm.parameters()]
def timed(enabled, n=20):
    with torch.backends.mkldnn.flags(enabled=enabled):
        once(); once()
        t = time.perf_counter()
        for _ in range(n):
            once()
        return (time.perf_counter() - t) / n * 1e3
diff = max(float((a - b).norm() / b.norm()) for a, b in zip(grads(True), grads(False)))
pairs = [(timed(True), timed(False)) for _ in range(rounds)]
print(json.dumps({"grad_rel_diff": diff, "pairs_ms": pairs}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=64, help="the LSTM's size (the AVX2 and older kinds': 64)")
    ap.add_argument("--rows", type=int, default=8192, help="minibatch rows (the cpu profile's minibatch)")
    ap.add_argument("--horizon", type=int, default=64, help="steps a segment (train.bptt_horizon)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), *[".."] * 4))
    from appliance.sysinfo import cpu

    print(f"# LSTM {args.hidden}, {args.rows // args.horizon} segments x {args.horizon} steps, "
          f"{args.threads} threads; forward + backward, ms per minibatch")  # fmt: skip
    for kind in ("avx2", "older"):
        env = {**os.environ, **{var: values[kind] for var, values in cpu.TORCH_CAPS.items()}}
        out = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", CHILD, str(args.hidden), str(args.rows), str(args.horizon),
             str(args.rounds), str(args.threads)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        got = json.loads(out.stdout.strip().splitlines()[-1])
        for i, (onednn, native) in enumerate(got["pairs_ms"]):
            print(
                f"{kind:6s} round {i}: oneDNN {onednn:6.1f}  native {native:6.1f}  native/oneDNN {native / onednn:.2f}"
            )
        print(f"{kind:6s} gradients' largest relative difference {got['grad_rel_diff']:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
