"""The noise guard's table in a report: one row per measurement step, for the Markdown and the HTML."""

from __future__ import annotations

from typing import Any

NOISE_COLUMNS = (
    "step", "readings", "others' load, cores (mean/max)", "steal, cores (mean/max)",
    "speed check (int/float/copy vs start median)", "speed gate: samples, retaken, kept slow, waited", "busy",
)  # fmt: skip
NOISE_NOTE = (
    "Sampled during each measurement: CPU used by processes outside puffer-bench, hypervisor steal "
    "time and, on GPUs, other processes and clock slowdowns; before and after it, unless the speed "
    "gate checks each of its samples, a speed check (the calibration loops once: slowed by contention "
    "/proc cannot see, such as other virtual machines on the host). A busy step's figures are low for "
    "a reason that has nothing to do with the code. "
    "CPU-bound samples go through a speed gate: a short check on each CPU before and after each; "
    "while a CPU runs two loops below the floors the start checks' spread sets (the step gate) the "
    "gate waits, and a sample with a slow check is taken again (the discarded values stay in the "
    "JSON, with their speed as a share of the start checks' median), within the suite's gate budget."
)


def _num(value: Any, spec: str) -> str:
    """A number formatted with ``spec``, or '-' where the report has none."""
    return "-" if value is None else format(value, spec)


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{100 * ratio:.0f}%"


def _gate_cell(step: dict[str, Any]) -> str:
    gate = step.get("gate")
    if not gate:
        return "-"
    taken = gate.get("retaken") or []
    retaken = ", ".join(f"{_num(r['value'], '.3g')} at {_percent(r['speed_ratio'])}" for r in taken)
    return (
        f"{gate.get('samples')}, {len(taken)}{f' ({retaken})' if retaken else ''}, "
        f"{gate.get('slow_kept')}, {_num(gate.get('waited_s'), 'g')} s"
    )


def _speed_cell(step: dict[str, Any]) -> str:
    ratio = step.get("speed_ratio")
    if not ratio:
        return "-"
    return " / ".join(_percent(ratio[k]) for k in ("int_mops", "float_gflops", "copy_gbs") if k in ratio)


def noise_table(report: dict[str, Any]) -> list[tuple[list[str], bool]]:
    """(cells, busy) per noise-guard step: the last cell is the busy reasons, 'quiet' or '-'."""
    rows = []
    for step in (report.get("noise") or {}).get("steps") or []:
        if not step.get("n"):
            rows.append(([str(step["step"]), "0", "-", "-", _speed_cell(step), _gate_cell(step), "-"], False))
            continue
        busy = bool(step.get("busy"))
        cores = [
            f"{_num(step.get(f'{who}_cores_mean'), '.2f')} / {_num(step.get(f'{who}_cores_max'), '.2f')}"
            for who in ("others", "steal")
        ]
        reasons = "; ".join(step.get("reasons") or []) if busy else "quiet"
        rows.append(
            ([str(step["step"]), str(step["n"]), *cores, _speed_cell(step), _gate_cell(step), reasons], busy)
        )
    return rows
