"""Every report under some folders, read through the one validator, grouped by machine and series.

A folder shared by many machines holds reports, reports of another schema version, and other JSON
(a selftest's verdict, an A/B result). Reports are read with :func:`appliance.bench.report.load`
(bounded, validated); every other ``.json`` is kept in :attr:`Collection.skipped` with why, so a
report of another schema version is listed, never dropped silently.

A machine is what :func:`appliance.compare.compare.machine_change` calls one: the same CPU model,
family/model/stepping and GPUs (plus cores and RAM, which a report's figures depend on). The host
id is left out, since it changes with every boot. A series is one metric on one machine in one
suite and profile: figures measured with another suite's settings are not one history.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.bench import report as rpt
from appliance.errors import ReportError
from appliance.report_io import read_json
from appliance.sysinfo import machine_facts

REPORT_SCHEMA_PREFIX = "puffer-bench/report/"


def digest(*parts: Any, size: int = 10) -> str:
    """A short hex name for ``parts`` (file names of pages: never a string from a report)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:size]


@dataclass
class Machine:
    id: str
    facts: dict[str, Any]  # machine_facts of its newest report
    label: str
    reports: list[Entry] = field(default_factory=list)
    host_ids: set[str] = field(default_factory=set)


@dataclass
class Entry:
    """One report read from disk."""

    id: str
    path: Path
    shown: str  # the path as given on the command line, for display and `compare` commands
    data: dict[str, Any]
    machine: str = ""

    @property
    def created(self) -> str:
        return self.data["created_utc"]

    @property
    def suite(self) -> str:
        return str((self.data["suite"] or {}).get("name") or "?")

    @property
    def profile(self) -> str:
        return str((self.data["profile"] or {}).get("name") or "?")

    @property
    def commit(self) -> str:
        """The git commit, '+dirty' where the tree had changes, or '?' when not recorded."""
        git = self.data["fingerprint"].get("git") or {}
        commit = git.get("commit")
        if not isinstance(commit, str) or not commit:
            return "?"
        return commit + ("+dirty" if git.get("dirty") else "")

    def label(self) -> str:
        return f"{self.created[:10]} {self.suite}/{self.profile} @ {short_commit(self.commit)} ({self.shown})"


def short_commit(commit: str) -> str:
    if commit == "?":
        return "?"
    dirty = commit.endswith("+dirty")
    return commit[:8] + ("+dirty" if dirty else "")


@dataclass
class Skipped:
    path: str
    why: str
    other_version: bool  # a report of another schema version (not merely another kind of file)


@dataclass
class Collection:
    reports: list[Entry]
    machines: dict[str, Machine]
    skipped: list[Skipped]

    def series(self) -> dict[tuple[str, str, str, str], list[Entry]]:
        """(metric, machine id, suite, profile) -> the reports that hold the metric, oldest first."""
        out: dict[tuple[str, str, str, str], list[Entry]] = {}
        for e in sorted(self.reports, key=lambda e: e.created):
            for name in e.data["metrics"]:
                out.setdefault((name, e.machine, e.suite, e.profile), []).append(e)
        return out

    def metric_names(self) -> list[str]:
        return sorted({n for e in self.reports for n in e.data["metrics"]})


def machine_key(fp: dict[str, Any]) -> tuple[Any, ...]:
    facts = machine_facts(fp)
    ram = fp.get("ram_bytes")
    return (
        facts.get("CPU"),
        facts.get("CPU family/model/stepping"),
        (fp.get("cpu") or {}).get("logical_cores"),
        rpt.gpu_name(fp),
        round(ram / 2**30) if isinstance(ram, int | float) else None,
    )


def machine_label(fp: dict[str, Any]) -> str:
    cpu = fp.get("cpu") or {}
    arch = f" ({cpu['codename']})" if cpu.get("codename") else ""
    cores = cpu.get("logical_cores") or cpu.get("physical_cores") or "?"
    ram = fp.get("ram_bytes")
    ram_text = f", {ram / 2**30:.0f} GiB" if isinstance(ram, int | float) else ""
    return f"{cpu.get('model') or '?'}{arch}, {cores} cores, {rpt.gpu_label(fp)}{ram_text}"


def _why_not(path: Path, error: ReportError) -> Skipped:
    """Why a .json file is not shown: another schema version of a report, another kind of file, or
    a report the validator refused."""
    try:
        data = read_json(path, "file", ReportError, rpt.MAX_BYTES, rpt.MAX_DEPTH)
    except ReportError as e:
        return Skipped(str(path), str(e), False)
    schema = data.get("schema") if isinstance(data, dict) else None
    if isinstance(schema, str) and schema.startswith(REPORT_SCHEMA_PREFIX) and schema != rpt.SCHEMA:
        return Skipped(
            str(path), f"a report of schema {schema[:60]!r}; this puffer-bench reads {rpt.SCHEMA!r}", True
        )
    if isinstance(schema, str) and schema != rpt.SCHEMA:
        return Skipped(str(path), f"not a report (schema {schema[:60]!r})", False)
    if schema is None:
        return Skipped(str(path), "not a report (no 'schema' field)", False)
    return Skipped(str(path), str(error), schema == rpt.SCHEMA)


def collect(folders: list[str | Path]) -> Collection:
    """Every ``*.json`` under ``folders`` (hidden folders and temp files left out).

    Raises ReportError, one line, for a folder that does not exist or holds no report."""
    files: list[tuple[Path, str]] = []
    for folder in folders:
        root = Path(folder)
        if not root.is_dir():
            raise ReportError(f"no such folder: {folder}" if not root.exists() else f"not a folder: {folder}")
        for path in sorted(root.rglob("*.json")):
            parts = path.relative_to(root).parts
            if any(p.startswith(".") for p in parts) or path.is_symlink() or not path.is_file():
                continue
            files.append((path, str(path)))
    reports: list[Entry] = []
    skipped: list[Skipped] = []
    seen: dict[str, str] = {}  # digest of a report file's bytes -> its path
    for path, shown in files:
        try:
            data = rpt.load(path)
        except ReportError as e:
            skipped.append(_why_not(path, e))
            continue
        content = hashlib.sha256(path.read_bytes()).hexdigest()
        if content in seen:  # a copy (e.g. in a shared folder and in results/): its samples once
            skipped.append(Skipped(shown, f"the same report as {seen[content]}", False))
            continue
        seen[content] = shown
        reports.append(Entry(content[:10], path, shown, data))
    if not reports:
        where = ", ".join(map(str, folders))
        raise ReportError(
            f"no puffer-bench report under {where} ({len(skipped)} other JSON file(s)); "
            "write one with puffer-bench run"
        )
    machines: dict[str, Machine] = {}
    for e in sorted(reports, key=lambda e: e.created):
        fp = e.data["fingerprint"]
        mid = "m" + digest(*machine_key(fp), size=8)
        e.machine = mid
        m = machines.get(mid)
        if m is None:
            m = machines[mid] = Machine(mid, {}, "")
        m.facts, m.label = machine_facts(fp), machine_label(fp)  # the newest report's
        m.reports.append(e)
        if isinstance(fp.get("host_hash"), str):
            m.host_ids.add(fp["host_hash"])
    return Collection(reports, machines, skipped)


def find_machine(collection: Collection, wanted: str) -> Machine:
    """The machine ``wanted`` names: its id, a host id it reported from, or a part of its label
    (case-insensitive). Raises ReportError naming the machines where none or several match."""
    machines = list(collection.machines.values())
    exact = [m for m in machines if wanted == m.id or wanted in m.host_ids]
    found = exact or [m for m in machines if wanted.lower() in m.label.lower()]
    if len(found) == 1:
        return found[0]
    listing = "; ".join(f"{m.id} ({m.label})" for m in machines)
    if not found:
        raise ReportError(f"no machine matches {wanted!r}; the reports' machines: {listing}")
    raise ReportError(
        f"{wanted!r} matches {len(found)} machines; name one by its id: "
        + "; ".join(f"{m.id} ({m.label})" for m in found)
    )


SLUG = re.compile(r"[^A-Za-z0-9_.=-]+")


def slug(name: str, size: int = 48) -> str:
    """A file name for ``name``: its safe characters (at most ``size``) and a digest of all of it."""
    return f"{SLUG.sub('_', name)[:size].strip('._') or 'm'}-{digest(name, size=8)}"
