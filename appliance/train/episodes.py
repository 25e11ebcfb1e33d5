"""Episode statistics for the dashboard and the metrics: the vector's own log where it keeps one
(native Ocean envs), else the episodes its infos reported."""

from __future__ import annotations

from typing import Any

import numpy as np


def episode_means(episodes: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each stat over episodes, an entry with ``n`` counting as n episodes; ``n`` = the total."""
    weights = np.array([e.get("n", 1.0) for e in episodes])
    keys = [k for k in episodes[0] if k != "n"]
    out = {
        k: float(
            np.average(
                [e[k] for e in episodes if k in e],
                weights=[w for e, w in zip(episodes, weights, strict=True) if k in e],
            )
        )
        for k in keys
    }
    out["n"] = float(weights.sum())
    return out


class Episodes:
    """Episodes reported through infos since the last :meth:`stats`."""

    def __init__(self) -> None:
        self.pending: list[dict[str, float]] = []

    def collect(self, infos: list[dict[str, Any]]) -> None:
        """Episode stats from infos: one episode each (emulated envs), or the means of ``n`` episodes
        (Ocean envs on a process backend report their C log this way)."""
        for info in infos or ():
            if "episode_return" in info:
                self.pending.append({k: float(v) for k, v in info.items() if k != "env"})

    def stats(self, vec: Any, current: dict[str, float]) -> dict[str, float]:
        """The vector's log when it has one, else the means of the pending episodes, else ``current``."""
        log = vec.log() if hasattr(vec, "log") else {}
        if log:
            return dict(log)
        if self.pending:
            out, self.pending = episode_means(self.pending), []
            return out
        return current
