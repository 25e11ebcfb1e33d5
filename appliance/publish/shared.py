"""Adding a report to a folder that many machines write into at once (``run --publish DIR``).

Each report goes in under a name no other report can take: its date, host id and a digest of its
bytes (``<date>-<host>-<digest>.json``). It is written whole into a temp file beside, then
hard-linked into place (:func:`appliance.report_io.write_bytes_exclusive`), so a reader never sees
half a file and two machines writing at the same moment both keep theirs. The same report added
twice is one file.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from appliance.bench import report as rpt
from appliance.errors import ReportError
from appliance.report_io import read_bounded, write_bytes_exclusive

_SAFE = re.compile(r"[^A-Za-z0-9_-]+")


def shared_name(data: dict[str, Any], content: bytes) -> str:
    host = _SAFE.sub("_", str(data["fingerprint"].get("host_hash") or "host"))[:16]
    date = _SAFE.sub("_", str(data["created_utc"]))[:20]
    return f"{date}-{host}-{hashlib.sha256(content).hexdigest()[:12]}.json"


def add_report(report: str | Path, folder: str | Path) -> tuple[Path, bool]:
    """Copy the report file ``report`` into ``folder``; (its path there, whether it was new).

    The report is validated first (a damaged report is refused, one line); the folder is created."""
    data = rpt.load(report)
    content = read_bounded(report, "report", ReportError, rpt.MAX_BYTES)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / shared_name(data, content)
    try:
        write_bytes_exclusive(path, content)
    except FileExistsError:
        if (
            read_bounded(path, "shared report", ReportError, rpt.MAX_BYTES) != content
        ):  # a digest collision: never overwrite another's report
            raise ReportError(f"{path} exists with other content; not replaced") from None
        return path, False
    return path, True
