"""Atomic file writes, and bounded reads of files that may come from another machine.

A report or checkpoint is either whole or absent, never half-written. Files get the mode any other
file of the user gets (``0666`` less the umask), like ``metrics.jsonl``, not the ``0600`` of a bare
temp file. :func:`write_bytes_exclusive` publishes a file only under a name nobody else has taken,
and :func:`unwritable` finds a destination that could not take the results (unwritable, or too
little free space) before the work that would fill it: ``run``, ``ab``, ``sweep``, ``train
--report`` and run folders all ask it. A disk that fills up anyway is named by :func:`disk_full`;
:func:`write_what_fits` then keeps every file that still fits.

Reports, suites and configs are shared between machines, so their content is hostile input, and the
files themselves too: :func:`open_input` opens every file a command reads without blocking and
refuses anything but a regular file (a FIFO, a device, a folder) before reading a byte;
:func:`read_bounded` refuses a file over a size limit before reading it, and
:func:`read_json` also refuses nesting deeper than a limit before parsing (the parser recurses, so a
200,000-deep array would otherwise end in RecursionError). Errors are one line naming the file, raised
as the caller's error class (this module sits below ``errors``). Text from such files is made safe
to show: :func:`whole_characters` (lone surrogates and bidi controls as U+FFFD, where a file is
read) and :func:`printable` (control characters escaped, for a one-line message).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from appliance.redact import redact

TMP_SUFFIX = ".tmp"
# Free space a results folder needs before the work starts: a suite report with its HTML and plots
# is under 2 MiB, a sweep's study.db a few MiB, a small policy's checkpoint a few MiB more. A disk
# with less than this is nearly full, and measuring for minutes only to lose the figures helps nobody.
MIN_FREE = 64 * 2**20


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


def unwritable(folder: str | Path, need: int = MIN_FREE) -> str | None:
    """Why results could not be written into ``folder`` (one line), or None if they can.

    Ask before the work whose results would go there: the folder must take a file, and its
    filesystem must have ``need`` bytes free. Creates the missing folders (they would be created
    anyway) and a probe file that is removed.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".puffer-bench-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"cannot write into {folder}: {e.strerror or e}"
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None  # no figure (an odd filesystem): the probe file went in, go ahead
    if free < need:
        return (
            f"only {size_text(free)} free in {folder} (results need {size_text(need)}); "
            "free some space or write elsewhere"
        )
    return None


def require_room(folder: str | Path, what: str, error: Callable[[str], Exception]) -> None:
    """Raise ``error("<what>: <why>")`` when :func:`unwritable` finds that ``folder`` cannot take the
    results (``error`` is the caller's one-line error type: this module sits below errors.py)."""
    problem = unwritable(folder)
    if problem:
        raise error(f"{what}: {problem}")


def lock_or_refuse(f: Any, what: str, hint: str, error: Callable[[str], Exception]) -> None:
    """Take the flock on ``f`` (a folder's lock file, open) without waiting. If another process holds
    it, close ``f`` and raise ``error`` naming the holder that the file records and what to do."""
    import fcntl

    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = redact(f.read().strip()) or "another process"  # a lock written before redaction
        f.close()
        raise error(f"{what} is in use by {holder}: {hint}") from None


def size_text(n: float) -> str:
    """Bytes as B, KiB, MiB or GiB with three significant digits."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` says the disk (or the user's quota) is full."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "database or disk is full" in str(error)  # SQLite's words for ENOSPC


def write_what_fits(files: Iterable[tuple[Path, Callable[[], bytes]]]) -> tuple[list[Path], list[Path], str]:
    """Write each (path, contents) atomically in turn; on a full disk go on with the rest (a smaller
    file may still fit). Returns the paths written, those not written, and why not ('' when all were).
    Errors other than a full disk propagate."""
    written: list[Path] = []
    missing: list[Path] = []
    why = ""
    for path, contents in files:
        try:
            written.append(write_bytes_atomic(path, contents()))
        except OSError as e:
            if not disk_full(e):
                raise
            missing.append(Path(path))
            why = e.strerror or str(e)
    return written, missing, why


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


# ----------------------------------------------------------------------------- bounded reads


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFDIR: "a folder",
    stat.S_IFSOCK: "a socket",
}


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` is, in words ('a FIFO', 'a folder'...), for a refusal."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_input(path: str | Path, what: str, error: type[Exception], follow: bool = True) -> BinaryIO:
    """``path`` open for reading, refused in one line (``error``) unless it is a regular file.

    Opened non-blocking, so a FIFO or a device never hangs the open, then checked with ``fstat`` (no
    race between a check and the open): a FIFO, a device, a folder or a socket is refused before a
    byte is read. ``follow=False`` (a run's or sweep's own files): a symbolic link is refused too
    (``O_NOFOLLOW``). Every reader of a file a command is given or finds goes through here."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"no such {what}: {path}") from None
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise error(
                f"{what} {path} is a symbolic link: refused (a run's own files are never read through "
                "a link); replace it with the file itself"
            ) from None
        raise error(f"cannot read {what} {path}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{what} {path} is {kind_of(mode)}, not a regular file: refused; pass a file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_bounded(
    path: str | Path, what: str, error: type[Exception], max_bytes: int, follow: bool = True
) -> bytes:
    """The bytes of ``path`` (a regular file: :func:`open_input`), refused (``error``, one line naming
    the file) above ``max_bytes`` before it is read."""
    path = Path(path)
    with open_input(path, what, error, follow) as f:
        try:
            too_big = os.fstat(f.fileno()).st_size > max_bytes
            data = b"" if too_big else f.read(max_bytes + 1)
        except OSError as e:
            raise error(f"cannot read {what} {path}: {e.strerror or e}") from None
    if too_big or len(data) > max_bytes:
        raise error(
            f"{what} {path} is larger than {max_bytes / 2**20:g} MiB: refused (damaged or not a {what})"
        )
    return data


# shown escaped: control characters (C0 but tab, DEL, C1), bidi embeddings, overrides, isolates and
# marks (they reorder what follows on a terminal), and lone surrogates (JSON's "\ud800"; no encoder takes one)
_UNSAFE_TEXT = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


# lone surrogates, and the bidi controls that reorder what follows them on a terminal or a page
_SURROGATE = re.compile("[\ud800-\udfff\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def needs_whole_characters(text: str) -> bool:
    """Whether parsed data of ``text`` may hold what :func:`whole_characters` replaces (an escape, or
    a bidi control as it is): a cheap test that spares the walk for nearly every file."""
    return "\\u" in text or "\\U" in text or _SURROGATE.search(text) is not None


def whole_characters(data: Any) -> Any:
    """``data`` (parsed JSON or YAML) with every lone surrogate and bidi control in its strings and
    keys as U+FFFD.

    UTF-8 text cannot hold a lone surrogate, but JSON's ``"\\ud800"`` and YAML's ``"\\ud800"`` escapes
    make one, and a string holding one can be neither printed nor written as UTF-8; a bidi control
    (U+202E) makes a terminal, a Markdown page or a plot show text in another order than it is.
    Every reader of a JSON or YAML file returns its data through here, so every rendering of it
    (tables, errors, Markdown, HTML, plots) is safe. Nested containers are walked without recursion."""
    if isinstance(data, str):
        return _SURROGATE.sub("\ufffd", data)
    if not isinstance(data, dict | list):
        return data
    stack = [data]
    while stack:
        node = stack.pop()
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        for key, value in items:
            if isinstance(value, str) and _SURROGATE.search(value):
                node[key] = _SURROGATE.sub("\ufffd", value)
            elif isinstance(value, dict | list):
                stack.append(value)
            if isinstance(key, str) and _SURROGATE.search(key):
                node[_SURROGATE.sub("\ufffd", key)] = node.pop(key)
    return data


def printable(text: str) -> str:
    """``text`` safe to print on one line whatever a JSON or YAML string held: each control
    character, bidi control and lone surrogate becomes its escape (``\\x1b``, ``\\u202e``, ``\\n``), so
    a file's text can neither move the cursor, recolour or reorder a terminal, break a one-line
    message in two, nor make printing fail."""

    def escape(m: re.Match[str]) -> str:
        code = ord(m.group())
        return {10: "\\n", 13: "\\r"}.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")

    return _UNSAFE_TEXT.sub(escape, text)


def decode_utf8(data: bytes, path: str | Path, what: str, error: type[Exception]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise error(
            f"{what} {path} is not UTF-8 text: byte 0x{data[e.start]:02x} on line {line} (binary or damaged)"
        ) from None


# a JSON string: quote, runs of plain characters and escapes, then a quote or the end of the text
# (possessive, and matching to the end when unterminated: linear time on any input)
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_OPEN, _CLOSE = b"[{", b"]}"
_ALL_BUT_BRACKETS = bytes(b for b in range(256) if b not in _OPEN + _CLOSE)
_STEPS = bytes.maketrans(_OPEN + _CLOSE, b"\x01\x01\xff\xff")  # +1 opens, -1 (int8) closes


def json_depth(data: bytes) -> int:
    """How deeply arrays and objects nest in JSON text (brackets inside strings do not count), found
    without parsing: a linear scan in chunks, so neither the stack nor memory grows with the depth."""
    import numpy as np

    steps = _JSON_STRING.sub(b'""', data).translate(None, _ALL_BUT_BRACKETS).translate(_STEPS)
    depth = deepest = 0
    chunk = 1 << 20
    for start in range(0, len(steps), chunk):
        levels = np.cumsum(
            np.frombuffer(steps, np.int8, min(chunk, len(steps) - start), start), dtype=np.int64
        )
        deepest = max(deepest, depth + int(levels.max()))
        depth += int(levels[-1])
    return deepest


def read_json(
    path: str | Path,
    what: str,
    error: type[Exception] = ValueError,
    max_bytes: int = 16 * 2**20,
    max_depth: int = 32,
) -> Any:
    """Parse a JSON file that may be hostile: at most ``max_bytes``, UTF-8, nested at most
    ``max_depth`` deep. Every refusal is ``error`` with one line naming the file."""
    data = read_bounded(path, what, error, max_bytes)
    depth = json_depth(data)
    if depth > max_depth:
        raise error(f"{what} {path} nests {depth:,} levels deep, more than the {max_depth} allowed: refused")
    text = decode_utf8(data, path, what, error)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError, as is a 5,000-digit int
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise error(f"cannot read {what} {path}: {detail}") from None
    if needs_whole_characters(text):
        data = whole_characters(data)
    return data
