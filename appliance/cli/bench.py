"""Benchmark commands: profile, run, selftest, compare, ab, report, gpu-check."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from appliance.cli.common import (
    CONTEXT,
    PROFILE,
    PROFILE_HELP,
    NameList,
    Number,
    check_out,
    cli,
    count,
    duration,
    print_table,
    write_out,
)

# ----------------------------------------------------------------------------- profile, run, compare, report


def _print_analysis(report: dict[str, Any]) -> None:
    from appliance.bench.suite.session import analysis_lines

    for line, err in analysis_lines(report):
        click.echo(line, err=err)


@cli.command("profile", context_settings=CONTEXT)
@click.option("--gpu", "profile", metavar="PROFILE", type=PROFILE, help=PROFILE_HELP)
@click.option(
    "--env", default="breakout", show_default=True, help="Ocean env for env speed and the roofline."
)
@click.option(
    "--runs",
    default=5,
    show_default=True,
    type=count(),  # at most COUNT (1,000): a report holds at most 1,000 samples a metric
    help="Timed runs per figure.",
)
@click.option(
    "--seconds", default=1.0, show_default=True, type=duration(), help="Timed seconds of each env-speed run."
)
@click.option("--json", "as_json", is_flag=True, help="Print the probe report as JSON instead of a table.")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the probe report (JSON) here.")
def profile_cmd(
    profile: str | None, env: str, runs: int, seconds: float, as_json: bool, out: str | None
) -> None:
    """Probe this machine: copy bandwidth, matmul, launch latency, CPU memory and env speed.

    Each figure is the median of timed runs after warm-up, beside its ceiling where one is known,
    followed by a roofline in RL terms (which of PCIe, env threads and policy forward limits
    agent-steps/s). Without a GPU only the CPU side is probed.
    """
    from appliance.bench import probe
    from appliance.bench import report as rpt
    from appliance.bench.suite.session import probe as run_probe

    check_out(out, "--out")
    data = run_probe(profile, env, runs, seconds)
    if out:
        write_out(out, (json.dumps(data, indent=2) + "\n").encode(), "--out")
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    columns = ("figure", "median", "min - max", "unit", "ceiling", "of ceiling")
    print_table(
        f"puffer-bench profile: {rpt.machine_line(data['fingerprint'])}", columns, probe.table_rows(data)
    )
    _print_analysis(data)
    if out:
        click.echo(f"wrote {out}")


def _suite_options(command: Any) -> Any:
    """The options `run` and `selftest` share: which suite, profile, envs, repeats and seconds."""
    options = [
        click.option(
            "--suite", "suite_name", default="quick", show_default=True, help="Suite name or YAML path."
        ),
        click.option("--gpu", "profile", metavar="PROFILE", type=PROFILE, help=PROFILE_HELP),
        click.option(
            "--envs", "env_list", type=NameList(), help="Only measure these envs (comma-separated)."
        ),
        click.option("--repeats", type=count(), help="Repeats per measurement (default: bench.repeats, 3)."),
        click.option(
            "--seconds", type=duration(), help="Timed seconds per measurement (default: the suite's)."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.command("run", context_settings=CONTEXT)
@_suite_options
@click.option("--out", "out_dir", default="results", show_default=True, help="Reports go to OUT/<profile>/.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--container", metavar="IMAGE", help="Run the suite inside this Docker image (see docker.sh).")
@click.option(
    "--wait-quiet",
    type=duration(low_open=False),
    metavar="SECONDS",
    help="First wait up to SECONDS for a quiet CPU (noise guard).",
)
@click.option(
    "--publish",
    "publish_dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Also add the report to DIR, a folder many machines share (atomic, under a name of its own).",
)
def run_cmd(
    suite_name: str,
    profile: str | None,
    env_list: list[str] | None,
    repeats: int | None,
    seconds: float | None,
    out_dir: str,
    no_plots: bool,
    container: str | None,
    wait_quiet: float | None,
    publish_dir: str | None,
) -> None:
    """Run a benchmark suite and write results/<profile>/<date>-<host>.json, .md, .html and PNG plots.

    \b
    puffer-bench run                       # quick suite, profile detected (cpu without a GPU)
    puffer-bench run --suite full --gpu h100
    puffer-bench run --envs breakout --repeats 5
    puffer-bench run --publish /shared/reports   # also add the report to a shared folder (see publish)
    """
    from appliance.bench.suite.session import run_suite

    if publish_dir:  # before the suite, not after it
        from appliance.safe_files import check_output

        check_output(publish_dir, "--publish", folder=True)
    if container:
        if publish_dir:
            raise click.UsageError(
                "--publish runs outside the container: run, then puffer-bench share REPORT.json --to DIR"
            )
        from appliance.container import run_in_container

        sys.exit(run_in_container(container, sys.argv[1:], results=Path(out_dir)))
    data, paths = run_suite(
        suite_name,
        profile,
        env_list,
        repeats,
        seconds,
        out_dir,
        plots=not no_plots,
        announce=lambda s: click.echo(s, err=True),
        wait_quiet=wait_quiet,
    )
    _print_analysis(data)
    for p in paths:
        click.echo(f"wrote {p}")
    if publish_dir and not data.get("partial"):
        from appliance.publish import add_report

        for p in paths:
            if Path(p).suffix == ".json":
                shared, new = add_report(p, publish_dir)
                click.echo(f"published {shared}" if new else f"already published: {shared}")
    if data.get("partial"):  # interrupted: the figures so far are written; exit as the signal asks
        import signal

        sys.exit(128 + signal.Signals[data["partial"]["signal"] or "SIGINT"].value)


@cli.command("selftest", context_settings=CONTEXT)
@_suite_options
@click.option(
    "--threshold",
    type=Number(0, 1, low_open=True, high_open=True),
    help="Relative change that counts as a difference (default: the suite's threshold, else 0.05).",
)
@click.option(
    "--out", "out_dir", default="results/selftest", show_default=True, help="Reports and comparison go here."
)
@click.option(
    "--interleave",
    is_flag=True,
    help="Take the two runs' measurements in turn (ABBA), so a drift of the machine's speed falls on both.",
)
def selftest_cmd(
    suite_name: str,
    profile: str | None,
    env_list: list[str] | None,
    repeats: int | None,
    seconds: float | None,
    threshold: float | None,
    out_dir: str,
    interleave: bool,
) -> None:
    """Run a suite twice back to back and compare: does this machine agree with itself? Exit 1 if
    not, or if it is inconclusive (most metrics measured while the CPU was busy or slowed).

    Writes both reports (OUT/first, OUT/second), the comparison (OUT/compare.md) and the verdict
    (OUT/selftest.json). Run it on an idle machine: two reports of one machine must show no
    significant difference beyond the threshold, in either direction.

    With --interleave the runs take turns, measurement by measurement (first, second; then second,
    first; ...): where back-to-back runs disagree and interleaved ones agree, the machine's speed
    drifted between the runs; where both disagree, the measurements themselves do.

    \b
    puffer-bench selftest                  # the quick suite, twice
    puffer-bench selftest --suite quick --envs breakout --out results/cpu/selftest
    puffer-bench selftest --interleave     # the same, its measurements in turn
    """
    import signal

    from appliance.compare import selftest
    from appliance.safe_files import check_output

    check_output(out_dir, "--out", folder=True)
    record = selftest.run(
        suite_name,
        out_dir,
        profile,
        env_list,
        repeats,
        seconds,
        threshold,
        announce=lambda s: click.echo(s, err=True),
        interleave=interleave,
    )
    if record.get("partial"):  # interrupted: what was written stays; exit as the signal asks
        sig = record["partial"].get("signal") or "SIGINT"
        click.echo(
            f"selftest interrupted ({sig}); written: {', '.join(record['reports']) or 'nothing'}", err=True
        )
        sys.exit(128 + signal.Signals[sig].value)
    for line in selftest.lines(record):
        click.echo(line)
    for p in record["written"]:
        click.echo(f"wrote {p}")
    if not record["agree"]:
        sys.exit(1)


@cli.command("compare", context_settings=CONTEXT)
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--threshold",
    default=0.05,
    show_default=True,
    type=Number(0, 1, low_open=True, high_open=True),
    help="Relative change that counts as a regression (0.05 = 5%).",
)
@click.option("--markdown", is_flag=True, help="Print Markdown instead of a table.")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the Markdown comparison here.")
@click.option(
    "--normalize",
    is_flag=True,
    help="Scale CPU-bound metrics by the reports' calibration ratio (across CPUs).",
)
@click.option(
    "--same-machine",
    is_flag=True,
    help="Judge the reports as one machine's even where host id, CPU or GPU differ (e.g. after a reboot).",
)
def compare_cmd(
    reports: tuple[str, ...],
    threshold: float,
    markdown: bool,
    out: str | None,
    normalize: bool,
    same_machine: bool,
) -> None:
    """Compare reports metric by metric (the first is the base); exit 1 on a significant regression.

    Shows each report's median, the ratio to the base with a 95% interval, whether the change is
    significant (all metrics judged together), and what differs between the machines. Reports of different machines
    (host id, CPU model or GPU differ) read "slower"/"faster" with the calibration-normalized ratio
    beside the raw one, and are no regression (exit 0) unless --same-machine.
    """
    from appliance.bench import report as rpt
    from appliance.compare import compare as cmp
    from appliance.errors import ReportError

    if len(reports) < 2:
        raise ReportError("compare needs at least two reports: puffer-bench compare BASE.json NEW.json")
    check_out(out, "--out", inputs=reports)
    result = cmp.compare(
        [{**rpt.load(path), "_path": path} for path in reports],
        threshold,
        normalize=normalize,
        same_machine=same_machine,
    )
    text = cmp.to_markdown(result)
    if out:
        write_out(out, text.encode(), "--out")
    if markdown:
        click.echo(text, nl=False)
    else:
        numbers = range(1, len(reports) + 1)
        if result["differences"]:
            from rich.markup import escape  # the reports' own text is not markup

            diff_rows = [[escape(str(v)) for v in (key, *values)] for key, values in result["differences"]]
            print_table("what differs", ["", *(f"report {i}" for i in numbers)], diff_rows)
        for i, keys in result["unrecorded"].items():
            click.echo(f"not recorded in report {i} (an older report): {', '.join(keys)}")
        for note in result["notes"]:
            click.echo(f"- {note}")
        columns = [
            "metric",
            *(f"median {i}" for i in numbers),
            *(f"ratio {i}/1 (95% CI)" for i in numbers if i > 1),
        ]
        print_table(f"base: {reports[0]} (threshold {100 * threshold:.0f}%)", columns, cmp.table_rows(result))
    if out:
        click.echo(f"wrote {out}", err=True)
    if result["regressions"]:
        click.echo(f"regressed beyond {100 * threshold:.0f}%: {', '.join(result['regressions'])}", err=True)
        sys.exit(1)


@cli.command("report", context_settings=CONTEXT)
@click.argument("reports", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--render", is_flag=True, help="Re-render each report's Markdown, HTML and plots next to its JSON."
)
@click.option(
    "--markdown", "md_out", type=click.Path(dir_okay=False), help="Write one report's Markdown here."
)
@click.option(
    "--readme", type=click.Path(dir_okay=False, exists=True), help="Rewrite this README's results table."
)
@click.option("--results", "results_dir", default="results", show_default=True, help="Where reports live.")
def report_cmd(
    reports: tuple[str, ...], render: bool, md_out: str | None, readme: str | None, results_dir: str
) -> None:
    """Render reports: their Markdown and plots, or the README's results table and plot.

    Without REPORTS, --readme takes the newest report of each profile folder under --results.
    """
    from appliance.bench import report as rpt
    from appliance.docs import readme as readme_mod

    if not (render or md_out or readme):
        raise click.UsageError("give --render, --markdown FILE or --readme README.md")
    check_out(md_out, "--markdown", inputs=reports)
    check_out(readme, "--readme", inputs=reports)
    if render:
        for path in reports:
            stem = Path(path).with_suffix("")
            check_out(f"{stem}.md", "--render", inputs=reports, beside=[f"{stem}.html"])
    loaded = [rpt.load(p) for p in reports]
    written: list[Path] = []
    if render:
        for path, data in zip(reports, loaded, strict=True):
            written += rpt.render(data, Path(path).with_suffix(""))
    if md_out:
        if len(loaded) != 1:
            raise click.UsageError("--markdown renders exactly one report")
        write_out(md_out, rpt.to_markdown(loaded[0]).encode(), "--markdown")
        written.append(Path(md_out))
    if readme:
        paths = [Path(p) for p in reports] or readme_mod.latest_reports(Path(results_dir))
        written += readme_mod.update_readme(Path(readme), paths, Path(results_dir))
    for p in written:
        click.echo(f"wrote {p}")


@cli.command("gpu-check", context_settings=CONTEXT)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write the report to DIR/kernels/.")
@click.option("--runs", default=20, show_default=True, type=count(), help="Timed repeats per kernel.")
def gpu_check(out_dir: str | None, runs: int) -> None:
    """Every fused kernel against its torch reference on this GPU (float32 and bfloat16, at breakout
    scale), with its median time beside the eager torch it replaces. Exit 1 if one disagrees, 2 without CUDA.
    """
    from appliance.gpucheck import run_check

    if out_dir:
        from appliance.safe_files import check_output

        check_output(out_dir, "--out", folder=True)
    report = run_check(out_dir, runs, log=lambda line: click.echo(line, err=True))
    for path in report.get("written", []):
        click.echo(f"wrote {path}")
    if not report["analysis"]["passed"]:
        click.echo("error: a kernel disagrees with its reference (see analysis.kernels)", err=True)
        sys.exit(1)


@cli.command("ab", context_settings=CONTEXT)
@click.argument("a")
@click.argument("b")
@click.option("--suite", "suite_name", default="quick", show_default=True, help="Suite name or YAML path.")
@click.option("--gpu", "profile", metavar="PROFILE", type=PROFILE, help=PROFILE_HELP)
@click.option("--envs", "env_list", type=NameList(), help="Only measure these envs (comma-separated).")
@click.option("--rounds", default=3, show_default=True, type=count(), help="Rounds; each runs A then B once.")
@click.option("--seconds", type=duration(), help="Timed seconds per measurement (default: the suite's).")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the result here (.json and .md).")
def ab_cmd(
    a: str,
    b: str,
    suite_name: str,
    profile: str | None,
    env_list: list[str] | None,
    rounds: int,
    seconds: float | None,
    out: str | None,
) -> None:
    """Measure two variants in turns (A B A B ...) on this machine; print B/A per metric with its interval.

    \b
    A and B are each one of (both of one kind):
      base | section.key=value[,...] | FILE.yaml     a config (runs in this process)
      git:REF                                        a commit, in a temporary worktree
      image:NAME                                     a container image
    \b
    puffer-bench ab base vec.num_envs=4096 --suite quick --envs breakout
    puffer-bench ab git:HEAD~1 git:HEAD --rounds 5
    """
    import signal

    from rich.console import Console

    from appliance.compare import ab

    if out:  # before the first round, not after them; ab writes OUT.json and OUT.md
        check_out(out, "--out", beside=[Path(out).with_suffix(".json"), Path(out).with_suffix(".md")])
    result = ab.run(
        a, b, suite_name, rounds, profile, env_list, seconds, progress=lambda t: click.echo(t, err=True)
    )
    partial = result.get("partial")
    if result["metrics"]:
        Console().print(ab.table(result))
        click.echo(f"A: {result['variants']['A']['what']}; B: {result['variants']['B']['what']}")
    written = ab.write(result, out) if out and (result["metrics"] or not partial) else []
    if partial:  # interrupted: say what was kept, exit as the signal asks
        click.echo(ab.partial_line(result, written), err=True)
        sys.exit(128 + signal.Signals[partial["signal"]].value)
    for p in written:
        click.echo(f"wrote {p}")


# ----------------------------------------------------------------------------- publish, history


@cli.command("publish", context_settings=CONTEXT)
@click.argument("folders", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option(
    "--out", required=True, type=click.Path(), help="The site's folder (new, empty, or a site built before)."
)
@click.option(
    "--threshold",
    default=0.05,
    show_default=True,
    type=Number(0, 1, low_open=True, high_open=True),
    help="Relative change that counts as a regression (0.05 = 5%).",
)
@click.option(
    "--pair",
    "pairs",
    nargs=2,
    multiple=True,
    metavar="BASE NEW",
    help="Also build the comparison of these two reports (paths under FOLDERS); repeatable.",
)
@click.option(
    "--all-pairs",
    is_flag=True,
    help="Build the comparison of every two reports of one suite (n(n-1)/2 of them: slow for many reports).",
)
def publish_cmd(
    folders: tuple[str, ...], out: str, threshold: float, pairs: tuple[tuple[str, str], ...], all_pairs: bool
) -> None:
    """Build a static site of every report under FOLDERS: machines, leaderboards, histories, comparisons.

    The site opens from file:// (no server, nothing fetched): a machines page, a leaderboard per metric
    family (raw and calibration-normalized, busy or slowed figures shown and never ranked), a page per
    metric with its history across commits on each machine and the steps in it, and comparisons
    with the verdicts of `compare`. JSON files that are not reports this version reads are listed.

    \b
    puffer-bench publish results/ --out site/
    puffer-bench publish /shared/reports results/ --out site/ --pair a.json b.json
    """
    from appliance.publish import publish

    result = publish(list(folders), out, threshold, list(pairs), all_pairs)
    other = [s for s in result["skipped"] if s.other_version]
    click.echo(
        f"{result['reports']} reports of {result['machines']} machines, {result['metrics']} metrics, "
        f"{result['compares']} comparisons; {result['steps']} steps across commits "
        f"({result['regressions']} regressions beyond {100 * threshold:g}%)"
    )
    if result["skipped"]:
        click.echo(
            f"listed, not shown: {len(result['skipped'])} JSON file(s) that are not reports this puffer-bench "
            f"reads ({len(other)} of another report schema version); see the site's front page"
        )
    for s in other:
        click.echo(f"  {s.path}: {s.why}", err=True)
    click.echo(f"wrote {result['pages']} pages to {out} (open {Path(out) / 'index.html'})")


@cli.command("share", context_settings=CONTEXT)
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--to", "folder", required=True, type=click.Path(file_okay=False), help="The shared folder.")
def share_cmd(reports: tuple[str, ...], folder: str) -> None:
    """Add reports to a folder many machines share, for publish (what run --publish does).

    Each report is validated, then written whole under a name of its own (date, host id, a digest of
    its bytes) and linked into place: two machines adding at once both keep theirs, a reader never
    sees half a file, and a report added twice is one file.

    \b
    puffer-bench share results/cpu/*.json --to /shared/reports
    """
    from appliance.publish import add_report
    from appliance.safe_files import check_output

    check_output(folder, "--to", folder=True)
    for report in reports:
        shared, new = add_report(report, folder)
        click.echo(f"published {shared}" if new else f"already published: {shared}")


@cli.command("history", context_settings=CONTEXT)
@click.argument("metric")
@click.option(
    "--machine", "host", metavar="HOST", help="Only this machine: its id, a host id, or part of its name."
)
@click.option(
    "--results",
    "folders",
    multiple=True,
    default=("results",),
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where reports live (repeatable).",
)
@click.option(
    "--threshold",
    default=0.05,
    show_default=True,
    type=Number(0, 1, low_open=True, high_open=True),
    help="Relative change that counts as a regression (0.05 = 5%).",
)
def history_cmd(metric: str, host: str | None, folders: tuple[str, ...], threshold: float) -> None:
    """A metric's history across commits on each machine, and the steps in it; exit 1 when the newest
    step of a history is a regression beyond the threshold.

    A step is a change in level that is significant given the samples' noise (not one noisy point);
    each names its first commit, its size and a 95% interval. Busy or slowed figures are not judged.

    \b
    puffer-bench history env_sps/breakout/threads=1
    puffer-bench history train_sps/breakout --machine 09fe8b3bfafc --results /shared/reports
    """
    import difflib

    from appliance.bench import report as rpt
    from appliance.errors import ReportError
    from appliance.publish import collect, find_machine
    from appliance.publish import history as hist
    from appliance.publish.collect import short_commit

    collection = collect(list(folders))
    for s in collection.skipped:
        if s.other_version:  # listed, not dropped silently
            click.echo(f"not read: {s.path}: {s.why}", err=True)
    names = collection.metric_names()
    if metric not in names:
        near = difflib.get_close_matches(metric, names, n=3)
        raise ReportError(
            f"no report under {', '.join(folders)} holds metric {metric!r}"
            + (f"; did you mean {', '.join(near)}?" if near else "")
        )
    machine = find_machine(collection, host) if host else None
    failed = []
    shown = 0
    for (name, mid, suite, profile), entries in collection.series().items():
        if name != metric or (machine and mid != machine.id):
            continue
        shown += 1
        m = entries[-1].data["metrics"][name]
        unit = m["unit"]
        pts = hist.points(name, entries)
        found = hist.steps(pts, m["better"], threshold)
        click.echo(
            f"{metric} on {mid} ({collection.machines[mid].label}), suite {suite}, profile {profile}: "
            f"{len(pts)} commit(s), {sum(p.judged for p in pts)} judged"
        )
        for p in pts:
            flag = f" {p.unreliable}" if p.unreliable else ""
            ci = f" ({rpt.fmt(p.ci[0], unit)} - {rpt.fmt(p.ci[1], unit)})" if p.ci else ""
            click.echo(
                f"  {short_commit(p.commit):<14} {p.created[:16]}  {rpt.fmt(p.median, unit)}{ci} {unit}, "
                f"{len(p.samples)} samples{flag}"
            )
        if len([p for p in pts if p.judged]) < hist.MIN_POINTS:
            click.echo(f"  no step can be told from noise with fewer than {hist.MIN_POINTS} judged commits")
        elif not found:
            click.echo("  no step: no change in level is significant given the samples' noise")
        for s in found:
            click.echo(f"  {hist.step_text(s, unit)}")
        if hist.newest_regression(found):
            failed.append(f"{mid} {suite}/{profile}")
    if not shown:
        raise ReportError(f"machine {machine.id if machine else '?'} has no report holding {metric!r}")
    if failed:
        click.echo(
            f"the newest step is a regression beyond {100 * threshold:g}% on: {', '.join(failed)}", err=True
        )
        sys.exit(1)
