"""Per-phase wall-clock timing of the training loop, read by the dashboard, the logs and reports.

Evaluate: forward, env, copy, graphed, misc. Train: forward, learn, copy, graphed, misc. ``misc`` is
whatever the phase spent outside its named parts. With ``sync=True`` (profiling) every section waits
for CUDA first, so GPU time lands in the section that queued it; otherwise nothing synchronizes.

``graphed`` is work replayed as CUDA graphs, timed as a whole because a replay runs none of the
eager sections: the update's minibatch graphs by CUDA events around each replay
(:class:`appliance.train.graphs.ReplayClock`, read after the update's one synchronization), the
rollout engine's per-buffer graphs by the C loop's clock around each launch and its stream's
synchronization. Without graphs (a CPU, ``train.graphs false``) it stays 0 and the eager sections
keep the time.

The rollout engine (:mod:`appliance.train.engine`) steps buffers on threads of its own: it adds each
buffer's seconds in its policy step (``copy``: the part spent copying observations, rollout rows and
actions), waiting for the GIL and stepping its envs (:attr:`Timings.buffers`), and their means over
the buffers to evaluate's ``forward``, ``copy`` and ``env`` (the GIL wait stays in ``misc``); when
the policy steps were CUDA graphs, their mean goes to ``graphed`` instead of ``forward``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = {"evaluate": ("forward", "env", "copy", "graphed"), "train": ("forward", "learn", "copy", "graphed")}
BUFFER_PARTS = ("policy", "copy", "gil", "env")  # copy: the part of policy spent copying


class Timings:
    def __init__(self, sync: bool = False) -> None:
        self.sync = sync
        self.reset()

    def reset(self) -> None:
        """Zero every total (e.g. after warm-up epochs a benchmark should not count)."""
        self.totals: dict[str, float] = {
            f"{p}.{s}": 0.0 for p, parts in PHASES.items() for s in (*parts, "misc")
        }
        self.phase_totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.buffers: list[dict[str, float]] = []  # per rollout-engine buffer: policy, gil, env seconds
        self._phase: str | None = None

    def _sync(self) -> None:
        if self.sync:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._sync()
        start = time.perf_counter()
        self._phase = name
        named_before = sum(self.totals[f"{name}.{s}"] for s in PHASES[name])
        try:
            yield
        finally:
            self._sync()
            elapsed = time.perf_counter() - start
            named = sum(self.totals[f"{name}.{s}"] for s in PHASES[name]) - named_before
            self.totals[f"{name}.misc"] += max(0.0, elapsed - named)
            self.phase_totals[name] += elapsed
            self._phase = None

    @contextmanager
    def __call__(self, section: str) -> Iterator[None]:
        """``with timings("env"):`` inside a phase; the seconds count in the phase it began in (a section
        whose exit comes after its phase ended, as when a signal interrupts the ``with`` statement and
        the section is closed later by the garbage collector, still counts there)."""
        phase = self._phase
        self._sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            if phase is not None:
                self.totals[f"{phase}.{section}"] += time.perf_counter() - start

    def add(self, section: str, seconds: float) -> None:
        """``seconds`` measured elsewhere (e.g. CUDA events) into ``section`` of the current phase."""
        if self._phase is not None:
            self.totals[f"{self._phase}.{section}"] += seconds

    def add_buffers(self, times: list[dict[str, float]], graphed: bool = False) -> None:
        """One horizon of the rollout engine: per buffer ``policy`` (including ``copy``), ``gil`` and ``env``
        seconds; ``graphed``: each policy step was one CUDA graph (its whole time is ``graphed``)."""
        if len(self.buffers) != len(times):
            self.buffers = [dict.fromkeys(BUFFER_PARTS, 0.0) for _ in times]
        for total, t in zip(self.buffers, times, strict=True):
            for part in BUFFER_PARTS:
                total[part] += float(t[part])
        if times and self._phase == "evaluate":
            n = len(times)
            if graphed:
                self.totals["evaluate.graphed"] += sum(t["policy"] for t in times) / n
            else:
                self.totals["evaluate.forward"] += sum(t["policy"] - t["copy"] for t in times) / n
                self.totals["evaluate.copy"] += sum(t["copy"] for t in times) / n
            self.totals["evaluate.env"] += sum(t["env"] for t in times) / n

    def breakdown(self) -> dict[str, dict[str, float]]:
        """Seconds and share of total for every section."""
        total = sum(self.phase_totals.values()) or 1e-12
        return {k: {"seconds": v, "share": v / total} for k, v in self.totals.items()}

    def metrics(self) -> dict[str, float]:
        """The metrics record's ``time/`` fields: seconds per phase, and per rollout-engine buffer the
        seconds in its policy step, waiting for the GIL and stepping envs."""
        return {
            **{f"time/{k}": v["seconds"] for k, v in self.breakdown().items()},
            **{
                f"time/buffer{b}/{part}": seconds
                for b, parts in enumerate(self.buffers)
                for part, seconds in parts.items()
            },
        }
