"""The metric registry (appliance/bench/metrics.py) is what every reader of metric names goes by, and a
report is written only through :class:`Report`'s methods.

Adding a metric takes three things (docs/architecture.md, "Adding a metric"): a registry row, its
producer and a suite YAML step. The first test adds one of each, in a temporary folder and in this
process, and checks that the suite runs it and that the report's Markdown, compare's CPU calibration
and the README table pick it up with no other file changed.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from appliance.bench import metrics as reg
from appliance.bench import report as rpt
from appliance.bench.suite import definition
from appliance.bench.suite.steps import SuiteRunner
from appliance.compare import compare as cmp
from appliance.docs import readme
from appliance.sysinfo import fingerprint

ROOT = Path(__file__).resolve().parents[1]

PRODUCER = '''
from appliance.bench.metrics import Measured


def measure(item, ctx):
    """Copy speed of a bytearray of item["mib"] MiB, ctx.repeats samples."""
    import time

    size = int(item["mib"]) * 2**20
    src = bytearray(size)

    def sample():
        start = time.perf_counter()
        bytes(src)
        return size / (time.perf_counter() - start) / 1e9

    yield Measured(parts=(f"{item['mib']}MiB",), samples=[ctx.take(sample) for _ in range(ctx.repeats)])
'''

SUITE = """
name: copy-test
gate: false
copy_sps:
  - {mib: 1}
"""


@pytest.fixture
def new_family(tmp_path, monkeypatch):
    """1: the producer (a module), 2: the registry row, 3: the suite YAML; nothing else."""
    (tmp_path / "copy_producer.py").write_text(PRODUCER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(reg, "FAMILIES", list(reg.FAMILIES))
    family = reg.register(
        reg.Family(
            "copy_sps/",
            "GB/s",
            section="Memory copy (a test's family)",
            calibration="copy",
            readme=("copy_sps/",),
            producer="copy_producer.measure",
            suite_key="copy_sps",
            produce="copy_producer:measure",
        )
    )
    suite_file = tmp_path / "copy-test.yaml"
    suite_file.write_text(SUITE)
    yield family, suite_file
    sys.modules.pop("copy_producer", None)


def test_a_new_metric_needs_a_registry_row_a_producer_and_a_suite_step(new_family):
    _, suite_file = new_family
    suite, _ = definition.load(str(suite_file))
    report = rpt.Report(
        {"name": suite["name"], "definition": suite}, {"name": "cpu"}, fingerprint(), {}, 0, 2
    )
    runner = SuiteRunner(suite, "cpu", report, repeats=2)
    assert [s.label for s in runner.steps] == ["copy_sps 1"]
    runner.run_all()
    metric = report.data["metrics"]["copy_sps/1MiB"]
    assert metric["unit"] == "GB/s" and metric["better"] == "higher" and len(metric["samples"]) == 2
    assert metric["median"] > 0

    data = rpt.validate(rpt.storable(report.data))
    markdown = rpt.to_markdown(data)
    assert "## Memory copy (a test's family)" in markdown
    assert "copy_sps/1MiB" in markdown.split("## Memory copy (a test's family)")[1]
    assert "Memory copy (a test&#39;s family)" in rpt.to_html(data)
    assert cmp.cpu_bound("copy_sps/1MiB", data) == "copy"  # compare puts it on the base CPU's copy speed
    assert readme.headline("copy_sps/1MiB")
    assert "`copy_sps/1MiB`" in readme.table([data], [Path("r.json")])


def test_a_suite_item_of_a_registered_family_must_be_a_mapping(new_family):
    with pytest.raises(Exception, match="copy_sps: must be a list of mappings"):
        definition.validate({"name": "x", "copy_sps": [1]})


def test_every_family_of_the_shipped_reports_is_registered():
    """Every metric of every committed report belongs to a registered family (a name no row matches
    would be left out of the report's sections and compare's calibration without a word)."""
    names = set()
    for path in sorted((ROOT / "results").rglob("*.json")):
        try:
            names |= set(rpt.load(path)["metrics"])
        except Exception:
            continue  # not a report
    if not names:
        pytest.skip("no committed reports in this tree (results/ not shipped)")
    assert sorted(n for n in names if reg.family_of(n) is None) == []


def test_the_longest_prefix_decides_a_names_family():
    assert reg.family_of("probe/cpu/memory_bandwidth") is reg.PROBE_CPU_COPY
    assert reg.family_of("probe/cpu/memory_bandwidth2") is reg.PROBE_CPU  # exact rows match exactly
    assert reg.family_of("probe/gpu/d2d/256MiB") is reg.PROBE_GPU
    assert reg.family_of("train_sps_ratio/breakout/a_over_b") is reg.TRAIN_SPS_RATIO
    assert reg.family_of("train_sps/breakout") is reg.TRAIN_SPS
    assert reg.family_of("nothing/here") is None
    assert reg.section_of("train_sps_ratio/x") == ""  # not in a report section, as before the registry


def test_a_family_row_is_checked():
    with pytest.raises(ValueError, match="calibration"):
        reg.Family("x/", calibration="gpu")
    with pytest.raises(ValueError, match="registered already"):
        reg.register(reg.Family("env_sps/"))


WRITE = re.compile(r"(^|\.)report\.data\b")


def _report_writes(source: str) -> list[int]:
    """Lines that write into ``report.data`` (``...report.data[...] = ``, ``.setdefault``, ...)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setdefault", "append", "update", "extend", "pop", "clear", "insert")
        ):
            targets = [node.func.value]
        for t in targets:
            if isinstance(t, ast.Subscript | ast.Attribute) and WRITE.search(ast.unparse(t)):
                lines.append(node.lineno)
    return lines


def test_the_write_finder_sees_each_kind_of_write():
    source = (
        "report.data['x'] = 1\nself.report.data['analysis'].setdefault('k', {})\n"
        "runner.report.data['w'].append(1)\nprint(report.data['metrics'])\n"
    )
    assert _report_writes(source) == [1, 2, 3]


def test_a_report_is_written_only_through_report_methods():
    found = []
    for path in sorted((ROOT / "appliance").rglob("*.py")):
        if path.name == "schema.py" and path.parent.name == "report":
            continue  # Report itself
        found += [f"{path.relative_to(ROOT)}:{n}" for n in _report_writes(path.read_text(encoding="utf-8"))]
    assert found == []
