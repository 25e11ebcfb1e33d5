"""The published site in a real headless Chromium (tests/browser.py: the DevTools protocol over a
pipe): every page loads from file:// with its tables and plots, no console message, no uncaught
exception, no failed load; every link between pages leads to a page that loads; the compare
picker finds a built comparison. Where no browser can be started, the tests skip with one line
(.ci/run installs Debian's chromium and sets PUFFER_TEST_BROWSER=required, so in CI a browser
that does not start fails them)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

import pytest
from browser import Browser, start
from publish_fixtures import METRIC, history_levels, report, write, write_history

from appliance.publish import publish

RESULTS = Path(__file__).parent.parent / "results"
STEP = [1.0] * 5 + [0.9] * 5


@pytest.fixture(scope="module")
def browser():
    started = start()
    if isinstance(started, str):
        if os.environ.get("PUFFER_TEST_BROWSER") == "required":  # CI installed one: it must start
            pytest.fail(started)
        pytest.skip(started)
    with started:
        yield started


def site(tmp_path: Path) -> Path:
    root = tmp_path / "reports"
    write_history(root / "a", STEP, host="aaaa", cpu="CPU one")
    for i, samples in enumerate(history_levels([2.0, 2.0, 2.0], seed=3)):
        data = report(
            f"{i:02d}" + "f" * 38,
            20 + i,
            {METRIC: samples, "train_sps/x": samples, "probe/cpu/memory_bandwidth": samples},
            busy=("train_sps/x",) * (i == 2),
            host="bbbb",
            cpu="CPU two",
            speed=2.0,
        )
        write(root / "b", data, f"r{i}")
    injected = "</script><script>console.error('injected')</script>"
    hostile = report(
        "<script>alert(1)</script>\u202e", 9, {"env_sps/<b>\ud800": [1.0, 2.0, 3.0]}, cpu=injected
    )
    hostile["command"] = "</script><script>console.error('injected')</script>" * 1000
    write(root, hostile, "hostile")
    publish([root], tmp_path / "site")
    return tmp_path / "site"


def check_page(browser: Browser, page: Path) -> dict:
    problems = browser.visit(page.resolve().as_uri())
    assert problems == [], (page.name, problems)
    return browser.evaluate(
        "({tables: document.querySelectorAll('table').length,"
        " rows: document.querySelectorAll('table tr').length,"
        " svgs: [...document.querySelectorAll('svg.plot')].map(s => ["
        "   s.getBoundingClientRect().width, s.querySelectorAll('circle').length]),"
        " links: [...document.querySelectorAll('a[href]')].map(a => a.href),"
        " h1: document.querySelector('h1').textContent,"
        " scripts: document.querySelectorAll('script').length})"
    )


def test_every_page_renders_with_its_tables_and_plots_and_no_console_errors(browser, tmp_path):
    out = site(tmp_path)
    pages = sorted(out.rglob("*.html"))
    assert len(pages) > 10
    targets: set[str] = set()
    for page in pages:
        seen = check_page(browser, page)
        empty_board = page.name.startswith("board-") and "No report holds" in page.read_text()
        assert (seen["tables"] >= 1 and seen["rows"] >= 2) or empty_board, page.name
        assert seen["scripts"] <= 1, page.name  # the compare picker's own, nothing injected
        if page.parent.name == "metric":
            assert seen["svgs"] and all(w > 100 and n >= 1 for w, n in seen["svgs"]), (
                page.name,
                seen["svgs"],
            )
        targets |= {link.split("#")[0] for link in seen["links"]}
    # every link between pages leads to a page that loads (without errors)
    assert all(t.startswith("file://") for t in targets), targets
    for target in sorted({unquote(t) for t in targets} - {unquote(p.resolve().as_uri()) for p in pages}):
        pytest.fail(f"a link leads outside the built pages: {target}")
    metric = next(p for p in pages if p.parent.name == "metric" and p.name.startswith("env_sps_breakout"))
    seen = check_page(browser, metric)
    assert len(seen["svgs"]) == 2 and max(n for _, n in seen["svgs"]) == 10


def test_the_compare_picker_finds_a_built_comparison(browser, tmp_path):
    out = site(tmp_path)
    assert check_page(browser, out / "compare.html")["tables"] == 1
    key = browser.evaluate("document.querySelector('a.pair').dataset.pair")
    base, new = key.split("-")
    browser.evaluate(
        f"(() => {{ const b = document.getElementById('base'), n = document.getElementById('new');"
        f" b.value = '{base}'; n.value = '{new}'; n.dispatchEvent(new Event('change')); }})()"
    )
    href = browser.evaluate("document.querySelector('#picked a').href")
    assert href.endswith(f"compare/{key}.html")
    assert check_page(browser, Path(unquote(href.removeprefix("file://"))))["rows"] > 1
    check_page(browser, out / "compare.html")
    browser.evaluate(
        "(() => { const n = document.getElementById('new'); n.value = document.getElementById('base').value;"
        " n.dispatchEvent(new Event('change')); })()"
    )
    said = browser.evaluate("document.getElementById('picked').textContent")
    assert said.startswith("Not built: puffer-bench compare ") and ".json" in said, said
    assert browser.problems() == []


@pytest.mark.slow
def test_the_site_of_the_committed_reports_renders(browser, tmp_path):
    if not RESULTS.is_dir():
        pytest.skip("results/ is not in this tree (the Docker image leaves it out)")
    publish([RESULTS], tmp_path / "site")
    out = tmp_path / "site"
    main = [out / n for n in ("index.html", "machines.html", "metrics.html", "compare.html")]
    boards = sorted(out.glob("board-*.html"))
    some = sorted((out / "metric").glob("*.html"))[::25] + sorted((out / "compare").glob("*.html"))[::20]
    for page in main + boards + some:
        seen = check_page(browser, page)
        assert seen["tables"] >= 1, page.name
