#!/usr/bin/env python3
"""`puffer-bench train ENV` with no flags while a busy process comes or goes mid-run: the threads the
run holds, epoch by epoch (issue 60 part 3: the load is looked at again between epochs).

    python tools/results/cpu/threads/passing_neighbour.py --env breakout --stop-steps 14e6 \
        --out results/cpu/threads/passing-neighbour-breakout.json

Two runs, each in a fresh folder with `--report`: "gone", beside `python3 -c 'while True: pass'`
(under `setsid`: not the run's child) from before it starts until --gone-at seconds after; "came",
alone until --came-at seconds, then beside the same loop for --for seconds. Written: each run's
`threads:` lines, its metrics records' (uptime, threads, global_step), the neighbour's start and end
in seconds from the launch (a record's uptime counts from the trainer's start, some seconds after
the launch), and the machine's fingerprint from the report.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BUSY = [sys.executable, "-c", "while True: pass"]


def one_run(env: str, stop_steps: str, start: float, end: float) -> dict:
    """A run with the busy loop from ``start`` to ``end`` seconds after its launch (negative: before)."""
    launch = time.monotonic() + max(0.0, -start)
    neighbour: list[subprocess.Popen] = []

    def spin() -> None:
        time.sleep(max(0.0, launch + start - time.monotonic()))
        neighbour.append(subprocess.Popen(BUSY, start_new_session=True))
        time.sleep(max(0.0, launch + end - time.monotonic()))
        neighbour[0].kill()
        neighbour[0].wait()

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    with tempfile.TemporaryDirectory(prefix="passing-") as tmp:
        time.sleep(max(0.0, launch - time.monotonic()))
        out = subprocess.run(
            [sys.executable, "-m", "appliance.cli", "train", env, "--no-dashboard", "--stop-steps", stop_steps,
             "--report", "report.json"],
            cwd=tmp, capture_output=True, text=True, check=False,
        )  # fmt: skip
        spinner.join(timeout=600)
        if neighbour and neighbour[0].poll() is None:
            neighbour[0].kill()
        files = list(Path(tmp).glob("experiments/*/metrics.jsonl"))
        rows = [json.loads(x) for x in files[0].read_text().splitlines()] if files else []
        report = Path(tmp, "report.json")
        fingerprint = json.loads(report.read_text())["fingerprint"] if report.is_file() else None
    lines = (out.stdout + out.stderr).splitlines()
    return {
        "neighbour_from_launch_s": [start, end],
        "exit_code": out.returncode,
        "threads_lines": [x for x in lines if x.startswith("threads:")],
        "records": [(round(r["uptime"], 1), r.get("threads"), r["global_step"]) for r in rows],
        "fingerprint": fingerprint,
        "tail": lines[-1:] if out.returncode == 0 else lines[-20:],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="breakout")
    p.add_argument("--stop-steps", default="14e6")
    p.add_argument(
        "--gone-at", type=float, default=20.0, help="seconds after the launch the first run's neighbour ends"
    )
    p.add_argument(
        "--came-at",
        type=float,
        default=25.0,
        help="seconds after the launch the second run's neighbour starts",
    )
    p.add_argument(
        "--for", dest="for_s", type=float, default=25.0, help="how long the second run's neighbour spins"
    )
    p.add_argument("--out", required=True)
    a = p.parse_args()
    runs = {
        "gone": one_run(a.env, a.stop_steps, -0.5, a.gone_at),
        "came": one_run(a.env, a.stop_steps, a.came_at, a.came_at + a.for_s),
    }
    for name, run in runs.items():
        print(name, *run["threads_lines"], *run["tail"], sep="\n  ")
    Path(a.out).write_text(json.dumps({"command": sys.argv, "env": a.env, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
