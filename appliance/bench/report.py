"""Benchmark reports: one JSON schema, and the Markdown and PNG plots rendered from it.

A report (``schema: puffer-bench/report/1``, DESIGN.md "Reports") holds the machine fingerprint,
the suite and profile it ran, the resolved config and seed, and every metric with its unit, its
direction (higher or lower is better, or "info" for descriptive figures such as phase shares), every sample and their summary (median, min, max, CV and a
bootstrap interval for the median). Markdown and plots are always rendered from the JSON.

Optional fields added compatibly (issue 17): ``fingerprint.calibration``/``build`` and the CPU
details, ``noise`` (the noise guard's readings per measurement step), ``metric.noise`` (that step's
summary with ``busy``) and ``analysis.noise`` (busy and unstable metrics). Reports without them
still load, render and compare. Every report renders to Markdown, PNG plots and one self-contained
HTML file (plots inline) beside its JSON.

Metric names are ``group/part/...`` paths, e.g. ``env_sps/breakout/threads=2`` or
``probe/gpu/h2d_pinned/64MiB``; ``labels`` carry the same parts as fields for plotting.

Reports travel between machines, so a report file is hostile input (issue 28): it is read only
through :func:`load` (bounded, then :func:`validate`, the one validator), and its content reaches
output only through escaping paths: :func:`md_format` for Markdown, a jinja2 template with
autoescape for HTML, :func:`plot_text` for plots. What puffer-bench writes passes the validator
(:func:`storable`).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
import string
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from appliance.bench.noise.table import NOISE_COLUMNS, NOISE_NOTE, noise_table
from appliance.bench.stats import summarize
from appliance.errors import ReportError
from appliance.report_io import read_json, write_bytes_atomic, write_bytes_exclusive
from appliance.sysinfo import machine_facts

SCHEMA = "puffer-bench/report/1"
REQUIRED = ("schema", "created_utc", "fingerprint", "suite", "profile", "config", "seed", "metrics")
METRIC_FIELDS = ("unit", "better", "samples")
# which way is better; "info" figures (e.g. phase shares) describe a run and are never a regression
DIRECTIONS = ("higher", "lower", "info")


class Report:
    """A report being built: metrics are added as measurements finish."""

    def __init__(
        self,
        suite: dict[str, Any],
        profile: dict[str, Any],
        fingerprint: dict[str, Any],
        config: dict[str, Any],
        seed: int,
        repeats: int,
        command: str = "",
    ) -> None:
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": command,
            "suite": suite,
            "profile": profile,
            "fingerprint": fingerprint,
            "config": config,
            "seed": seed,
            "repeats": repeats,
            "metrics": {},
            "analysis": {},
            "warnings": [],
            "skipped": [],
            "duration_s": None,
        }

    def add(
        self,
        name: str,
        samples: Sequence[float | None],
        unit: str,
        better: str = "higher",
        ceiling: dict[str, Any] | None = None,
        **labels: Any,
    ) -> dict[str, Any]:
        if better not in DIRECTIONS:
            raise ValueError(f"better must be one of {DIRECTIONS}, got {better!r}")
        metric = {
            "unit": unit,
            "better": better,
            "labels": labels,
            "samples": [None if s is None else float(s) for s in samples],
            **summarize([s for s in samples if s is not None]),
        }
        if ceiling:
            metric["ceiling"] = ceiling
        self.data["metrics"][name] = metric
        return metric

    def warn(self, message: str) -> None:
        self.data["warnings"].append(message)

    def skip(self, what: str, why: str) -> None:
        self.data["skipped"].append({"what": what, "why": why})


# ---------------------------------------------------------------------- reading: the one validator
#
# Reports are shared between machines, so a report file is hostile input. Every file read goes through
# load() (bounded size and nesting, then validate()), and validate() types every field the readers use:
# numbers that are computed with are finite (NaN and Infinity are refused; JSON has neither, and
# puffer-bench writes null for a figure it could not take), objects that are looked into are objects,
# lists that are joined hold strings, and sample counts are bounded (compare bootstraps every metric).
# Display-only fields may hold any JSON value: the Markdown and HTML renderers escape all of them.
# Fields no reader uses are left alone, so optional fields added later still load.

MAX_BYTES = 16 * 2**20  # the largest committed report is 250 KB
MAX_DEPTH = 32  # reports nest 7 deep
MAX_METRICS = 1000  # a full suite on an H100 writes 89
MAX_SAMPLES = 1000  # per metric: the bench.repeats and --runs limit
MAX_TOTAL_SAMPLES = 100_000  # compare resamples every metric 4,000 times
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # not tab, newline or CR
Check = Callable[[Any, str], None]


class _Invalid(Exception):
    def __init__(self, where: str, expected: str, value: Any) -> None:
        super().__init__(where)
        self.where, self.expected, self.value = where, expected, value


def _shown(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value):,}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _text(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise _Invalid(where, "a string", value)


def _number(value: Any, where: str) -> None:
    """A finite int or float (not a bool); an int too large for a float is not finite here."""
    try:
        ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    except OverflowError:
        ok = False
    if not ok:
        raise _Invalid(where, "a finite number", value)


def _int(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise _Invalid(where, "a whole number", value)


def _any(value: Any, where: str) -> None:
    pass


def _opt(check: Check) -> Check:
    def opt(value: Any, where: str) -> None:
        if value is not None:
            try:
                check(value, where)
            except _Invalid as e:
                if e.where == where:
                    e.expected += " or null"
                raise

    return opt


def _one_of(*choices: str) -> Check:
    def one_of(value: Any, where: str) -> None:
        if value not in choices:
            raise _Invalid(where, "one of " + ", ".join(choices), value)

    return one_of


def _list(check: Check, most: int | None = None, length: int | None = None) -> Check:
    def items(value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise _Invalid(where, "a list", value)
        if most is not None and len(value) > most:
            raise _Invalid(where, f"a list of at most {most:,}", value)
        if length is not None and len(value) != length:
            raise _Invalid(where, f"a list of {length}", value)
        for i, item in enumerate(value):
            check(item, f"{where}[{i}]")

    return items


def _map(check: Check, most: int | None = None) -> Check:
    """An object of any keys, each value checked."""

    def entries(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _Invalid(where, "an object", value)
        if most is not None and len(value) > most:
            raise _Invalid(where, f"an object of at most {most:,} entries", value)
        for key, item in value.items():
            check(item, f"{where}[{_shown(key)}]")

    return entries


def _obj(required: Sequence[str] = (), **fields: Check) -> Check:
    """An object whose named fields, where present, are checked (others are not used: left alone)."""

    def obj(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _Invalid(where, "an object", value)
        for key in required:
            if key not in value:
                raise _Invalid(_at(where, key), "present", None)
        for key, check in fields.items():
            if key in value:
                check(value[key], _at(where, key))

    return obj


NUM, TEXTS, OBJ = _opt(_number), _list(_text), _map(_any)
_GATE = _obj(
    retaken=_list(_obj(("value", "speed_ratio"), value=NUM, speed_ratio=NUM)), waited_s=NUM, slow_kept=_any
)
_METRIC = _obj(
    ("unit", "better", "samples"),
    unit=_text,
    better=_one_of(*DIRECTIONS),
    samples=_list(NUM, most=MAX_SAMPLES),
    **{k: NUM for k in ("median", "min", "max", "mean", "cv")},
    n=_opt(_int),
    ci=_opt(_list(NUM, length=2)),
    labels=_opt(_obj(env=_opt(_text), backend=_opt(_text), phase=_opt(_text), threads=_opt(_int))),
    ceiling=_opt(_obj(value=NUM)),
    noise=_opt(_obj(reasons=_opt(TEXTS), gate=_opt(_GATE))),
)
_GPU = _obj(throttle_reasons=_opt(TEXTS))
_CPU = _obj(
    **{k: _opt(OBJ) for k in ("isa", "caches", "cgroup", "virtualization")},
    flags=_opt(TEXTS),
    current_mhz=NUM,
)
_FINGERPRINT = _obj(
    cpu=_opt(_CPU),
    gpus=_opt(_list(_GPU)),
    calibration=_opt(_obj(**{k: NUM for k in ("int_mops", "float_gflops", "copy_gbs", "cpu_share")})),
    ram_bytes=NUM,
    host_id_from=_opt(TEXTS),
    **{k: _opt(OBJ) for k in ("os", "build", "versions", "git")},
)
_STEP = _obj(
    ("step",),
    n=_opt(_int),
    reasons=_opt(TEXTS),
    gate=_opt(_GATE),
    speed_ratio=_opt(_map(NUM)),
    **{f"{who}_cores_{s}": NUM for who in ("others", "steal") for s in ("mean", "max")},
)
_CURVE = _obj(
    ("runs",),
    target=NUM,
    runs=_list(_obj(("steps", "seconds", "score"), **{k: _list(NUM) for k in ("steps", "seconds", "score")})),
)
_ANALYSIS = _obj(
    roofline=_opt(_list(_obj(("summary",)))),
    training=_opt(_map(_obj(("summary",), suggestions=_opt(_list(_any))))),
    learning_curves=_opt(_map(_CURVE, most=100)),
)
_REPORT = _obj(
    REQUIRED,
    created_utc=_text,
    suite=_obj(name=_opt(_text)),
    profile=_obj(name=_opt(_text)),
    fingerprint=_FINGERPRINT,
    config=OBJ,
    seed=_int,
    repeats=_opt(_int),
    duration_s=NUM,
    warnings=_opt(_list(_any)),
    skipped=_opt(_list(_obj(("what", "why")))),
    metrics=_map(_METRIC, most=MAX_METRICS),
    analysis=_opt(_ANALYSIS),
    noise=_opt(_obj(steps=_opt(_list(_STEP)))),
)


def _control_character(data: Any) -> tuple[str, str] | None:
    """(where, the string) of the first key or string value holding a control character, else None."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if CONTROL.search(key):
                    return where or "a key", key
                stack.append((item, f"{where}[{_shown(key)}]" if where else key))
        elif isinstance(value, list):
            stack += [(item, f"{where}[{i}]") for i, item in enumerate(value)]
        elif isinstance(value, str) and CONTROL.search(value):
            return where, value
    return None


def validate(data: Any, source: str = "report") -> dict[str, Any]:
    """Check a report against the schema readers rely on; raise ReportError, one line naming the
    source and the field. Returns ``data`` unchanged."""
    if not isinstance(data, dict):
        raise ReportError(f"{source} is not a puffer-bench report (a JSON object was expected)")
    schema = data.get("schema")
    if schema != SCHEMA:
        found = f"schema {_shown(schema)}" if schema else "no 'schema' field"
        raise ReportError(f"{source} has {found}; this puffer-bench reads {SCHEMA!r} reports")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ReportError(f"{source} lacks {', '.join(missing)}")
    if isinstance(data["metrics"], dict):
        for name, metric in data["metrics"].items():
            absent = [k for k in METRIC_FIELDS if not isinstance(metric, dict) or k not in metric]
            if absent:
                raise ReportError(f"{source}: metric {_shown(name)} lacks {', '.join(absent)}")
    try:
        _REPORT(data, "")
    except _Invalid as e:
        raise ReportError(f"{source}: {e.where} must be {e.expected}, got {_shown(e.value)}") from None
    total = sum(len(m["samples"]) for m in data["metrics"].values())
    if total > MAX_TOTAL_SAMPLES:
        raise ReportError(
            f"{source} holds {total:,} samples, more than the {MAX_TOTAL_SAMPLES:,} a report may hold"
        )
    found = _control_character(data)
    if found:
        where, text = found
        char = CONTROL.search(text).group()  # type: ignore[union-attr]
        raise ReportError(
            f"{source}: {where} holds the control character 0x{ord(char):02x}, which a report never does"
        )
    return data


def load(path: str | Path) -> dict[str, Any]:
    """A report file, read within bounds (:data:`MAX_BYTES`, :data:`MAX_DEPTH`) and validated."""
    data = read_json(path, "report", ReportError, MAX_BYTES, MAX_DEPTH)
    return validate(data, f"report {path}")


def storable(report: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``report`` that :func:`validate` accepts whatever a measurement produced: null for
    NaN and infinite numbers (JSON has neither), U+FFFD for control characters in strings."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {clean(k) if isinstance(k, str) else k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, str):
            return CONTROL.sub("\ufffd", value)
        return value

    return clean(report)


# ---------------------------------------------------------------------- writing


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


# ---------------------------------------------------------------------- rendering
#
# Report content reaches three kinds of output, each through one escaping path: Markdown through
# md_format (every value escaped unless the template itself is the markup), HTML through a jinja2
# template with autoescape, plot text through plot_text (matplotlib reads $...$ as maths).


def fmt(value: float | None, unit: str = "") -> str:
    """A figure with 3-4 significant digits and an SI prefix for rates."""
    if value is None:
        return "-"
    if unit.endswith("/s") and not unit.startswith("G") and abs(value) >= 1000:
        for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {prefix}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


_MD_ESCAPES = str.maketrans(
    {
        **{chr(c): " " for c in (*range(32), *range(127, 160))},  # one line, no control characters
        **{c: "\\" + c for c in "\\`[]|"},  # no code span, link or table cell ends
        **{"&": "&amp;", "<": "&lt;"},  # no HTML tag or comment (a lone > is text)
    }
)
# what a code span cannot hold: its own delimiter, a table cell break, a line break, comment markers
_NOT_IN_CODE = re.compile(r"[`|\x00-\x1f\x7f-\x9f]|<!--|-->")


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


def plot_text(value: Any, most: int = 80) -> str:
    """Report content as matplotlib text: ``$`` escaped (no maths parsing), cut to ``most`` characters."""
    text = " ".join(str(value).split())
    text = text if len(text) <= most else text[: most - 3] + "..."
    return text.replace("$", r"\$")


MAX_FIGURE_INCHES = 600  # at 90 dpi, below Agg's 65,536 pixels a side


def gpu_name(fingerprint: dict[str, Any]) -> str:
    gpus = fingerprint.get("gpus") or []
    return ", ".join(str(g.get("name")) for g in gpus) or "none"


def gpu_label(fingerprint: dict[str, Any]) -> str:
    """The GPU names, or 'no GPU'."""
    name = gpu_name(fingerprint)
    return "no GPU" if name == "none" else name


def machine_line(fingerprint: dict[str, Any]) -> str:
    cpu = fingerprint.get("cpu") or {}
    ram = fingerprint.get("ram_bytes")
    ram_text = f"{ram / 2**30:.0f} GiB" if ram else "?"
    arch = f"{cpu['codename']}, " if cpu.get("codename") else ""
    return (
        f"GPU {gpu_label(fingerprint)}; CPU {cpu.get('model') or '?'} ({arch}{cpu.get('physical_cores')} physical cores, "
        f"{cpu.get('usable_cores')} usable); RAM {ram_text}"
    )


def metric_cells(m: dict[str, Any]) -> dict[str, str]:
    """A metric's figures as text (median, range, ci, cv, unit, ceiling), for Markdown and HTML alike."""
    unit = m["unit"]
    ci = m.get("ci")
    ceiling = m.get("ceiling") or {}
    return {
        "median": fmt(m.get("median"), unit),
        "range": f"{fmt(m.get('min'), unit)} - {fmt(m.get('max'), unit)}",
        "ci": f"{fmt(ci[0], unit)} - {fmt(ci[1], unit)}" if ci else "-",
        "cv": f"{100 * m['cv']:.1f}%" if m.get("cv") is not None else "-",
        "unit": unit,
        "ceiling": f"{fmt(ceiling['value'], unit)} ({ceiling.get('source')})" if ceiling.get("value") else "",
    }


METRIC_COLUMNS = ("metric", "median", "range", "95% CI", "CV", "unit", "ceiling")


def _metric_rows(metrics: dict[str, Any], prefix: str) -> list[str]:
    rows = []
    for name, m in metrics.items():
        if name.startswith(prefix):
            busy = " **(busy)**" if (m.get("noise") or {}).get("busy") else ""
            template = "| {name!c}" + busy + " | {median} | {range} | {ci} | {cv} | {unit} | {ceiling} |"
            rows.append(md_format(template, name=name, **metric_cells(m)))
    return rows


SECTIONS = (
    ("probe/", "Hardware probe"),
    ("env_sps/", "Env speed (Ocean C envs, random actions)"),
    ("vector_sps/", "Vector speed per backend"),
    ("train_sps/", "Training speed (end-to-end agent-steps/s)"),
    ("train_phase/", "Training phase shares"),
    ("train_buffer/", "Rollout engine buffers (share of wall time: policy step, GIL wait, env step)"),
    ("time_to_score/", "Time to score"),
    ("kernel/", "Fused kernels (us per call, cuda and eager torch; speed-up)"),
)
SUMMARY_NOTE = (
    "Figures are medians of the repeats; the range is min - max; CI is a 95% bootstrap interval for "
    "the median; CV is the run-to-run spread (sample std / mean)."
)


def header_facts(report: dict[str, Any]) -> dict[str, Any]:
    """The values of a report's header lines (plain values; each renderer escapes them)."""
    fp, prof, suite = report["fingerprint"], report["profile"], report["suite"]
    versions = fp.get("versions") or {}
    duration = report.get("duration_s")
    return {
        "suite": suite.get("name"),
        "profile": prof.get("name"),
        "created": report["created_utc"],
        "command": report.get("command") or "puffer-bench run",
        "machine": machine_line(fp),
        "puffer_bench": versions.get("puffer_bench"),
        "python": fp.get("python"),
        "torch": versions.get("torch"),
        "cuda": versions.get("cuda_runtime"),
        "driver": versions.get("nvidia_driver"),
        "git": (fp.get("git") or {}).get("commit", "?"),
        "expected_gpu": prof.get("expected_gpu") or "none",
        "detected_gpu": prof.get("detected_gpu") or "none",
        "seed": report["seed"],
        "repeats": report.get("repeats"),
        "took": f"{duration:.0f}" if isinstance(duration, int | float) else "0",
    }


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
    if analysis.get("roofline"):
        lines += ["", "## Roofline", ""]
        lines += [md_format("- {}", r["summary"]) for r in analysis["roofline"]]
    for env, t in (analysis.get("training") or {}).items():
        lines += ["", md_format("## Training bottleneck: {}", env), "", md_format("{}", t["summary"]), ""]
        lines += [md_format("- {}", s) for s in t.get("suggestions") or []]
    metrics = report["metrics"]
    for prefix, title in SECTIONS:
        rows = _metric_rows(metrics, prefix)
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
        lines += ["", "## Noise guard", "", NOISE_NOTE, "", "| " + " | ".join(NOISE_COLUMNS) + " |"]
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


def _metrics(report: dict[str, Any], group: str) -> list[tuple[str, dict[str, Any]]]:
    """The group's metrics that have a median and a range (a report may lack either)."""
    return [
        (n, m)
        for n, m in report["metrics"].items()
        if n.startswith(group + "/") and m.get("median") and None not in (m.get("min"), m.get("max"))
    ]


def _label(m: dict[str, Any], key: str) -> Any:
    return (m.get("labels") or {}).get(key)


def render_plots(report: dict[str, Any], stem: Path) -> list[Path]:
    """PNG plots next to the report: SPS per env/backend, thread scaling, training phase shares."""
    return [
        write_bytes_atomic(stem.parent / f"{stem.name}-{suffix}.png", data)
        for suffix, data in plot_images(report)
    ]


def plot_images(report: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(suffix, PNG bytes) of each plot: SPS per env/backend, thread scaling, training phase shares.

    Every text from the report goes through :func:`plot_text`; metrics lacking the labels a plot
    needs are left out of it."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out: list[tuple[str, bytes]] = []

    def save(fig: Any, suffix: str) -> None:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=90)
        plt.close(fig)
        out.append((suffix, buf.getvalue()))

    bars = []  # best thread count per env, every backend, training
    best_env: dict[str, tuple[float, float, float]] = {}
    for _, m in _metrics(report, "env_sps"):
        env = _label(m, "env")
        if env is not None and (env not in best_env or m["median"] > best_env[env][0]):
            best_env[env] = (m["median"], m["min"], m["max"])
    bars += [(f"{env} env (best threads)", *v) for env, v in best_env.items()]
    bars += [
        (f"{_label(m, 'env')} {_label(m, 'backend')}", m["median"], m["min"], m["max"])
        for _, m in _metrics(report, "vector_sps")
    ]
    bars += [
        (f"{_label(m, 'env')} train", m["median"], m["min"], m["max"])
        for _, m in _metrics(report, "train_sps")
    ]
    if bars:
        fig, ax = plt.subplots(figsize=(8, min(MAX_FIGURE_INCHES, 0.35 * len(bars) + 1.2)))
        labels = [plot_text(b[0]) for b in bars]
        med = [b[1] for b in bars]
        err = [[max(0, b[1] - b[2]) for b in bars], [max(0, b[3] - b[1]) for b in bars]]
        ax.barh(labels, med, xerr=err, color="#4c72b0")
        ax.set_xscale("log")
        ax.invert_yaxis()
        ax.set_xlabel("agent-steps/s (median, min-max bars)")
        fp = report["fingerprint"]
        cores = (fp.get("cpu") or {}).get("physical_cores")
        ax.set_title(plot_text(f"{report['suite'].get('name')} suite: {gpu_label(fp)}, {cores} cores", 120))
        save(fig, "sps")

    curves: dict[str, list[tuple[int, float]]] = {}
    for _, m in _metrics(report, "env_sps"):
        env, threads = _label(m, "env"), _label(m, "threads")
        if env is not None and isinstance(threads, int) and threads > 0:
            curves.setdefault(env, []).append((threads, m["median"]))
    if any(len(c) > 1 for c in curves.values()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for env, pts in sorted(curves.items()):
            pts.sort()
            base = pts[0][1] / pts[0][0]
            ax.plot([p[0] for p in pts], [p[1] / base for p in pts], marker="o", label=plot_text(env))
        top = max(p[0] for c in curves.values() for p in c)
        ax.plot([1, top], [1, top], "k--", linewidth=0.8, label="linear")
        ax.set_xlabel("threads")
        ax.set_ylabel("speed-up over 1 thread")
        ax.legend(fontsize=7)
        ax.set_title("env thread scaling")
        save(fig, "scaling")

    phases: dict[str, dict[str, float]] = {}
    for _, m in _metrics(report, "train_phase"):
        env, phase = _label(m, "env"), _label(m, "phase")
        if env is not None and phase is not None:
            phases.setdefault(env, {})[phase] = m["median"]
    if phases:
        fig, ax = plt.subplots(figsize=(9, min(MAX_FIGURE_INCHES, 0.6 * len(phases) + 1.6)))
        names = sorted({p for v in phases.values() for p in v})
        cmap = plt.get_cmap("tab10")
        for row, (_env, shares) in enumerate(sorted(phases.items())):
            left = 0.0
            for i, name in enumerate(names):
                width = 100 * shares.get(name, 0.0)
                ax.barh(
                    row, width, left=left, color=cmap(i % 10), label=plot_text(name) if row == 0 else None
                )
                left += width
        ax.set_yticks(range(len(phases)), [plot_text(env) for env in sorted(phases)])
        ax.set_xlabel("% of training wall time")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_title("training phase breakdown")
        save(fig, "phases")
    plot_learning_curves(report, save, plt)
    return out


# ---------------------------------------------------------------------- HTML

# Autoescape is on: every value from the report is escaped; nothing in the template is marked safe.
HTML_TEMPLATE = """\
<!doctype html><html><head><meta charset=utf-8><title>{{ title }}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:.4em .8em;margin:.4em 0}
.busy{color:#b00;font-weight:bold}img{max-width:100%}code{font-size:90%}
</style></head><body><h1>{{ title }}</h1><ul>
<li>Created {{ h['created'] }} by <code>{{ h['command'] }}</code></li>
<li>Machine: {{ h['machine'] }}</li>
<li>Versions: puffer-bench {{ h['puffer_bench'] }}, Python {{ h['python'] }}, torch {{ h['torch'] }}, git {{ h['git'] }}</li>
<li>Seed {{ h['seed'] }}, {{ h['repeats'] }} repeats per measurement; took {{ h['took'] }} s</li></ul>
<p>{{ note }}</p>
{% for w in warnings %}<div class=warn><b>Warning:</b> {{ w }}</div>
{% endfor %}{% for s in skipped %}<div class=warn>Skipped {{ s['what'] }}: {{ s['why'] }}</div>
{% endfor %}{% if roofline %}<h2>Roofline</h2><ul>{% for r in roofline %}<li>{{ r['summary'] }}</li>{% endfor %}</ul>
{% endif %}{% for env, t in training %}<h2>Training bottleneck: {{ env }}</h2><p>{{ t['summary'] }}</p><ul>
{% for s in t.get('suggestions') or [] %}<li>{{ s }}</li>{% endfor %}</ul>
{% endfor %}{% for title, rows in sections %}<h2>{{ title }}</h2>
<table><tr>{% for c in metric_columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for name, busy, c in rows %}<tr><td><code>{{ name }}</code>{% if busy %} <span class=busy>busy</span>{% endif %}</td>\
<td class=num>{{ c['median'] }}</td><td class=num>{{ c['range'] }}</td><td class=num>{{ c['ci'] }}</td>\
<td class=num>{{ c['cv'] }}</td><td class=num>{{ c['unit'] }}</td><td class=num>{{ c['ceiling'] }}</td></tr>
{% endfor %}</table>
{% endfor %}{% if images %}<h2>Plots</h2>
{% for alt, data in images %}<p><img alt="{{ alt }}" src="data:image/png;base64,{{ data }}"></p>
{% endfor %}{% endif %}{% if noise %}<h2>Noise guard</h2><p>{{ noise_note }}</p>
<table><tr>{% for c in noise_columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for cells, busy in noise %}<tr>{% for c in cells[:-1] %}<td>{{ c }}</td>{% endfor %}\
<td>{% if busy %}<span class=busy>busy</span>: {% endif %}{{ cells[-1] }}</td></tr>
{% endfor %}</table>
{% endif %}<h2>Machine fingerprint</h2>
<table><tr><th></th><th></th></tr>
{% for k, v in facts %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>
{% endfor %}</table>
</body></html>
"""


@functools.cache
def _html_template() -> Any:
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(HTML_TEMPLATE)


def to_html(report: dict[str, Any], images: Sequence[tuple[str, bytes]] = ()) -> str:
    """One self-contained HTML page: the same content as the Markdown, plots inline as base64 PNG.

    Rendered by a jinja2 template with autoescape: report content cannot add markup."""
    import base64

    h = header_facts(report)
    analysis = report.get("analysis") or {}
    metrics = report["metrics"]
    sections = []
    for prefix, title in SECTIONS:
        rows = [
            (name, bool((m.get("noise") or {}).get("busy")), metric_cells(m))
            for name, m in metrics.items()
            if name.startswith(prefix)
        ]
        if rows:
            sections.append((title, rows))
    return _html_template().render(
        title=f"puffer-bench report: suite {h['suite']}, profile {h['profile']}",
        h=h,
        note=SUMMARY_NOTE,
        warnings=report.get("warnings") or [],
        skipped=report.get("skipped") or [],
        roofline=analysis.get("roofline") or [],
        training=list((analysis.get("training") or {}).items()),
        sections=sections,
        metric_columns=METRIC_COLUMNS,
        images=[(suffix, base64.b64encode(data).decode()) for suffix, data in images],
        noise=noise_table(report),
        noise_note=NOISE_NOTE,
        noise_columns=NOISE_COLUMNS,
        facts=[(k, v) for k, v in machine_facts(report["fingerprint"]).items() if v is not None],
    )


def plot_learning_curves(report: dict[str, Any], save: Any, plt: Any) -> None:
    """Score vs agent-steps and vs wall seconds, one line per env and run, the target dashed
    (from the time-to-score runs' curves in ``analysis.learning_curves``)."""
    curves = (report.get("analysis") or {}).get("learning_curves") or {}
    if not curves:
        return
    for x, label in (("steps", "agent-steps"), ("seconds", "wall seconds")):
        envs = sorted(curves)
        cols = min(3, len(envs))
        rows = -(-len(envs) // cols)
        fig, axes = plt.subplots(
            rows, cols, figsize=(4.2 * cols, min(MAX_FIGURE_INCHES, 3.2 * rows)), squeeze=False
        )
        for ax in axes.flat[len(envs) :]:
            ax.set_visible(False)
        for ax, env in zip(axes.flat, envs, strict=False):
            entry = curves[env]
            for i, run in enumerate(entry["runs"]):
                points = [(a, b) for a, b in zip(run[x], run["score"], strict=False) if None not in (a, b)]
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    linewidth=1.2,
                    label=f"seed +{i}" if len(entry["runs"]) > 1 else None,
                )
            target = entry.get("target")
            if target is not None:
                ax.axhline(float(target), color="k", linestyle="--", linewidth=0.8)
            ax.set_title(plot_text(f"{env}: {entry.get('metric')} (target {target})", 60), fontsize=9)
            ax.set_xlabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
        save(fig, f"learning-{x}")
