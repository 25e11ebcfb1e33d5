"""Run folders and checkpoints: where a run lives, and how its weights and counters are saved.

A run folder (``train.data_dir/<run id>``) holds ``model.pt`` (the newest checkpoint),
``model_<epoch>.pt`` snapshots, ``config.yaml`` and ``metrics.jsonl``; ``train.data_dir/latest``
names the newest run that has a checkpoint.

A checkpoint is one file: the weights, the optimizer, the counters and RNG states, and what it was
trained with (env, policy shape, optimizer), so it is whole or absent. It is written once to a temp
file, fsynced, hard-linked as the epoch's snapshot and renamed over ``model.pt``; a kill at any
point leaves ``model.pt`` either the old checkpoint or the new one. Loading checks it against the
run being started and says in one line what does not fit, and which intact snapshot to use when a
file is damaged. Every run takes its folder through :func:`claim`: locked (``.lock``, fcntl) while
it trains, never one that holds another run, named from the env spec with characters safe in a
shell, and removed again if the run trains nothing.

Folders of the previous layout (``model.pt`` holding weights only, beside ``trainer_state.pt``)
still load; a resume checks that both files come from the same epoch.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from appliance.errors import ApplianceError, ConfigError
from appliance.report_io import (
    lock_or_refuse,
    remove_stale_temps,
    require_room,
    write_bytes_atomic,
    write_temp,
)

if TYPE_CHECKING:
    from appliance.train.trainer import Trainer

MODEL, LATEST, LOCK, METRICS = "model.pt", "latest", ".lock", "metrics.jsonl"
LEGACY_STATE = "trainer_state.pt"  # the previous layout's second file
FORMAT = "puffer-bench/checkpoint/2"
SNAPSHOT = re.compile(r"model_(\d+)\.pt$")


class CheckpointError(ApplianceError, ValueError):
    """A checkpoint cannot be used: unreadable, from another run shape, or its folder is busy."""

    exit_code = 2


class CheckpointWriteError(ApplianceError, OSError):
    """A checkpoint or metrics record cannot be written (disk full, read-only folder)."""


# ----------------------------------------------------------------------------- run folders


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
    """A checkpoint file from 'latest', a run id, a run folder, or a path to a checkpoint file."""
    data_dir = Path(data_dir)
    if which == LATEST:
        pointer = data_dir / LATEST
        if not pointer.is_file():
            raise ConfigError(
                f"no 'latest' run in {data_dir}/ yet: train first, or pass a run folder or model.pt"
            )
        which = str(data_dir / _pointer_target(pointer))
    path = Path(which)
    if path.is_file():
        return path
    if not path.is_dir() and (data_dir / which).is_dir():
        path = data_dir / which
    if not (path / MODEL).is_file():
        if path.is_dir():
            raise ConfigError(f"no {MODEL} in {path}: the run wrote no checkpoint")
        raise ConfigError(f"no run or checkpoint {which!r} (looked in . and {data_dir}/)")
    return path / MODEL


def _pointer_target(pointer: Path) -> str:
    """The run the ``latest`` pointer names: one line of text, or a one-line error naming it."""
    try:
        with open(pointer, "rb") as f:
            target = f.read(4097).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        target = ""
    if not target or len(target) > 4096 or not target.isprintable():
        raise ConfigError(
            f"the 'latest' pointer {pointer} is damaged (not the name of a run): pass a run folder or "
            "model.pt, or train again to rewrite it"
        )
    return target


def find_run(data_dir: str | Path, which: str) -> Path:
    """The run folder of :func:`find_checkpoint`'s checkpoint."""
    return find_checkpoint(data_dir, which).parent


def start_run(cfg: Any, run_dir: Path) -> None:
    """Create the folder and write the resolved config (``latest`` moves at the first checkpoint)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(run_dir / "config.yaml", cfg.to_yaml().encode())
    except OSError as e:
        raise CheckpointWriteError(f"cannot write into the run folder {run_dir}: {e.strerror or e}") from None


@dataclass(frozen=True)
class Claim:
    """The run folder a run trains into, and the checkpoint it resumes from (None for a new run)."""

    run_dir: Path
    resume_from: Path | None = None


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
            yield Claim(resume_from.parent, resume_from)
        return
    if run_id is not None:
        check_run_id(run_id)
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
_STARTING = {LOCK, "config.yaml"}


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
    epochs = [e for e in (_epoch_of(run_dir / n) for n in held) if e is not None]
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
            f = open(run_dir / LOCK, "a+")  # noqa: SIM115 (held open for the lock's lifetime)
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
        f.write(f"process {os.getpid()} ({' '.join(['puffer-bench', *sys.argv[1:]])})\n")
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


# ----------------------------------------------------------------------------- writing


def _torch_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _meta(trainer: Trainer) -> dict[str, Any]:
    cfg = trainer.config
    return {
        "env": cfg.env_name,
        "policy": {k: cfg.data["policy"].get(k) for k in ("core", "hidden_size", "encoder")},
        "optimizer": cfg.train.optimizer,
    }


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save(trainer: Trainer, run_dir: Path, latest: Path | None = None) -> Path:
    """One checkpoint file as ``model_<epoch>.pt`` and ``model.pt``; then point ``latest`` here.

    Raises :class:`CheckpointWriteError` (one line, naming the folder) when the disk is full or the
    folder read-only; the previous checkpoint is then untouched.
    """
    blob = {
        "format": FORMAT,
        "epoch": trainer.epoch,
        "global_step": trainer.global_step,
        "meta": _meta(trainer),
        "model": trainer.policy.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "generator": trainer.generator.get_state(),
    }
    model, snapshot = run_dir / MODEL, run_dir / f"model_{trainer.epoch:06d}.pt"
    tmp = None
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = write_temp(model, _torch_bytes(blob))
        try:  # the snapshot shares the file's blocks; without hard links it is a second copy
            link = f"{tmp[: -len('.tmp')]}.snap.tmp"
            os.link(tmp, link)
            os.replace(link, snapshot)
        except OSError:
            Path(link).unlink(missing_ok=True)
            os.replace(write_temp(snapshot, Path(tmp).read_bytes()), snapshot)
        os.replace(tmp, model)
        tmp = None
        (run_dir / LEGACY_STATE).unlink(missing_ok=True)  # model.pt now carries the state
        _fsync_dir(run_dir)
        if latest is not None:
            point_latest(latest, run_dir)
    except OSError as e:
        kept = (
            f"the last checkpoint {trainer.last_checkpoint} is intact"
            if trainer.last_checkpoint
            else ("no checkpoint was written yet")
        )
        raise CheckpointWriteError(
            f"cannot write a checkpoint into {run_dir}: {e.strerror or e}; {kept}"
        ) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return model


def point_latest(pointer: Path, run_dir: Path) -> None:
    """``latest`` names ``run_dir`` (by name when it sits beside the pointer)."""
    target = run_dir.name if run_dir.parent.resolve() == pointer.parent.resolve() else str(run_dir.resolve())
    with contextlib.suppress(OSError):
        if pointer.read_text().strip() == target:
            return
    write_bytes_atomic(pointer, target.encode())


def append_metrics(run_dir: Path, line: str) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / METRICS, "a") as f:
            f.write(line)
    except OSError as e:
        raise CheckpointWriteError(f"cannot write {METRICS} into {run_dir}: {e.strerror or e}") from None


# ----------------------------------------------------------------------------- reading


def _epoch_of(path: Path) -> int | None:
    m = SNAPSHOT.search(path.name)
    return int(m.group(1)) if m else None


def _unpacked_size(path: Path) -> int | None:
    """The bytes a torch (zip) archive's entries unpack to, from its directory; None if not a zip."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return sum(info.file_size for info in z.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None


def _unsafe_global(e: Exception) -> str | None:
    """What the weights-only unpickler refused to import or build (pickled code), else None."""
    text = str(e)
    if not isinstance(e, pickle.UnpicklingError) or not re.search(r"GLOBAL|add_safe_globals", text):
        return None
    found = re.search(r"GLOBAL (\S+)", text)
    return found.group(1) if found else "an object of a class"


def _read(path: Path) -> Any:
    """``torch.load`` (tensors and plain data only) with a one-line error for damaged files.

    An archive whose entries would unpack to far more than its own size (a zip bomb) is refused
    before torch reads it; torch writes its entries uncompressed."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror or e}") from None
    if size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (a write was cut short){_instead(path)}")
    unpacked = _unpacked_size(path)
    if unpacked is not None and unpacked > 2 * size + 2**20:
        raise CheckpointError(
            f"checkpoint {path} would unpack to {unpacked:,} bytes from {size:,}: not an archive torch "
            f"writes (its entries are stored uncompressed), refused{_instead(path)}"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        unsafe = _unsafe_global(e)
        if unsafe:
            raise CheckpointError(
                f"checkpoint {path} holds objects that are not plain tensors and data ({unsafe}): it is "
                "refused for safety, as loading it could run code; puffer-bench checkpoints never hold any"
            ) from None
        with open(path, "rb") as f:
            zipped = f.read(4) == b"PK\x03\x04"  # torch files are zip archives
        if zipped or isinstance(e, EOFError):
            what = f"truncated or corrupt ({size:,} bytes, not a whole torch archive)"
        else:
            what = f"not a torch checkpoint ({type(e).__name__})"
        raise CheckpointError(f"checkpoint {path} is {what}{_instead(path)}") from None


def _loads(path: Path) -> bool:
    try:
        size = path.stat().st_size
        if size == 0 or (_unpacked_size(path) or 0) > 2 * size + 2**20:
            return False
        return torch.load(path, map_location="cpu", weights_only=True) is not None
    except Exception:
        return False


def _instead(path: Path) -> str:
    """'; use <snapshot> instead' naming the newest other snapshot in the folder that loads."""
    try:
        inode = path.stat().st_ino
    except OSError:
        inode = None
    snaps = sorted(
        (p for p in path.parent.glob("model_*.pt") if _epoch_of(p) is not None),
        key=lambda p: _epoch_of(p) or 0,
        reverse=True,
    )
    for snap in snaps:
        if snap == path or snap.stat().st_ino == inode:
            continue
        if _loads(snap):
            return f"; the newest intact snapshot is {snap}: pass it to --resume or --load-model-path"
    return "; no intact snapshot in its folder"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _check_state(path: Path, state: Any) -> None:
    """The counters and RNG states a resume reads: the right types, or one line naming the field."""
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path}: its trainer state is not a mapping{_instead(path)}")
    for key in ("epoch", "global_step"):
        if key in state and not _is_count(state[key]):
            raise CheckpointError(
                f"checkpoint {path}: {key} must be a whole number >= 0, got {str(state[key])[:40]!r}{_instead(path)}"
            )
    for key in ("torch_rng", "generator"):
        if key in state and not (torch.is_tensor(state[key]) and state[key].dtype == torch.uint8):
            raise CheckpointError(
                f"checkpoint {path}: {key} is not an RNG state (a byte tensor){_instead(path)}"
            )


def _check_meta(path: Path, meta: Any) -> None:
    """What a checkpoint says it was trained with, held to the ranges and choices the config checks
    (so no message ever suggests ``--policy.hidden-size 1000000``, nor does a policy get built with it)."""
    from appliance import config

    if meta is None:
        return
    if (
        not isinstance(meta, dict)
        or not isinstance(meta.get("policy"), dict)
        or not isinstance(meta.get("env"), str)
    ):
        raise CheckpointError(
            f"checkpoint {path}: its 'meta' (env, policy, optimizer) is damaged{_instead(path)}"
        )
    try:
        saved = {k: v for k, v in meta["policy"].items() if v is not None}
        config.check_layer(
            {"policy": saved, "train": {"optimizer": meta.get("optimizer", "adam")}}, f"checkpoint {path}"
        )
    except config.ConfigError as e:
        raise CheckpointError(f"{e}{_instead(path)}") from None


def read(path: Path) -> dict[str, Any]:
    """A checkpoint as ``{"model", "state" (None for weights only), "meta" (None if unknown)}``.

    Every field a load uses is checked first: weights are named tensors, counters whole numbers,
    ``meta`` within the config's ranges; a damaged one is one line naming the file and the field."""
    obj = _read(path)
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        missing = [k for k in ("model", "epoch", "global_step", "optimizer") if k not in obj]
        if missing:
            raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}{_instead(path)}")
        _check_state(path, obj)
        epoch = _epoch_of(path)
        if epoch is not None and epoch != obj["epoch"]:
            raise CheckpointError(
                f"checkpoint {path} holds epoch {obj['epoch']}, not the {epoch} of its name{_instead(path)}"
            )
        _check_meta(path, obj.get("meta"))
        if not _weights(obj["model"]):
            raise CheckpointError(f"checkpoint {path}: 'model' is not a set of named tensors{_instead(path)}")
        return {"model": obj["model"], "state": obj, "meta": obj.get("meta")}
    if _weights(obj):
        return {"model": obj, "state": None, "meta": None}  # weights only (previous layout)
    raise CheckpointError(f"{path} is a torch file but not a puffer-bench checkpoint{_instead(path)}")


def _weights(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and bool(obj)
        and all(isinstance(k, str) and torch.is_tensor(v) for k, v in obj.items())
    )


def _legacy_state(path: Path) -> dict[str, Any]:
    """The previous layout's trainer_state.pt beside ``path``, checked against its epoch snapshot."""
    state_path = path.parent / LEGACY_STATE
    if not state_path.is_file():
        raise CheckpointError(f"{path} holds weights only and {state_path} is missing: it cannot be resumed")
    state = _read(state_path)
    _check_state(state_path, state)
    missing = [k for k in ("epoch", "global_step", "optimizer", "torch_rng", "generator") if k not in state]
    if missing:
        raise CheckpointError(f"{state_path} lacks {', '.join(missing)}: {path} cannot be resumed")
    snapshot = path.parent / f"model_{state['epoch']:06d}.pt"
    if snapshot.is_file() and snapshot.read_bytes() != path.read_bytes():
        raise CheckpointError(
            f"{path} and {state_path} come from different checkpoints ({state_path.name} says epoch "
            f"{state['epoch']}, {path.name} differs from {snapshot.name}): resume is refused; "
            f"--load-model-path {snapshot} starts from that epoch's weights"
        )
    return state


def _check_fits(path: Path, meta: dict[str, Any] | None, trainer: Trainer, resume: bool) -> None:
    if not meta:
        return
    now = _meta(trainer)
    pairs = [
        (f"policy.{k.replace('_', '-')}", meta["policy"].get(k), now["policy"].get(k)) for k in meta["policy"]
    ]
    if resume:
        pairs = [
            ("env", meta["env"], now["env"]),
            *pairs,
            ("train.optimizer", meta.get("optimizer"), now["optimizer"]),
        ]
    for key, saved, current in pairs:
        if saved != current:
            fix = f"train {saved} again" if key == "env" else f"pass --{key} {saved}"
            raise CheckpointError(
                f"checkpoint {path} was trained with {key} {saved!r}, this run has {current!r}: {fix}"
                + (" (or start a new run)" if resume else "")
            )


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    detail = [ln for ln in lines if not ln.startswith("Error(s) in loading")]
    return (detail or lines or [type(e).__name__])[0]


def load_weights(policy: torch.nn.Module, path: Path, weights: dict[str, Any]) -> None:
    try:
        policy.load_state_dict(weights)
    except (RuntimeError, KeyError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} does not fit this policy: {_first_line(e)}") from None


def load(trainer: Trainer, path: Path, resume: bool = True) -> Path:
    """Weights from the checkpoint ``path`` (a file, or a run folder's newest); with ``resume`` also
    the optimizer, counters and RNG states. Returns the file read."""
    path = path / MODEL if path.is_dir() else path
    ckpt = read(path)
    _check_fits(path, ckpt["meta"], trainer, resume)
    state = ckpt["state"] if not resume or ckpt["state"] is not None else _legacy_state(path)
    load_weights(trainer.policy, path, {k: v.to(trainer.device) for k, v in ckpt["model"].items()})
    if resume:
        try:
            trainer.optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])
            trainer.generator.set_state(state["generator"])
        except (RuntimeError, KeyError, ValueError, TypeError) as e:
            raise CheckpointError(
                f"checkpoint {path}: its optimizer state does not fit this run's optimizer "
                f"(train.optimizer {trainer.config.train.optimizer}): {_first_line(e)}"
            ) from None
        trainer.global_step, trainer.epoch = int(state["global_step"]), int(state["epoch"])
    return path
