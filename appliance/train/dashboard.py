"""What a training run shows: a rich live dashboard, or plain log lines (CI, pipes, --no-dashboard).

Both read the trainer's own counters and Timings; neither is redrawn more than ~3 times a second, so
printing costs no measurable SPS.
"""

from __future__ import annotations

import time
from typing import Any

import psutil

REFRESH_S = 0.34


def _gpu_line() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        util = pynvml.nvmlDeviceGetUtilizationRates(h)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        return f"GPU {util.gpu}%  VRAM {mem.used / 2**30:.1f}/{mem.total / 2**30:.1f} GiB"
    except Exception:
        return None


def _fmt_time(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return (
        f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )


class Reporter:
    """Call :meth:`update` after every epoch; it redraws or prints only when REFRESH_S has passed."""

    def __init__(self, trainer: Any, env_name: str, live: bool) -> None:
        self.trainer, self.env_name = trainer, env_name
        self.params = sum(p.numel() for p in {id(p): p for p in trainer.policy.parameters()}.values())
        self._last = 0.0
        self._live = None
        self._gpu = _gpu_line() is not None
        if live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render(), console=Console(), refresh_per_second=3, auto_refresh=False)
            self._live.start()

    def update(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last < REFRESH_S:
            return
        self._last = now
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
        else:
            print(self.line(), flush=True)

    def say(self, *lines: str) -> None:
        """Lines about the run (its threads changed), printed above the live view or among the progress lines."""
        for line in lines:
            if self._live is not None:
                self._live.console.print(line, markup=False, highlight=False)
            else:
                print(line, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            self._live.stop()

    # ------------------------------------------------------------------ views

    def line(self) -> str:
        t = self.trainer
        losses = " ".join(
            f"{k}={t.losses[k]:.4g}"
            for k in ("policy_loss", "value_loss", "entropy", "approx_kl")
            if k in t.losses
        )
        env = " ".join(f"{k}={v:.4g}" for k, v in _env_stats(t).items() if k != "n") or no_episode_yet(t)
        env += _stale(t)
        return f"epoch {t.epoch} step {t.global_step} sps {t.sps:,.0f}{_per_rank(t)} | {losses} | {env}{_buffers(t)}"

    def _render(self) -> Any:
        from rich.table import Table

        t = self.trainer
        total = t.hp.total_timesteps
        elapsed = time.time() - t.start_time
        remaining = (total - t.global_step) / t.sps if t.sps > 0 else float("inf")
        grid = Table.grid(padding=(0, 2))
        head = Table(show_header=False, box=None)
        head.add_row("env", self.env_name, "params", f"{self.params:,}")
        head.add_row("steps", f"{t.global_step:,} / {total:,}", "SPS", f"{t.sps:,.0f}")
        head.add_row("epoch", str(t.epoch), "uptime", _fmt_time(elapsed))
        if getattr(t, "rank_sps", None):  # data-parallel: SPS is the sum, each rank's beside it
            head.add_row("ranks", str(len(t.rank_sps)), "SPS/rank", _per_rank(t).strip(" ()"))
        head.add_row(
            "remaining", _fmt_time(remaining) if remaining != float("inf") else "-", "device", str(t.device)
        )
        cpu = f"CPU {psutil.cpu_percent():.0f}%  RAM {psutil.virtual_memory().percent:.0f}%"
        head.add_row("system", cpu, "", (_gpu_line() or "") if self._gpu else "")
        perf = Table(title="performance", box=None)
        for col in ("phase", "seconds", "%"):
            perf.add_column(col, justify="right" if col != "phase" else "left")
        for phase in ("evaluate", "train"):
            share = t.timings.phase_totals[phase] / max(1e-9, sum(t.timings.phase_totals.values()))
            perf.add_row(f"[bold]{phase}", f"{t.timings.phase_totals[phase]:.1f}", f"{100 * share:.0f}")
            for key, v in t.timings.breakdown().items():
                if key.endswith(".graphed") and not v["seconds"]:
                    continue  # no CUDA graphs in this run (a CPU, train.graphs false)
                if key.startswith(phase + "."):
                    perf.add_row(f"  {key.split('.')[1]}", f"{v['seconds']:.1f}", f"{100 * v['share']:.0f}")
        losses = Table(title="losses", box=None)
        losses.add_column("name")
        losses.add_column("value", justify="right")
        for k, v in t.losses.items():
            losses.add_row(k, f"{v:.4g}")
        env = Table(title="env", box=None)
        env.add_column("name")
        env.add_column("value", justify="right")
        for k, v in _env_stats(t).items():
            env.add_row(k, f"{v:.4g}")
        if not _env_stats(t):
            env.add_row(no_episode_yet(t), "")
        elif _stale(t):
            env.add_row(_stale(t).strip(" ()"), "")
        grid.add_row(head)
        grid.add_row(_row(perf, losses, env))
        if t.timings.buffers:  # the rollout engine: where each buffer's thread spent its time
            buffers = Table(title="rollout buffers (seconds)", box=None)
            for col in ("buffer", "policy step", "of it copies", "GIL wait", "env step"):
                buffers.add_column(col, justify="right")
            for b, parts in enumerate(t.timings.buffers):
                buffers.add_row(str(b), *(f"{parts[k]:.1f}" for k in ("policy", "copy", "gil", "env")))
            grid.add_row(buffers)
        return grid


def no_episode_yet(trainer: Any) -> str:
    """What the env stats say before any episode has ended (long episodes, many envs): that none has,
    rather than nothing at all, so a user can tell an empty log from a stuck run."""
    return f"no episode has ended yet: {trainer.global_step:,} agent-steps in"


def _env_stats(trainer: Any) -> dict[str, float]:
    """The latest episodes' stats: this epoch's, else the last epoch's that ended any."""
    return trainer.env_stats or getattr(trainer, "last_env_stats", {})


def _stale(trainer: Any) -> str:
    """' (no episode ended since step N)' when the stats shown are an earlier epoch's, else ''."""
    if trainer.env_stats or not getattr(trainer, "last_env_stats", {}):
        return ""
    return f" (no episode ended since step {trainer.last_env_step:,})"


def _buffers(trainer: Any) -> str:
    """' | buffers policy/env s: 1.2/0.3 1.1/0.4': the rollout engine's per-buffer split, else ''."""
    buffers = trainer.timings.buffers
    if not buffers:
        return ""
    return " | buffers policy/env s: " + " ".join(f"{b['policy']:.2f}/{b['env']:.2f}" for b in buffers)


def _per_rank(trainer: Any) -> str:
    """' (r0 a, r1 b)': each rank's SPS when the trainer is one rank of several, else ''."""
    sps = getattr(trainer, "rank_sps", None)
    return " (" + ", ".join(f"r{i} {s:,.0f}" for i, s in enumerate(sps)) + ")" if sps else ""


def _row(*tables: Any) -> Any:
    from rich.table import Table

    row = Table.grid(padding=(0, 4))
    row.add_row(*tables)
    return row
