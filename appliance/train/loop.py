"""The outer training loop: epochs until a stop condition, with checkpoints, metrics and callbacks.

``puffer-bench train``, the benchmark suites (training speed, time to score) and the learning tests
all run training through :func:`run`, so a stop rule or a checkpoint cadence is written once::

    result = run(trainer, Stop(total_timesteps=2_000_000, target=("perf", 0.95)))
    result.reached, result.steps, result.seconds, result.history   # env stats per epoch

One epoch is ``trainer.evaluate()`` (a rollout) then ``trainer.train()`` (the PPO update).

An interruptible run (``puffer-bench train``) ends the same way on Ctrl-C, SIGTERM (``docker stop``,
a scheduler) and SIGHUP (a closed terminal): the update in progress finishes, a checkpoint is
written, the vector is closed by the caller. A rollout cut short is dropped and its steps are not
counted, so ``global_step`` counts exactly the steps that were trained on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The stop signals have one home, appliance.signals; these names are the loop's own API too
# (loop.Interrupted, loop.stop_signals, loop.Stopped for the trainer's commands).
from appliance.signals import STOP_SIGNALS as STOP_SIGNALS
from appliance.signals import Interrupted, SignalGuard, stop_signals
from appliance.signals import Stopped as Stopped

if TYPE_CHECKING:
    from appliance.train.trainer import Trainer


@dataclass(frozen=True)
class Stop:
    """When to stop; the first condition met ends the run (checked after each epoch).

    ``target`` is reached when the mean of ``metric`` over the last ``window`` epochs that reported
    it is at least ``value``, and at least ``min_epochs`` epochs have run (early epochs only see the
    episodes that end fastest, so a score needs time to mean something). ``seconds`` stops at the
    first epoch end after that much wall time, but never before ``min_epochs``.
    """

    total_timesteps: int | None = None
    seconds: float | None = None
    epochs: int | None = None
    target: tuple[str, float] | None = None
    window: int = 5
    min_epochs: int = 1


@dataclass
class Result:
    reason: str  # "timesteps" | "seconds" | "epochs" | "target" | "interrupted"
    epochs: int
    steps: int  # agent-steps trained on during this run
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    checkpoint: Path | None = None
    signal: str | None = None  # "SIGINT", "SIGTERM", "SIGHUP" when interrupted

    @property
    def sps(self) -> float:
        """Agent-steps trained on per wall-clock second of this run (not of earlier sessions)."""
        return self.steps / max(1e-9, self.seconds)

    @property
    def reached(self) -> bool:
        return self.reason == "target"

    def recent(self, metric: str, window: int = 5) -> float | None:
        return recent(self.history, metric, window)


def recent(history: Sequence[dict[str, float]], metric: str, window: int = 5) -> float | None:
    """Mean of ``metric`` over the last ``window`` epochs that reported it (None if none did)."""
    values = [e[metric] for e in history if metric in e][-window:]
    return sum(values) / len(values) if values else None


def _reason(stop: Stop, trainer: Trainer, history: list[dict[str, float]], elapsed: float) -> str | None:
    epochs = len(history)
    if stop.target is not None and epochs >= stop.min_epochs:
        metric, value = stop.target
        values = [e[metric] for e in history if metric in e][-stop.window :]
        if len(values) == stop.window and sum(values) / stop.window >= value:
            return "target"
    if stop.total_timesteps is not None and trainer.global_step >= stop.total_timesteps:
        return "timesteps"
    if stop.epochs is not None and epochs >= stop.epochs:
        return "epochs"
    if stop.seconds is not None and elapsed >= stop.seconds and epochs >= stop.min_epochs:
        return "seconds"
    return None


def run(
    trainer: Trainer,
    stop: Stop,
    checkpoint_interval: int | None = None,
    on_epoch: Sequence[Callable[[Trainer], None]] = (),
    on_metrics: Sequence[Callable[[dict[str, Any]], None]] = (),
    metrics_every: float = 1.0,
    interruptible: bool = False,
    guard: SignalGuard | None = None,
) -> Result:
    """Train until ``stop``; returns why it stopped and the env stats of every epoch.

    With a run folder (``trainer.run_dir``) a checkpoint is written every ``checkpoint_interval``
    epochs and at the end (also after Ctrl-C, SIGTERM or SIGHUP when ``interruptible``), and metrics records go to
    ``metrics.jsonl`` at most every ``metrics_every`` seconds and at the end (unless the last epoch's
    record is already written: one record per epoch, on every way out); ``on_metrics``
    callbacks (TensorBoard, W&B) get the same records. ``on_epoch`` callbacks (dashboard, progress)
    run after every epoch. A run that trained no epoch writes nothing at the end (``checkpoint`` is
    then the one it resumed from, if any). ``guard``: stop signals are already handled by the
    caller through this guard (data-parallel ranks, which must agree on when to stop).
    """
    if stop == Stop():
        raise ValueError("Stop() has no condition: the run would never end")
    if guard is not None:
        return _run(
            trainer, stop, checkpoint_interval, on_epoch, on_metrics, metrics_every, interruptible, guard
        )
    with stop_signals() if interruptible else contextlib.nullcontext(SignalGuard()) as guard:
        return _run(
            trainer, stop, checkpoint_interval, on_epoch, on_metrics, metrics_every, interruptible, guard
        )


def _run(
    trainer: Trainer,
    stop: Stop,
    checkpoint_interval: int | None,
    on_epoch: Sequence[Callable[[Trainer], None]],
    on_metrics: Sequence[Callable[[dict[str, Any]], None]],
    metrics_every: float,
    interruptible: bool,
    guard: SignalGuard,
) -> Result:
    history: list[dict[str, float]] = []
    start, steps0 = time.perf_counter(), trainer.global_step
    last_metrics = float("-inf")
    recorded: tuple[int, int] | None = None  # (epoch, global_step) of the last metrics record written
    reason: str | None = None
    stopped_by: str | None = None
    try:
        while reason is None:
            if stop.total_timesteps is not None and trainer.global_step >= stop.total_timesteps:
                reason = "timesteps"  # a resumed run that is already done
                break
            epoch0, step0 = trainer.epoch, trainer.global_step
            try:
                trainer.evaluate()
                with guard.deferred():  # a signal during the update waits for it, then ends the run
                    trainer.train()
                    history.append(dict(trainer.env_stats))
            except KeyboardInterrupt:
                if trainer.epoch == epoch0:  # the rollout was never trained on: it does not count
                    trainer.global_step = step0
                raise
            if (
                trainer.run_dir is not None
                and checkpoint_interval
                and trainer.epoch % checkpoint_interval == 0
            ):
                with guard.deferred():
                    trainer.save_checkpoint()
            if time.perf_counter() - last_metrics > metrics_every:
                last_metrics = time.perf_counter()
                with guard.deferred():  # a signal mid-write must not leave it written but not noted
                    recorded = _emit(trainer, on_metrics)
            for callback in on_epoch:
                callback(trainer)
            reason = _reason(stop, trainer, history, time.perf_counter() - start)
    except KeyboardInterrupt as e:
        if not interruptible:
            raise
        reason = "interrupted"
        stopped_by = e.name if isinstance(e, Interrupted) else "SIGINT"
    result = Result(
        reason,
        len(history),
        trainer.global_step - steps0,
        time.perf_counter() - start,
        history,
        signal=stopped_by,
    )
    if trainer.run_dir is not None and history:
        with guard.deferred():
            result.checkpoint = trainer.save_checkpoint()
            if recorded != (trainer.epoch, trainer.global_step):  # one record per epoch, never twice
                _emit(trainer, on_metrics)
    else:  # nothing new to save: an untrained policy is no checkpoint, and a resumed one is on disk
        result.checkpoint = trainer.last_checkpoint
    return result


def _emit(trainer: Trainer, callbacks: Sequence[Callable[[dict[str, Any]], None]]) -> tuple[int, int]:
    """Write the metrics record of where the trainer is and hand it to ``callbacks``; which epoch and
    step it recorded (the end of the run writes that epoch's record only if this has not)."""
    at = (trainer.epoch, trainer.global_step)
    record = trainer.log_metrics()
    for callback in callbacks:
        callback(record)
    return at
