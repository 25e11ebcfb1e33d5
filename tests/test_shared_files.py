"""Files that come from another machine are hostile input (issue 28): reports, checkpoints, run
configs, suites, config files, hardware profiles and sweep spaces.

A crafted report must render as text (no markup of its own in HTML, Markdown or the README), and a
damaged or crafted file of any kind must give one line naming the file and the field, exit 2, never
a traceback, a hang or a huge allocation. Each test reproduces a file that used to do one of those.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.bench import readme
from appliance.bench import report as rpt
from appliance.bench.stats import summarize
from appliance.cli import cli


def run_cli(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(result, *fragments: str) -> str:
    """The command failed with exit 2 and one line holding every fragment (no traceback)."""
    out = result.output.strip()
    assert result.exit_code == 2, out
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    for fragment in fragments:
        assert fragment in out, out
    return out


# ----------------------------------------------------------------------------- reports


def metric(samples: list[float], **extra) -> dict:
    return {
        "unit": "agent-steps/s",
        "better": "higher",
        "labels": {},
        "samples": samples,
        **summarize(samples),
        **extra,
    }


def good_report() -> dict:
    return {
        "schema": rpt.SCHEMA,
        "created_utc": "2026-11-23T00:00:00Z",
        "command": "puffer-bench run",
        "suite": {"name": "quick"},
        "profile": {"name": "cpu"},
        "fingerprint": {"cpu": {"model": "cpu", "physical_cores": 2}, "ram_bytes": 2**33},
        "config": {"train": {"seed": 0}},
        "seed": 0,
        "repeats": 3,
        "metrics": {"env_sps/squared/threads=1": metric([1e6, 1.1e6, 0.9e6])},
    }


def mutated(change) -> dict:
    data = good_report()
    change(data)
    return data


M = "metrics['env_sps/squared/threads=1']"

DAMAGED_REPORTS = [
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(median="fast")), f"{M}.median"),
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(cv="3%")), f"{M}.cv"),
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(unit=5)), f"{M}.unit"),
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(samples=[math.nan] * 3)), "NaN"),
    (mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(median=math.inf)), "Infinity"),
    (
        mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"].update(samples=[1.0] * 50_000)),
        "at most 1,000",
    ),
    (
        mutated(lambda d: d["metrics"]["env_sps/squared/threads=1"]["labels"].update(threads="x")),
        f"{M}.labels.threads",
    ),
    (mutated(lambda d: d["fingerprint"].update(cpu="x")), "fingerprint.cpu must be an object"),
    (mutated(lambda d: d["fingerprint"].update(calibration={"int_mops": "fast"})), "calibration.int_mops"),
    (
        mutated(lambda d: d.update(noise={"steps": [{"step": "s", "n": 2, "others_cores_mean": "a"}]})),
        "noise.steps[0]",
    ),
    (mutated(lambda d: d.update(duration_s="long")), "duration_s"),
    (mutated(lambda d: d.update(metrics=[1])), "metrics must be an object"),
    (mutated(lambda d: d.update(warnings=["\x1b]0;owned\x07"])), "control character 0x1b"),
    (mutated(lambda d: d.update(seed="<script>")), "seed must be a whole number"),
]

DAMAGED_FILES = [
    (b"[" * 200_000 + b"]" * 200_000, "nests 200,000 levels deep"),
    (json.dumps(good_report()).encode()[:300], "cannot read report"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe" + bytes(range(256)), "is not UTF-8 text"),
    (b"", "cannot read report"),
    (b'{"schema": 1e999999}', "schema"),
]


@pytest.mark.parametrize(
    ("content", "field"),
    [(json.dumps(d).encode(), f) for d, f in DAMAGED_REPORTS] + DAMAGED_FILES,
    ids=[f"report-{i}" for i in range(len(DAMAGED_REPORTS))]
    + [f"file-{i}" for i in range(len(DAMAGED_FILES))],
)
def test_a_damaged_report_is_one_line_naming_file_and_field_in_every_command(tmp_path, content, field):
    bad, good, page = tmp_path / "bad.json", tmp_path / "good.json", tmp_path / "README.md"
    bad.write_bytes(content)
    good.write_text(json.dumps(good_report()))
    page.write_text(f"{readme.BEGIN}\n{readme.END}\n")
    for args in (
        ("report", "--render", bad),
        ("report", bad, "--markdown", tmp_path / "x.md"),
        ("compare", good, bad),
        ("report", "--readme", page, bad, "--results", tmp_path),
    ):
        one_line_error(run_cli(*args), str(bad), field)


def test_a_report_larger_than_the_bound_is_refused_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(good_report()))
    monkeypatch.setattr(rpt, "MAX_BYTES", 100)
    one_line_error(run_cli("report", "--render", path), str(path), "larger than")


def test_what_puffer_bench_writes_it_reads_back(tmp_path):
    r = rpt.Report({"name": "t"}, {"name": "cpu"}, {"cpu": {}}, {}, seed=0, repeats=2)
    r.add("env_sps/x/threads=1", [1.0, math.nan, 2.0], "agent-steps/s", env="x", threads=1)
    r.warn("colour \x1b[31m from a subprocess")
    rpt.write(r.data, tmp_path / "r", plots=False)
    back = rpt.load(tmp_path / "r.json")
    assert back["metrics"]["env_sps/x/threads=1"]["samples"] == [1.0, None, 2.0]
    assert "\x1b" not in back["warnings"][0]


def test_every_committed_report_passes_the_validator():
    results = Path(__file__).parent.parent / "results"
    if not results.is_dir():
        pytest.skip("results/ is not in this tree")
    checked = 0
    for path in results.rglob("*.json"):
        if json.loads(path.read_text()).get("schema") == rpt.SCHEMA:
            rpt.to_markdown(rpt.load(path))
            checked += 1
    assert checked
