"""Compare benchmark reports: the same metrics side by side, ratios with 95% intervals.

The first report is the base. For every metric the reports share: each machine's median, the
ratio to the base (new / base), a 95% interval for that ratio (:func:`appliance.measure.stats.ratio_interval`),
and a verdict. A change is significant when the interval excludes 1; a regression is a significant
change in the worse direction (lower for higher-is-better metrics) by more than the threshold, that
stays significant when all the comparison's judged metrics are tested together (Holm's correction,
5 % family-wise): a suite of 30 metrics tested one by one at 95 % would call one or two of them
changed by chance in a comparison of a machine with itself. One significant alone reads "possible
regression" and does not fail the comparison. Descriptive ("info") figures such as phase shares show
as changed or similar, never as regressions. Reports of another
schema or with no metric in common are refused. What differs between the machines (GPU, CPU, cores,
driver, versions, config) is listed so a ratio is never read without its context.

The context is the whole fingerprint (:func:`appliance.sysinfo.machine_facts`):
CPU family/model/stepping and ISA, caches, clocks, quota and cpuset, virtualisation, compiler
flags, GPU clocks, power limit, ECC, MIG, PCIe, library versions; facts one report did not record
are named apart. The calibration ratio says how much faster one CPU ran the same fixed loops.
Metrics that the noise guard marked busy in either report are "unreliable (busy)", never a
regression. ``normalize=True`` scales CPU-bound metrics of each report by the calibration ratio
(compute loops for speed figures, the copy loop for memory bandwidth) so CPUs of different speed
can be compared, and says so.

Reports of different machines (their host id, CPU model or GPU differ: :func:`machine_change`) are
not a regression test of the code: their significant differences read "slower" / "faster", never
"regression" / "improvement" (``same_machine=True`` judges them as one machine's, e.g. one machine
after a reboot, which changes its host id). Beside each CPU-bound ratio goes the one normalized by
the calibration, and one line per report says why the machines differ (cores, per-core speed and
memory bandwidth from the calibration, GPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.markup import escape

from appliance.bench import metrics as reg
from appliance.bench import report as rpt
from appliance.errors import ReportError
from appliance.measure.stats import FAMILY_ALPHA, holm, ratio_test
from appliance.sysinfo import machine_facts


def _get(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...``, or None where a level is missing or not an object (free-form config)."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


# facts that always differ a little between runs: numbers within this relative tolerance are "the same"
TOLERANCE = 0.03
SKIP_FACTS = ("calibration ", "host id")  # calibration is shown as a ratio; the host id differs by design
UNRELIABLE = "unreliable (busy)"
SLOWED = "unreliable (slowed)"  # samples the speed gate kept although the CPU ran slow after every retake


# software that may simply be absent (a CPU machine has no CUDA): None there means "none", not "unrecorded"
ABSENT_IS_NONE = ("NVIDIA driver", "CUDA runtime", "cuDNN", "NCCL", "cupy")


def _machine(fp: dict[str, Any]) -> dict[str, Any]:
    facts = {"GPU": rpt.gpu_name(fp), **machine_facts(fp)}
    for key in ABSENT_IS_NONE:
        if facts.get(key) is None:
            facts[key] = "none"
    return facts


def _same(values: list[Any]) -> bool:
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        lo, hi = min(values), max(values)
        return hi == lo or (lo > 0 and hi / lo - 1 <= TOLERANCE)
    return len({repr(v) for v in values}) == 1


def differences(reports: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """(what, [value per report]) for every machine fact or config key that is not the same everywhere.

    Facts some reports did not record are left out here (see :func:`unrecorded`)."""
    out = []
    machines = [_machine(r["fingerprint"]) for r in reports]
    keys = list(dict.fromkeys(k for m in machines for k in m))
    for key in keys:
        if key.startswith(SKIP_FACTS):
            continue
        values = [m.get(key) for m in machines]
        if any(v is None for v in values):
            continue
        if not _same(values):
            out.append((key, values))
    busy = [sorted(_busy(r)) for r in reports]
    if any(busy):
        out.append(("busy metrics (noise guard)", [len(b) for b in busy]))
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


def unrecorded(reports: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Report index -> facts it did not record although another report did (older reports)."""
    machines = [_machine(r["fingerprint"]) for r in reports]
    keys = list(dict.fromkeys(k for m in machines for k in m if not k.startswith(SKIP_FACTS)))
    out: dict[int, list[str]] = {}
    for key in keys:
        values = [m.get(key) for m in machines]
        if any(v is None for v in values) and any(v is not None for v in values):
            for i, v in enumerate(values):
                if v is None and not (key.startswith("GPU ") and not reports[i]["fingerprint"].get("gpus")):
                    out.setdefault(i, []).append(key)  # (a machine without GPUs has no GPU facts to record)
    return out


def _busy(report: dict[str, Any]) -> set[str]:
    return {n for n, m in report["metrics"].items() if (m.get("noise") or {}).get("busy")}


def _slowed(report: dict[str, Any]) -> set[str]:
    return {
        n for n, m in report["metrics"].items() if ((m.get("noise") or {}).get("gate") or {}).get("slow_kept")
    }


def calibration_ratios(base: dict[str, Any], other: dict[str, Any]) -> dict[str, float] | None:
    """How much faster ``other``'s CPU ran the calibration loops than ``base``'s (other / base).

    ``compute`` is the geometric mean of the integer and float loops, ``copy`` the memory copy."""
    a, b = base["fingerprint"].get("calibration"), other["fingerprint"].get("calibration")
    if not a or not b:
        return None
    keys = ("int_mops", "float_gflops", "copy_gbs")
    if not all(isinstance(c.get(k), int | float) and c[k] > 0 for c in (a, b) for k in keys):
        return None  # not measured (null), or not a speed
    try:
        ints, floats = b["int_mops"] / a["int_mops"], b["float_gflops"] / a["float_gflops"]
        return {
            "compute": (ints * floats) ** 0.5,
            "int": ints,
            "float": floats,
            "copy": b["copy_gbs"] / a["copy_gbs"],
        }
    except (KeyError, TypeError, ZeroDivisionError):
        return None


SLOWER, FASTER = "slower", "faster"  # a significant difference between two machines
# significant beyond the threshold alone, but not once every judged metric of the comparison is
# tested together (Holm): shown, never counted as a regression
POSSIBLE = {
    "regression": "possible regression",
    "improvement": "possible improvement",
    SLOWER: "possibly slower",
    FASTER: "possibly faster",
}
MACHINE_FACTS = ("host id", "CPU", "CPU family/model/stepping", "GPU")  # any differing: another machine


def machine_change(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Which of the facts that identify a machine differ between two reports (empty: the same
    machine); a fact one report did not record does not count."""
    a, b = _machine(base["fingerprint"]), _machine(other["fingerprint"])
    changed = [k for k in MACHINE_FACTS if a.get(k) is not None and b.get(k) is not None and a[k] != b[k]]
    if "CPU" in changed and "CPU family/model/stepping" in changed:
        changed.remove("CPU family/model/stepping")
    return changed


def _cores(report: dict[str, Any]) -> Any:
    cpu = report["fingerprint"].get("cpu") or {}
    return cpu.get("usable_cores") or cpu.get("physical_cores")


def machine_reason(base: dict[str, Any], other: dict[str, Any], index: int, changed: list[str]) -> str:
    """One line: why report ``index`` is read as another machine, and how its CPU and GPU differ."""
    parts = []
    cores = _cores(base), _cores(other)
    if None not in cores:
        parts.append(f"usable cores {cores[0]} -> {cores[1]}")
    ratios = calibration_ratios(base, other)
    if ratios:
        parts.append(
            f"per-core speed {ratios['compute']:.2f}x and memory bandwidth {ratios['copy']:.2f}x "
            "(calibration loops)"
        )
    gpus = rpt.gpu_name(base["fingerprint"]), rpt.gpu_name(other["fingerprint"])
    parts.append(f"GPU {gpus[0]} -> {gpus[1]}" if gpus[0] != gpus[1] else f"same GPU ({gpus[0]})")
    return (
        f"report {index} is another machine than report 1 ({', '.join(changed)} differ{'s' if len(changed) == 1 else ''}): "
        f"{'; '.join(parts)}. Its differences read '{SLOWER}'/'{FASTER}', not regressions "
        "(--same-machine judges them as one machine's)"
    )


def normalized_ratio(
    name: str, ratio: float, better: str, report: dict[str, Any], ratios: dict[str, float] | None
) -> float | None:
    """``ratio`` (new / base) as if both were measured on the base's CPU: None where the metric is
    not CPU-bound, is descriptive, or a calibration is missing."""
    kind = cpu_bound(name, report)
    if kind is None or ratios is None or better == "info" or not ratios.get(kind):
        return None
    return ratio / ratios[kind] if better == "higher" else ratio * ratios[kind]


def cpu_bound(name: str, report: dict[str, Any]) -> str | None:
    """'copy' or 'compute' for metrics the CPU's speed decides; None for GPU and descriptive ones."""
    kind = reg.calibration(name)  # the metric registry's calibration kind of the name's family
    if kind in ("copy", "compute"):
        return kind
    if kind == "compute_on_cpu":
        device = _get(report.get("config"), "profile", "train", "device")
        gpu = bool(report["fingerprint"].get("cuda_available"))
        return "compute" if device == "cpu" or (device is None and not gpu) else None
    return None


def _normalized(
    name: str, metric: dict[str, Any], report: dict[str, Any], ratios: dict[str, float] | None
) -> list[float] | None:
    """``metric``'s samples as if measured on the base CPU (None when not CPU-bound)."""
    kind = cpu_bound(name, report)
    if kind is None or ratios is None or metric["better"] == "info":
        return None
    f = ratios[kind]
    scale = 1 / f if metric["better"] == "higher" else f  # times shrink on a slower CPU
    return [s * scale for s in metric["samples"] if s is not None]


def _calibration_notes(reports: list[dict[str, Any]], paths: list[str]) -> list[str]:
    notes = []
    for i, r in enumerate(reports):
        cal = r["fingerprint"].get("calibration")
        if cal and (cal.get("cpu_share") or 1) < 0.9:
            notes.append(
                f"report {i + 1}'s calibration got {100 * cal['cpu_share']:.0f}% of a core (a busy machine): "
                "its calibration figures, and ratios built on them, are low"
            )
    for i, other in enumerate(reports[1:], start=2):
        ratios = calibration_ratios(reports[0], other)
        if ratios:
            notes.append(
                f"calibration: report {i}'s CPU ran the fixed loops {ratios['compute']:.2f}x as fast as "
                f"report 1's (integer {ratios['int']:.2f}x, float {ratios['float']:.2f}x) and copied memory "
                f"{ratios['copy']:.2f}x as fast"
            )
    missing = [str(i + 1) for i, r in enumerate(reports) if not r["fingerprint"].get("calibration")]
    if missing and len(missing) < len(reports):
        notes.append(
            f"calibration: report {', '.join(missing)} has none (older than the calibration), "
            "so how fast its CPU ran is unknown"
        )
    return notes


def compare(
    reports: list[dict[str, Any]],
    threshold: float = 0.05,
    normalize: bool = False,
    same_machine: bool = False,
) -> dict[str, Any]:
    """Rows for every common metric; raises ReportError when there is nothing to compare.
    ``same_machine``: judge every report as the base's machine whatever the fingerprints say."""
    if len(reports) < 2:
        raise ReportError("compare needs at least two reports")
    paths = [r.get("_path", f"report {i + 1}") for i, r in enumerate(reports)]
    for r, path in zip(reports, paths, strict=True):
        rpt.validate(r, f"report {path}")
    ratios = [calibration_ratios(reports[0], r) for r in reports]
    if normalize:
        for r, path in zip(reports, paths, strict=True):
            if not r["fingerprint"].get("calibration"):
                raise ReportError(
                    f"--normalize needs a calibration in every report; {path} has none "
                    "(older reports lack one: re-run it with puffer-bench run)"
                )
    busy = [_busy(r) for r in reports]
    slowed = [_slowed(r) for r in reports]
    changed = [[] if same_machine else machine_change(reports[0], r) for r in reports]
    normalized: set[str] = set()
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
        for k, other in enumerate(reports[1:], start=1):
            m = other["metrics"][name]
            a = [s for s in base["samples"] if s is not None]
            b = [s for s in m["samples"] if s is not None]
            if normalize and (scaled := _normalized(name, m, other, ratios[k])) is not None:
                b = scaled
                normalized.add(name)
                row["medians"][k] = float(np.median(b)) if b else None
            try:
                if not base.get("median"):
                    raise ValueError("no base median")
                ratio, ci, p = ratio_test(a, b)  # ValueError without samples or with a zero base median
            except ValueError:
                row["ratios"].append({"ratio": None, "ci": None, "significant": False, "verdict": "no data"})
                continue
            significant = ci is not None and (ci[0] > 1 or ci[1] < 1)
            gain = 1 / ratio if base["better"] == "lower" else ratio  # > 1: better
            if name in busy[0] or name in busy[k]:
                verdict = UNRELIABLE  # measured beside other load: not evidence about the code
            elif name in slowed[0] or name in slowed[k]:
                verdict = SLOWED  # the CPU ran slow through the samples (e.g. other guests on its host)
            elif base["better"] == "info":
                verdict = "changed" if significant and abs(ratio - 1) > threshold else "similar"
            elif significant and gain < 1 - threshold:
                verdict = SLOWER if changed[k] else "regression"
            elif significant and gain > 1 + threshold:
                verdict = FASTER if changed[k] else "improvement"
            elif significant:
                verdict = "within threshold"
            else:
                verdict = "not significant"
            beside = None  # the ratio as if measured on the base's CPU (another machine, not --normalize)
            if changed[k] and name not in normalized:
                beside = normalized_ratio(name, ratio, base["better"], other, ratios[k])
            row["ratios"].append(
                {
                    "ratio": ratio,
                    "ci": ci,
                    "significant": significant,
                    "verdict": verdict,
                    "normalized": beside,
                    "p": p,
                }
            )
        rows.append(row)
    family = _judge_together(rows, len(reports) - 1)
    only = sorted({n for r in reports for n in r["metrics"]} - set(common))
    notes = _calibration_notes(reports, paths)
    if normalize:
        notes.insert(
            0,
            f"normalized: {len(normalized)} CPU-bound metric(s) of reports 2+ are scaled to report 1's CPU "
            "by the calibration ratio (compute loops for speeds, the copy loop for memory bandwidth); "
            "GPU and descriptive metrics are not",
        )
    for k, what in enumerate(changed):
        if what:
            notes.insert(0, machine_reason(reports[0], reports[k], k + 1, what))
    for k, (judged, possible, reach) in enumerate(family, start=2):
        if reach and judged > 1:
            notes.append(
                f"report {k}: the judged metrics' 95% intervals reach {100 * (reach[0] - 1):+.1f}% to "
                f"{100 * (reach[1] - 1):+.1f}% around their ratios (medians over {judged}): a difference "
                "within that does not show at these samples on these machines; more repeats or a quieter "
                "machine narrow it"
            )
        if possible:
            notes.append(
                f"report {k}: {len(possible)} metric(s) differ beyond the threshold by their own 95% interval "
                f"but not once all {judged} judged metrics are tested together (Holm, {100 * FAMILY_ALPHA:g}% "
                "family-wise), shown as 'possible ...' and never as regressions: among so many, some "
                "differ that far by chance"
            )
    for i, b in enumerate(busy):
        if b:
            notes.append(
                f"report {i + 1} has {len(b)} metric(s) measured on a busy machine, shown as "
                f"'{UNRELIABLE}' and never as regressions"
            )
    for i, b in enumerate(slowed):
        if b:
            notes.append(
                f"report {i + 1} has {len(b)} metric(s) with samples the speed gate kept although the CPU ran "
                f"slow after every retake, shown as '{SLOWED}' and never as regressions"
            )
    return {
        "threshold": threshold,
        "reports": paths,
        "rows": rows,
        "differences": differences(reports),
        "unrecorded": {i + 1: keys for i, keys in unrecorded(reports).items()},
        "notes": notes,
        "normalized": sorted(normalized),
        "machines": [{"report": k + 1, "differs": what} for k, what in enumerate(changed) if k],
        "same_machine": same_machine,
        "judged_together": [judged for judged, _, _ in family],  # per report after the base: Holm's family
        "resolution": [reach for _, _, reach in family],  # per report after the base (:func:`_resolution`)
        "not_common": only,
        "regressions": [
            row["metric"] for row in rows if any(x["verdict"] == "regression" for x in row["ratios"])
        ],
    }


def _judge_together(
    rows: list[dict[str, Any]], columns: int
) -> list[tuple[int, list[dict[str, Any]], list[float] | None]]:
    """Holm's correction over each report's judged metrics (those that could be a regression or an
    improvement: not descriptive, not set apart by the noise guard, with a p-value): a verdict beyond
    the threshold whose adjusted p-value is not below :data:`FAMILY_ALPHA` becomes 'possible ...'.
    Per report column: (metrics judged, the ratios made 'possible', :func:`_resolution`)."""
    out = []
    for k in range(columns):
        judged = [
            x
            for row in rows
            if row["better"] != "info"
            and (x := row["ratios"][k]).get("p") is not None
            and x["verdict"] not in (UNRELIABLE, SLOWED)
        ]
        adjusted = holm([x["p"] for x in judged])
        possible: list[dict[str, Any]] = []
        for x, p in zip(judged, adjusted, strict=True):
            x["p_family"] = p
            if x["verdict"] in POSSIBLE and p >= FAMILY_ALPHA:
                x["verdict"] = POSSIBLE[x["verdict"]]
                possible.append(x)
        out.append((len(judged), possible, _resolution(judged)))
    return out


def _resolution(judged: list[dict[str, Any]]) -> list[float] | None:
    """How far the judged metrics' 95% intervals reach around their ratios, as factors (the medians of
    low / ratio and high / ratio): a difference within that does not show at these samples on this
    machine. None without an interval."""
    spans = [(x["ci"][0] / x["ratio"], x["ci"][1] / x["ratio"]) for x in judged if x["ci"] and x["ratio"]]
    if not spans:
        return None
    return [float(np.median([lo for lo, _ in spans])), float(np.median([hi for _, hi in spans]))]


def ratio_text(x: dict[str, Any]) -> str:
    """'0.912 (0.884-0.951) regression': ratio, its 95% interval and the verdict, then across
    machines the calibration-normalized ratio ('; 1.19 per-core normalized'); '-' without data."""
    if x["ratio"] is None:
        return "-"
    ci = f" ({x['ci'][0]:.3f}-{x['ci'][1]:.3f})" if x["ci"] else ""
    beside = f"; {x['normalized']:.3f} normalized" if x.get("normalized") is not None else ""
    return f"{x['ratio']:.3f}{ci} {x['verdict']}{beside}"


def to_markdown(result: dict[str, Any]) -> str:
    """The comparison as Markdown; every value from the reports goes through ``md_format``."""
    md = rpt.md_format
    paths = result["reports"]
    lines = [md("# puffer-bench compare (base: {!c})", paths[0]), ""]
    lines += [md("- report {}: {!c}", i + 1, p) for i, p in enumerate(paths)]
    if result["differences"]:
        lines += [
            "",
            "## What differs",
            "",
            "| | " + " | ".join(f"report {i + 1}" for i in range(len(paths))) + " |",
        ]
        lines += ["|---" * (len(paths) + 1) + "|"]
        lines += [md("| {} |" + " {} |" * len(vals), k, *vals) for k, vals in result["differences"]]
    for i, keys in (result.get("unrecorded") or {}).items():
        lines += ["", md("Not recorded in report {} (an older report): {}", i, ", ".join(keys))]
    if result.get("notes"):
        lines += [""] + [md("- {}", n) for n in result["notes"]]
    header = "| metric | unit | " + " | ".join(f"median {i + 1}" for i in range(len(paths)))
    header += " | " + " | ".join(f"ratio {i + 2}/1 (95% CI)" for i in range(len(paths) - 1)) + " |"
    lines += ["", f"## Metrics (threshold {100 * result['threshold']:.0f}%)", "", header]
    lines += ["|---" * (2 + len(paths) + len(paths) - 1) + "|"]
    for row in result["rows"]:
        cells = [rpt.fmt(m, row["unit"]) for m in row["medians"]]
        ratios = [
            ratio_text(x).replace("regression", "**regression**")
            if x["verdict"] == "regression"
            else ratio_text(x)
            for x in row["ratios"]
        ]
        unit = row["unit"] if row["better"] == "info" else f"{row['unit']} ({row['better']} is better)"
        mark = " (normalized)" if row["metric"] in result.get("normalized", ()) else ""
        template = "| {!c}" + mark + " | {} |" + " {} |" * (len(cells) + len(ratios))
        lines.append(md(template, row["metric"], unit, *cells, *ratios))
    if result["not_common"]:
        lines += ["", md("Not in every report (left out): {}", ", ".join(result["not_common"]))]
    return "\n".join(lines) + "\n"


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """Each metric's medians and ratios as cells (rich markup: regressions red, improvements green;
    the report's own text escaped)."""
    rows = []
    for row in result["rows"]:
        cells = [rpt.fmt(m, row["unit"]) for m in row["medians"]]
        for x in row["ratios"]:
            style = {"regression": "red", "improvement": "green"}.get(x["verdict"], "")
            cell = ratio_text(x)
            cells.append(f"[{style}]{cell}[/{style}]" if style else cell)
        better = "" if row["better"] == "info" else f", {row['better']} better"
        rows.append([escape(f"{row['metric']} ({row['unit']}{better})"), *cells])
    return rows
