"""Benchmark reports: one JSON schema, and the Markdown, HTML and PNG plots rendered from it.

A report is JSON (:mod:`~appliance.bench.report.schema`: what it holds, :class:`Report` to build
one, the one validator); Markdown, HTML and plots are always rendered from the JSON, and every
report is written with all of them beside it (:mod:`~appliance.bench.report.writing`).

Reports travel between machines, so a report file is hostile input: it is read only through
:func:`load` (bounded, then :func:`validate`, the one validator), and its content reaches output
only through escaping paths, one per kind of output: :func:`md_format` for Markdown
(:mod:`~appliance.bench.report.markdown`; every value escaped unless the template itself is the
markup), a jinja2 template with autoescape for HTML (:mod:`~appliance.bench.report.html`),
:func:`plot_text` for plots (:mod:`~appliance.bench.report.plots`; matplotlib reads ``$...$`` as
maths). What the renderers share, as plain values, is :mod:`~appliance.bench.report.content`. What
puffer-bench writes passes the validator (:func:`storable`).
"""

from __future__ import annotations

from appliance.bench.report.content import fmt, gpu_label, gpu_name, machine_line
from appliance.bench.report.html import to_html
from appliance.bench.report.markdown import md, md_code, md_format, to_markdown
from appliance.bench.report.plots import MAX_FIGURE_INCHES, plot_images, plot_text
from appliance.bench.report.schema import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_SAMPLES,
    SCHEMA,
    Report,
    load,
    storable,
    validate,
)
from appliance.bench.report.writing import json_bytes, output_stem, render, write, write_new

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_FIGURE_INCHES",
    "MAX_SAMPLES",
    "SCHEMA",
    "Report",
    "fmt",
    "gpu_label",
    "gpu_name",
    "json_bytes",
    "load",
    "machine_line",
    "md",
    "md_code",
    "md_format",
    "output_stem",
    "plot_images",
    "plot_text",
    "render",
    "storable",
    "to_html",
    "to_markdown",
    "validate",
    "write",
    "write_new",
]
