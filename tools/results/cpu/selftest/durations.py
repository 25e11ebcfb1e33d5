"""Where each quick run of the selftest tries spent its time: per try and run, the report's
duration, the seconds of its probe, env, vector and training steps, what the speed gate waited, and
the commit (docs/lab/noise.md).

    python tools/results/cpu/selftest/durations.py results/cpu/selftest/try4-zen3 results/cpu/selftest/try6-zen3
"""

import json
import sys
from pathlib import Path

print("| try | run | commit | quick, s | probe | env | vector | train | gate waited, s | judged |")
print("|---|---|---|---|---|---|---|---|---|---|")
for folder in map(Path, sys.argv[1:]):
    judged = json.loads((folder / "selftest.json").read_text())
    for run in ("first", "second"):
        (path,) = (folder / run).glob("*/*.json")
        report = json.loads(path.read_text())
        seconds: dict[str, float] = {}
        for step in report["noise"]["steps"]:
            kind = step["step"].split()[0]
            seconds[kind] = seconds.get(kind, 0.0) + step["seconds"]
        waited = sum((s.get("gate") or {}).get("waited_s", 0) for s in report["noise"]["steps"])
        git = report["fingerprint"]["git"]
        commit = git["commit"][:7] + (" (dirty)" if git.get("dirty") else "")
        parts = " | ".join(f"{seconds.get(k, 0):.0f}" for k in ("probe", "env", "vector", "train"))
        print(
            f"| {folder.name} | {run} | {commit} | {report['duration_s']:.0f} | {parts} | {waited:.0f} "
            f"| {judged['judged']} of {judged['compared']} |"
        )
