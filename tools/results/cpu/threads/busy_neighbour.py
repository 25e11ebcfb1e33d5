#!/usr/bin/env python3
"""`puffer-bench train ENV` with no flags, alone and beside one busy process, rounds interleaved
(issue 60 part 3: a busy neighbour may slow a run by its share of the cores, never by 15x).

    python tools/results/cpu/threads/busy_neighbour.py --env CartPole-v1 --rounds 3 --seconds 40 \
        --out results/cpu/threads/busy-neighbour.json

Each round runs, in this order: A alone; S beside `python3 -c 'while True: pass'` started under
`setsid` (another session, as another user's job is); B beside the same busy loop in this session.
Each run is `puffer-bench train ENV` in a fresh folder, stopped with SIGINT after --seconds; its rate is
agent-steps over seconds between its first and last metrics records. The load average before each
run and the machine's fingerprint (`puffer-bench info --json`) are written beside the rates.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUSY = [sys.executable, "-c", "while True: pass"]


def rate(folder: Path) -> float | None:
    files = list(folder.glob("experiments/*/metrics.jsonl"))
    if not files:
        return None
    rows = [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "global_step" in r and "uptime" in r]
    if len(rows) < 2 or rows[-1]["uptime"] <= rows[0]["uptime"]:
        return None
    return (rows[-1]["global_step"] - rows[0]["global_step"]) / (rows[-1]["uptime"] - rows[0]["uptime"])


def one_run(env: str, seconds: float, busy: str | None) -> dict:
    neighbour = None
    if busy == "setsid":
        neighbour = subprocess.Popen(BUSY, start_new_session=True)
    elif busy == "session":
        neighbour = subprocess.Popen(BUSY)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="busy-") as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "appliance.cli", "train", env, "--no-dashboard"],
            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        time.sleep(seconds)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
        threads = next((line.strip() for line in out.splitlines() if line.strip().startswith("threads:")), "")
        result = {
            "busy": busy or "none",
            "rate": rate(Path(tmp)),
            "load_before": round(load, 2),
            "threads": threads,
        }
    if neighbour is not None:
        neighbour.kill()
        neighbour.wait()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    info = subprocess.run(
        [sys.executable, "-m", "appliance.cli", "info", "--json"], capture_output=True, text=True
    )
    fingerprint = json.loads(info.stdout[info.stdout.index("{") :]) if info.returncode == 0 else {}
    rounds = []
    for i in range(args.rounds):
        runs = {
            name: one_run(args.env, args.seconds, busy)
            for name, busy in (("A", None), ("S", "setsid"), ("B", "session"))
        }
        for name in ("S", "B"):
            a, x = runs["A"]["rate"], runs[name]["rate"]
            runs[name]["vs_alone"] = round(x / a, 3) if a and x else None
        rounds.append(runs)
        print(
            f"round {i + 1}: "
            + "  ".join(
                f"{k} {v['rate'] and round(v['rate'])} (load {v['load_before']})" for k, v in runs.items()
            ),
            flush=True,
        )
    summary = {name: statistics.median(r[name]["vs_alone"] for r in rounds if r[name]["vs_alone"]) for name in ("S", "B")
               if any(r[name]["vs_alone"] for r in rounds)}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = {"command": " ".join(["python", *sys.argv]), "env": args.env, "seconds": args.seconds, "rounds": rounds,
            "median_vs_alone": summary, "fingerprint": fingerprint}  # fmt: skip
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(args.out)
    print(f"median vs alone: {summary}; wrote {args.out}")


if __name__ == "__main__":
    main()
