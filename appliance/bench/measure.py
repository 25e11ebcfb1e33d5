"""Training measurements for the suites: speed after warm-up, and time to a score.

Both run the real :class:`~appliance.train.Trainer` through the one training loop
(:func:`appliance.train.loop.run`), so a suite measures exactly what ``puffer-bench train`` does.
"""

from __future__ import annotations

import time
from typing import Any

from appliance.train.loop import Stop

SCORE_WINDOW = 5  # epochs averaged when judging a score


def training_speed(cfg: Any, seconds: float, warmup_epochs: int = 1) -> dict[str, Any]:
    """End-to-end training agent-steps/s after warm-up epochs, with the phase shares of the timed part."""
    import torch

    from appliance import vector
    from appliance.train import Trainer, loop

    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        cuda = trainer.device.type == "cuda"
        loop.run(trainer, Stop(epochs=warmup_epochs))
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        trainer.timings.reset()
        start = time.perf_counter()
        result = loop.run(trainer, Stop(seconds=seconds, min_epochs=2))
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        return {
            "sps": result.steps / elapsed,
            "epochs": result.epochs,
            "shares": {k: v["share"] for k, v in trainer.timings.breakdown().items()},
            "memory_peak": torch.cuda.max_memory_allocated() if cuda else None,
            "memory_total": torch.cuda.get_device_properties(trainer.device).total_memory if cuda else None,
        }
    finally:
        trainer.close()


def time_to_score(cfg: Any, metric: str, target: float, max_timesteps: int) -> dict[str, Any]:
    """Train until the mean of ``metric`` over the last epochs reaches ``target``; wall time and steps."""
    from appliance import vector
    from appliance.train import Trainer, loop

    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        stop = Stop(total_timesteps=max_timesteps, target=(metric, target), window=SCORE_WINDOW)
        result = loop.run(trainer, stop)
        if result.reached:
            return {"reached": True, "seconds": result.seconds, "steps": trainer.global_step}
        return {"reached": False, "seconds": None, "steps": None, "last": result.recent(metric, SCORE_WINDOW)}
    finally:
        trainer.close()
