#!/usr/bin/env python3
"""The CPU rollout buffer's memory traffic with and without transparent huge pages, in turns: each
round runs one fresh process per variant (torch reads ``THP_MEM_ALLOC_ENABLE`` once, when it first
allocates), which allocates breakout's rollout at the cpu profile's shapes (8,192 segments of 64
steps, 118 observation floats), writes it a column at a time as ``Rollout.write_column`` does for
each policy step, and reads minibatches of segments back as the update does. It prints seconds a
million agent-steps for each, and how much of the process's memory the kernel backed with huge
pages (``AnonHugePages`` of /proc/self/smaps_rollup). docs/lab/cpu-speed.md, "Huge pages for the
rollout".

    python tools/results/cpu/speed/rollout_thp.py [--rounds 3] [--horizons 6]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {"4k pages": {}, "huge pages": {"THP_MEM_ALLOC_ENABLE": "1"}}


def huge_kib() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def child(segments: int, horizon: int, width: int, horizons: int, minibatch: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(2)
    torch.manual_seed(0)
    obs = torch.empty(segments, horizon, width)
    actions = torch.empty(segments, horizon, dtype=torch.int64)
    values = torch.empty(segments, horizon)
    src = torch.rand(segments, width)
    act, val = torch.randint(0, 3, (segments,)), torch.rand(segments)
    write = read = 0.0
    for k in range(horizons + 1):  # the first pass touches the pages: not counted
        t0 = time.perf_counter()
        for t in range(horizon):
            obs[:, t] = src
            actions[:, t] = act
            values[:, t] = val
        t1 = time.perf_counter()
        order = torch.randperm(segments)
        per = minibatch // horizon
        for i in range(0, segments, per):
            rows = order[i : i + per]
            obs.index_select(0, rows).sum()  # the update gathers whole segments of the rollout
        t2 = time.perf_counter()
        if k:
            write, read = write + t1 - t0, read + t2 - t1
    steps = segments * horizon * horizons / 1e6
    return {"write_s_per_M": write / steps, "read_s_per_M": read / steps, "huge_kib": huge_kib()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--horizons", type=int, default=6)
    parser.add_argument("--segments", type=int, default=8192)
    parser.add_argument("--horizon", type=int, default=64)
    parser.add_argument("--width", type=int, default=118)
    parser.add_argument("--minibatch", type=int, default=8192)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = (args.segments, args.horizon, args.width, args.horizons, args.minibatch)
    if args.child:
        print(json.dumps(child(*shape)))
        return
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    print(f"transparent_hugepage/enabled: {thp.read_text().strip() if thp.exists() else 'absent'}")
    print(f"rollout: {args.segments} segments x {args.horizon} steps x {args.width} floats, {args.horizons} "
          f"horizons timed after one untimed, minibatches of {args.minibatch} agent-steps")  # fmt: skip
    argv = [sys.executable, __file__, "--child", *sys.argv[1:]]
    for r in range(1, args.rounds + 1):
        for name, extra in VARIANTS.items():
            env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | extra
            out = json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)
            print(f"round {r} {name:>10}: write {out['write_s_per_M']:.3f} s, read {out['read_s_per_M']:.3f} s "
                  f"a million agent-steps; {out['huge_kib'] / 1024:.0f} MiB in huge pages")  # fmt: skip


if __name__ == "__main__":
    main()
