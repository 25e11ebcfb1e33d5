"""``publish``, ``history`` and ``share``: steps across commits found where they are and nowhere else,
the site's pages built from every report (other schema versions listed), hostile reports escaped,
comparisons with ``compare``'s verdicts, and a shared folder that loses nothing to two writers."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from publish_fixtures import (
    METRIC,
    REPEATS,
    SUITE_CV,
    commit_id,
    history_levels,
    report,
    write,
    write_history,
)

from appliance.bench import report as rpt
from appliance.cli import cli
from appliance.compare import compare as cmp
from appliance.publish import collect, history, publish
from appliance.publish.collect import Entry
from appliance.publish.site import MARKER

RESULTS = Path(__file__).parent.parent / "results"


def points(levels: list[float], seed: int, cv: float = SUITE_CV) -> list[history.Point]:
    return [
        history.Point(commit_id(i), f"2026-10-{i + 1:02d}", samples)
        for i, samples in enumerate(history_levels(levels, seed, cv))
    ]


def flagged(levels: list[float], seed: int) -> list[int]:
    return [s.index for s in history.steps(points(levels, seed), "higher")]


# ---------------------------------------------------------------------------- step detection


STEP = [1.0] * 5 + [0.9] * 5  # a 10 % drop at the sixth of ten commits


def test_a_10_percent_step_at_one_commit_among_ten_is_flagged_at_that_commit_and_no_other():
    found = history.steps(points(STEP, seed=0), "higher")
    assert [s.index for s in found] == [5]
    step = found[0]
    assert step.commit == commit_id(5) and step.verdict == "regression"
    assert step.ci[0] < step.ratio < step.ci[1] and 0.85 < step.ratio < 0.95 and step.ci[1] < 0.95
    # and so in (almost) every history of the suite's spread, not only in seed 0's
    exact = sum(flagged(STEP, seed) == [5] for seed in range(20))
    assert exact >= 19, exact


def test_a_step_at_the_newest_commit_is_flagged_at_once():
    levels = [1.0] * 9 + [0.9]
    assert sum(flagged(levels, seed) == [9] for seed in range(20)) >= 18


def test_noise_at_the_suites_spread_flags_nothing_in_19_of_20_seeds():
    assert SUITE_CV == 0.03 and REPEATS == 3
    quiet = sum(flagged([1.0] * 10, seed) == [] for seed in range(20))
    assert quiet >= 19, quiet
    # a longer history is no more likely to show a step (Bonferroni over its places)
    assert sum(flagged([1.0] * 30, seed) == [] for seed in range(20)) >= 19


def test_one_noisy_point_is_not_a_step_and_busy_figures_are_not_judged(tmp_path):
    blip = [1.0] * 4 + [0.8] + [1.0] * 5  # one commit low, then back
    assert sum(flagged(blip, seed) == [] for seed in range(20)) >= 19
    # three commits 30 % low, measured busy: shown, unreliable, and no step (judged, they are two)
    for busy_flag, folder in ((True, tmp_path / "busy"), (False, tmp_path / "quiet")):
        levels = [1.0] * 4 + [0.7] * 3 + [1.0] * 4
        for i, samples in enumerate(history_levels(levels, seed=1)):
            busy = (METRIC,) if busy_flag and 4 <= i <= 6 else ()
            write(folder, report(commit_id(i), i + 1, {METRIC: samples}, busy=busy), f"r{i}")
        ((_, entries),) = collect([folder]).series().items()
        pts = history.points(METRIC, entries)
        found = [s.index for s in history.steps(pts, "higher")]
        if busy_flag:
            assert pts[4].unreliable == cmp.UNRELIABLE and not pts[4].judged and pts[4].median is not None
            assert not {4, 7} & set(found), found
        else:
            assert found == [4, 7], found


def test_history_names_the_step_and_exits_1_when_the_newest_step_is_a_regression(tmp_path):
    write_history(tmp_path / "down", STEP)
    out = CliRunner().invoke(cli, ["history", METRIC, "--results", str(tmp_path / "down")])
    assert out.exit_code == 1, out.output
    steps = [line for line in out.output.splitlines() if "step at" in line]
    assert len(steps) == 1 and commit_id(5)[:8] in steps[0] and "regression" in steps[0], out.output
    assert "newest step is a regression beyond 5%" in out.output
    # an improvement, or no step, exits 0
    write_history(tmp_path / "up", [1.0] * 5 + [1.1] * 5)
    out = CliRunner().invoke(cli, ["history", METRIC, "--results", str(tmp_path / "up")])
    assert out.exit_code == 0 and "improvement" in out.output, out.output
    write_history(tmp_path / "flat", [1.0] * 10)
    out = CliRunner().invoke(cli, ["history", METRIC, "--results", str(tmp_path / "flat")])
    assert out.exit_code == 0 and "no step" in out.output, out.output
    # a regression that a later step undid is not the newest step
    write_history(tmp_path / "fixed", [1.0] * 4 + [0.9] * 4 + [1.0] * 4)
    out = CliRunner().invoke(cli, ["history", METRIC, "--results", str(tmp_path / "fixed")])
    assert out.exit_code == 0 and out.output.count("step at") == 2, out.output


def test_history_per_machine_and_one_line_errors(tmp_path):
    write_history(tmp_path, STEP, host="aaaa", cpu="CPU one")
    write_history(tmp_path / "two", [1.0] * 10, host="bbbb", cpu="CPU two")
    runner = CliRunner()
    out = runner.invoke(cli, ["history", METRIC, "--results", str(tmp_path), "--machine", "bbbb"])
    assert out.exit_code == 0 and "CPU two" in out.output and "CPU one" not in out.output, out.output
    out = runner.invoke(cli, ["history", METRIC, "--results", str(tmp_path), "--machine", "cpu one"])
    assert out.exit_code == 1 and "CPU one" in out.output
    cases = [
        (["history", METRIC, "--results", str(tmp_path), "--machine", "CPU"], "matches 2 machines"),
        (["history", METRIC, "--results", str(tmp_path), "--machine", "zzz"], "no machine matches 'zzz'"),
        (["history", "env_sps/breakout/threads=9", "--results", str(tmp_path)], f"did you mean {METRIC}"),
        (["history", METRIC, "--results", str(tmp_path / "none")], "no such folder"),
        (["publish", str(tmp_path / "none"), "--out", str(tmp_path / "site")], "no such folder"),
        (["publish", str(tmp_path / "two" / "nothing"), "--out", str(tmp_path / "site")], "no such folder"),
    ]
    (tmp_path / "empty").mkdir()
    cases.append(
        (["publish", str(tmp_path / "empty"), "--out", str(tmp_path / "site")], "no puffer-bench report")
    )
    for args, message in cases:
        out = runner.invoke(cli, args)
        assert out.exit_code == 2 and message in out.output, (args, out.output)
        assert len(out.output.strip().splitlines()) == 1 and "Traceback" not in out.output


# ---------------------------------------------------------------------------- the site


def lab(tmp_path: Path) -> Path:
    """Two machines (one twice as fast per core), ten commits on the first with a step, three on
    the second with a busy figure, a JSON of another kind and a report of another schema version."""
    root = tmp_path / "reports"
    write_history(root / "a", STEP, host="aaaa", cpu="CPU one")
    for i, samples in enumerate(history_levels([2.0, 2.0, 2.0], seed=3)):
        data = report(
            commit_id(i),
            20 + i,
            {METRIC: samples, "train_sps/x": samples},
            busy=("train_sps/x",) * (i == 2),
            host="bbbb",
            cpu="CPU two",
            speed=2.0,
        )
        write(root / "b", data, f"r{i}")
    write(root, {"schema": "puffer-bench/ab/1", "rows": []}, "ab")
    newer = report(commit_id(0), 1, {METRIC: [1.0, 1.0]})
    newer["schema"] = "puffer-bench/report/2"
    write(root / "future", newer, "v2")
    return root


def build(tmp_path: Path, folders: list[Path], **options) -> tuple[dict, dict[str, str]]:
    out = tmp_path / "site"
    result = publish([str(f) for f in folders], out, **options)
    pages = {str(p.relative_to(out)): p.read_bytes().decode("utf-8") for p in out.rglob("*.html")}
    return result, pages


def links(page: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', page)


def test_the_site_has_every_part_and_every_link_resolves(tmp_path):
    result, pages = build(tmp_path, [lab(tmp_path)])
    assert result["reports"] == 13 and result["machines"] == 2
    for page in ("index.html", "machines.html", "metrics.html", "compare.html", "board-env_sps.html"):
        assert page in pages and "<table" in pages[page], page
    # other files are listed, the other schema version first and named so
    index = pages["index.html"]
    assert index.index("v2.json") < index.index("ab.json") and "other schema version" in index
    assert "puffer-bench/report/2" in index
    machines = pages["machines.html"]
    assert "CPU one" in machines and "CPU two" in machines and "16.0 / 6.0 / 14.0" in machines
    metric = next(p for name, p in pages.items() if name.startswith("metric/env_sps_breakout_threads=1-"))
    assert metric.count("<svg") == 2 and "regression" in metric and commit_id(5)[:8] in metric
    for name, page in pages.items():
        base = (tmp_path / "site" / name).parent
        for href in links(page):
            target, _, anchor = href.partition("#")
            file = (base / target) if target else tmp_path / "site" / name
            assert file.resolve().is_file(), (name, href)
            if anchor:
                assert f'id="{anchor}"' in file.read_text(), (name, href)
    assert (tmp_path / "site" / MARKER).is_file()


def test_the_leaderboard_ranks_raw_and_normalized_and_never_ranks_busy_figures(tmp_path):
    _, pages = build(tmp_path, [lab(tmp_path)])
    board = pages["board-env_sps.html"]
    rows = re.findall(r"<tr><td class=num>(.*?)</td>.*?</tr>", board.split(METRIC)[1], re.S)
    assert [r.strip() for r in rows] == ["1", "2"], rows  # CPU two (2x as fast) first, raw
    # normalized by the calibration (CPU two runs the loops 2x as fast), the two machines tie near 1
    # (CPU one's newest figure is after its 10 % step: 0.9), the faster CPU's figure near 1.0
    normalized = re.findall(
        r"<td class=num>(\d)</td><td class=num>([\d.]+)</td><td class=num>[\d.]+ - [\d.]+</td><td>", board
    )
    assert [rank for rank, _ in normalized] == ["1", "2"], normalized
    assert 0.93 < float(normalized[0][1]) < 1.07 and 0.85 < float(normalized[1][1]) < 0.95, normalized
    train = pages["board-train_sps.html"]
    assert "unreliable (busy)" in train and "<td class=num>1</td>" not in train  # its only row is busy


def test_comparisons_show_the_verdicts_of_compare(tmp_path):
    root = lab(tmp_path)
    _, pages = build(tmp_path, [root])
    a, b = root / "a" / "r04.json", root / "a" / "r05.json"
    result = cmp.compare([{**rpt.load(a), "_path": str(a)}, {**rpt.load(b), "_path": str(b)}])
    entries = {e.path: e for e in collect([root]).reports}
    page = pages[f"compare/{entries[a].id}-{entries[b].id}.html"]
    for row in result["rows"]:
        assert cmp.ratio_text(row["ratios"][0]) in page
    assert result["regressions"] == [METRIC] and "Regressed beyond the threshold" in page
    # the picker's list holds the pair; across machines the newest reports are compared too
    assert f'data-pair="{entries[a].id}-{entries[b].id}"' in pages["compare.html"]
    across = [p for n, p in pages.items() if n.startswith("compare/") and "CPU two" in p and "CPU one" in p]
    assert across and all("slower" in p or "faster" in p for p in across)


def test_a_hostile_report_neither_breaks_the_site_nor_injects_into_it(tmp_path):
    root = lab(tmp_path)
    evil = "<script>alert(1)</script>\u202egnp.exe\ud800\"'><img src=x onerror=alert(2)>"
    data = report(commit_id(3), 9, {METRIC: [1.0, 1.1, 0.9], f"env_sps/{evil}": [1.0, 2.0, 3.0]}, cpu=evil)
    data["fingerprint"]["host_hash"] = evil
    data["fingerprint"]["git"]["commit"] = evil
    data["suite"]["name"] = evil
    data["fingerprint"]["cpu"]["model"] = evil + "x" * 12_000_000  # shown on every page of its machine
    data["command"] = "y" * 100
    data["warnings"] = [evil]
    (root / "evil.json").write_text(json.dumps(data))  # lone surrogates as JSON escapes
    result, pages = build(tmp_path, [root])
    assert result["reports"] == 14
    for name, page in pages.items():
        assert "<script>alert" not in page and "<img src=x" not in page and "onerror=alert(2)>" not in page
        assert "\u202e" not in page and len(page) < 2_000_000, name
        assert page.count("<script>") <= 1, name  # the compare picker's own, nothing else
    assert any("&lt;script&gt;alert(1)&lt;/script&gt;" in p for p in pages.values())
    assert "characters)" in pages["machines.html"] and "xxxxx" in pages["machines.html"]
    assert all(re.fullmatch(r"[A-Za-z0-9_.=/-]+", n) for n in pages), sorted(pages)


def test_the_out_folder_is_replaced_only_when_it_is_a_site(tmp_path):
    root = lab(tmp_path)
    build(tmp_path, [root])
    build(tmp_path, [root])  # a site built before is replaced whole
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    out = CliRunner().invoke(cli, ["publish", str(root), "--out", str(other)])
    assert out.exit_code == 2 and "a folder of other files" in out.output
    out = CliRunner().invoke(cli, ["history", METRIC, "--results", str(root)])
    assert "not read: " in out.output and "v2.json" in out.output and "puffer-bench/report/2" in out.output
    assert (other / "notes.txt").read_text() == "keep" and len(list(tmp_path.glob(".*tmp"))) == 0
    out = CliRunner().invoke(cli, ["publish", str(root), "--out", str(tmp_path / "site")])
    assert out.exit_code == 0, out.output
    assert "13 reports of 2 machines" in out.output and "1 of another report schema version" in out.output


# ---------------------------------------------------------------------------- the shared folder


def _add_many(args: tuple[list[str], str]) -> None:
    from appliance.publish import add_report

    reports, folder = args
    for path in reports:
        add_report(path, folder)


def test_two_machines_adding_reports_at_once_lose_nothing(tmp_path):
    paths = {host: [] for host in ("aaaa", "bbbb")}
    for host in paths:
        for i in range(12):
            data = report(commit_id(i), i + 1, {METRIC: [1.0, 1.1, 0.9]}, host=host)
            paths[host].append(str(write(tmp_path / host, data, f"r{i}")))
    shared = tmp_path / "shared"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.map(_add_many, [(paths[h], str(shared)) for h in paths])
    files = sorted(shared.glob("*.json"))
    assert len(files) == 24 and not list(shared.glob(".*"))
    assert all(rpt.load(f) for f in files)
    # the same report again is the same file, not a second one
    out = CliRunner().invoke(cli, ["share", paths["aaaa"][0], "--to", str(shared)])
    assert out.exit_code == 0 and "already published" in out.output
    assert len(list(shared.glob("*.json"))) == 24
    assert len(collect([shared]).reports) == 24


def test_share_refuses_a_damaged_report_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "puffer-bench/report/1"}')
    out = CliRunner().invoke(cli, ["share", str(bad), "--to", str(tmp_path / "shared")])
    assert out.exit_code == 2 and "lacks" in out.output and len(out.output.strip().splitlines()) == 1
    assert not list((tmp_path / "shared").glob("*.json"))


def test_run_with_publish_checks_the_folder_before_the_suite(tmp_path):
    file = tmp_path / "file"
    file.write_text("")
    out = CliRunner().invoke(cli, ["run", "--publish", str(file)])
    assert out.exit_code == 2 and "--publish" in out.output and "is a file" in out.output


def test_run_with_publish_adds_the_report_it_wrote(tmp_path, monkeypatch):
    from appliance.bench.suite import session

    written = write(tmp_path / "results", report(commit_id(0), 1, {METRIC: [1.0, 1.1, 0.9]}), "r")

    def run_suite(*args, **kwargs):
        return rpt.load(written), [written]

    monkeypatch.setattr(session, "run_suite", run_suite)
    monkeypatch.setattr(session, "analysis_lines", lambda data: [])
    out = CliRunner().invoke(cli, ["run", "--publish", str(tmp_path / "shared")])
    assert out.exit_code == 0 and "published" in out.output, out.output
    (shared,) = (tmp_path / "shared").glob("*.json")
    assert shared.read_bytes() == written.read_bytes()
    # the copy and the original, given together, are one report (its samples counted once)
    collection = collect([tmp_path / "results", tmp_path / "shared"])
    assert len(collection.reports) == 1 and "the same report as" in collection.skipped[0].why


def test_pair_builds_a_comparison_of_any_two_reports(tmp_path):
    root = lab(tmp_path)
    a, b = root / "a" / "r00.json", root / "b" / "r1.json"
    _, pages = build(tmp_path, [root], pairs=[(str(a), str(b))])
    entries = {e.path: e for e in collect([root]).reports}
    assert f"compare/{entries[a].id}-{entries[b].id}.html" in pages
    out = CliRunner().invoke(
        cli, ["publish", str(root / "a"), "--out", str(tmp_path / "s2"), "--pair", str(a), str(b)]
    )
    assert out.exit_code == 2 and "not one of the reports under the folders" in out.output


def test_all_pairs_builds_every_two_reports_of_one_suite(tmp_path):
    paths = write_history(tmp_path / "reports", [1.0, 1.0, 0.9, 0.9])
    _, pages = build(tmp_path, [tmp_path / "reports"], all_pairs=True)
    ids = [e.id for e in sorted(collect([tmp_path / "reports"]).reports, key=lambda e: e.created)]
    assert len(paths) == 4
    built = {n for n in pages if n.startswith("compare/")}
    assert built == {f"compare/{a}-{b}.html" for i, a in enumerate(ids) for b in ids[i + 1 :]}


# ---------------------------------------------------------------------------- the committed reports


@pytest.mark.slow
def test_publish_builds_the_site_of_the_committed_reports(tmp_path):
    if not RESULTS.is_dir():
        pytest.skip("results/ is not in this tree (the Docker image leaves it out)")
    result = publish([RESULTS], tmp_path / "site")
    expected = 0
    for path in RESULTS.rglob("*.json"):
        data = json.loads(path.read_text())
        expected += isinstance(data, dict) and data.get("schema") == rpt.SCHEMA
    assert result["reports"] == expected and result["machines"] >= 2
    machines = (tmp_path / "site" / "machines.html").read_text()
    assert "H100" in machines and "AMD EPYC" in machines
    assert len(list((tmp_path / "site" / "metric").glob("*.html"))) == result["metrics"]


def test_entries_are_labelled_by_date_suite_and_commit(tmp_path):
    path = write(tmp_path, report(commit_id(1), 2, {METRIC: [1.0]}), "r")
    (entry,) = collect([tmp_path]).reports
    assert isinstance(entry, Entry) and entry.label().startswith("2026-10-02 quick/cpu @ 01abcdef")
    assert str(path) in entry.label()
