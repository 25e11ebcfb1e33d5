"""What every rendering of a report shows, as plain values: figures as text, the header's facts,
the metric sections and each metric's cells. Each renderer escapes them its own way.
"""

from __future__ import annotations

from typing import Any

from appliance.bench import metrics as reg


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


def sections() -> list[tuple[str, str]]:
    """(the shortest prefix among its families, title) of each metric section, from the registry
    (:mod:`appliance.bench.metrics`), in its order."""
    return [
        (min((f.prefix for f in reg.FAMILIES if f.section == title), key=len), title)
        for title in reg.sections()
    ]


def section_rows(metrics: dict[str, Any], title: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, metric) of the report's metrics in section ``title``, in the report's order."""
    return list(reg.in_section(metrics, title))


SECTIONS = tuple(sections())  # the registry's sections when this module was imported (the site's families)
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
