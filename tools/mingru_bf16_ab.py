"""The mingru core's forward and backward under CPU bf16 autocast: the scan as it runs now (float32
on the host build) against the bf16 torch reference scan it fell to before, in interleaved rounds.

    python tools/mingru_bf16_ab.py [--rounds 3] [--batch 256] [--horizon 64] [--size 64] [--layers 2]

Prints each round's seconds for both; one torch thread, so another job on the machine slows both
alike. The shape defaults to PufferLib 4.0's breakout network (2 layers of 64) over segments of 64.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from appliance.gpu import host, kernels, reference
from appliance.train.cores import MinGRU, mingru


def _reference_under_bf16(kv: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """What ``kernels.mingru_scan`` did before: the host build for float32, the reference otherwise."""
    if kv.dtype == torch.float32:
        return kernels.MinGRUScan.apply(kv, h0, host.Scan)
    return reference.mingru_scan(kv, h0)


def _seconds(core: MinGRU, x: torch.Tensor, scan, reps: int) -> float:  # type: ignore[no-untyped-def]
    real = mingru.kernels.mingru_scan
    mingru.kernels.mingru_scan = scan
    try:
        start = time.perf_counter()
        for _ in range(reps):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = core.sequence(x, core.initial_state(x.shape[0]))
            y.float().sum().backward()
        return time.perf_counter() - start
    finally:
        mingru.kernels.mingru_scan = real


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tool_cli  # a sibling script, not a package

    parser = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    for name, default, high in (
        ("--rounds", 3, 1000),
        ("--reps", 5, 10_000),
        ("--batch", 256, 65_536),
        ("--horizon", 64, 65_536),
        ("--size", 64, 8192),
        ("--layers", 2, 64),
    ):
        parser.add_argument(name, type=tool_cli.number(1, high, integer=True), default=default)
    args = parser.parse_args(argv)
    if not host.available():
        print("error: the host build of the kernels is not built here (pip install -e .)", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    torch.manual_seed(0)
    core = MinGRU(args.size, args.layers)
    x = torch.randn(args.batch, args.horizon, args.size, requires_grad=True)
    for r in range(args.rounds):
        before = _seconds(core, x, _reference_under_bf16, args.reps)
        now = _seconds(core, x, kernels.mingru_scan, args.reps)
        print(
            f"round {r}: bf16 reference scan {before:.3f} s, float32 host scan {now:.3f} s ({before / now:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
