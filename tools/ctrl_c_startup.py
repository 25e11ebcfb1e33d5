"""Stop `puffer-bench train` with Ctrl-C at many moments of its first second, and count what went wrong.

    python tools/ctrl_c_startup.py --runs 32 --first 0.2 --step 0.05 --spread 16

Each run starts a small multiprocessing train (squared, 8 envs, 2 workers) in a session of its own,
sends SIGINT to its process group after first + step * (i % spread) seconds, and checks: exit 130
(stopped before the first epoch) or 0 (saved a checkpoint), no traceback or abort on stderr, nothing
of its in /dev/shm, no process of its group left. Prints one line per bad run and a summary.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package

SMALL = ["--no-dashboard", "--train.device", "cpu", "--vec.num-envs", "8", "--train.bptt-horizon", "8",
         "--train.minibatch-size", "64", "--policy.hidden-size", "32", "--train.total-timesteps", "1e9",
         "--vec.backend", "multiprocessing", "--vec.num-workers", "2"]  # fmt: skip


def one(puffer: str, delay: float, data: Path) -> list[str]:
    proc = subprocess.Popen(
        [puffer, "train", "squared", *SMALL, "--train.data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background shell ignores it
    )  # fmt: skip
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return ["no exit within 60 s"]
    bad = []
    if proc.returncode not in (0, 130):
        bad.append(f"exit {proc.returncode}")
    if "Traceback" in err or "terminate called" in err or "Aborted" in err:
        bad.append("traceback: " + err.strip().splitlines()[-1][:200])
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"puffer_{proc.pid}_")]
    if left:
        bad.append(f"left in /dev/shm: {left}")
        for n in left:
            os.unlink(f"/dev/shm/{n}")
    deadline = time.monotonic() + 2.0  # workers and the resource tracker follow their parent out
    while True:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() > deadline:
            bad.append("processes of its group still running 2 s after it exited")
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=tool_cli.number(1, 10**5, integer=True), default=32)
    ap.add_argument(
        "--first", type=tool_cli.number(0, 3600), default=0.2, help="seconds before the first run's Ctrl-C"
    )
    ap.add_argument("--step", type=tool_cli.number(0, 3600), default=0.05)
    ap.add_argument("--spread", type=tool_cli.number(1, 10**5, integer=True), default=16,
                    help="delays cycle over this many steps")  # fmt: skip
    ap.add_argument(
        "--puffer-bench", type=tool_cli.path, default=str(Path(sys.executable).parent / "puffer-bench")
    )
    a = ap.parse_args(argv)
    return tool_cli.guarded(lambda: run_command(a))


def run_command(a: argparse.Namespace) -> None:
    if not os.access(a.puffer_bench, os.X_OK) or a.puffer_bench.is_dir():
        raise tool_cli.ToolError(f"--puffer-bench {a.puffer_bench}: not a program that can be run")
    counts: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="ctrl-c-") as tmp:
        for i in range(a.runs):
            delay = a.first + a.step * (i % a.spread)
            data = Path(tmp) / f"exp{i}"
            bad = one(a.puffer_bench, delay, data)
            shutil.rmtree(data, ignore_errors=True)
            counts["bad" if bad else "clean"] += 1
            for b in bad:
                print(f"run {i} (Ctrl-C at {delay:.2f} s): {b}", flush=True)
    print(f"{a.runs} runs, Ctrl-C at {a.first:.2f}-{a.first + a.step * (min(a.runs, a.spread) - 1):.2f} s: "
          f"{counts['clean']} clean, {counts['bad']} with a fault")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
