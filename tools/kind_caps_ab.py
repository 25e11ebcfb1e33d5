"""What an emulated CPU kind (``PUFFER_CPU_KIND``) costs the lstm core, cap by cap, in interleaved
rounds: the CPU as it is, each kind with ATen's kernels capped alone (the emulation before oneDNN and
MKL were capped too), and each kind as ``puffer-bench`` caps it now (``sysinfo.cpu.cap_torch``).

    python tools/kind_caps_ab.py [--rounds 3] [--kinds avx2,older] [--out FILE.json]

``--kinds`` defaults to every kind below this CPU's own.

The libraries read their caps once, at first use, so every variant runs in a fresh process. Timed: the
update's pass over one minibatch (the core's ``sequence`` forward and backward over ``--segments``
segments of ``--horizon`` steps) and the rollout's inference step on ``--rows`` rows, at breakout's
cpu profile by default (an LSTM of 96, minibatch 16,384 = 256 x 64, a buffer of 4,096 agents). Prints
each round; ``--out`` writes the medians, each variant's ratio to the CPU as it is, and the fingerprint.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from appliance.sysinfo.cpu import TORCH_CAPS  # imports no torch: a child's caps are set before torch loads

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package

ROOT = Path(__file__).resolve().parents[1]


def _child(args: Any) -> int:
    """One variant's timings, as a JSON line (the caps are already in this process's environment)."""
    import torch

    from appliance.train.cores.lstm import LSTM

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    core = LSTM(args.size)
    x = torch.randn(args.segments, args.horizon, args.size, requires_grad=True)
    step_x = torch.randn(args.rows, args.size)

    def update() -> None:
        core.sequence(x, core.initial_state(args.segments)).sum().backward()

    def rollout() -> None:
        with torch.no_grad():
            core.step(step_x, core.initial_state(args.rows))

    out = {"capability": torch.backends.cpu.get_cpu_capability()}
    for name, fn in (("update_ms", update), ("rollout_ms", rollout)):
        fn()  # first use: the libraries' dispatch and JIT happen here
        start, n = time.perf_counter(), 0
        while n < 3 or time.perf_counter() - start < args.seconds:
            fn()
            n += 1
        out[name] = (time.perf_counter() - start) / n * 1e3
    print(json.dumps(out))
    return 0


def _variants(kinds: list[str]) -> dict[str, dict[str, str]]:
    """Name -> the cap variables that variant sets."""
    from appliance.sysinfo.cpu import TORCH_CAPS, cap_torch

    out: dict[str, dict[str, str]] = {"as it is": {}}
    for kind in kinds:
        out[f"{kind}, ATen only"] = {"ATEN_CPU_CAPABILITY": TORCH_CAPS["ATEN_CPU_CAPABILITY"][kind]}
        environ = {"PUFFER_CPU_KIND": kind}
        cap_torch(environ)
        out[kind] = {k: v for k, v in environ.items() if k in TORCH_CAPS}
    return out


def timed(name: str, caps: dict[str, str], args: Any) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in TORCH_CAPS and k != "PUFFER_CPU_KIND"}
    env.update(caps)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, __file__, "--child"] + [
        f"--{k}={getattr(args, k)}" for k in ("threads", "size", "segments", "horizon", "rows", "seconds")
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise tool_cli.ToolError(f"variant {name!r} failed (exit {done.returncode}): {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name, default, high in (
        ("--rounds", 3, 100),
        ("--threads", 2, 1024),
        ("--size", 96, 8192),
        ("--segments", 256, 65_536),
        ("--horizon", 64, 65_536),
        ("--rows", 4096, 1 << 20),
    ):
        parser.add_argument(name, type=tool_cli.number(1, high, integer=True), default=default)
    parser.add_argument(
        "--seconds", type=tool_cli.number(0.1, 600), default=3.0, help="per variant and figure"
    )
    parser.add_argument(
        "--kinds", type=tool_cli.names, default=None, help="default: every kind below this CPU's"
    )
    parser.add_argument("--out", type=tool_cli.path, default=None)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    from appliance.sysinfo.cpu import CPU_KINDS, real_kind

    def body() -> int:
        if args.out is not None:
            tool_cli.check_output(args.out, ours=tool_cli.written_by("kind_caps_ab.py"))
        real = real_kind()
        lesser = list(CPU_KINDS[CPU_KINDS.index(real) + 1 :])
        if not lesser:
            raise tool_cli.ToolError(f"this CPU is of the {real} kind: there is no lesser kind to act as")
        args.kinds = args.kinds or lesser
        bad = [k for k in args.kinds if k not in lesser]
        if bad:
            raise tool_cli.ToolError(
                f"--kinds {','.join(bad)}: this CPU is of the {real} kind and can act only as {', '.join(lesser)}"
            )
        variants = _variants(args.kinds)
        samples: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        for r in range(args.rounds):
            for name, caps in variants.items():
                got = timed(name, caps, args)
                samples[name].append(got)
                print(
                    f"round {r + 1}/{args.rounds} {name:>18}: update {got['update_ms']:7.1f} ms, "
                    f"rollout step {got['rollout_ms']:6.2f} ms (ATen {got['capability']})",
                    flush=True,
                )
        if args.out is not None:
            _write(args, variants, samples)
        return 0

    return tool_cli.guarded(body)


def _write(args: Any, variants: dict[str, dict[str, str]], samples: dict[str, list[dict[str, Any]]]) -> None:
    from appliance.report_io import write_json_atomic
    from appliance.sysinfo import fingerprint

    base = {f: statistics.median(s[f] for s in samples["as it is"]) for f in ("update_ms", "rollout_ms")}
    result: dict[str, Any] = {
        "schema": "puffer-bench/kind-caps/1",
        "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python tools/kind_caps_ab.py " + " ".join(sys.argv[1:]),
        "shape": {k: getattr(args, k) for k in ("threads", "size", "segments", "horizon", "rows", "seconds")},
        "rounds": args.rounds,
        "variants": {},
    }
    for name, caps in variants.items():
        entry: dict[str, Any] = {"caps": caps, "samples": samples[name]}
        for figure in ("update_ms", "rollout_ms"):
            median = statistics.median(s[figure] for s in samples[name])
            entry[figure] = round(median, 3)
            entry[figure.replace("_ms", "_ratio")] = round(median / base[figure], 3)
        result["variants"][name] = entry
    result["fingerprint"] = {
        k: v for k, v in fingerprint().items() if k in ("cpu", "git", "load", "host_hash")
    }
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
