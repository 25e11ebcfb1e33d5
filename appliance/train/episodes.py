"""Episode statistics for the dashboard and the metrics: the vector's own log where it keeps one
(native Ocean envs), else the episodes its infos reported.

Statistics are only ever fresh. An epoch whose rollout ended no episode has no env stats (``{}``),
so the loop's history and the time-to-score windows skip it rather than count the last batch again;
a metrics record pools the episodes of every epoch since the record before it and says how many
(``env/n``, 0 when none ended and then no other ``env/`` key), so a record is never a repeat.
"""

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
    """Episodes reported through infos since the last :meth:`stats`, and the epochs' stats since the
    last metrics record (:meth:`note`, :meth:`take_window`)."""

    def __init__(self) -> None:
        self.pending: list[dict[str, float]] = []
        self.window: dict[int, dict[str, float]] = {}  # epoch -> the stats of the episodes it ended

    def collect(self, infos: list[dict[str, Any]]) -> None:
        """Episode stats from infos: one episode each (emulated envs), or the means of ``n`` episodes
        (Ocean envs on a process backend report their C log this way)."""
        for info in infos or ():
            if "episode_return" in info:
                self.pending.append({k: float(v) for k, v in info.items() if k != "env"})

    def stats(self, vec: Any) -> dict[str, float]:
        """The episodes that ended since the last call: the vector's log when it has one, else the
        means of the pending episodes, else ``{}`` (none ended; never the previous values again)."""
        log = vec.log() if hasattr(vec, "log") else {}
        if log:
            return dict(log)
        if self.pending:
            out, self.pending = episode_means(self.pending), []
            return out
        return {}

    def note(self, epoch: int, stats: dict[str, float]) -> None:
        """``stats`` are epoch ``epoch``'s (set again in the same epoch, as data-parallel ranks merge
        theirs, they replace the first)."""
        if stats:
            self.window[epoch] = dict(stats)
        else:
            self.window.pop(epoch, None)

    def take_window(self) -> dict[str, float]:
        """The episodes of the epochs noted since the last call, pooled (``n`` their count); ``{"n":
        0.0}`` when none ended."""
        stats = list(self.window.values())
        self.window = {}
        return episode_means(stats) if stats else {"n": 0.0}
