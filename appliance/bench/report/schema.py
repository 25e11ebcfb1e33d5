"""The report schema: what a report holds, :class:`Report` to build one, and the one validator of report files.

A report (``schema: puffer-bench/report/1``) holds the machine fingerprint,
the suite and profile it ran, the resolved config and seed, and every metric with its unit, its
direction (higher or lower is better, or "info" for descriptive figures such as phase shares), every
sample and their summary (median, min, max, CV and a bootstrap interval for the median).

Optional fields were added compatibly: ``fingerprint.calibration``/``build`` and the CPU details,
``noise`` (the noise guard's readings per measurement step), ``metric.noise`` (that step's summary
with ``busy``) and ``analysis.noise`` (busy and unstable metrics). Reports without them still load,
render and compare.

Metric names are ``group/part/...`` paths, e.g. ``env_sps/breakout/threads=2`` or
``probe/gpu/h2d_pinned/64MiB``; ``labels`` carry the same parts as fields for plotting.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.errors import ReportError
from appliance.measure.stats import summarize
from appliance.report_io import read_json

if TYPE_CHECKING:
    from appliance.bench.metrics import Family

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

    def record(
        self,
        family: Family,
        parts: Sequence[Any],
        samples: Sequence[float | None],
        unit: str | None = None,
        better: str | None = None,
        ceiling: dict[str, Any] | None = None,
        **labels: Any,
    ) -> dict[str, Any]:
        """:meth:`add` a metric of a registered ``family`` (:mod:`appliance.bench.metrics`), named by
        ``parts`` below its prefix, in the family's unit and direction unless given."""
        return self.add(
            family.name(*parts), samples, unit or family.unit, better or family.better, ceiling, **labels
        )

    def samples(self, name: str) -> list[float | None]:
        """The samples recorded so far for ``name`` (none: an empty list)."""
        metric = self.data["metrics"].get(name)
        return list(metric["samples"]) if metric else []

    def warn(self, message: str) -> None:
        self.data["warnings"].append(message)

    def skip(self, what: str, why: str) -> None:
        self.data["skipped"].append({"what": what, "why": why})

    def set(self, field: str, value: Any) -> None:
        """A top-level field of the report (``duration_s``, ``config``, ``partial``, ...); never the
        metrics, the analysis, warnings or skips, which have their own methods."""
        if field in ("schema", "metrics", "analysis", "warnings", "skipped"):
            raise ValueError(f"the report's {field!r} is written through its own methods")
        self.data[field] = value

    def analyse(self, key: str, value: Any, entry: str | None = None) -> None:
        """``analysis[key] = value``, or with ``entry`` ``analysis[key][entry] = value``."""
        if entry is None:
            self.data["analysis"][key] = value
        else:
            self.data["analysis"].setdefault(key, {})[entry] = value

    def append_analysis(self, key: str, value: Any) -> None:
        """Append ``value`` to the list ``analysis[key]``."""
        self.data["analysis"].setdefault(key, []).append(value)

    def noise(self) -> dict[str, Any]:
        """The noise guard's section (``noise``: its start checks and one entry per step), created
        empty the first time; the guard fills it (:mod:`appliance.measure.noise`)."""
        return self.data.setdefault("noise", {"steps": []})

    def set_metric_noise(self, name: str, noise: dict[str, Any]) -> None:
        """The noise summary of metric ``name`` (the guard's, for the step that measured it)."""
        self.data["metrics"][name]["noise"] = noise


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
