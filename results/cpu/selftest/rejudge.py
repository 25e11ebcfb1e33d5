"""Each kept selftest judged again by the comparison as it stands: the verdict recorded then beside
the one now, and which metrics differ ("disagree", counted) or differ by their own interval alone
("possible", not counted), and how far the judged metrics' intervals reach around their ratios.

    .venv/bin/python results/cpu/selftest/rejudge.py results/cpu/selftest/try*
"""

import json
import sys
from pathlib import Path

from appliance.bench import report as rpt
from appliance.bench import selftest


def word(v: dict) -> str:
    if v.get("agree"):
        return "agree"
    return "inconclusive" if v.get("inconclusive") else f"disagree: {len(v['disagree'])}"


def listed(entries: list) -> str:
    return ", ".join(f"{e['metric']} {e['ratio']:.3f}" for e in entries) or "-"


print("| try | order | then | now | counted now | possible now (not counted) | judged | intervals reach |")
print("|---|---|---|---|---|---|---|---|")
for folder in map(Path, sys.argv[1:]):
    then = json.loads((folder / "selftest.json").read_text())
    first, second = (rpt.load(next((folder / run).glob("*/*.json"))) for run in ("first", "second"))
    _, now = selftest.judge(first, second, then["threshold"])
    print(
        f"| {folder.name} | {then.get('order', 'back to back')} | {word(then)} | {word(now)} | "
        f"{listed(now['disagree'])} | {listed(now['possible'])} | {now['judged']} of {now['compared']} | "
        + (
            f"{100 * (reach[0] - 1):+.1f}% to {100 * (reach[1] - 1):+.1f}% |"
            if (reach := now["resolution"])
            else "- |"
        )
    )
