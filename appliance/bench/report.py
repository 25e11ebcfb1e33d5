"""Benchmark reports: one JSON schema, and the Markdown and PNG plots rendered from it.

A report (``schema: puffer-bench/report/1``, DESIGN.md "Reports") holds the machine fingerprint,
the suite and profile it ran, the resolved config and seed, and every metric with its unit, its
direction (higher or lower is better, or "info" for descriptive figures such as phase shares), every sample and their summary (median, min, max, CV and a
bootstrap interval for the median). Markdown and plots are always rendered from the JSON.

Metric names are ``group/part/...`` paths, e.g. ``env_sps/breakout/threads=2`` or
``probe/gpu/h2d_pinned/64MiB``; ``labels`` carry the same parts as fields for plotting.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from appliance.bench.stats import summarize
from appliance.errors import ReportError
from appliance.report_io import write_bytes_atomic, write_json_atomic

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


# ---------------------------------------------------------------------- reading


def validate(data: Any, source: str = "report") -> dict[str, Any]:
    """Check a loaded report's shape; raise ReportError naming what is wrong."""
    if not isinstance(data, dict):
        raise ReportError(f"{source} is not a puffer-bench report (a JSON object was expected)")
    schema = data.get("schema")
    if schema != SCHEMA:
        found = f"schema {schema!r}" if schema else "no 'schema' field"
        raise ReportError(f"{source} has {found}; this puffer-bench reads {SCHEMA!r} reports")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ReportError(f"{source} lacks {', '.join(missing)}")
    if not isinstance(data["metrics"], dict):
        raise ReportError(f"{source}: 'metrics' must be an object of name -> metric")
    for name, metric in data["metrics"].items():
        absent = [k for k in METRIC_FIELDS if not isinstance(metric, dict) or k not in metric]
        if absent:
            raise ReportError(f"{source}: metric {name!r} lacks {', '.join(absent)}")
        if metric["better"] not in DIRECTIONS:
            raise ReportError(f"{source}: metric {name!r} has better={metric['better']!r}")
    return data


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"no such report: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"cannot read report {path}: {e}") from None
    return validate(data, str(path))


# ---------------------------------------------------------------------- writing


def output_stem(out_dir: str | Path, profile: str, fingerprint: dict[str, Any], when: str) -> Path:
    """results/<profile>/<UTC date>-<host>, with -2, -3... when a report of that name exists."""
    folder = Path(out_dir) / profile
    base = f"{when[:10]}-{fingerprint.get('host_hash') or 'host'}"
    stem, n = folder / base, 2
    while stem.with_suffix(".json").exists():
        stem, n = folder / f"{base}-{n}", n + 1
    return stem


def write(report: dict[str, Any], stem: Path, plots: bool = True) -> list[Path]:
    """The JSON, the Markdown and the plots next to each other; every file written atomically."""
    validate(report)
    return [write_json_atomic(stem.with_suffix(".json"), report), *render(report, stem, plots)]


def render(report: dict[str, Any], stem: Path, plots: bool = True) -> list[Path]:
    """The Markdown and plots of a report (also re-rendered later from its JSON: ``puffer-bench report``)."""
    written = []
    images = render_plots(report, stem) if plots else []
    md = to_markdown(report, images=[p.name for p in images])
    written.append(write_bytes_atomic(stem.with_suffix(".md"), md.encode()))
    return written + images


# ---------------------------------------------------------------------- rendering


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
    return (
        f"GPU {gpu_label(fingerprint)}; CPU {cpu.get('model') or '?'} ({cpu.get('physical_cores')} physical cores, "
        f"{cpu.get('usable_cores')} usable); RAM {ram_text}"
    )


def _metric_rows(metrics: dict[str, Any], prefix: str) -> list[str]:
    rows = []
    for name, m in metrics.items():
        if not name.startswith(prefix):
            continue
        ci = m.get("ci")
        ci_text = f"{fmt(ci[0], m['unit'])} - {fmt(ci[1], m['unit'])}" if ci else "-"
        cv = f"{100 * m['cv']:.1f}%" if m.get("cv") is not None else "-"
        ceiling = m.get("ceiling")
        ceil_text = (
            f"{fmt(ceiling['value'], m['unit'])} ({ceiling['source']})"
            if ceiling and ceiling.get("value")
            else ""
        )
        rows.append(
            f"| `{name}` | {fmt(m.get('median'), m['unit'])} | {fmt(m.get('min'), m['unit'])} - "
            f"{fmt(m.get('max'), m['unit'])} | {ci_text} | {cv} | {m['unit']} | {ceil_text} |"
        )
    return rows


SECTIONS = (
    ("probe/", "Hardware probe"),
    ("env_sps/", "Env speed (Ocean C envs, random actions)"),
    ("vector_sps/", "Vector speed per backend"),
    ("train_sps/", "Training speed (end-to-end agent-steps/s)"),
    ("train_phase/", "Training phase shares"),
    ("time_to_score/", "Time to score"),
)


def to_markdown(report: dict[str, Any], images: Sequence[str] = ()) -> str:
    fp, prof = report["fingerprint"], report["profile"]
    suite = report["suite"]
    lines = [
        f"# puffer-bench report: suite `{suite.get('name')}`, profile `{prof.get('name')}`",
        "",
        f"- Created {report['created_utc']} by `{report.get('command') or 'puffer-bench run'}`",
        f"- Machine: {machine_line(fp)}",
        f"- Versions: puffer-bench {fp.get('versions', {}).get('puffer_bench')}, Python {fp.get('python')}, "
        f"torch {fp.get('versions', {}).get('torch')}, CUDA {fp.get('versions', {}).get('cuda_runtime')}, "
        f"driver {fp.get('versions', {}).get('nvidia_driver')}, git {(fp.get('git') or {}).get('commit', '?')}",
        f"- Profile expects GPU: {prof.get('expected_gpu') or 'none'}; detected: {prof.get('detected_gpu') or 'none'}",
        f"- Seed {report['seed']}, {report.get('repeats')} repeats per measurement; "
        f"took {report.get('duration_s') or 0:.0f} s",
        "",
        "Figures are medians of the repeats; the range is min - max; CI is a 95% bootstrap interval for "
        "the median; CV is the run-to-run spread (sample std / mean).",
    ]
    for w in report.get("warnings") or []:
        lines += ["", f"> **Warning:** {w}"]
    for s in report.get("skipped") or []:
        lines += ["", f"> Skipped {s['what']}: {s['why']}"]
    analysis = report.get("analysis") or {}
    if analysis.get("roofline"):
        lines += ["", "## Roofline", ""]
        lines += [f"- {r['summary']}" for r in analysis["roofline"]]
    for env, t in (analysis.get("training") or {}).items():
        lines += ["", f"## Training bottleneck: {env}", "", t["summary"], ""]
        lines += [f"- {s}" for s in t.get("suggestions", [])]
    metrics = report["metrics"]
    for prefix, title in SECTIONS:
        rows = _metric_rows(metrics, prefix)
        if rows:
            lines += [
                "",
                f"## {title}",
                "",
                "| metric | median | range | 95% CI | CV | unit | ceiling |",
                "|---|---|---|---|---|---|---|",
                *rows,
            ]
    if images:
        lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in images]
    return "\n".join(lines) + "\n"


def _metrics(report: dict[str, Any], group: str) -> list[tuple[str, dict[str, Any]]]:
    return [(n, m) for n, m in report["metrics"].items() if n.startswith(group + "/") and m.get("median")]


def render_plots(report: dict[str, Any], stem: Path) -> list[Path]:
    """PNG plots next to the report: SPS per env/backend, thread scaling, training phase shares."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out: list[Path] = []

    def save(fig: Any, suffix: str) -> None:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=90)
        plt.close(fig)
        out.append(write_bytes_atomic(stem.parent / f"{stem.name}-{suffix}.png", buf.getvalue()))

    bars = []  # best thread count per env, every backend, training
    best_env: dict[str, tuple[float, float, float]] = {}
    for _, m in _metrics(report, "env_sps"):
        env = m["labels"]["env"]
        if env not in best_env or m["median"] > best_env[env][0]:
            best_env[env] = (m["median"], m["min"], m["max"])
    bars += [(f"{env} env ({'best threads'})", *v) for env, v in best_env.items()]
    bars += [
        (f"{m['labels']['env']} {m['labels']['backend']}", m["median"], m["min"], m["max"])
        for _, m in _metrics(report, "vector_sps")
    ]
    bars += [
        (f"{m['labels']['env']} train", m["median"], m["min"], m["max"])
        for _, m in _metrics(report, "train_sps")
    ]
    if bars:
        fig, ax = plt.subplots(figsize=(8, 0.35 * len(bars) + 1.2))
        labels = [b[0] for b in bars]
        med = [b[1] for b in bars]
        err = [[b[1] - b[2] for b in bars], [b[3] - b[1] for b in bars]]
        ax.barh(labels, med, xerr=err, color="#4c72b0")
        ax.set_xscale("log")
        ax.invert_yaxis()
        ax.set_xlabel("agent-steps/s (median, min-max bars)")
        cores = report["fingerprint"].get("cpu", {}).get("physical_cores")
        ax.set_title(
            f"{report['suite'].get('name')} suite: {gpu_label(report['fingerprint'])}, {cores} cores"
        )
        save(fig, "sps")

    curves: dict[str, list[tuple[int, float]]] = {}
    for _, m in _metrics(report, "env_sps"):
        curves.setdefault(m["labels"]["env"], []).append((int(m["labels"]["threads"]), m["median"]))
    if any(len(c) > 1 for c in curves.values()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for env, pts in sorted(curves.items()):
            pts.sort()
            base = pts[0][1] / pts[0][0]
            ax.plot([p[0] for p in pts], [p[1] / base for p in pts], marker="o", label=env)
        top = max(p[0] for c in curves.values() for p in c)
        ax.plot([1, top], [1, top], "k--", linewidth=0.8, label="linear")
        ax.set_xlabel("threads")
        ax.set_ylabel("speed-up over 1 thread")
        ax.legend(fontsize=7)
        ax.set_title("env thread scaling")
        save(fig, "scaling")

    phases: dict[str, dict[str, float]] = {}
    for _, m in _metrics(report, "train_phase"):
        phases.setdefault(m["labels"]["env"], {})[m["labels"]["phase"]] = m["median"]
    if phases:
        fig, ax = plt.subplots(figsize=(9, 0.6 * len(phases) + 1.6))
        names = sorted({p for v in phases.values() for p in v})
        cmap = plt.get_cmap("tab10")
        for row, (_env, shares) in enumerate(sorted(phases.items())):
            left = 0.0
            for i, name in enumerate(names):
                width = 100 * shares.get(name, 0.0)
                ax.barh(row, width, left=left, color=cmap(i % 10), label=name if row == 0 else None)
                left += width
        ax.set_yticks(range(len(phases)), sorted(phases))
        ax.set_xlabel("% of training wall time")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_title("training phase breakdown")
        save(fig, "phases")
    plot_learning_curves(report, save, plt)
    return out


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
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
        for ax in axes.flat[len(envs) :]:
            ax.set_visible(False)
        for ax, env in zip(axes.flat, envs, strict=False):
            entry = curves[env]
            for i, run in enumerate(entry["runs"]):
                ax.plot(
                    run[x],
                    run["score"],
                    linewidth=1.2,
                    label=f"seed +{i}" if len(entry["runs"]) > 1 else None,
                )
            ax.axhline(float(entry["target"]), color="k", linestyle="--", linewidth=0.8)
            ax.set_title(f"{env}: {entry['metric']} (target {entry['target']})", fontsize=9)
            ax.set_xlabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
        save(fig, f"learning-{x}")
