"""Cost-aware hyperparameter sweeps: Optuna's multi-objective TPE over score and wall seconds.

``puffer-bench sweep ENV --trials N`` asks Optuna for settings from a search space
(``appliance/defaults/sweep.yaml``, or ``--space FILE``), trains each trial through
:func:`appliance.train.loop.run` until the score target, its steps or its time run out, and tells
Optuna two objectives: the final score (maximize) and the wall seconds it took (minimize). The
Pareto front of the two is the answer, as in PufferLib's Protein: for each cost the best score.

* **The base config** of every trial is resolved as ``train`` resolves it: the hardware profile
  (``--gpu``, else detected), ``--config`` and the overrides. The space
  (:mod:`appliance.bench.sweepspace`) is checked whole before the first trial, and the shipped one
  is fitted to the base config, so trial 0, the config as given, always lies inside it.
* **Trials in parallel**: ``--parallel K`` processes (each with ``cores / K`` threads), one per
  trial, or Ray tasks with ``--ray-address`` (``local`` starts a Ray runtime here). The driver alone
  talks to the study (ask/tell), so one SQLite file is enough. A trial whose process dies (a
  segfault, the OOM killer) fails with its signal and the sweep goes on. Trial processes ignore
  Ctrl-C (the driver stops them) and die with the driver (the kernel's parent-death signal).
* **Pruning**: Optuna's pruners are single-objective only, so a trial prunes itself: after
  ``prune.warmup`` of its steps, a trial whose score curve is more than ``prune.margin`` below the
  median of the finished trials' curves at the same step stops (the driver hands each trial the
  finished curves when it starts).
* **The sweep folder** (:mod:`appliance.bench.sweepstudy`) is locked while a sweep runs in it (a
  second one is refused, naming the first). The study lives in ``<sweep folder>/study.db`` with the
  base config it was started with; running the same command again goes on where it stopped (a
  changed base config is refused), and trials that were running when it stopped run again (once:
  a trial running when the sweep died twice is marked failed). A damaged, foreign or old-schema
  ``study.db`` is one line saying what to do.
* **Time**: ``--trial-seconds`` stops a trial once its score window is full; ``--budget-seconds``
  bounds the whole sweep: no trial starts after it, and a trial stops at the first epoch past it.
* **Output**: ``trials.md`` (the table), ``pareto.png`` (score against seconds, the front joined),
  ``best.yaml`` (the best trade-off: the fastest trial at the target, else the best score), which
  ``puffer-bench train ENV --config best.yaml`` takes as is. A disk that fills keeps what fits.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from multiprocessing import connection, get_context
from pathlib import Path
from typing import Any

import yaml

from appliance.bench.sweepspace import (
    SECTIONS,
    Base,
    Space,
    inside,
    load_space,
    merge,
    sections_of,
    split_params,
    trial_overrides,
)
from appliance.bench.sweepstudy import (  # noqa: F401 (re-exported: one module to import)
    DB,
    INTERRUPTED,
    STUDY,
    adopt,
    finished_trials,
    load_study,
    locked,
    open_study,
    put_back,
    queued,
    record,
    requeue_stale,
)
from appliance.config import Config, resolve
from appliance.errors import ApplianceError, ConfigError
from appliance.report_io import unwritable, write_what_fits

PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)


class Stopped(ApplianceError):
    """A stop signal ended the sweep; the study keeps every finished trial (exit 128 + signal)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


# ----------------------------------------------------------------------------- one trial


class Pruned(Exception):
    """Raised inside a trial's loop when its curve is hopeless."""


def median_at(curves: list[list[list[float]]], step: float) -> float | None:
    """Median over curves of each one's score at ``step`` (its last point at or before it)."""
    values = []
    for curve in curves:
        before = [score for s, score in curve if s <= step]
        if before:
            values.append(before[-1])
    if not values:
        return None
    values.sort()
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def run_trial(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one trial; a plain function of plain data so a process or Ray can run it.

    Returns state (complete | pruned | fail), score, seconds, steps, curve [[step, score], ...] and
    error. ``spec``: cfg (Config), metric, target, window, seconds (and min_epochs, the epochs before
    they count: the window by default), threads, reference curves, warmup, margin, min_trials.
    """
    import torch

    from appliance import vector
    from appliance.train import loop
    from appliance.train.trainer import Trainer

    cfg, metric, window = spec["cfg"], spec["metric"], spec["window"]
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    total = int(cfg.train.total_timesteps)
    curve: list[list[float]] = []
    history: list[dict[str, float]] = []
    start = time.perf_counter()

    def check(trainer: Any) -> None:
        history.append(dict(trainer.env_stats))
        score = loop.recent(history, metric, window)
        if score is None:
            return
        curve.append([float(trainer.global_step), float(score)])
        refs = spec.get("reference") or []
        if len(refs) >= spec["min_trials"] and trainer.global_step >= spec["warmup"] * total:
            median = median_at(refs, trainer.global_step)
            if median is not None and score < median - spec["margin"]:
                raise Pruned(f"score {score:.3g} < median {median:.3g} at step {trainer.global_step}")

    out: dict[str, Any] = {"curve": curve, "error": None}
    trainer = None
    try:
        trainer = Trainer(cfg, vector.make_from_config(cfg))
        stop = loop.Stop(
            total_timesteps=total,
            seconds=spec.get("seconds"),
            target=(metric, spec["target"]) if spec.get("target") is not None else None,
            window=window,
            min_epochs=spec.get("min_epochs", window),
        )
        result = loop.run(trainer, stop, on_epoch=[check])
        score = result.recent(metric, window)
        out.update(
            state="complete" if score is not None else "fail",
            score=score,
            seconds=result.seconds,
            steps=result.steps,
            reason=result.reason,
        )
        if score is None:
            out["error"] = (
                f"no epoch reported {metric!r}; the env reports {sorted(history[-1]) if history else []}"
            )
    except Pruned as e:
        out.update(state="pruned", score=curve[-1][1], seconds=time.perf_counter() - start, error=str(e))
        out["steps"] = int(curve[-1][0])
    except Exception as e:  # a trial's settings can be invalid (e.g. a minibatch); the sweep goes on
        out.update(state="fail", score=None, seconds=time.perf_counter() - start, steps=0)
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        if trainer is not None:
            trainer.close()
    return out


def failed_result(error: str, seconds: float = 0.0) -> dict[str, Any]:
    return {"state": "fail", "score": None, "seconds": seconds, "steps": 0, "curve": [], "error": error}


def _die_with_driver(driver: int) -> None:
    """In a trial process: the kernel SIGKILLs it when the driver dies (however it dies)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != driver:  # the driver died before the signal was armed
        os._exit(1)


def _trial_process(
    conn: Any, trial: Callable[[dict[str, Any]], dict[str, Any]], spec: dict[str, Any], driver: int
) -> None:
    """A trial process: run ``trial(spec)`` and send the result back. SIGINT is ignored from the
    start (see :func:`appliance.vector.mp.children_ignore_sigint`): Ctrl-C is the driver's."""
    _die_with_driver(driver)
    start = time.perf_counter()
    try:
        result = trial(spec)
    except BaseException as e:  # run_trial catches its own; a test's trial function may not
        result = failed_result(f"{type(e).__name__}: {e}", time.perf_counter() - start)
    conn.send(result)
    conn.close()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"its process was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"its process was killed by signal {-code}"
    return f"its process exited with code {code} before sending a result"


class _Runner:
    """Runs trial specs: in this process (--parallel 1), one spawned process per trial, or Ray tasks.

    ``start(number, spec)`` begins a trial; ``wait()`` returns (number, result) of those that have
    ended (at least one); ``close()`` stops whatever still runs.
    """

    def __init__(self, options: Options, trial: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        import psutil

        self.trial = trial
        self.parallel = options.parallel
        cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
        self.threads = max(1, cores // self.parallel) if self.parallel > 1 else None
        self.done: list[tuple[int, dict[str, Any]]] = []  # in-process results
        self.procs: dict[int, tuple[Any, Any]] = {}  # number -> (process, connection)
        self.futures: dict[Future[Any], int] = {}
        self.ray: Any = None
        if options.ray_address:
            try:
                import ray
            except ImportError:
                raise ConfigError("--ray-address needs ray: pip install 'puffer-bench[ray]'") from None
            ray.init(
                address=None if options.ray_address == "local" else options.ray_address, log_to_driver=False
            )
            self.ray = ray
            self.remote = ray.remote(num_cpus=1)(trial)
            self.threads = 1

    def running(self) -> int:
        return len(self.procs) + len(self.futures)

    def start(self, number: int, spec: dict[str, Any]) -> None:
        if self.ray is not None:
            self.futures[self.remote.remote(spec).future()] = number
        elif self.parallel > 1:
            from appliance.vector.mp import children_ignore_sigint

            ctx = get_context("spawn")
            ours, theirs = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_trial_process,
                args=(theirs, self.trial, spec, os.getpid()),
                name=f"puffer-trial-{number}",
                daemon=True,
            )
            with children_ignore_sigint():
                proc.start()
            theirs.close()
            self.procs[number] = (proc, ours)
        else:
            self.done.append((number, self.trial(spec)))

    def wait(self) -> list[tuple[int, dict[str, Any]]]:
        if self.done:
            out, self.done = self.done, []
            return out
        if self.futures:
            finished, _ = wait(list(self.futures), return_when=FIRST_COMPLETED)
            out = []
            for fut in finished:
                number = self.futures.pop(fut)
                error = fut.exception()
                out.append(
                    (number, failed_result(f"{type(error).__name__}: {error}") if error else fut.result())
                )
            return out
        handles = {}
        for number, (proc, conn) in self.procs.items():
            handles[conn] = handles[proc.sentinel] = number
        ready = connection.wait(list(handles))
        out = []
        for number in sorted({handles[h] for h in ready}):
            proc, conn = self.procs.pop(number)
            result = None
            try:
                if conn.poll():
                    result = conn.recv()
            except (EOFError, OSError):
                result = None  # died while sending
            conn.close()
            proc.join(timeout=None if result is None else 30)
            out.append((number, result if result is not None else failed_result(_exit_text(proc.exitcode))))
        return out

    def close(self) -> None:
        """Stop what still runs: SIGTERM to each trial process, SIGKILL after 5 s."""
        for proc, _ in self.procs.values():
            with contextlib.suppress(Exception):
                proc.terminate()
        deadline = time.monotonic() + 5
        for proc, conn in self.procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()
        self.procs.clear()
        for fut in self.futures:
            fut.cancel()
        self.futures.clear()
        if self.ray is not None:
            self.ray.shutdown()
            self.ray = None


# ----------------------------------------------------------------------------- the sweep


@dataclass
class Options:
    trials: int
    parallel: int = 1
    budget_seconds: float | None = None  # the sweep's wall time: no trial starts after it, trials stop at it
    trial_seconds: float | None = None  # a trial stops after this much training time
    ray_address: str | None = None
    seed: int = 0
    baseline: bool = True  # trial 0 is the config as given (the values the space would vary)
    startup_trials: int | None = None  # random trials before TPE models the front (default: trials // 3)
    extra: dict[str, Any] = field(default_factory=dict)


def sweep(
    env: str,
    out_dir: str | Path,
    options: Options,
    space_file: str | None = None,
    config_file: str | None = None,
    overrides: list[str] | None = None,
    profile: str | None = None,
    trial: Callable[[dict[str, Any]], dict[str, Any]] = run_trial,
) -> Iterator[str]:
    """Run (or resume) the sweep in ``out_dir``; yields progress lines. Outputs: see the module doc.

    ``trial`` runs one trial spec (a module-level function, for the processes to import).
    Everything the user gave is checked before anything is written: the base config, the whole
    space, the baseline inside it, the sweep folder (writable, with room). A stop signal stops the
    running trials, puts them back in the queue and raises :class:`Stopped`.
    """
    from appliance.train.loop import Interrupted, stop_signals

    if options.trials < 1 or options.parallel < 1:
        raise ConfigError("--trials and --parallel must be at least 1")
    base = Base(
        env, profile, str(Path(config_file).resolve()) if config_file else None, list(overrides or [])
    )
    cfg = base.resolve()
    space = load_space(env, space_file, base)
    for note in space.notes:
        yield f"space fitted to your config: {note}"
    baseline = _baseline(cfg, space) if options.baseline else None
    out = Path(out_dir)
    problem = unwritable(out)
    if problem:
        raise ConfigError(f"sweep folder {out}: {problem}")
    with locked(out):
        study = load_study(
            out, create=True, seed=options.seed, startup=options.startup_trials or max(2, options.trials // 3)
        )
        adopt(study, out, base, cfg, space)
        requeue_stale(study)
        finished, requeued = finished_trials(study), queued(study)
        if finished or requeued:
            yield f"resuming {out / DB}: {len(finished)} trials done, {requeued} interrupted ones run again"
        elif baseline is not None and not study.trials:
            study.enqueue_trial(baseline, user_attrs={"baseline": True})

        distributions = space.distributions()
        remaining = options.trials - len(finished)
        runner = _Runner(options, trial)
        running: dict[int, Any] = {}
        sweep_start = time.perf_counter()
        with stop_signals() as guard:
            try:
                while remaining > 0 or running:
                    left = None
                    if options.budget_seconds is not None:
                        left = options.budget_seconds - (time.perf_counter() - sweep_start)
                    while remaining > 0 and len(running) < options.parallel and (left is None or left > 0):
                        with guard.deferred():
                            asked = study.ask(distributions)
                            running[asked.number] = asked  # before it starts: in-process, it runs in start
                        remaining -= 1
                        refused = _start(runner, study, asked, base, space, options, left)
                        if refused:
                            running.pop(asked.number)
                            yield refused
                    if not running:
                        if left is not None and left <= 0:
                            yield f"--budget-seconds {options.budget_seconds:g} spent: no more trials start"
                        break
                    for number, result in runner.wait():
                        with guard.deferred():
                            line = record(study, running.pop(number), result)
                        yield line
            except Interrupted as e:
                runner.close()
                put_back(study, running.values(), "the sweep was stopped while it ran")
                done = len(finished_trials(study))
                again = f"; {len(running)} that were running run again" if running else ""
                raise Stopped(
                    f"interrupted ({e.name}): {done} trials done{again} when you run the same command",
                    e.signum,
                ) from None
            except BaseException:
                runner.close()
                with contextlib.suppress(Exception):  # the study itself may be what failed
                    put_back(study, running.values(), "the sweep failed while it ran")
                raise
            runner.close()
        yield from write_outputs(study, space, out, env)


def _start(
    runner: _Runner, study: Any, trial: Any, base: Base, space: Space, options: Options, left: float | None
) -> str | None:
    """Start ``trial``: its config from the base and its params. One whose config is refused fails at
    once: returns its line (None when it started)."""
    try:
        cfg = base.resolve(trial_overrides(base.resolve(), trial.params))
    except ConfigError as e:  # a combination of choices the config refuses (each alone was checked)
        return record(study, trial, failed_result(f"config refused: {e}"))
    if runner.threads and cfg.vec.num_threads == "auto":
        cfg.data["vec"]["num_threads"] = runner.threads
    seconds = [s for s in (options.trial_seconds, left) if s is not None]
    # a trial stops at --trial-seconds once its score window is full; the sweep's budget is a hard
    # bound: a trial it cuts short ends at the first epoch past it, its score over fewer epochs
    cut = left is not None and (options.trial_seconds is None or left < options.trial_seconds)
    runner.start(
        trial.number,
        {
            "trial": trial.number,
            "cfg": cfg,
            "metric": space.metric,
            "target": space.target,
            "window": space.window,
            "seconds": min(seconds) if seconds else None,
            "min_epochs": 1 if cut else space.window,
            "threads": runner.threads,
            "reference": [t.user_attrs.get("curve", []) for t in finished_trials(study, complete=True)],
            "warmup": space.warmup,
            "margin": space.margin,
            "min_trials": space.min_trials,
        },
    )
    return None


def _baseline(cfg: Config, space: Space) -> dict[str, Any]:
    """The config as given, as values of the swept params (each must lie in the space)."""
    params = {}
    for section, key, spec in split_params(space.params):
        value = cfg[section][key]
        if not inside(spec, value):
            shown = spec["choices"] if "choices" in spec else f"{spec['low']:g} to {spec['high']:g}"
            raise ConfigError(
                f"the baseline trial (your config) has {section}.{key} = {value}, outside the space of "
                f"{space.source} ({shown}); widen the space or pass --no-baseline"
            )
        params[f"{section}.{key}"] = value
    return params


# ----------------------------------------------------------------------------- results


def rows(study: Any) -> list[dict[str, Any]]:
    """One dict per finished trial: number, state, score, seconds, steps, on the front, params."""
    from optuna.trial import TrialState

    front = {t.number for t in study.best_trials}
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.RUNNING, TrialState.WAITING) or t.user_attrs.get("error") == INTERRUPTED:
            continue
        out.append(
            {
                "trial": t.number,
                "state": t.state.name.lower(),
                "score": t.user_attrs.get("score"),
                "seconds": t.user_attrs.get("seconds"),
                "steps": t.user_attrs.get("steps"),
                "pareto": t.number in front,
                "baseline": bool(t.user_attrs.get("baseline")),
                "params": dict(t.params),
                "error": t.user_attrs.get("error"),
            }
        )
    return out


def best_trade_off(study: Any, target: float | None) -> Any | None:
    """On the Pareto front: the fastest trial that reached the target, else the best score."""
    front = study.best_trials
    if not front:
        return None
    if target is not None:
        reached = [t for t in front if t.values[0] >= target]
        if reached:
            return min(reached, key=lambda t: t.values[1])
    return max(front, key=lambda t: (t.values[0], -t.values[1]))


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def table(study: Any) -> tuple[list[str], list[list[str]]]:
    trials = rows(study)
    names = sorted({k for r in trials for k in r["params"]})
    columns = ["trial", "state", "score", "seconds", "steps", "front", *names]
    body = []
    for r in sorted(trials, key=lambda r: (r["score"] is None, -(r["score"] or 0), r["seconds"] or 0)):
        mark = ("*" if r["pareto"] else "") + (" (baseline)" if r["baseline"] else "")
        body.append(
            [str(r["trial"]), r["state"], _fmt(r["score"]), _fmt(r["seconds"]), _fmt(r["steps"]), mark]
            + [_fmt(r["params"].get(k)) for k in names]
        )
    return columns, body


def write_outputs(study: Any, space: Space, out: Path, env: str) -> Iterator[str]:
    """trials.md, pareto.png and best.yaml; on a full disk each one that still fits, then one line.

    trials.md is Markdown of text from the space file and the study (metric, keys, choices): every
    value goes through the report's escaping (:func:`~appliance.bench.report.md`)."""
    from appliance.bench.report import md, md_format

    columns, body = table(study)
    target = md_format("Target {} {:g}.", space.metric, space.target) if space.target else ""
    lines = [
        md_format("# Sweep of {}: {} (maximize) against wall seconds (minimize)", env, space.metric),
        "",
        "`*`: on the Pareto front. " + target,
        "",
        "| " + " | ".join(map(md, columns)) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(map(md, row)) + " |" for row in body),
        "",
    ]
    files: list[tuple[Path, Callable[[], bytes]]] = [(out / "trials.md", lambda: "\n".join(lines).encode())]
    png = pareto_png(study, space, env)
    if png is not None:
        files.append((out / "pareto.png", lambda: png))
    best = best_trade_off(study, space.target)
    if best is not None:
        sections = best_config(env, study, best)
        profile = study.user_attrs.get("profile")
        header = _yaml_comment(
            f"puffer-bench sweep {env}: trial {best.number}, {space.metric} {best.values[0]:.4g} "
            f"in {best.values[1]:.1f} s" + (f" on profile '{profile}'" if profile else "") + ". "
            f"Use: puffer-bench train {env} --config {out / 'best.yaml'}"
        )
        files.append(
            (out / "best.yaml", lambda: (header + yaml.safe_dump(sections, sort_keys=True)).encode())
        )
    written, missing, why = write_what_fits(files)
    for path in written:
        yield f"wrote {path}" + (
            f" (trial {best.number})" if best is not None and path.name == "best.yaml" else ""
        )
    if best is None:
        yield "no trial completed: no best.yaml"
    if missing:
        raise ApplianceError(
            f"disk full in {out} ({why}): not written: {', '.join(p.name for p in missing)}; {DB} holds every "
            "trial: free some space and run the same command again to write them"
        )


def _yaml_comment(text: str) -> str:
    """One YAML comment line: a metric name or profile from a shared space file or study.db cannot
    break out of it into keys of best.yaml."""
    return "# " + "".join(c if c.isprintable() else " " for c in text) + "\n"


def best_config(env: str, study: Any, trial: Any) -> dict[str, dict[str, Any]]:
    """The trial's config as a ``--config`` file, typed as the config types it: its params, and every
    other value of the sweep's base config that differs from the env's defaults on the sweep's profile."""
    attrs = study.user_attrs
    profile = attrs.get("profile")
    if attrs.get("base"):  # the base config as resolved when the sweep began
        layer = {s: dict(v) for s, v in attrs["base"].items() if s in SECTIONS}
    else:  # a study from before the base was kept: its overrides and --config as given
        layer = sections_of(
            Base(env, profile, attrs.get("config_file"), attrs.get("overrides", [])).resolve()
        )
    start = resolve(env=env, profile=profile, overrides=layer)
    cfg = resolve(env=env, profile=profile, overrides=merge(layer, trial_overrides(start, trial.params)))
    defaults = resolve(env=env, profile=profile)
    swept = {tuple(name.split(".", 1)) for name in trial.params}
    out: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        for key, value in cfg[section].items():
            if defaults[section].get(key) != value or (section, key) in swept:
                out.setdefault(section, {})[key] = value
    return out


def pareto_png(study: Any, space: Space, env: str) -> bytes | None:
    """Score against wall seconds per trial, the Pareto front joined, as PNG bytes (None: no points)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from appliance.bench.report import plot_text  # a space file's metric is text, not maths

    trials = [r for r in rows(study) if r["score"] is not None and r["seconds"] is not None]
    if not trials:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for state, marker, color in (("complete", "o", "tab:blue"), ("pruned", "x", "tab:gray")):
        pts = [r for r in trials if r["state"] == state]
        if pts:
            ax.scatter(
                [r["seconds"] for r in pts], [r["score"] for r in pts], marker=marker, c=color, label=state
            )
    front = sorted((r for r in trials if r["pareto"]), key=lambda r: r["seconds"])
    if front:
        ax.plot(
            [r["seconds"] for r in front],
            [r["score"] for r in front],
            "-o",
            c="tab:red",
            label="Pareto front",
        )
    for r in trials:
        if r["baseline"]:
            ax.annotate("baseline", (r["seconds"], r["score"]), textcoords="offset points", xytext=(4, 4))
    if space.target is not None:
        ax.axhline(space.target, ls="--", c="k", lw=0.8, label=f"target {space.target:g}")
    ax.set_xlabel("wall seconds per trial")
    ax.set_ylabel(plot_text(space.metric))
    ax.set_title(f"sweep of {env}: {len(trials)} trials")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def summary(study: Any, space: Space) -> list[str]:
    """A few lines for the end of the command: the front and the best trade-off."""
    best = best_trade_off(study, space.target)
    if best is None:
        return []
    base = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline") and t.values]
    lines = [f"Pareto front: {len(study.best_trials)} trials; best trade-off trial {best.number}"]
    if base and space.target is not None:
        b = base[0]
        lines.append(
            f"baseline (your config): {space.metric} {b.values[0]:.3f} in {b.values[1]:.1f} s; "
            f"best: {best.values[0]:.3f} in {best.values[1]:.1f} s"
        )
    return lines
