"""What ``puffer-bench run`` and ``puffer-bench profile`` do, start to end.

Pick the hardware profile (given, or detected from the GPU), start a report with the fingerprint,
plan the suite (:class:`~appliance.bench.suite.steps.SuiteRunner`), measure with a progress bar, analyse,
and write JSON + Markdown + plots. The CLI only parses options and prints what comes back.

Nothing measured is lost: an unwritable or nearly full ``--out`` is refused before the first
measurement; Ctrl-C, SIGTERM, SIGHUP or a failing measurement still writes the figures taken so far,
as a report marked ``partial``; the report name is claimed exclusively; a disk that fills up while
the report is written keeps what fits (the JSON first, else a copy in the temp folder) and says so. Each suite run registers itself (a locked file
in ``$TMPDIR/puffer-bench-suites``) so a suite that shares the machine with another one says so in
its warnings.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from appliance.bench import report as rpt
from appliance.bench.suite.definition import load, validate
from appliance.bench.suite.steps import Step, SuiteRunner
from appliance.config import detect_profile, gpu_matches, resolve
from appliance.errors import ApplianceError, ConfigError
from appliance.redact import command_line
from appliance.report_io import disk_full, open_input, unwritable, write_bytes_exclusive
from appliance.signals import Interrupted, stop_signals
from appliance.sysinfo import fingerprint

SUITES_DIR = Path(tempfile.gettempdir()) / "puffer-bench-suites"


def bench_profile(profile: str | None, fp: dict[str, Any]) -> tuple[str, dict[str, Any], list[str]]:
    """Profile name (given, or detected from the GPU), its report entry, and warnings about a mismatch."""
    from appliance.config import hardware

    chosen = hardware.choose(fp.get("gpus") or []) if profile is None else None
    name = profile or detect_profile(fp.get("gpus") or [])
    why = (
        f"profile '{name}': {chosen.why}"
        if chosen is not None and chosen.name == name
        else hardware.why(name)
    )
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
        "why": why,
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
        command=command_line(),
    )
    for w in warnings:
        report.warn(w)
    return name, report


def interleaved(steps: int) -> list[tuple[int, int]]:
    """Two runs' steps in turn, ABBA: step i of the first then of the second where i is even, the
    other way round where it is odd, so a drift of the machine's speed falls on both alike."""
    return [(r if i % 2 == 0 else 1 - r, i) for i in range(steps) for r in (0, 1)]


def run_schedule(
    runs: list[tuple[SuiteRunner, str]],
    order: list[tuple[int, int]],
    title: str,
    before_step: Callable[[Step, int], None] | None = None,
) -> None:
    """The steps of one or more runners (each with a label, shown before its steps' lines where
    there are several) in ``order`` (run index, step index), under one progress bar on stderr
    (plain lines when not a terminal); each runner begins before the first step and ends after the
    last."""
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
        task = bar.add_task(title, total=len(order))
        count = [0]

        def callbacks(runner: SuiteRunner, label: str) -> tuple[Callable[..., None], Callable[..., None]]:
            prefix = f"{label}: " if label else ""

            def progress(step: Step, i: int) -> None:
                if before_step:
                    before_step(step, i)
                bar.update(task, description=prefix + step.label, completed=count[0])
                if not console.is_terminal:
                    console.print(f"[{count[0] + 1}/{len(order)}] {prefix}{step.label}")

                def note(part: str) -> None:
                    """A part of the step starts (a probe section): on the bar, or a line of its own."""
                    bar.update(task, description=f"{prefix}{step.label}: {part}")
                    if not console.is_terminal:
                        console.print(f"    {part}", highlight=False, markup=False)

                runner.note = note

            def done(step: Step, names: list[str]) -> None:
                """The step's headline figures (not its descriptive shares) as they come."""
                from appliance.bench.report import fmt

                count[0] += 1
                metrics = runner.report.data["metrics"]
                for name in names:
                    m = metrics[name]
                    if m.get("better") == "info" or m.get("median") is None:
                        continue
                    cv = (
                        f", CV {100 * m['cv']:.1f}%"
                        if m.get("cv") is not None and len(m["samples"]) > 1
                        else ""
                    )
                    console.print(
                        f"    {name}: {fmt(m['median'], m['unit'])} {m['unit']}{cv}", highlight=False
                    )

            return progress, done

        hooks = [callbacks(runner, label) for runner, label in runs]
        for runner, _ in runs:
            runner.begin()
        for r, i in order:
            runs[r][0].run_step(i, *hooks[r])
        for runner, _ in runs:
            runner.end()
        bar.update(task, completed=len(runner.steps), description="done")


@contextlib.contextmanager
def registered_suite() -> Iterator[Callable[[], list[str]]]:
    """Register this suite run for others to see; yields a function naming the other runs alive now.

    A run is a file ``<pid>.suite`` locked (fcntl) for as long as the run lasts, so a run that died
    leaves a file nobody holds, which is ignored and removed.
    """
    import fcntl

    try:
        SUITES_DIR.mkdir(mode=0o777, exist_ok=True)
        if SUITES_DIR.stat().st_uid == os.getuid():
            SUITES_DIR.chmod(0o1777)  # every user's suites register here, like /tmp
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=SUITES_DIR)
    except OSError:  # no shared temp folder: detection is off, the suite still runs
        yield lambda: []
        return
    me = SUITES_DIR / f"{os.getpid()}.suite"
    with os.fdopen(fd, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        os.fchmod(fd, 0o644)
        f.write(command_line() + "\n")
        f.flush()
        os.replace(tmp, me)  # visible only once locked

        def others() -> list[str]:
            alive = []
            for path in sorted(SUITES_DIR.glob("*.suite")):
                if path == me:
                    continue
                try:
                    # a shared folder: another user's FIFO there is refused (OSError), never waited on
                    with open_input(path, "suite registration", OSError, follow=False) as g:
                        try:
                            fcntl.flock(g, fcntl.LOCK_SH | fcntl.LOCK_NB)
                        except OSError:  # held: that run is alive
                            held = g.read(4096).decode(errors="replace").strip()
                            alive.append(f"process {path.stem} ({held})")
                            continue
                    path.unlink()  # a run that died
                except OSError:
                    continue
            return alive

        try:
            yield others
        finally:
            me.unlink(missing_ok=True)


def _measure(runner: SuiteRunner, report: rpt.Report, title: str) -> None:
    """Every step; on an interrupt or a failure the report is marked partial and the error re-raised."""
    measure([(runner, report, "")], [(0, i) for i in range(len(runner.steps))], title)


def measure(
    runs: list[tuple[SuiteRunner, rpt.Report, str]], order: list[tuple[int, int]], title: str
) -> None:
    """The runners' steps in ``order`` (:func:`run_schedule`); on an interrupt or a failure each
    report is marked partial at the steps it had done, and the error re-raised."""
    start = time.time()
    position = [0]  # steps of ``order`` started
    with registered_suite() as others:
        concurrent: set[str] = set()

        def before_step(step: Step, i: int) -> None:
            position[0] += 1
            concurrent.update(others())

        try:
            with stop_signals():
                run_schedule([(r, label) for r, _, label in runs], order, title, before_step)
        except BaseException as e:
            started = order[: position[0]]
            failed = started[-1][0] if started else 0  # the run whose step was going on
            for k, (runner, report, _) in enumerate(runs):
                completed = sum(1 for r, _ in started if r == k) - (k == failed and bool(started))
                elsewhere = runs[failed][2] if k != failed and not isinstance(e, KeyboardInterrupt) else ""
                if completed < len(runner.steps):
                    _mark_partial(runner, report, completed, e, elsewhere or "")
            raise
        finally:
            concurrent.update(others())
            for runner, report, _ in runs:
                if concurrent:
                    report.warn(
                        f"another puffer-bench suite ran on this machine at the same time ({'; '.join(sorted(concurrent))}): "
                        "the runs shared the cores, so these figures may be far too low; measure one suite at a time"
                    )
                report.set("config", runner.resolved_configs())
                report.set("duration_s", time.time() - start)


def _mark_partial(
    runner: SuiteRunner, report: rpt.Report, done: int, error: BaseException, elsewhere: str = ""
) -> None:
    """Mark ``report`` partial after ``done`` steps; ``elsewhere``: the run interleaved with it, where
    a measurement of that run failed (this one then stopped without a failure of its own)."""
    signal = None
    if isinstance(error, KeyboardInterrupt):
        signal = error.name if isinstance(error, Interrupted) else "SIGINT"
        why = f"interrupted by {signal}"
    elif elsewhere:
        why = f"stopped: a measurement of the {elsewhere} run, interleaved with this one, failed: {type(error).__name__}: {error}"
    else:
        why = f"measurement '{runner.steps[done].label}' failed: {type(error).__name__}: {error}"
    missing = [s.label for s in runner.steps[done:]]
    report.set(
        "partial",
        {
            "reason": why,
            "signal": signal,
            "completed": done,
            "planned": len(runner.steps),
            "missing": missing,
        },
    )
    report.warn(
        f"partial report: {why} after {done} of {len(runner.steps)} measurements; missing: {', '.join(missing)}"
    )


def run_suite(
    suite_name: str,
    profile: str | None = None,
    envs: list[str] | None = None,
    repeats: int | None = None,
    seconds: float | None = None,
    out_dir: str | Path = "results",
    plots: bool = True,
    announce: Any = None,
    wait_quiet: float | None = None,
) -> tuple[dict[str, Any], list[Path]]:
    """Run a suite and write ``out_dir/<profile>/<date>-<host>.json`` with Markdown, HTML and plots.

    With ``wait_quiet``, first wait up to that many seconds for other processes to leave the CPU
    quiet (the noise guard); if they do not, measure anyway and say so in the report.

    ``announce(line)`` receives the warnings and the plan before measuring starts. Interrupted
    (Ctrl-C, SIGTERM, SIGHUP), the figures measured so far are written as a report marked
    ``partial`` and returned; a failing measurement writes the same, then its error propagates.
    """
    suite, path = load(suite_name)
    quiet = _wait_quiet(wait_quiet, announce) if wait_quiet is not None else None
    name, report = new_report(suite, str(path), profile, repeats)
    if quiet is not None:
        report.set("quiet_wait", quiet)
        if not quiet["quiet"]:
            report.warn(
                f"the machine was not quiet after waiting {wait_quiet:.0f} s (others used "
                f"{quiet['others_cores']:.2f} cores, steal {quiet['steal_cores']:.2f}); measured anyway"
            )
    problem = unwritable(Path(out_dir) / name)
    if problem:
        raise ConfigError(f"--out {out_dir}: {problem}; nothing was measured")
    runner = SuiteRunner(suite, name, report, report.data["repeats"], envs, seconds)
    if announce:
        announce(report.data["profile"].get("why") or f"profile '{name}'")
        for w in report.data["warnings"]:
            announce(f"warning: {w}")
        own = any("repeats" in item for item in suite.get("time_to_score") or [])
        announce(
            f"suite '{suite['name']}' on profile '{name}' ({rpt.gpu_label(report.data['fingerprint'])}): "
            f"{len(runner.steps)} measurements, {report.data['repeats']} repeats each"
            + (" (time-to-score items say their own)" if own else "")
        )
    try:
        _measure(runner, report, suite["name"])
    except BaseException:
        if not report.data["metrics"]:
            raise
        paths = write_report(report.data, out_dir, name, plots)
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            return report.data, paths  # the caller prints them and exits as the signal asks
        if announce:
            announce(f"wrote a partial report: {paths[0]}")
        raise
    return report.data, write_report(report.data, out_dir, name, plots)


def write_report(data: dict[str, Any], out_dir: str | Path, profile: str, plots: bool) -> list[Path]:
    """:func:`report.write_new`; on a full disk, keep what fits and raise a one-line error (exit 1).

    The JSON is the report (Markdown, HTML and plots render from it later), so it is what must
    survive: if it went in before the disk filled, that is said; if not, it goes to the temp folder
    (often another filesystem); if that fails too, the figures printed while measuring are all there is.
    """
    try:
        return rpt.write_new(data, out_dir, profile, plots=plots)
    except OSError as e:
        if not disk_full(e):
            raise
        why = e.strerror or str(e)
    folder = Path(out_dir) / profile
    text = rpt.json_bytes(rpt.validate(rpt.storable(data)))  # as write_new writes it
    saved = next((p for p in sorted(folder.glob("*.json")) if _same_bytes(p, text)), None)
    if saved is not None:
        raise ApplianceError(
            f"disk full writing the report into {folder} ({why}): kept {saved}; its Markdown, HTML and "
            f"plots are missing: `puffer-bench report --render {saved}` once there is space"
        )
    spare = Path(tempfile.gettempdir()) / f"puffer-bench-report-{os.getpid()}-{int(time.time())}.json"
    try:
        write_bytes_exclusive(spare, text)
    except OSError:
        raise ApplianceError(
            f"disk full writing the report into {folder} ({why}), and no room in {spare.parent} either: "
            "nothing saved; the figures printed above are all that is left"
        ) from None
    raise ApplianceError(
        f"disk full writing the report into {folder} ({why}): saved it as {spare} instead; once there "
        f"is space, move it into {folder} and render it with `puffer-bench report --render`"
    )


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _wait_quiet(seconds: float, announce: Any = None) -> dict[str, Any]:
    """Wait up to ``seconds`` for a quiet machine (:func:`appliance.measure.noise.wait_quiet`)."""
    from appliance.measure import noise

    if seconds < 0:
        raise ConfigError(f"--wait-quiet must be 0 or more seconds, got {seconds:g}")
    say = announce or (lambda _: None)

    def waiting(r: dict[str, Any]) -> None:
        say(
            f"waiting for a quiet machine ({r['waited_s']:.0f}/{seconds:.0f} s): others use "
            f"{r['others_cores']:.2f} cores, steal {r['steal_cores']:.2f}"
        )

    result = noise.wait_quiet(seconds, on_wait=waiting)
    say(f"machine {'quiet' if result['quiet'] else 'still busy'} after {result['waited_s']:.0f} s")
    return result


def probe(profile: str | None, env: str, runs: int, seconds: float) -> dict[str, Any]:
    """The hardware probe alone (``puffer-bench profile``) as a validated report."""
    probe = {"name": "probe", "seconds": seconds, "probe": {"envs": [env], "runs": runs}}
    probe["gate"] = {"patience_s": 5, "budget_s": 30}  # a quick look: the speed gate adds 30 s at most
    suite = validate(probe, "--env")
    name, report = new_report(suite, "(puffer-bench profile)", profile, runs)
    _measure(SuiteRunner(suite, name, report, repeats=runs), report, "probe")
    return rpt.validate(rpt.storable(report.data))


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
