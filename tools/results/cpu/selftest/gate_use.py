"""What the speed gates did in the kept selftest reports: per report, the per-sample gate's samples,
those it took again, those it kept although slow, the seconds it waited for the CPU, and the steps the
step gate flagged as slowed; then the totals.

    .venv/bin/python tools/results/cpu/selftest/gate_use.py results/cpu/selftest/try*
"""

import json
import sys
from pathlib import Path

print("| try | run | samples | retaken | kept slow | waited, s | steps flagged |")
print("|---|---|---|---|---|---|---|")
total = [0, 0, 0, 0.0, 0, 0]
for folder in map(Path, sys.argv[1:]):
    for run in ("first", "second"):
        report = json.loads(next((folder / run).glob("*/*.json")).read_text())
        steps = report.get("noise", {}).get("steps", [])
        gates = [s["gate"] for s in steps if s.get("gate")]
        row = [
            sum(g["samples"] for g in gates),
            sum(len(g["retaken"]) for g in gates),
            sum(g["slow_kept"] for g in gates),
            sum(g["waited_s"] for g in gates),
            sum(1 for s in steps if s.get("slow")),
            len(steps),
        ]
        total = [a + b for a, b in zip(total, row, strict=True)]
        print(
            f"| {folder.name} | {run} | {row[0]} | {row[1]} | {row[2]} | {row[3]:.0f} | {row[4]} of {row[5]} |"
        )
print(f"| all | | {total[0]} | {total[1]} | {total[2]} | {total[3]:.0f} | {total[4]} of {total[5]} |")
