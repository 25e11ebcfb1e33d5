"""Each kept selftest judged again by the comparison as it stands: the verdict recorded then beside
the one now, and which metrics differ ("disagree", counted) or differ by their own interval alone
("possible", not counted), and how far the judged metrics' intervals reach around their ratios.
With --reflag, each report's slowed steps and figures are first judged again by the noise guard's
rule as it stands (noise.flag_slow_steps, from the checks the report kept).

    .venv/bin/python tools/results/cpu/selftest/rejudge.py [--reflag] results/cpu/selftest/try*
"""

import json
import sys
from pathlib import Path

from appliance.bench import report as rpt
from appliance.compare import selftest
from appliance.measure import noise

REFLAG = "--reflag" in sys.argv


def reflagged(data: dict) -> dict:
    """``data`` with its slowed steps and figures judged again by the rule as it stands."""
    for step in (data.get("noise") or {}).get("steps", []):
        step.pop("slow", None)
    for m in data["metrics"].values():
        (m.get("noise") or {}).pop("slow", None)
    noise.flag_slow_steps(data)
    return data


def word(v: dict) -> str:
    if v.get("agree"):
        return "agree"
    return "inconclusive" if v.get("inconclusive") else f"disagree: {len(v['disagree'])}"


def listed(entries: list) -> str:
    return ", ".join(f"{e['metric']} {e['ratio']:.3f}" for e in entries) or "-"


print("| try | order | then | now | counted now | possible now (not counted) | judged | intervals reach |")
print("|---|---|---|---|---|---|---|---|")
for folder in (Path(a) for a in sys.argv[1:] if a != "--reflag"):
    then = json.loads((folder / "selftest.json").read_text())
    first, second = (rpt.load(next((folder / run).glob("*/*.json"))) for run in ("first", "second"))
    if REFLAG:
        first, second = reflagged(first), reflagged(second)
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
