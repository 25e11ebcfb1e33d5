"""Run folders: where a run lives, who holds it, and which run is the newest.

A run folder (``train.data_dir/<run id>``) holds ``model.pt`` (the newest checkpoint),
``model_<epoch>.pt`` snapshots, ``config.yaml``, ``metrics.jsonl`` and ``machines.jsonl`` (the
machine each session of the run trained on, its CPU kind as emulated); ``train.data_dir/latest``
names the newest run that has a checkpoint. Every run takes its folder through :func:`claim`:
locked (``.lock``, fcntl) while it trains, never one that holds another run, named from the env
spec with characters safe in a shell, and removed again if the run trains nothing. What goes into
a checkpoint file, and how it is read back, is :mod:`appliance.train.checkpoint`.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.errors import ApplianceError, ConfigError
from appliance.redact import command_line, redact_tree
from appliance.report_io import (
    MIN_FREE,
    lock_or_refuse,
    read_bounded,
    remove_stale_temps,
    require_room,
    size_text,
    unwritable,
    write_bytes_atomic,
)
from appliance.safe_files import UnsafeFileError, append_line, link_text, open_lock, open_own, repair_tail

if TYPE_CHECKING:
    from appliance.config import Config

MODEL, LATEST, LOCK, METRICS = "model.pt", "latest", ".lock", "metrics.jsonl"
MACHINES = "machines.jsonl"
SNAPSHOT = re.compile(r"model_(\d+)\.pt$")


class CheckpointError(ApplianceError, ValueError):
    """A checkpoint cannot be used: unreadable, from another run shape, or its folder is busy."""

    exit_code = 2


class CheckpointWriteError(ApplianceError, OSError):
    """A checkpoint or metrics record cannot be written (disk full, read-only folder)."""


def epoch_of(path: Path) -> int | None:
    """The epoch in a snapshot's name (``model_<epoch>.pt``), else None."""
    m = SNAPSHOT.search(path.name)
    return int(m.group(1)) if m else None


# Characters a run folder name may hold: safe in a shell, a ``docker run -v`` spec and a URL.
NAME_CHARS = re.compile(r"[A-Za-z0-9._-]+")


def run_name(spec: str) -> str:
    """A folder name from an env spec: ``spread:make`` gives ``spread-make`` and ``ALE/Pong-v5``
    gives ``ALE-Pong-v5`` (a run of anything but letters, digits, ``.``, ``_`` and ``-`` is one ``-``)."""
    return "-".join(NAME_CHARS.findall(spec)).strip(".-") or "run"


def check_run_id(run_id: str) -> None:
    """A ``--run-id`` is one folder name of :data:`NAME_CHARS`, not hidden and not ``latest``."""
    if not NAME_CHARS.fullmatch(run_id) or run_id.startswith(".") or run_id == LATEST:
        raise ConfigError(
            f"--run-id {run_id!r} is not a run folder name: use letters, digits, '.', '_' and '-' "
            f"(not starting with '.', and not '{LATEST}')"
        )


def find_checkpoint(data_dir: str | Path, which: str) -> Path:
    """A checkpoint file from 'latest', a run id, a run folder, or a path to a checkpoint file.

    A path that exists from the current folder is taken as given (the user typed it). A run named
    by the ``latest`` pointer, or looked up in ``data_dir``, is a run folder name as ``--run-id``
    takes it, in ``data_dir`` itself (:func:`run_folder`): a pointer or name that leads outside the
    data folder (``../x``, an absolute path, a link elsewhere) is refused in one line.
    """
    data_dir = Path(data_dir)
    if which == LATEST:
        pointer = data_dir / LATEST
        if not _there(pointer):
            raise ConfigError(
                f"no 'latest' run in {data_dir}/ yet: train first, or pass a run folder or model.pt"
            )
        target = _pointer_target(pointer)
        path = run_folder(data_dir, target, f"the 'latest' pointer {pointer} names {target!r}, which")
        if not _there(path / MODEL):
            raise ConfigError(f"no {MODEL} in {path} (named by {pointer}): the run wrote no checkpoint")
        return path / MODEL
    path = Path(which)
    if path.is_file():
        return path
    name = which.rstrip("/")
    if not path.is_dir() and ((data_dir / name).is_dir() or (data_dir / name).is_symlink()):
        path = run_folder(data_dir, name, f"{which!r}")
    if not _there(path / MODEL):  # a FIFO, folder or link there is named when it is read
        if path.is_dir():
            raise ConfigError(f"no {MODEL} in {path}: the run wrote no checkpoint")
        raise ConfigError(f"no run or checkpoint {which!r} (looked in . and {data_dir}/)")
    return path / MODEL


def _there(path: Path) -> bool:
    """Whether anything is at ``path``: a file, a FIFO, a folder, a link (dangling included)."""
    return path.exists() or path.is_symlink()


def _pointer_target(pointer: Path) -> str:
    """The run the ``latest`` pointer names: one line of text, or a one-line error naming it."""
    try:  # a FIFO or device there is damage too, refused without waiting on it
        target = read_bounded(pointer, "'latest' pointer", ConfigError, 4096, follow=False).decode().strip()
    except (ConfigError, UnicodeDecodeError):
        target = ""
    if not target or len(target) > 4096 or not target.isprintable():
        raise ConfigError(
            f"the 'latest' pointer {pointer} is damaged (not the name of a run): pass a run folder or "
            "model.pt, or train again to rewrite it"
        )
    return target


def run_folder(data_dir: Path, name: str, what: str) -> Path:
    """``data_dir/name`` for a run name read from a file or looked up in the data folder, checked as
    ``--run-id`` is (:func:`check_run_id`) and to stay in the data folder (not a link out of it).
    ``what`` starts the one-line refusal."""
    if not NAME_CHARS.fullmatch(name) or name.startswith(".") or name == LATEST:
        raise UnsafeFileError(
            f"{what} is not a run folder name in {data_dir}/ (letters, digits, '.', '_' and '-', as "
            "--run-id takes): refused, a run outside the data folder is never trained into; pass the run "
            "folder's path itself"
        )
    folder = data_dir / name
    _inside(data_dir, folder, what)
    return folder


def _inside(data_dir: Path, folder: Path, what: str) -> None:
    """Refuse a run folder in ``data_dir`` that is a link leading out of it."""
    try:
        outside = not folder.resolve().is_relative_to(data_dir.resolve())
    except (OSError, RuntimeError):  # a link loop
        outside = True
    if outside:
        how = f"{folder} {link_text(folder)}" if folder.is_symlink() else f"{folder} resolves elsewhere"
        raise UnsafeFileError(
            f"{what} leads out of the data folder {data_dir}/ ({how}): refused, a run outside the data "
            "folder is never trained into; pass the run folder's path itself"
        )


def find_run(data_dir: str | Path, which: str) -> Path:
    """The run folder of :func:`find_checkpoint`'s checkpoint."""
    return find_checkpoint(data_dir, which).parent


def require_checkpoint_room(run_dir: Path, policy: Any) -> None:
    """Refuse, before the first epoch, a run folder without room for two checkpoints of ``policy``
    (the weights and up to two optimizer moments each: the new one is written beside the last).
    The claim's check (:func:`report_io.require_room`) knows no policy; this one is sized to it."""
    weights = sum(t.numel() * t.element_size() for t in policy.state_dict().values())
    need = max(MIN_FREE, 2 * 3 * weights + 2**20)
    problem = unwritable(run_dir, need)
    if problem:
        raise ConfigError(f"run folder: {problem} (two checkpoints of this policy: {size_text(need)})")


def start_run(
    cfg: Config, run_dir: Path, global_step: int = 0, machine: dict[str, Any] | None = None
) -> str | None:
    """Create the folder, write the resolved config and add this session's machine (``machine``: its
    fingerprint read ahead, :class:`MachineAhead`) to ``machines.jsonl`` (``latest`` moves at the
    first checkpoint). Returns the note when a cut-short last line of ``machines.jsonl`` was set
    aside."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        import yaml

        # the resolved config with no secret in it (an API key given as an env parameter): a resume
        # asks for what was left out (train.resume.resume_config)
        saved = yaml.safe_dump(redact_tree(cfg.to_dict()), sort_keys=False, default_flow_style=False)
        write_bytes_atomic(run_dir / "config.yaml", saved.encode())
        return record_machine(run_dir, global_step, machine)
    except OSError as e:
        raise CheckpointWriteError(f"cannot write into the run folder {run_dir}: {e.strerror or e}") from None


class MachineAhead:
    """This machine's fingerprint (no calibration loops), read on a thread while the envs are built:
    py-cpuinfo runs a subprocess for about a second, and a run's clock (its uptime) starts with its
    trainer. :meth:`result` waits for it; call it before the trainer is built."""

    def __init__(self) -> None:
        import threading

        self._fingerprint: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._read, name="puffer-bench-machine", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        from appliance.sysinfo import fingerprint

        with contextlib.suppress(Exception):  # then record_machine reads it again, where a failure shows
            self._fingerprint = fingerprint(calibration=False)

    def result(self) -> dict[str, Any] | None:
        self._thread.join()
        return self._fingerprint


def record_machine(run_dir: Path, global_step: int, machine: dict[str, Any] | None = None) -> str | None:
    """Append the machine this session trains on to the run's ``machines.jsonl``: the UTC time, the
    step it starts from and the fingerprint as the trainer sees it (the CPU kind ``PUFFER_CPU_KIND``
    emulates and the libraries' ISA caps included, torch's threads as chosen for the run; no
    calibration loops). ``machine``: the fingerprint read ahead, else it is read here. A report read
    from the folder later names this machine, not the reader's; a resumed run adds a line."""
    import datetime as dt
    import json

    import torch

    from appliance.sysinfo import fingerprint

    machine = dict(machine if machine is not None else fingerprint(calibration=False))
    machine["versions"] = {**(machine.get("versions") or {}), "torch_threads": torch.get_num_threads()}
    record = {
        "utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "global_step": int(global_step),
        "fingerprint": machine,
    }
    return append_line(run_dir / MACHINES, json.dumps(record) + "\n", "the run's machines")


def machines(run_dir: Path) -> list[dict[str, Any]]:
    """The sessions' records in ``machines.jsonl``, oldest first ([] for a run from before it was
    written); a line that is no JSON object is skipped."""
    import json

    path = run_dir / MACHINES
    if not path.is_file():
        return []
    text = read_bounded(path, "the run's machines", CheckpointError, 1 << 24).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and isinstance(record.get("fingerprint"), dict):
                out.append(record)
    return out


@dataclass(frozen=True)
class Claim:
    """The run folder a run trains into, and the checkpoint it resumes from (None for a new run)."""

    run_dir: Path
    resume_from: Path | None = None
    notes: tuple[str, ...] = ()  # lines to print: a cut-short metrics.jsonl line set aside


@contextlib.contextmanager
def claim(
    data_dir: str | Path, env_name: str, run_id: str | None = None, resume: str | None = None
) -> Iterator[Claim]:
    """Take the run folder of a new run or a resumed one, locked for the whole run.

    Every entry point that trains into a run folder (``train``, ``train --nproc``, ``--resume``)
    comes through here. ``resume`` (a run id, folder, checkpoint or ``latest``) takes the folder
    that holds it. A ``run_id`` must name an empty or new folder: one that holds a run is refused,
    naming its epoch and ``--resume``. Without either, the folder is ``<env>-<UTC time>``, created
    exclusively (``mkdir`` fails if it exists), so runs started in the same second get ``-2``,
    ``-3`` ... When a new run ends with no metrics and no checkpoint in its folder (it failed or was
    stopped before its first epoch), the lock and config go, and so does the folder if it made it.
    A folder that cannot be written or is nearly full (:func:`report_io.require_room`) is refused
    before it is locked; a folder made for the run goes again.
    """
    data_dir = Path(data_dir)
    if resume:
        resume_from = find_checkpoint(data_dir, resume)
        require_room(resume_from.parent, "run folder", ConfigError)  # writable, with room: before the lock
        with locked(resume_from.parent):
            note = repair_tail(resume_from.parent / METRICS, "the run's metrics")
            yield Claim(resume_from.parent, resume_from, (note,) if note else ())
        return
    if run_id is not None:
        check_run_id(run_id)
        _inside(data_dir, data_dir / run_id, f"--run-id {run_id}")
        run_dir, created = data_dir / run_id, _make_folder(data_dir / run_id, exclusive=False)
    else:
        run_dir, created = _new_folder(data_dir, run_name(env_name))
    try:
        require_room(run_dir, "run folder", ConfigError)
        with locked(run_dir, tidy=True, created=created):
            if not created:
                _refuse_if_it_holds_a_run(run_dir, run_id or run_dir.name)
            yield Claim(run_dir)
    except BaseException:  # e.g. Ctrl-C between the mkdir and the lock
        if created:
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        raise


def _make_folder(folder: Path, exclusive: bool) -> bool:
    """``mkdir``; True if this call created it. ``exclusive``: FileExistsError if it was there."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir()
        return True
    except FileExistsError:
        if exclusive:
            raise
        if not folder.is_dir():
            raise CheckpointWriteError(
                f"cannot create the run folder {folder}: a file has that name"
            ) from None
        return False
    except OSError as e:
        raise CheckpointWriteError(f"cannot create the run folder {folder}: {e.strerror or e}") from None


def _new_folder(data_dir: Path, name: str) -> tuple[Path, bool]:
    """``data_dir/<name>-<UTC time>``, or with ``-2``, ``-3`` ... when that is taken (the time has one-second
    resolution, so runs started together would otherwise share a folder)."""
    stem = f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    for n in range(1, 10_000):
        folder = data_dir / (stem if n == 1 else f"{stem}-{n}")
        try:
            return folder, _make_folder(folder, exclusive=True)
        except FileExistsError:
            continue
    raise CheckpointWriteError(f"cannot create a run folder {stem}-N in {data_dir}: all names are taken")


# what a run folder holds before its run trains (a run killed while starting leaves these too)
_STARTING = {LOCK, "config.yaml", MACHINES}


def _run_files(run_dir: Path) -> list[str]:
    """The files in ``run_dir`` that belong to a run that trained (not the lock, config, temp files or
    the probe file of another process's :func:`report_io.unwritable` check)."""
    try:
        names = [p.name for p in run_dir.iterdir()]
    except OSError:
        return []
    return sorted(
        n
        for n in names
        if n not in _STARTING
        and not (n.startswith(".") and n.endswith(".tmp"))
        and not n.startswith(".puffer-bench-probe.")
    )


def _refuse_if_it_holds_a_run(run_dir: Path, run_id: str) -> None:
    held = _run_files(run_dir)
    if not held:
        return
    epochs = [e for e in (epoch_of(run_dir / n) for n in held) if e is not None]
    if epochs or MODEL in held:
        epoch = f"epoch {max(epochs)}" if epochs else "a checkpoint"
        raise CheckpointError(
            f"{run_dir} holds a run ({epoch}); pass --resume {run_id} to continue it or another --run-id"
        )
    shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
    raise CheckpointError(
        f"{run_dir} holds a run that wrote no checkpoint ({shown}); remove the folder or pass another --run-id"
    )


@contextlib.contextmanager
def locked(run_dir: Path, tidy: bool = False, created: bool = False) -> Iterator[None]:
    """Hold the run folder for this process; a second trainer gets a one-line error naming the first.

    With the lock held, temp files a killed write left behind are removed. ``tidy``: on the way out,
    if the folder holds no run's files (metrics, checkpoints), remove the lock and config, and the
    folder too if this run ``created`` it (all while still locked).
    """
    while True:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            f = open_lock(run_dir / LOCK, "the run lock")
        except OSError as e:
            raise CheckpointWriteError(
                f"cannot write into the run folder {run_dir}: {e.strerror or e}"
            ) from None
        lock_or_refuse(
            f, f"run folder {run_dir}", "wait for it to end, or train into another run", CheckpointError
        )
        try:  # the holder before us may have removed the folder (unused) between our open and our lock
            if os.stat(run_dir / LOCK).st_ino == os.fstat(f.fileno()).st_ino:
                break
        except OSError:
            pass
        f.close()
    try:
        f.seek(0)
        f.truncate()
        f.write(f"process {os.getpid()} ({command_line()})\n")
        f.flush()
        remove_stale_temps(run_dir)
        yield
    finally:
        try:
            if tidy and not _run_files(run_dir):
                for name in [*_STARTING, *(p.name for p in run_dir.glob(".*.tmp"))]:
                    with contextlib.suppress(OSError):
                        (run_dir / name).unlink()
                if created:
                    with contextlib.suppress(OSError):
                        run_dir.rmdir()
            else:
                with contextlib.suppress(OSError):
                    f.truncate(0)
        finally:
            f.close()  # closing releases the lock


def point_latest(pointer: Path, run_dir: Path) -> None:
    """``latest`` names ``run_dir`` by its name, when it sits beside the pointer; a run resumed from
    outside the data folder leaves the pointer as it was (it only ever names a run in that folder)."""
    if run_dir.parent.resolve() != pointer.parent.resolve():
        return
    target = run_dir.name
    if pointer.is_dir() and not pointer.is_symlink():  # a rename cannot replace a folder
        raise UnsafeFileError(
            f"the 'latest' pointer {pointer} is a folder, so it cannot name {run_dir} (saved there): "
            "remove the folder; pass the run folder itself meanwhile"
        )
    with contextlib.suppress(ConfigError):  # a FIFO, device or link there: replaced, never waited on
        named = read_bounded(pointer, "'latest' pointer", ConfigError, 4096, follow=False).strip()
        if named == target.encode():
            return
    write_bytes_atomic(pointer, target.encode())  # a rename: a link there is replaced, not followed


SUPERSEDED = ".superseded"


def supersede_later_records(run_dir: Path, epoch: int) -> str | None:
    """A run resumed from its checkpoint of ``epoch`` trains the epochs after it again, and writes
    their records again: the records an earlier session wrote for them (it was killed between two
    checkpoints) are moved out of ``metrics.jsonl`` into ``metrics.jsonl.superseded`` first, so each
    epoch has one record, written by the session whose training counts. The note to print, or None.
    The set-aside copy is on disk before ``metrics.jsonl`` is replaced (a rename): a kill between
    the two leaves every record in ``metrics.jsonl``."""
    import json

    path = run_dir / METRICS
    if not path.is_file() or path.is_symlink():
        return None
    fd = open_own(path, "the run's metrics", os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    keep, later = [], []
    for line in lines:
        try:
            after = int(json.loads(line)["epoch"]) > epoch
        except (ValueError, KeyError, TypeError, RecursionError):
            after = False  # damaged or foreign: not ours to judge, kept where it is
        (later if after else keep).append(line)
    if not later:
        return None
    aside = path.with_name(path.name + SUPERSEDED)
    try:
        append_line(aside, b"".join(x if x.endswith(b"\n") else x + b"\n" for x in later).decode(),
                    "the run's superseded metrics", sync=True)  # fmt: skip
        write_bytes_atomic(path, b"".join(keep))
    except OSError as e:
        raise CheckpointWriteError(f"cannot rewrite {METRICS} in {run_dir}: {e.strerror or e}") from None
    return (
        f"{len(later)} metrics record{'s' if len(later) != 1 else ''} of epochs after the checkpoint's "
        f"({epoch}) set aside in {aside}: those epochs are trained again"
    )


def append_metrics(run_dir: Path, line: str) -> str | None:
    """Append one JSON line to the run's ``metrics.jsonl`` (:func:`safe_files.append_line`: never
    through a link, on a line boundary). Returns the note when a cut-short last line was set aside."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        return append_line(run_dir / METRICS, line, "the run's metrics")
    except OSError as e:
        raise CheckpointWriteError(f"cannot write {METRICS} into {run_dir}: {e.strerror or e}") from None
