"""Atomic file writes: a report or checkpoint is either whole or absent, never half-written.

Files get the mode any other file of the user gets (``0666`` less the umask), like ``metrics.jsonl``,
not the ``0600`` of a bare temp file. :func:`write_bytes_exclusive` publishes a file only under a
name nobody else has taken, and :func:`check_writable` finds an unwritable destination before the
work that would fill it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"


def umask() -> int:
    """The process umask, read without changing it where Linux allows (/proc), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_temp(path: Path, data: bytes) -> str:
    """``data`` in a fsynced ``.<name>.*.tmp`` beside ``path``, with the user's usual file mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write to a temp file in the same folder, fsync, then rename over ``path``."""
    path = Path(path)
    tmp = write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_bytes_exclusive(path: str | Path, data: bytes) -> Path:
    """Like :func:`write_bytes_atomic`, but only if ``path`` does not exist (else FileExistsError).

    The whole file is hard-linked into place, which fails when the name is taken: of two processes
    that pick the same name at the same moment exactly one gets it, and nobody sees a partial file.
    """
    path = Path(path)
    tmp = write_temp(path, data)
    try:
        os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    return write_bytes_atomic(path, (json.dumps(obj, indent=2) + "\n").encode())


def unwritable(folder: str | Path) -> str | None:
    """Why files could not be written into ``folder`` (one line), or None if they can.

    Ask before the work whose results would go there. Creates the missing folders (they would be
    created anyway) and a probe file that is removed.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".puffer-bench-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"cannot write into {folder}: {e.strerror or e}"
    return None


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete ``.*.tmp`` files an interrupted atomic write left in ``folder`` (killed mid-write).

    Call only where no other process is writing into ``folder`` (a locked run folder).
    """
    removed = []
    for p in Path(folder).glob(f".*{TMP_SUFFIX}"):
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    return removed
