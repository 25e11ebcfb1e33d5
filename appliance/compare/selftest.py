"""Self-agreement: two back-to-back reports of one machine must compare as "no difference".

With ``interleave`` the two runs take turns step by step (ABBA), so a drift of the machine's speed
over minutes falls on both alike: what is left between them is the measurements' own noise.

``puffer-bench selftest`` runs a suite twice in a row on this machine and compares the second report
with the first (:func:`appliance.compare.compare.compare`, judged as one machine's) at the suite's
threshold (its ``threshold`` key; 5 %, compare's default, where it has none). The machine agrees
with itself when no metric changed significantly beyond the threshold, in either direction (judged
as compare judges: all the metrics tested together, so that a suite of 30 does not disagree by
chance; those beyond the threshold by their own interval alone are listed as "possible"): a
machine that is "faster" than itself is as wrong as one that regressed. Metrics the noise guard
marked busy or slowed in either report are listed apart (a reason outside the code), not counted as
disagreement; descriptive figures (phase shares) never count. When more than half of the metrics are
set apart so, the verdict is "inconclusive", not "agree": agreement of the few left says little. What it writes: both reports (under
``OUT/first`` and ``OUT/second``), the comparison (``OUT/compare.md``) and the verdict
(``OUT/selftest.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.compare import compare as cmp
from appliance.report_io import write_bytes_atomic

DEFAULT_THRESHOLD = 0.05  # compare's default; a suite's ``threshold`` key overrides it
DISAGREE = ("regression", "improvement", cmp.SLOWER, cmp.FASTER)  # significant beyond the threshold
POSSIBLE = tuple(cmp.POSSIBLE.values())  # beyond it by their own interval, not among all the metrics
EXCUSED = (cmp.UNRELIABLE, cmp.SLOWED)  # the noise guard saw a reason outside the code


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """Whether a comparison of two reports of one machine agrees: the metrics that differ beyond the
    threshold (``disagree``), those the noise guard excused, and how many were compared."""
    disagree, excused, possible = [], [], []
    for row in result["rows"]:
        x = row["ratios"][0]
        entry = {"metric": row["metric"], "ratio": x["ratio"], "ci": x["ci"], "verdict": x["verdict"]}
        if x["verdict"] in DISAGREE:
            disagree.append(entry)
        elif x["verdict"] in EXCUSED:
            excused.append(entry)
        elif x["verdict"] in POSSIBLE:
            possible.append(entry)
    judged = len(result["rows"]) - len(excused)
    inconclusive = not disagree and judged < len(result["rows"]) / 2
    t = result["threshold"]
    return {
        "agree": not disagree and not inconclusive,
        "inconclusive": inconclusive,
        "judged": judged,
        "threshold": t,
        "compared": len(result["rows"]),
        "disagree": disagree,
        "possible": possible,
        "tested_together": (result.get("judged_together") or [None])[0],
        # how far the intervals reach (median low and high factors): "agree" sees no difference
        # smaller than that, which on a host whose speed moves can be far beyond the threshold
        "resolution": (result.get("resolution") or [None])[0],
        "excused": excused,
        # the metrics set apart that differ beyond the threshold by their intervals even so: whether
        # the runs would have agreed had the CPU held its speed (docs/lab/noise.md)
        "excused_beyond": [e for e in excused if e["ci"] and (e["ci"][0] > 1 + t or e["ci"][1] < 1 - t)],
    }


def lines(v: dict[str, Any]) -> list[str]:
    """The verdict in words: 'agree: ...' or 'disagree: ...', then one line per metric that differs."""
    t = f"{100 * v['threshold']:g}%"
    if v["agree"]:
        out = [
            f"agree: none of {v['compared']} metrics differs significantly beyond {t} between the two runs"
        ]
    elif v.get("inconclusive"):
        out = [
            f"inconclusive: only {v['judged']} of {v['compared']} metrics could be judged (the noise guard saw "
            "a busy or slowed CPU while the others were measured); none of those differs beyond "
            f"{t}; run it again when the machine is quieter"
        ]
    else:
        out = [f"disagree: {len(v['disagree'])} of {v['compared']} metrics differ significantly beyond {t}:"]
    for e in v["disagree"]:
        out.append(_metric_line(e))
    reach = v.get("resolution")  # absent from verdicts recorded before it was read
    if reach:
        out.append(
            f"resolution: the 95% intervals reach {100 * (reach[0] - 1):+.1f}% to {100 * (reach[1] - 1):+.1f}% "
            "around their ratios (medians): "
            + (
                "a difference within that does not show here, so this verdict cannot see one of "
                f"{t}; more repeats or a quieter machine narrow it"
                if reach[0] < 1 - v["threshold"] or reach[1] > 1 + v["threshold"]
                else f"narrower than {t}"
            )
        )
    possible = v.get("possible") or []  # absent from verdicts recorded before Holm's correction
    if possible:
        out.append(
            f"possible ({len(possible)}, not counted): beyond {t} by their own 95% interval, but not "
            f"when all {v['tested_together']} speed metrics are tested together, as chance at that many allows:"
        )
        out += [_metric_line(e) for e in possible]
    if v["excused"]:
        out.append(
            f"not judged ({len(v['excused'])}, the noise guard saw a busy or slowed CPU): "
            + ", ".join(e["metric"] for e in v["excused"])
        )
        beyond = v.get("excused_beyond")  # absent from verdicts recorded before it was read
        if beyond:
            ratios = [e["ratio"] for e in beyond]
            out.append(
                f"of those, {len(beyond)} differ beyond {t} by their 95% intervals even so (second/first "
                f"{min(ratios):.3f}-{max(ratios):.3f}): the CPU's speed moved between the two runs, and "
                "the machine does not agree with itself at this threshold while it does"
            )
        elif beyond is not None:
            out.append(f"none of those differs beyond {t} by its 95% interval either")
    return out


def _metric_line(e: dict[str, Any]) -> str:
    ci = f" ({e['ci'][0]:.3f}-{e['ci'][1]:.3f})" if e["ci"] else ""
    return f"  {e['metric']}: second/first {e['ratio']:.3f}{ci} {e['verdict']}"


def judge(
    first: dict[str, Any], second: dict[str, Any], threshold: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(comparison, verdict) of two reports of this machine."""
    result = cmp.compare([first, second], threshold, same_machine=True)
    return result, verdict(result)


def run(
    suite_name: str,
    out_dir: str | Path,
    profile: str | None = None,
    envs: list[str] | None = None,
    repeats: int | None = None,
    seconds: float | None = None,
    threshold: float | None = None,
    announce: Callable[[str], None] | None = None,
    interleave: bool = False,
) -> dict[str, Any]:
    """Run the suite twice, compare, write both reports, ``compare.md`` and ``selftest.json`` under
    ``out_dir``; return the record (``partial`` with the signal when a run was interrupted).
    ``interleave``: the two runs' steps in turn (:func:`~appliance.bench.suite.session.interleaved`)
    instead of one run after the other."""
    from appliance.bench.suite.definition import load
    from appliance.bench.suite.session import run_suite

    suite, _ = load(suite_name)
    threshold = float(threshold or suite.get("threshold") or DEFAULT_THRESHOLD)
    out = Path(out_dir)
    if interleave:
        got = _interleaved(suite_name, out, profile, envs, repeats, seconds, announce)
        if "partial" in got:
            return got
        reports, paths = got["reports"], got["paths"]
        return _verdict(suite["name"], reports, paths, out, threshold, interleave)
    reports, paths = [], []
    for label in ("first", "second"):
        if announce:
            announce(f"selftest: {label} run of suite '{suite['name']}'")
        data, written = run_suite(
            suite_name, profile, envs, repeats, seconds, out / label, plots=False, announce=announce
        )
        if data.get("partial"):
            return {"partial": data["partial"], "reports": [str(p) for p in paths + written[:1]]}
        reports.append({**data, "_path": str(written[0])})
        paths.append(written[0])
    return _verdict(suite["name"], reports, paths, out, threshold, interleave)


def _verdict(
    suite: str,
    reports: list[dict[str, Any]],
    paths: list[Path],
    out: Path,
    threshold: float,
    interleave: bool,
) -> dict[str, Any]:
    result, v = judge(reports[0], reports[1], threshold)
    write_bytes_atomic(out / "compare.md", cmp.to_markdown(result).encode())  # never through a link
    record = {"suite": suite, "order": "interleaved" if interleave else "back to back"}
    record |= {"reports": [str(p) for p in paths], **v}
    write_bytes_atomic(out / "selftest.json", (json.dumps(record, indent=1) + "\n").encode())
    record["written"] = [*map(str, paths), str(out / "compare.md"), str(out / "selftest.json")]
    return record


def _interleaved(
    suite_name: str,
    out: Path,
    profile: str | None,
    envs: list[str] | None,
    repeats: int | None,
    seconds: float | None,
    announce: Callable[[str], None] | None,
) -> dict[str, Any]:
    """Both runs with their steps in turn (ABBA), each into its own report; ``{"reports", "paths"}``,
    or ``{"partial", "reports"}`` when interrupted (the figures so far are written)."""
    from appliance.bench.suite.definition import load
    from appliance.bench.suite.session import interleaved, measure, new_report, write_report
    from appliance.bench.suite.steps import SuiteRunner
    from appliance.errors import ConfigError
    from appliance.report_io import unwritable

    suite, path = load(suite_name)
    runs = []
    for label in ("first", "second"):
        name, report = new_report(suite, str(path), profile, repeats)
        problem = unwritable(out / label / name)
        if problem:
            raise ConfigError(f"--out {out / label}: {problem}; nothing was measured")
        report.set(
            "interleaved", {"with": "second" if label == "first" else "first", "order": "ABBA by step"}
        )
        runs.append((SuiteRunner(suite, name, report, report.data["repeats"], envs, seconds), report, label))
    steps = len(runs[0][0].steps)
    if announce:
        announce(
            f"selftest: suite '{suite['name']}' twice, its {steps} measurements in turn (first, second; "
            "then second, first; ...)"
        )
    try:
        measure(runs, interleaved(steps), suite["name"])
    except BaseException as e:
        written = [
            write_report(report.data, out / label, runner.profile, plots=False)[0]
            for runner, report, label in runs
            if report.data["metrics"]
        ]
        if isinstance(e, KeyboardInterrupt):
            partial = next(r.data["partial"] for _, r, _ in runs if "partial" in r.data)
            return {"partial": partial, "reports": [str(p) for p in written]}
        raise
    paths = [
        write_report(report.data, out / label, runner.profile, plots=False)[0]
        for runner, report, label in runs
    ]
    return {
        "reports": [{**report.data, "_path": str(p)} for (_, report, _), p in zip(runs, paths, strict=True)],
        "paths": paths,
    }
