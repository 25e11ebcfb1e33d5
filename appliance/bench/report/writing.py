"""Writing a report: its JSON, claimed under a free name, and the Markdown, HTML and plots beside it.

Every file is written atomically, and what is written is :func:`~appliance.bench.report.schema.storable`
and passes :func:`~appliance.bench.report.schema.validate`: every report puffer-bench writes, it reads back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from appliance.bench.report.html import to_html
from appliance.bench.report.markdown import to_markdown
from appliance.bench.report.plots import plot_images
from appliance.bench.report.schema import storable, validate
from appliance.report_io import write_bytes_atomic, write_bytes_exclusive


def output_stem(out_dir: str | Path, profile: str, fingerprint: dict[str, Any], when: str) -> Path:
    """results/<profile>/<UTC date>-<host>, with -2, -3... when a report of that name exists."""
    folder = Path(out_dir) / profile
    base = f"{when[:10]}-{fingerprint.get('host_hash') or 'host'}"
    stem, n = folder / base, 2
    while stem.with_suffix(".json").exists():
        stem, n = folder / f"{base}-{n}", n + 1
    return stem


def write_new(report: dict[str, Any], out_dir: str | Path, profile: str, plots: bool = True) -> list[Path]:
    """:func:`write` under :func:`output_stem`'s name, claimed exclusively: of two runs that pick the
    same name at the same moment, one gets it and the other the next free ``-n``."""
    report = validate(storable(report))
    data = json_bytes(report)
    while True:
        stem = output_stem(out_dir, profile, report["fingerprint"], report["created_utc"])
        try:
            path = write_bytes_exclusive(stem.with_suffix(".json"), data)
        except FileExistsError:
            continue
        return [path, *render(report, stem, plots)]


def write(report: dict[str, Any], stem: Path, plots: bool = True) -> list[Path]:
    """The JSON, the Markdown and the plots next to each other; every file written atomically.

    What is written is :func:`storable` and passes :func:`validate`: every report puffer-bench
    writes, it reads back."""
    report = validate(storable(report))
    return [write_bytes_atomic(stem.with_suffix(".json"), json_bytes(report)), *render(report, stem, plots)]


def json_bytes(report: dict[str, Any]) -> bytes:
    """A :func:`storable`, validated report as the bytes :func:`write` and :func:`write_new` write."""
    return (json.dumps(report, indent=2, allow_nan=False) + "\n").encode()


def render(report: dict[str, Any], stem: Path, plots: bool = True) -> list[Path]:
    """The Markdown, HTML and plots of a report (re-rendered later from its JSON: ``report --render``)."""
    pngs = plot_images(report) if plots else []
    images = [write_bytes_atomic(stem.parent / f"{stem.name}-{suffix}.png", data) for suffix, data in pngs]
    md = to_markdown(report, images=[p.name for p in images])
    written = [write_bytes_atomic(stem.with_suffix(".md"), md.encode())]
    written.append(write_bytes_atomic(stem.with_suffix(".html"), to_html(report, pngs).encode()))
    return written + images
