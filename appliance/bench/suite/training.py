"""Training measurements for the suites: speed after warm-up, and time to a score.

Both run the real :class:`~appliance.train.Trainer` through the one training loop
(:func:`appliance.train.loop.run`), so a suite measures exactly what ``puffer-bench train`` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appliance.train.loop import Stop

if TYPE_CHECKING:
    from appliance.config import Config

SCORE_WINDOW = 5  # epochs averaged when judging a score


def training_speed(
    cfg: Config,
    seconds: float,
    repeats: int = 1,
    take: Callable[[Callable[[], dict[str, Any]]], dict[str, Any]] | None = None,
    warmup_epochs: int = 1,
) -> list[dict[str, Any]]:
    """End-to-end training agent-steps/s, ``repeats`` timed windows of one trainer after its warm-up
    epochs, each window at least ``seconds`` and one whole epoch (a rollout and its update), with the
    phase shares of that window. ``take`` runs each window (the suite's speed gate, which may run one
    again); default: once. One trainer for all windows: building one and warming it up cost as much
    as the timed part on a 2-core CPU (docs/benchmarks.md)."""
    import torch

    from appliance import vector
    from appliance.train import Trainer, loop

    trainer = Trainer(cfg, vector.make_from_config(cfg))
    cuda = trainer.device.type == "cuda"

    def window() -> dict[str, Any]:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        trainer.timings.reset()
        start = time.perf_counter()
        result = loop.run(trainer, Stop(seconds=seconds, min_epochs=1))
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        return {
            "sps": result.steps / elapsed,
            "epochs": result.epochs,
            "shares": {k: v["share"] for k, v in trainer.timings.breakdown().items()},
            # the rollout engine's buffers: share of the timed wall clock each spent in its policy step,
            # waiting for the GIL and stepping its envs (empty for the plain loop)
            "buffers": [{k: v / elapsed for k, v in b.items()} for b in trainer.timings.buffers],
            "memory_peak": torch.cuda.max_memory_allocated() if cuda else None,
            "memory_total": torch.cuda.get_device_properties(trainer.device).total_memory if cuda else None,
        }

    try:
        loop.run(trainer, Stop(epochs=warmup_epochs))
        return [(take or (lambda f: f()))(window) for _ in range(repeats)]
    finally:
        trainer.close()


def time_to_score(
    cfg: Config, metric: str, target: float, max_timesteps: int, min_epochs: int = 1
) -> dict[str, Any]:
    """Train until the mean of ``metric`` over the last epochs reaches ``target``: wall time and
    agent-steps to it, the final score (that mean when the run ended) and the learning curve (per
    epoch that reported ``metric``: agent-steps, seconds, the windowed mean). ``min_epochs``: not
    before that many epochs (early epochs see only the episodes that end fastest)."""
    from appliance import vector
    from appliance.train import Trainer, loop

    trainer = Trainer(cfg, vector.make_from_config(cfg))
    curve: dict[str, list[float]] = {"steps": [], "seconds": [], "score": []}
    values: list[float] = []
    start = time.perf_counter()

    def record(t: Any) -> None:
        if metric in t.env_stats:
            values.append(float(t.env_stats[metric]))
            window = values[-SCORE_WINDOW:]
            curve["steps"].append(float(t.global_step))
            curve["seconds"].append(time.perf_counter() - start)
            curve["score"].append(sum(window) / len(window))

    try:
        stop = Stop(
            total_timesteps=max_timesteps, target=(metric, target), window=SCORE_WINDOW, min_epochs=min_epochs
        )
        result = loop.run(trainer, stop, on_epoch=[record])
        final = result.recent(metric, SCORE_WINDOW)
        out = {"reached": result.reached, "final": final, "curve": curve, "last": final}
        if result.reached:
            return {**out, "seconds": result.seconds, "steps": trainer.global_step}
        return {**out, "seconds": None, "steps": None}
    finally:
        trainer.close()
