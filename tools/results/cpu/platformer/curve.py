"""Write curve.csv (one row per epoch) from a run's metrics.jsonl and print when the training perf
(the fraction of finished episodes that reached the goal) first held a bar over `window` epochs.

    .venv/bin/python tools/results/cpu/platformer/curve.py experiments/RUN/metrics.jsonl [bar] [window]
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

COLUMNS = ["epoch", "global_step", "uptime", "sps", "env/perf", "env/score", "env/fell", "env/hit",
           "env/timeout", "env/episode_length", "env/n", "loss/entropy"]  # fmt: skip


def main(path: str, bar: float = 0.9, window: int = 5) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "env/perf" in r]
    out = Path(__file__).resolve().parents[4] / "results" / "cpu" / "platformer" / "curve.csv"
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([c.split("/")[-1] for c in COLUMNS])
        for r in rows:
            writer.writerow(
                [f"{r.get(c, ''):.4g}" if isinstance(r.get(c), float) else r.get(c, "") for c in COLUMNS]
            )
    perf = [r["env/perf"] for r in rows]
    for i in range(window - 1, len(rows)):
        mean = sum(perf[i - window + 1 : i + 1]) / window
        if mean >= bar:
            r = rows[i]
            print(f"perf mean of {window} epochs >= {bar}: epoch {r['epoch']}, {r['global_step']:,} agent-steps, "
                  f"{r['uptime']:.0f} s")  # fmt: skip
            break
    else:
        print(f"perf mean of {window} epochs never reached {bar}; best {max(perf):.3f}")
    last = rows[-1]
    tail = perf[-window:]
    print(f"last: epoch {last['epoch']}, {last['global_step']:,} agent-steps, {last['uptime']:.0f} s, "
          f"perf mean of last {len(tail)} epochs {sum(tail) / len(tail):.3f}; wrote {out}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], *(float(a) for a in sys.argv[2:3]), *(int(a) for a in sys.argv[3:4]))
