"""Checkpoints: a trainer's weights, optimizer, counters and RNG states in one file, and read back.

A checkpoint is one file: the weights, the optimizer, the counters and RNG states, and what it was
trained with (env, policy shape, optimizer), so it is whole or absent. It is written once to a temp
file, fsynced, hard-linked as the epoch's snapshot and renamed over ``model.pt``; a kill at any
point leaves ``model.pt`` either the old checkpoint or the new one. Loading checks it against the
run being started and says in one line what does not fit, and which intact snapshot to use when a
file is damaged. What is saved and restored is a :class:`TrainState`, which the trainer hands over;
the run folder that holds the files is :mod:`appliance.train.runs`.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from appliance.config import Config, check_layer
from appliance.errors import ConfigError
from appliance.report_io import open_input, write_temp
from appliance.train.rewards import ReturnScale
from appliance.train.runs import (
    MODEL,
    CheckpointError,
    CheckpointWriteError,
    epoch_of,
    point_latest,
)

FORMAT = "puffer-bench/checkpoint/2"


@dataclass
class TrainState:
    """What a checkpoint saves of a trainer and restores into it: the policy, optimizer and sampling
    generator (restored in place), the counters, and the config and device the run has."""

    policy: torch.nn.Module
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    config: Config
    device: torch.device
    epoch: int = 0
    global_step: int = 0
    return_scale: ReturnScale | None = None  # train.reward_norm's running statistics


@dataclass(frozen=True)
class Loaded:
    """What :func:`load` read: the file, and the counters to go on from (the checkpoint's with
    ``resume``, else the state's own)."""

    path: Path
    epoch: int
    global_step: int


# ----------------------------------------------------------------------------- writing


def _torch_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _meta(cfg: Config) -> dict[str, Any]:
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


def save(state: TrainState, run_dir: Path, latest: Path | None = None, previous: Path | None = None) -> Path:
    """One checkpoint file as ``model_<epoch>.pt`` and ``model.pt``; then point ``latest`` here.

    Raises :class:`CheckpointWriteError` (one line, naming the folder and the ``previous``
    checkpoint) when the disk is full or the folder read-only; the previous checkpoint is then untouched.
    """
    blob = {
        "format": FORMAT,
        "epoch": state.epoch,
        "global_step": state.global_step,
        "meta": _meta(state.config),
        "model": state.policy.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "generator": state.generator.get_state(),
    }
    if state.return_scale is not None:
        blob["return_scale"] = state.return_scale.state_dict()
    model, snapshot = run_dir / MODEL, run_dir / f"model_{state.epoch:06d}.pt"
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
        _fsync_dir(run_dir)
        if latest is not None:
            point_latest(latest, run_dir)
    except OSError as e:
        kept = f"the last checkpoint {previous} is intact" if previous else ("no checkpoint was written yet")
        raise CheckpointWriteError(
            f"cannot write a checkpoint into {run_dir}: {e.strerror or e}; {kept}"
        ) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return model


# ----------------------------------------------------------------------------- reading


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
    # a FIFO, device, folder or link: one line, no wait, nothing read through the link
    open_input(path, "checkpoint", CheckpointError, follow=False).close()
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
        (p for p in path.parent.glob("model_*.pt") if epoch_of(p) is not None),
        key=lambda p: epoch_of(p) or 0,
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
    if "return_scale" in state and not _is_return_scale(state["return_scale"]):
        raise CheckpointError(
            f"checkpoint {path}: return_scale is not reward-scale statistics "
            f"(count, mean, m2 >= 0, scale > 0){_instead(path)}"
        )


def _is_return_scale(value: Any) -> bool:
    if not isinstance(value, dict) or not _is_count(value.get("count")):
        return False
    try:
        mean, m2, scale = (float(value[k]) for k in ("mean", "m2", "scale"))
    except (KeyError, TypeError, ValueError):
        return False
    return all(map(math.isfinite, (mean, m2, scale))) and m2 >= 0 and scale > 0


def _check_meta(path: Path, meta: Any) -> None:
    """What a checkpoint says it was trained with, held to the ranges and choices the config checks
    (so no message ever suggests ``--policy.hidden-size 1000000``, nor does a policy get built with it)."""
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
        check_layer(
            {"policy": saved, "train": {"optimizer": meta.get("optimizer", "adam")}}, f"checkpoint {path}"
        )
    except ConfigError as e:
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
        epoch = epoch_of(path)
        if epoch is not None and epoch != obj["epoch"]:
            raise CheckpointError(
                f"checkpoint {path} holds epoch {obj['epoch']}, not the {epoch} of its name{_instead(path)}"
            )
        _check_meta(path, obj.get("meta"))
        if not _weights(obj["model"]):
            raise CheckpointError(f"checkpoint {path}: 'model' is not a set of named tensors{_instead(path)}")
        return {"model": obj["model"], "state": obj, "meta": obj.get("meta")}
    if _weights(obj):
        return {"model": obj, "state": None, "meta": None}  # weights only: they load, but do not resume
    raise CheckpointError(f"{path} is a torch file but not a puffer-bench checkpoint{_instead(path)}")


def _weights(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and bool(obj)
        and all(isinstance(k, str) and torch.is_tensor(v) for k, v in obj.items())
    )


def _check_fits(path: Path, meta: dict[str, Any] | None, cfg: Config, resume: bool) -> None:
    if not meta:
        return
    now = _meta(cfg)
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


def load(state: TrainState, path: Path, resume: bool = True) -> Loaded:
    """Weights from the checkpoint ``path`` (a file, or a run folder's newest) into ``state.policy``;
    with ``resume`` also the optimizer and RNG states, and the counters in what it returns."""
    path = path / MODEL if path.is_dir() else path
    ckpt = read(path)
    _check_fits(path, ckpt["meta"], state.config, resume)
    saved = ckpt["state"]
    if resume and saved is None:
        raise CheckpointError(
            f"{path} holds weights only: it cannot be resumed; --load-model-path {path} starts from its weights"
        )
    load_weights(state.policy, path, {k: v.to(state.device) for k, v in ckpt["model"].items()})
    if not resume:
        return Loaded(path, state.epoch, state.global_step)
    try:
        state.optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch_rng"])
        state.generator.set_state(saved["generator"])
        if state.return_scale is not None and isinstance(saved.get("return_scale"), dict):
            state.return_scale.load_state_dict(saved["return_scale"])
    except (RuntimeError, KeyError, ValueError, TypeError) as e:
        raise CheckpointError(
            f"checkpoint {path}: its optimizer state does not fit this run's optimizer "
            f"(train.optimizer {state.config.train.optimizer}): {_first_line(e)}"
        ) from None
    return Loaded(path, int(saved["epoch"]), int(saved["global_step"]))
