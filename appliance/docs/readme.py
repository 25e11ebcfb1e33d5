"""The README's results table and plot, generated from committed reports (``make readme-results``).

The table sits between two markers in README.md and is replaced whole; nothing in it is typed by
hand. The plot (``results/summary.png``) shows the same reports' speed figures side by side. Below
them, where a profile folder has a ``parity/`` folder with a trainer-speed comparison (the report
``tools/pufferlib_peer.py speed`` writes: both trainers at the peer's settings, interleaved rounds on
one machine), the newest such report per profile becomes a second table: ours beside the peer.

Reports may come from other machines: every value in the table is escaped for Markdown (so no
report can add HTML, or marker text that would end the block), and the README must hold exactly one
pair of markers, so regenerating gives the same bytes however often it runs.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from appliance.bench import metrics as reg
from appliance.bench import report as rpt
from appliance.errors import ReportError
from appliance.report_io import decode_utf8, read_bounded, read_json, write_bytes_atomic

BEGIN, END = "<!-- results:begin (make readme-results) -->", "<!-- results:end -->"


def newest_report(folder: Path, wanted: Any = lambda data: True) -> Path | None:
    """The newest complete puffer-bench/report/1 JSON in ``folder`` for which ``wanted(data)`` holds
    (other JSON files live there too, and partial reports of interrupted suites are skipped)."""
    best: tuple[str, Path] | None = None
    for path in folder.glob("*.json"):
        try:
            data = read_json(path, "report", ReportError, rpt.MAX_BYTES, rpt.MAX_DEPTH)
        except ReportError:
            continue  # not a report (or not readable)
        if (
            isinstance(data, dict)
            and data.get("schema") == rpt.SCHEMA
            and not data.get("partial")
            and wanted(data)
        ):
            key = str(data.get("created_utc"))
            if best is None or key > best[0]:
                best = (key, path)
    return best[1] if best else None


def latest_reports(results: Path) -> list[Path]:
    """The newest complete report in each profile folder."""
    folders = sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []
    out = [path for path in map(newest_report, folders) if path]
    if not out:
        raise ReportError(f"no {rpt.SCHEMA} reports under {results}/<profile>/; run puffer-bench run first")
    return out


RATIO = reg.TRAIN_SPS_RATIO.prefix  # the per-round ratios a trainer-speed comparison holds
OURS = "puffer-bench"


def compares_speed(data: dict[str, Any]) -> bool:
    metrics = data.get("metrics")
    return isinstance(metrics, dict) and any(str(n).startswith(RATIO) for n in metrics)


def latest_peer_reports(results: Path) -> list[Path]:
    """Per profile folder, the newest report under its ``parity/`` folder that compares two trainers'
    speed (a ``train_sps_ratio/`` metric; the folder also holds learning curves); none is fine: the
    peer is optional."""
    folders = sorted(p for p in results.glob("*/parity") if p.is_dir()) if results.is_dir() else []
    return [path for path in (newest_report(f, compares_speed) for f in folders) if path]


def peer_table(reports: list[dict[str, Any]], paths: list[Path]) -> str:
    """One row per env and peer of each trainer-speed report: both medians, the median of the
    per-round ratios with its range, the rounds, and the settings our side ran with (the peer's, or
    our defaults for the env) and its extra flags."""
    md = rpt.md_format
    lines = [
        "| machine | env | puffer-bench's speed | peer | the peer's speed | puffer-bench / peer: median of rounds (range) | rounds | puffer-bench's settings | report |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r, path in zip(reports, paths, strict=True):
        cores = (r["fingerprint"].get("cpu") or {}).get("physical_cores")
        machine = (r["profile"].get("name"), rpt.gpu_label(r["fingerprint"]), cores)
        definition = (r.get("suite") or {}).get("definition") or {}
        flags = " ".join(str(f) for f in definition.get("ours_set") or []) or "none"
        # the peer always runs its own config; ours ran the peer's values (bench/parity/ENV.yaml) or
        # its own defaults for the env (`speed --ours-defaults`): unequal work, which the row must say
        settings = "its own defaults" if definition.get("ours_config") == "defaults" else "the peer's"
        settings = f"{settings}, extra flags: {flags}"
        for name, ratio in r["metrics"].items():
            parts = name.split("/")
            if not name.startswith(RATIO) or len(parts) != 3 or not parts[2].startswith(OURS + "_over_"):
                continue
            env, peer = parts[1], parts[2][len(OURS + "_over_") :]
            ours = r["metrics"].get(f"train_sps/{env}/{OURS}") or {}
            theirs = r["metrics"].get(f"train_sps/{env}/{peer}") or {}
            unit = ours.get("unit") or theirs.get("unit") or "agent-steps/s"
            spread = f"{rpt.fmt(ratio.get('min'))}-{rpt.fmt(ratio.get('max'))}"
            lines.append(
                md("| {!c}: {}, {} cores | {!c} | {} | {!c} | {} | {}x ({}) | {} | {!c} | [{}]", *machine, env,
                   rpt.fmt(ours.get("median"), unit), peer, rpt.fmt(theirs.get("median"), unit),
                   rpt.fmt(ratio.get("median")), spread, ratio.get("n"), settings, path.name)
                + f"({quote(path.as_posix())}) |"
            )  # fmt: skip
    return "\n".join(lines)


def headline(name: str) -> bool:
    """Whether the reference table shows ``name``: its family's README rows (the metric registry)."""
    return name.startswith(reg.readme_starts()) and "/4096" not in name


def table(reports: list[dict[str, Any]], paths: list[Path]) -> str:
    names: list[str] = []
    for r in reports:
        names += [n for n in r["metrics"] if headline(n) and n not in names]
    md = rpt.md_format
    head = []
    for r in reports:
        cores = (r["fingerprint"].get("cpu") or {}).get("physical_cores")
        head.append(
            md("{!c}: {}, {} cores", r["profile"].get("name"), rpt.gpu_label(r["fingerprint"]), cores)
        )
    lines = [
        "| metric | unit | " + " | ".join(head) + " |",
        "|---|---|" + "---|" * len(reports),
    ]
    for name in names:
        unit = next(r["metrics"][name]["unit"] for r in reports if name in r["metrics"])
        cells = []
        for r in reports:
            m = r["metrics"].get(name)
            busy = " (busy)" if m and (m.get("noise") or {}).get("busy") else ""
            cells.append(rpt.fmt(m.get("median"), unit) + busy if m else "-")
        lines.append(md("| {!c} | {} |" + " {} |" * len(cells), name, unit, *cells))
    sources = ", ".join(md("[{}]", p.name) + f"({quote(p.as_posix())})" for p in paths)
    lines += ["", f"Medians of each report's repeats, from {sources}."]
    if any((m.get("noise") or {}).get("busy") for r in reports for m in r["metrics"].values()):
        lines[-1] += (
            " (busy): measured while other processes used the machine (noise guard); low for that reason."
        )
    return "\n".join(lines)


def plot(reports: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    names: list[str] = []
    for r in reports:
        names += [n for n in r["metrics"] if reg.plotted(n) and n not in names]
    fig, ax = plt.subplots(figsize=(8, min(rpt.MAX_FIGURE_INCHES, 0.3 * len(names) * len(reports) + 1.5)))
    height = 0.8 / max(1, len(reports))
    for i, r in enumerate(reports):
        values = [(r["metrics"].get(n) or {}).get("median") or 0 for n in names]
        ax.barh(
            [j + i * height for j in range(len(names))],
            values,
            height=height,
            label=rpt.plot_text(f"{r['profile'].get('name')}: {rpt.gpu_label(r['fingerprint'])}"),
        )
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(names))], map(rpt.plot_text, names), fontsize=7)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("agent-steps/s (median)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return write_bytes_atomic(path, buf.getvalue())


def update_readme(readme: Path, paths: list[Path], results: Path) -> list[Path]:
    reports = [rpt.load(p) for p in paths]
    text = decode_utf8(
        read_bounded(readme, "README", ReportError, rpt.MAX_BYTES), readme, "README", ReportError
    )
    if BEGIN not in text or END not in text:
        raise ReportError(f"{readme} has no results block; add the lines {BEGIN!r} and {END!r}")
    begins, ends = text.count(BEGIN), text.count(END)
    if begins != 1 or ends != 1 or text.index(BEGIN) > text.index(END):
        raise ReportError(
            f"{readme} has {begins} {BEGIN!r} and {ends} {END!r} markers: keep exactly one of each, "
            "in that order (a block regenerated by an older puffer-bench may have repeated them)"
        )
    peer_paths = latest_peer_reports(results)
    peers = [rpt.load(p) for p in peer_paths]
    image = plot(reports, results / "summary.png")
    rel = lambda p: Path(os.path.relpath(Path(p).resolve(), readme.resolve().parent)).as_posix()  # noqa: E731
    parts = [BEGIN, "", table(reports, [Path(rel(p)) for p in paths]), ""]
    if peers:
        parts += [
            "Training speed beside another trainer, on one machine at the peer's own settings, in "
            "interleaved rounds (`python tools/pufferlib_peer.py speed ENV`; what differs is in "
            "[docs/lab/peers.md](docs/lab/peers.md)):",
            "",
            peer_table(peers, [Path(rel(p)) for p in peer_paths]),
            "",
        ]
    parts += [f"![speed per env and backend]({rel(image)})", "", END]
    block = "\n".join(parts)
    assert block.count(BEGIN) == 1 and block.count(END) == 1, "report content must be escaped"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    write_bytes_atomic(readme, (head + block + tail).encode())
    return [readme, image]
