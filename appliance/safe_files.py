"""The one safe way to open what the appliance writes into: run folders, sweep folders, outputs.

A run or sweep folder may come from another machine or another user, so its files are hostile as
filesystem objects, not only as contents. Everything written in place (a lock, an append to a JSON-lines
file) goes through :func:`open_own`, which never follows a symbolic link (``O_NOFOLLOW``) and refuses a
file that is not a plain file of its own (a FIFO, a device, a hard link shared with another file), in
one line naming it. Whole files are replaced by a rename (:mod:`appliance.report_io`), which replaces a
link rather than writing through it.

* :func:`open_lock`: a folder's lock file (``.lock``, ``sweep.lock``), opened without following a link.
* :func:`append_line`: one JSON line, started on a line boundary: a last line cut short (a kill or a
  full disk mid-append) is set aside into ``<name>.damaged`` and reported, never glued onto.
* :func:`read_json_lines`: every reader of JSON lines skips a damaged line and says how many it skipped.
* Reading: every file a command reads is opened by :func:`appliance.report_io.open_input` (under
  ``read_bounded``, ``read_json``, ``read_yaml`` and the readers here): non-blocking, a FIFO, device,
  folder or socket refused before a byte is read, a run's own files never through a link; the
  strings of a JSON or YAML file come back whole (``report_io.whole_characters``).
* :func:`check_output`: every output a command or tool writes (``--out``, ``--save``, ``--json``,
  ``--report``, ``--markdown``, a study or run folder) is checked before the work: its folder exists or
  can be made and takes a file, has room, and the target is neither a link, a directory, nor one of the
  command's own inputs.
* :func:`write_or_keep`: a write that still fails late (a full disk) keeps what was measured in the temp
  folder and names it in the one-line error.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from appliance.errors import ApplianceError, ConfigError
from appliance.report_io import (
    MIN_FREE,
    disk_full,
    needs_whole_characters,
    open_input,
    size_text,
    unwritable,
    whole_characters,
    write_bytes_atomic,
    write_bytes_exclusive,
)

DAMAGED = ".damaged"
# A JSON-lines record is a few KiB (a metrics record, a trial, a curve row); a "last line" longer than
# this is no record cut short but a file that is not JSON lines at all, and is refused, not moved.
MAX_LINE = 2**20


class UnsafeFileError(ConfigError):
    """A file the appliance would write into is not what it seems (a link, a FIFO, a shared hard link,
    a directory), or a name read from a file points outside the data folder."""


def _refusal(path: Path, what: str, why: str) -> UnsafeFileError:
    return UnsafeFileError(
        f"{what} {path} {why}: refused (it is never written through); remove it or pick another folder"
    )


def link_text(path: Path) -> str:
    """``is a symbolic link (to TARGET)``, for a refusal."""
    try:
        return f"is a symbolic link (to {os.readlink(path)})"
    except OSError:
        return "is a symbolic link"


def refuse_link(path: str | Path, what: str) -> None:
    """Refuse ``path`` in one line if it is a symbolic link (a missing path is fine)."""
    path = Path(path)
    if path.is_symlink():
        raise _refusal(path, what, link_text(path))


def open_own(path: str | Path, what: str, flags: int, mode: int = 0o666) -> int:
    """A file descriptor for ``path``, opened with ``flags`` but never through a symbolic link.

    Refused in one line (:class:`UnsafeFileError`): a link, anything but a regular file (opened
    non-blocking, so a FIFO cannot hang the open), and a file with other hard links (writing would
    change another file too). Other OS errors propagate as OSError.
    """
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refusal(path, what, link_text(path)) from None
        if e.errno in (errno.EISDIR, errno.ENXIO):  # a folder; a FIFO with no reader or a socket
            raise _refusal(path, what, "is not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refusal(path, what, "is not a regular file")
        if st.st_nlink > 1:
            raise _refusal(path, what, f"has {st.st_nlink - 1} other hard link(s) (it is another file too)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_lock(path: str | Path, what: str) -> IO[str]:
    """A folder's lock file, open for reading and writing (created if missing, never truncated here):
    the holder records itself in it after taking the lock. See :func:`open_own` for what is refused."""
    return os.fdopen(open_own(path, what, os.O_RDWR | os.O_CREAT), "r+")


# ----------------------------------------------------------------------------- JSON lines


def damaged_path(path: str | Path) -> Path:
    """Where :func:`append_line` sets aside the cut-short last line of ``path``."""
    path = Path(path)
    return path.with_name(path.name + DAMAGED)


def _cut_short_tail(fd: int, size: int) -> int | None:
    """The offset after the last line break of a file that does not end in one (None if it does)."""
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    end = size
    while end > 0 and size - end <= MAX_LINE:
        start = max(0, end - 65536)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0 if end == 0 and size <= MAX_LINE else -1


def _set_aside(fd: int, path: Path, what: str) -> str | None:
    """Move a cut-short last line of the open file ``fd`` into ``<path>.damaged``; the note, or None."""
    size = os.fstat(fd).st_size
    cut = _cut_short_tail(fd, size)
    if cut is None:
        return None
    if cut < 0:
        raise UnsafeFileError(
            f"{what} {path} ends in more than {size_text(MAX_LINE)} without a line break: not a JSON-lines "
            "file; move it away"
        )
    fragment = os.pread(fd, size - cut, cut)
    aside = damaged_path(path)
    out = open_own(aside, f"the set-aside file of {what}", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        _write_all(out, fragment + b"\n")
        os.fsync(out)
    finally:
        os.close(out)
    os.ftruncate(fd, cut)
    return (
        f"{path} ended in a cut-short line ({len(fragment):,} bytes, a write was interrupted): "
        f"set aside in {aside}"
    )


def _refuse_foreign(fd: int, path: Path, what: str) -> None:
    """Refuse, before anything is written, a file that is not JSON lines: one whose first line (or its
    start, when cut short) is no JSON object: random bytes, NUL bytes, text, another program's file."""
    head = os.pread(fd, 65536, 0)  # a record is a few KiB: the first line is nearly always in here
    if b"\n" not in head and len(head) == 65536:
        head = os.pread(fd, MAX_LINE + 1, 0)
    if not head:
        return
    first, newline, _ = head.partition(b"\n")
    try:
        record = json.loads(first) if newline else None
    except (ValueError, RecursionError):
        record = None
    if isinstance(record, dict) or (not newline and first.lstrip(b" \t\r").startswith(b"{")):
        return  # a record, or the one record there was cut short (set aside next)
    raise UnsafeFileError(
        f"{what} {path} is not a JSON-lines file of records (its first line is none): refused before "
        "anything was written; move it away"
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_line(path: str | Path, line: str, what: str, sync: bool = False) -> str | None:
    """Append ``line`` (one line, ending in a line break) to ``path`` on a line boundary.

    The file is opened by :func:`open_own` (no links, FIFOs or shared hard links); one whose first line
    is no JSON object (random bytes, text) is refused before anything is written. If its last line
    was cut short, that fragment is moved into ``<path>.damaged`` first; the return value is then a
    one-line note saying so (None otherwise) for the caller to print. ``sync``: on disk before it
    returns (a record other processes act on, such as a shared study's journal).
    """
    path = Path(path)
    fd = open_own(path, what, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        _refuse_foreign(fd, path, what)
        note = _set_aside(fd, path, what)
        _write_all(fd, line.encode())
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return note


def repair_tail(path: str | Path, what: str) -> str | None:
    """Set aside a cut-short last line of ``path`` now (as :func:`append_line` would); the note or None.
    A missing file needs nothing."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None
    fd = open_own(path, what, os.O_RDWR)
    try:
        _refuse_foreign(fd, path, what)
        return _set_aside(fd, path, what)
    finally:
        os.close(fd)


def iter_json_lines(path: str | Path, what: str, skipped: list[int]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one per line; a line that is not one (cut short, damaged,
    longer than :data:`MAX_LINE`) is skipped and counted in ``skipped[0]``. Blank lines are ignored."""
    f = open_input(path, what, ConfigError)  # a FIFO or a device is refused, never waited on
    with f:
        while True:
            raw = f.readline(MAX_LINE + 1)
            if not raw:
                return
            if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
                skipped[0] += 1
                while raw and not raw.endswith(b"\n"):  # the rest of the overlong line
                    raw = f.readline(MAX_LINE)
                continue
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):
                record = None
            if isinstance(record, dict):  # its strings as every JSON reader gives them: whole, ordered
                text = raw.decode(errors="replace")
                yield whole_characters(record) if needs_whole_characters(text) else record
            else:
                skipped[0] += 1


def read_json_lines(path: str | Path, what: str) -> tuple[list[dict[str, Any]], int]:
    """:func:`iter_json_lines` as a list, with the number of damaged lines skipped."""
    skipped = [0]
    return list(iter_json_lines(path, what, skipped)), skipped[0]


def skipped_note(path: str | Path, skipped: int) -> str | None:
    """The one line a reader prints when it skipped damaged lines (None when it skipped none)."""
    if not skipped:
        return None
    return f"skipped {skipped} damaged line{'s' if skipped != 1 else ''} in {path} (not JSON: cut short or edited)"


# ----------------------------------------------------------------------------- outputs


def check_output(
    path: str | Path,
    option: str,
    need: int = MIN_FREE,
    folder: bool = False,
    inputs: Iterable[str | Path] = (),
    beside: Iterable[str | Path] = (),
) -> None:
    """Refuse, in one line starting with ``option`` and the path, an output that could not be written,
    before the work that would fill it.

    A file output must not be a symbolic link, a directory or anything but a regular file, nor one of
    ``inputs`` (the files the command reads); ``beside`` are further files written with it (a report's
    ``.md`` beside its ``.json``), held to the same rules. ``folder``: the output is a folder (a sweep
    or results folder), which must be a directory if it exists. Either way the folder that will hold
    it must exist or be creatable, take a file, and have ``need`` bytes free (:func:`report_io.unwritable`).
    """
    path = Path(path)
    shown = f"{option} {path}"
    if folder:
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{shown}: not a folder (a file has that name); pass a folder")
        parent = path
    else:
        targets = [path, *map(Path, beside)]
        for target in targets:
            _check_target(target, shown, inputs)
        parent = path.parent
    problem = unwritable(parent, need)
    if problem:
        raise ConfigError(f"{shown}: {problem}")


def _check_target(target: Path, shown: str, inputs: Iterable[str | Path]) -> None:
    if target.is_symlink():
        raise UnsafeFileError(f"{shown}: {target} {link_text(target)}; refused: write to a plain path")
    if target.is_dir():
        raise ConfigError(f"{shown}: {target} is a folder; pass a file name")
    if target.exists() and not target.is_file():
        raise ConfigError(f"{shown}: {target} is not a regular file (a device or FIFO); pass a file name")
    for given in inputs:
        with contextlib.suppress(OSError):
            if Path(given).exists() and target.exists() and os.path.samefile(given, target):
                raise ConfigError(f"{shown}: {target} is one of the inputs; refusing to overwrite it")


def write_or_keep(path: str | Path, data: bytes, option: str) -> Path:
    """Write ``data`` to ``path`` atomically; when that fails late (a full disk, a folder made read-only
    meanwhile), keep it in the temp folder and raise one line naming where it is."""
    path = Path(path)
    try:
        return write_bytes_atomic(path, data)
    except OSError as e:
        why = e.strerror or str(e)
        reason = "disk full" if disk_full(e) else "cannot write"
    spare = Path(tempfile.gettempdir()) / f"puffer-bench-{os.getpid()}-{int(time.time())}-{path.name}"
    try:
        write_bytes_exclusive(spare, data)
    except OSError:
        raise ApplianceError(
            f"{reason}: {option} {path} ({why}), and no room in {spare.parent} either: nothing saved; "
            "the output printed above is all there is"
        ) from None
    raise ApplianceError(
        f"{reason}: {option} {path} ({why}): saved it as {spare} instead; move it once there is space"
    )
