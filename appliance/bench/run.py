"""What ``puffer-bench run`` and ``puffer-bench profile`` do, start to end.

Pick the hardware profile (given, or detected from the GPU), start a report with the fingerprint,
plan the suite (:class:`~appliance.bench.runner.SuiteRunner`), measure with a progress bar, analyse,
and write JSON + Markdown + plots. The CLI only parses options and prints what comes back.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from appliance.bench import report as rpt
from appliance.bench.runner import Step, SuiteRunner
from appliance.bench.suite import load, validate
from appliance.config import detect_profile, gpu_matches, resolve
from appliance.sysinfo import fingerprint


def bench_profile(profile: str | None, fp: dict[str, Any]) -> tuple[str, dict[str, Any], list[str]]:
    """Profile name (given, or detected from the GPU), its report entry, and warnings about a mismatch."""
    name = profile or detect_profile(fp.get("gpus") or [])
    cfg = resolve(profile=name)  # unknown names list the valid ones
    expected = str(cfg.bench.expected_gpu or "")
    detected = rpt.gpu_name(fp)
    warnings = []
    if expected and not any(gpu_matches(expected, str(g.get("name"))) for g in fp.get("gpus") or []):
        warnings.append(
            f"profile '{name}' is written for a {expected} GPU but this machine has {detected}: "
            "its sizes may not suit this machine, and its figures compare with other machines of that profile only"
        )
    entry = {
        "name": name,
        "expected_gpu": expected,
        "detected_gpu": detected,
        "auto_detected": profile is None,
    }
    return name, entry, warnings


def new_report(
    suite: dict[str, Any], path: str, profile: str | None, repeats: int | None
) -> tuple[str, rpt.Report]:
    """A report for ``suite`` on this machine: fingerprint, profile, seed, repeats, command line."""
    fp = fingerprint()
    name, entry, warnings = bench_profile(profile, fp)
    base = resolve(profile=name)
    report = rpt.Report(
        {"name": suite["name"], "path": path, "definition": suite},
        entry,
        fp,
        {},
        seed=int(base.train.seed),
        repeats=int(repeats or base.bench.repeats),
        command="puffer-bench " + " ".join(sys.argv[1:]),
    )
    for w in warnings:
        report.warn(w)
    return name, report


def run_with_progress(runner: SuiteRunner, title: str) -> None:
    """Every step of ``runner`` under a progress bar on stderr (plain lines when not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description:<44}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as bar:
        task = bar.add_task(title, total=len(runner.steps))

        def progress(step: Step, i: int) -> None:
            bar.update(task, description=step.label, completed=i)
            if not console.is_terminal:
                console.print(f"[{i + 1}/{len(runner.steps)}] {step.label}")

        runner.run_all(progress)
        bar.update(task, completed=len(runner.steps), description="done")


def _measure(runner: SuiteRunner, report: rpt.Report, title: str) -> None:
    start = time.time()
    run_with_progress(runner, title)
    report.data["config"] = runner.resolved_configs()
    report.data["duration_s"] = time.time() - start


def run_suite(
    suite_name: str,
    profile: str | None = None,
    envs: list[str] | None = None,
    repeats: int | None = None,
    seconds: float | None = None,
    out_dir: str | Path = "results",
    plots: bool = True,
    announce: Any = None,
) -> tuple[dict[str, Any], list[Path]]:
    """Run a suite and write ``out_dir/<profile>/<date>-<host>.json`` with Markdown and plots.

    ``announce(line)`` receives the warnings and the plan before measuring starts.
    """
    suite, path = load(suite_name)
    name, report = new_report(suite, str(path), profile, repeats)
    runner = SuiteRunner(suite, name, report, report.data["repeats"], envs, seconds)
    if announce:
        for w in report.data["warnings"]:
            announce(f"warning: {w}")
        announce(
            f"suite '{suite['name']}' on profile '{name}' ({report.data['profile']['detected_gpu']} GPU): "
            f"{len(runner.steps)} measurements x {report.data['repeats']} repeats"
        )
    _measure(runner, report, suite["name"])
    stem = rpt.output_stem(out_dir, name, report.data["fingerprint"], report.data["created_utc"])
    return report.data, rpt.write(report.data, stem, plots=plots)


def probe(profile: str | None, env: str, runs: int, seconds: float) -> dict[str, Any]:
    """The hardware probe alone (``puffer-bench profile``) as a validated report."""
    suite = validate({"name": "probe", "seconds": seconds, "probe": {"envs": [env], "runs": runs}}, "--env")
    name, report = new_report(suite, "(puffer-bench profile)", profile, runs)
    _measure(SuiteRunner(suite, name, report, repeats=runs), report, "probe")
    return rpt.validate(report.data)


def analysis_lines(report: dict[str, Any]) -> list[tuple[str, bool]]:
    """The analysis as printable lines: (text, goes to stderr)."""
    analysis = report.get("analysis") or {}
    lines = [(f"roofline: {r['summary']}", False) for r in analysis.get("roofline") or []]
    for t in (analysis.get("training") or {}).values():
        lines.append((f"training: {t['summary']}", False))
        lines += [(f"  - {s}", False) for s in t["suggestions"]]
    lines += [(f"warning: {w}", True) for w in report.get("warnings") or []]
    lines += [(f"skipped {s['what']}: {s['why']}", True) for s in report.get("skipped") or []]
    return lines
