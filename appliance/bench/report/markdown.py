"""A report as Markdown; every value from the report goes through :func:`md_format`, whose escaping
(:func:`md`, :func:`md_code`) no report content can get out of: no HTML, link, code span or table
cell break, and one line per value.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from appliance.bench.report.content import (
    METRIC_COLUMNS,
    SUMMARY_NOTE,
    header_facts,
    metric_cells,
    section_rows,
)
from appliance.bench.report.content import (
    sections as metric_sections,
)
from appliance.measure.noise.table import NOISE_COLUMNS, NOISE_NOTE, noise_table
from appliance.sysinfo import machine_facts

_MD_ESCAPES = str.maketrans(
    {
        **{chr(c): " " for c in (*range(32), *range(127, 160))},  # one line, no control characters
        **{c: "\\" + c for c in "\\`[]|"},  # no code span, link or table cell ends
        **{"&": "&amp;", "<": "&lt;"},  # no HTML tag or comment (a lone > is text)
    }
)
# what a code span cannot hold: its own delimiter, a table cell break, a line break, comment markers
_NOT_IN_CODE = re.compile(r"[`|\x00-\x1f\x7f-\x9f]|<!--|-->")


def class_lines(report: dict[str, Any]) -> list[str]:
    """The "Workload classes" table: per class of the suite's ``classes``, its env's env and training
    speed (medians, one env thread) and the last sentence of its training diagnosis (the bottleneck).
    A figure measured on a busy machine is marked as such."""
    classes = ((report.get("suite") or {}).get("definition") or {}).get("classes") or {}
    if not isinstance(classes, dict) or not classes:
        return []
    metrics = report.get("metrics") or {}
    training = (report.get("analysis") or {}).get("training") or {}

    def figure(name: str) -> str:
        m = metrics.get(name)
        if not isinstance(m, dict) or not isinstance(m.get("median"), int | float):
            return "-"
        busy = " (busy)" if (m.get("noise") or {}).get("busy") else ""
        return f"{m['median'] / 1e6:.3g} M{busy}"

    rows = []
    for label, env in classes.items():
        summary = str((training.get(env) or {}).get("summary") or "-")
        bottleneck = summary.split(". ")[-1].rstrip(".") if ". " in summary else summary
        rows.append(
            md_format(
                "| {} | {} | {} | {} | {} |",
                label,
                env,
                figure(f"env_sps/{env}/threads=1"),
                figure(f"train_sps/{env}"),
                bottleneck,
            )
        )
    return [
        "",
        "## Workload classes",
        "",
        "One env per class of workload (the suite's `classes`): env-only agent-steps/s on one thread, "
        "end-to-end training agent-steps/s, and where training time goes.",
        "",
        "| class | env | env agent-steps/s | training agent-steps/s | training bottleneck |",
        "|---|---|---|---|---|",
        *rows,
    ]


def md(value: Any) -> str:
    """Any value as Markdown text that renders as that text: no HTML, link, code span or table cell
    break can come out of it, and it stays on one line."""
    return str(value).translate(_MD_ESCAPES)


def md_code(value: Any) -> str:
    """A value in a code span (whose content Markdown never reads as HTML or links), or as escaped
    text (:func:`md`) if it holds what a code span cannot."""
    text = str(value)
    return md(text) if _NOT_IN_CODE.search(text) else f"`{text}`"


class _MarkdownFormatter(string.Formatter):
    """``str.format`` that escapes every value with :func:`md`; ``{name!c}`` takes :func:`md_code`."""

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion == "c":
            return _Markup(md_code(value))
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> str:
        if isinstance(value, _Markup):
            return str(value)
        return md(super().format_field(value, format_spec))


class _Markup(str):
    """Markdown already escaped by :class:`_MarkdownFormatter` (a code span)."""


md_format = _MarkdownFormatter().format


def _metric_rows(metrics: dict[str, Any], title: str) -> list[str]:
    rows = []
    for name, m in section_rows(metrics, title):
        busy = " **(busy)**" if (m.get("noise") or {}).get("busy") else ""
        template = "| {name!c}" + busy + " | {median} | {range} | {ci} | {cv} | {unit} | {ceiling} |"
        rows.append(md_format(template, name=name, **metric_cells(m)))
    return rows


def to_markdown(report: dict[str, Any], images: Sequence[str] = ()) -> str:
    """The report as Markdown; every value from the report goes through :func:`md_format`."""
    h = header_facts(report)
    lines = [
        md_format("# puffer-bench report: suite {suite!c}, profile {profile!c}", **h),
        "",
        md_format("- Created {created} by {command!c}", **h),
        md_format("- Machine: {machine}", **h),
        md_format(
            "- Versions: puffer-bench {puffer_bench}, Python {python}, torch {torch}, CUDA {cuda}, "
            "driver {driver}, git {git}",
            **h,
        ),
        md_format("- Profile expects GPU: {expected_gpu}; detected: {detected_gpu}", **h),
        md_format("- Seed {seed}, {repeats} repeats per measurement; took {took} s", **h),
        "",
        SUMMARY_NOTE,
    ]
    for w in report.get("warnings") or []:
        lines += ["", md_format("> **Warning:** {}", w)]
    for s in report.get("skipped") or []:
        lines += ["", md_format("> Skipped {}: {}", s["what"], s["why"])]
    analysis = report.get("analysis") or {}
    lines += class_lines(report)
    if analysis.get("roofline"):
        lines += ["", "## Roofline", ""]
        lines += [md_format("- {}", r["summary"]) for r in analysis["roofline"]]
    for env, t in (analysis.get("training") or {}).items():
        lines += ["", md_format("## Training bottleneck: {}", env), "", md_format("{}", t["summary"]), ""]
        lines += [md_format("- {}", s) for s in t.get("suggestions") or []]
    metrics = report["metrics"]
    for _, title in metric_sections():
        rows = _metric_rows(metrics, title)
        if rows:
            lines += [
                "",
                f"## {title}",
                "",
                "| " + " | ".join(METRIC_COLUMNS) + " |",
                "|---" * 7 + "|",
                *rows,
            ]
    noise_rows = noise_table(report)
    if noise_rows:
        lines += ["", "## Noise guard", "", NOISE_NOTE]
        gate = ((report.get("analysis") or {}).get("noise") or {}).get("gate")
        if isinstance(gate, str):
            lines += ["", md_format("Step gate: a step counts as slowed when its speed check ran {}.", gate)]
        lines += ["", "| " + " | ".join(NOISE_COLUMNS) + " |"]
        lines += ["|---" * len(NOISE_COLUMNS) + "|"]
        for cells, busy in noise_rows:
            row = "| " + " | ".join("{}" for _ in cells[:-1]) + (" | **busy**: {} |" if busy else " | {} |")
            lines.append(md_format(row, *cells))
    lines += ["", "## Machine fingerprint", "", "| | |", "|---|---|"]
    lines += [
        md_format("| {} | {} |", k, v)
        for k, v in machine_facts(report["fingerprint"]).items()
        if v is not None
    ]
    if images:
        lines += ["", "## Plots", ""]
        lines += [md_format("![{}]", name) + f"({quote(str(name))})" for name in images]
    return "\n".join(lines) + "\n"
