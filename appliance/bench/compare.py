"""Compare benchmark reports: the same metrics side by side, ratios with bootstrap intervals.

The first report is the base. For every metric the reports share: each machine's median, the
ratio to the base (new / base), a 95% bootstrap interval for that ratio, and a verdict. A change is
significant when the interval excludes 1; a regression is a significant change in the worse
direction (lower for higher-is-better metrics) by more than the threshold; descriptive ("info")
figures such as phase shares show as changed or similar, never as regressions. Reports of another
schema or with no metric in common are refused. What differs between the machines (GPU, CPU, cores,
driver, versions, config) is listed so a ratio is never read without its context.
"""

from __future__ import annotations

from typing import Any

from appliance.bench import report as rpt
from appliance.bench.stats import ratio_interval
from appliance.errors import ReportError


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _machine(fp: dict[str, Any]) -> dict[str, Any]:
    cpu = fp.get("cpu") or {}
    versions = fp.get("versions") or {}
    return {
        "GPU": rpt.gpu_name(fp),
        "CPU": cpu.get("model"),
        "physical cores": cpu.get("physical_cores"),
        "usable cores": cpu.get("usable_cores"),
        "RAM GiB": round(fp["ram_bytes"] / 2**30) if fp.get("ram_bytes") else None,
        "NVIDIA driver": versions.get("nvidia_driver"),
        "CUDA runtime": versions.get("cuda_runtime"),
        "torch": versions.get("torch"),
        "cupy": versions.get("cupy"),
        "numpy": versions.get("numpy"),
        "python": fp.get("python"),
        "puffer-bench": versions.get("puffer_bench"),
        "git commit": (fp.get("git") or {}).get("commit"),
        "OS": (fp.get("os") or {}).get("release"),
    }


def differences(reports: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """(what, [value per report]) for every machine fact or config key that is not the same everywhere."""
    out = []
    machines = [_machine(r["fingerprint"]) for r in reports]
    for key in machines[0]:
        values = [m.get(key) for m in machines]
        if len({repr(v) for v in values}) > 1:
            out.append((key, values))
    profiles = [(r.get("profile") or {}).get("name") for r in reports]
    if len(set(profiles)) > 1:
        out.append(("profile", profiles))
    suites = [(r.get("suite") or {}).get("name") for r in reports]
    if len(set(suites)) > 1:
        out.append(("suite", suites))
    configs = [_flatten((r.get("config") or {}).get("profile") or r.get("config") or {}) for r in reports]
    for key in sorted(set().union(*configs)):
        if key in ("sources", "profile") or key.startswith("sources"):
            continue
        values = [c.get(key) for c in configs]
        if len({repr(v) for v in values}) > 1:
            out.append((f"config {key}", values))
    return out


def compare(reports: list[dict[str, Any]], threshold: float = 0.05) -> dict[str, Any]:
    """Rows for every common metric; raises ReportError when there is nothing to compare."""
    if len(reports) < 2:
        raise ReportError("compare needs at least two reports")
    for i, r in enumerate(reports):
        rpt.validate(r, r.get("_path", f"report {i + 1}"))
    common = [n for n in reports[0]["metrics"] if all(n in r["metrics"] for r in reports[1:])]
    if not common:
        raise ReportError(
            "the reports have no metric in common (different suites or envs?); "
            "run the same suite on both machines, e.g. puffer-bench run --suite quick"
        )
    rows = []
    for name in common:
        base = reports[0]["metrics"][name]
        row: dict[str, Any] = {
            "metric": name,
            "unit": base["unit"],
            "better": base["better"],
            "medians": [r["metrics"][name].get("median") for r in reports],
            "ratios": [],
        }
        for other in reports[1:]:
            m = other["metrics"][name]
            a = [s for s in base["samples"] if s is not None]
            b = [s for s in m["samples"] if s is not None]
            if not a or not b or not base.get("median"):
                row["ratios"].append({"ratio": None, "ci": None, "significant": False, "verdict": "no data"})
                continue
            ratio, ci = ratio_interval(a, b)
            significant = ci is not None and (ci[0] > 1 or ci[1] < 1)
            gain = 1 / ratio if base["better"] == "lower" else ratio  # > 1: better
            if base["better"] == "info":
                verdict = "changed" if significant and abs(ratio - 1) > threshold else "similar"
            elif significant and gain < 1 - threshold:
                verdict = "regression"
            elif significant and gain > 1 + threshold:
                verdict = "improvement"
            elif significant:
                verdict = "within threshold"
            else:
                verdict = "not significant"
            row["ratios"].append({"ratio": ratio, "ci": ci, "significant": significant, "verdict": verdict})
        rows.append(row)
    only = sorted({n for r in reports for n in r["metrics"]} - set(common))
    return {
        "threshold": threshold,
        "reports": [r.get("_path", f"report {i + 1}") for i, r in enumerate(reports)],
        "rows": rows,
        "differences": differences(reports),
        "not_common": only,
        "regressions": [
            row["metric"] for row in rows if any(x["verdict"] == "regression" for x in row["ratios"])
        ],
    }


def ratio_text(x: dict[str, Any]) -> str:
    """'0.912 (0.884-0.951) regression': ratio, its 95% interval and the verdict; '-' without data."""
    if x["ratio"] is None:
        return "-"
    ci = f" ({x['ci'][0]:.3f}-{x['ci'][1]:.3f})" if x["ci"] else ""
    return f"{x['ratio']:.3f}{ci} {x['verdict']}"


def to_markdown(result: dict[str, Any]) -> str:
    paths = result["reports"]
    lines = [f"# puffer-bench compare (base: `{paths[0]}`)", ""]
    lines += [f"- report {i + 1}: `{p}`" for i, p in enumerate(paths)]
    if result["differences"]:
        lines += [
            "",
            "## What differs",
            "",
            "| | " + " | ".join(f"report {i + 1}" for i in range(len(paths))) + " |",
        ]
        lines += ["|---" * (len(paths) + 1) + "|"]
        lines += [f"| {k} | " + " | ".join(str(v) for v in vals) + " |" for k, vals in result["differences"]]
    header = "| metric | unit | " + " | ".join(f"median {i + 1}" for i in range(len(paths)))
    header += " | " + " | ".join(f"ratio {i + 2}/1 (95% CI)" for i in range(len(paths) - 1)) + " |"
    lines += ["", f"## Metrics (threshold {100 * result['threshold']:.0f}%)", "", header]
    lines += ["|---" * (2 + len(paths) + len(paths) - 1) + "|"]
    for row in result["rows"]:
        cells = [rpt.fmt(m, row["unit"]) for m in row["medians"]]
        cells += [ratio_text(x).replace("regression", "**regression**") for x in row["ratios"]]
        unit = row["unit"] if row["better"] == "info" else f"{row['unit']} ({row['better']} is better)"
        lines.append(f"| `{row['metric']}` | {unit} | " + " | ".join(cells) + " |")
    if result["not_common"]:
        lines += ["", f"Not in every report (left out): {', '.join(result['not_common'])}"]
    return "\n".join(lines) + "\n"


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """Each metric's medians and ratios as cells (rich markup: regressions red, improvements green)."""
    rows = []
    for row in result["rows"]:
        cells = [rpt.fmt(m, row["unit"]) for m in row["medians"]]
        for x in row["ratios"]:
            style = {"regression": "red", "improvement": "green"}.get(x["verdict"], "")
            cell = ratio_text(x)
            cells.append(f"[{style}]{cell}[/{style}]" if style else cell)
        better = "" if row["better"] == "info" else f", {row['better']} better"
        rows.append([f"{row['metric']} ({row['unit']}{better})", *cells])
    return rows
