"""Run folders and checkpoints: where a run lives, and how its weights and counters are saved.

A run folder (``train.data_dir/<run id>``) holds ``model.pt`` (the newest weights, plus
``model_<epoch>.pt`` snapshots), ``trainer_state.pt`` (optimizer, counters, RNG states),
``config.yaml`` and ``metrics.jsonl``; ``train.data_dir/latest`` names the newest run. Every file is
written atomically.
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from appliance.errors import ConfigError
from appliance.report_io import write_bytes_atomic

if TYPE_CHECKING:
    from appliance.train.trainer import Trainer

MODEL, STATE, LATEST = "model.pt", "trainer_state.pt", "latest"


def new_run_folder(cfg: Any, run_id: str | None = None) -> Path:
    """``train.data_dir/<run id>``, by default ``<env>-<UTC time>``."""
    return Path(cfg.train.data_dir) / (
        run_id or f"{cfg.env_name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    )


def find_run(data_dir: str | Path, which: str) -> Path:
    """A run folder from 'latest', a run id, or a path to a folder or model.pt."""
    data_dir = Path(data_dir)
    if which == LATEST:
        pointer = data_dir / LATEST
        if not pointer.is_file():
            raise ConfigError(
                f"no 'latest' run in {data_dir}/ yet: train first, or pass a run folder or model.pt"
            )
        which = str(data_dir / pointer.read_text().strip())
    path = Path(which)
    if path.is_file():
        path = path.parent
    if not path.is_dir() and (data_dir / which).is_dir():
        path = data_dir / which
    if not (path / MODEL).is_file():
        raise ConfigError(f"no {MODEL} in {path}")
    return path


def start_run(cfg: Any, run_dir: Path) -> None:
    """Create the folder, write the resolved config and point ``latest`` at it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(run_dir / "config.yaml", cfg.to_yaml().encode())
    write_bytes_atomic(Path(cfg.train.data_dir) / LATEST, run_dir.name.encode())


def _torch_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def save(trainer: Trainer, run_dir: Path) -> Path:
    """Weights (also as an epoch snapshot) and trainer state, each written atomically."""
    run_dir.mkdir(parents=True, exist_ok=True)
    weights = _torch_bytes(trainer.policy.state_dict())
    write_bytes_atomic(run_dir / f"model_{trainer.epoch:06d}.pt", weights)
    write_bytes_atomic(run_dir / MODEL, weights)
    state = {
        "optimizer": trainer.optimizer.state_dict(),
        "global_step": trainer.global_step,
        "epoch": trainer.epoch,
        "torch_rng": torch.get_rng_state(),
        "generator": trainer.generator.get_state(),
    }
    write_bytes_atomic(run_dir / STATE, _torch_bytes(state))
    return run_dir / MODEL


def load(trainer: Trainer, run_dir: Path, resume: bool = True) -> None:
    """Weights from ``run_dir``; with ``resume`` also the optimizer, counters and RNG states."""
    trainer.policy.load_state_dict(
        torch.load(run_dir / MODEL, map_location=trainer.device, weights_only=True)
    )
    if resume:
        state = torch.load(run_dir / STATE, map_location="cpu", weights_only=False)
        trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.global_step, trainer.epoch = state["global_step"], state["epoch"]
        torch.set_rng_state(state["torch_rng"])
        trainer.generator.set_state(state["generator"])
