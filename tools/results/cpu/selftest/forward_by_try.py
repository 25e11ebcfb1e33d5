"""The policy forward probe in each kept selftest: per try, the commit, how the probe took its samples
(back to back, or one by one through the speed gate since 08e4b3d), both runs' medians (K agent-steps/s)
and CVs, second/first, and the comparison's verdict on it as it judges now (docs/lab/noise.md).

    .venv/bin/python tools/results/cpu/selftest/forward_by_try.py $(ls -d results/cpu/selftest/try* | sort -V)
"""

import statistics
import subprocess
import sys
from pathlib import Path

from appliance.bench import report as rpt
from appliance.compare import selftest

FORWARD = "probe/cpu/policy_forward/breakout"
GATED_SINCE = "08e4b3d"


def gated(commit: str) -> bool:
    """Whether ``commit`` has the gated forward probe (it descends from GATED_SINCE)."""
    ask = ["git", "merge-base", "--is-ancestor", GATED_SINCE, commit]
    return subprocess.run(ask, capture_output=True).returncode == 0


print("| try | commit | forward samples | first, K | CV | second, K | CV | second/first | verdict now |")
print("|---|---|---|---|---|---|---|---|---|")
for folder in map(Path, sys.argv[1:]):
    first, second = (rpt.load(next((folder / run).glob("*/*.json"))) for run in ("first", "second"))
    commit = first["fingerprint"]["git"]["commit"][:7]
    result, _ = selftest.judge(first, second, 0.05)
    verdict = next(r["ratios"][0]["verdict"] for r in result["rows"] if r["metric"] == FORWARD)
    cells = []
    for report in (first, second):
        s = report["metrics"][FORWARD]["samples"]
        cells += [f"{statistics.median(s) / 1e3:.0f}", f"{statistics.stdev(s) / statistics.mean(s):.1%}"]
    ratio = statistics.median(second["metrics"][FORWARD]["samples"]) / statistics.median(
        first["metrics"][FORWARD]["samples"]
    )
    how = "gated" if gated(commit) else "back to back"
    print(f"| {folder.name} | {commit} | {how} | {' | '.join(cells)} | {ratio:.3f} | {verdict} |")
