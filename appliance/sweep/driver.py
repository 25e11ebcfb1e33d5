"""The sweep itself: ask Optuna for trials, run them, tell it their score and seconds, resume.

:func:`sweep` checks everything the user gave before anything is written (the base config, the
whole space, the baseline inside it, the sweep folder), then holds the folder's lock and asks,
starts and records trials until ``--trials`` are done or ``--budget-seconds`` is spent. The driver
alone talks to the study (ask/tell), so one SQLite file is enough. A stop signal stops the running
trials, puts them back in the queue and raises :class:`Stopped`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.config import Config
from appliance.errors import ApplianceError, ConfigError
from appliance.report_io import disk_full
from appliance.safe_files import check_output
from appliance.signals import Interrupted, Stopped, stop_signals
from appliance.sweep.kept import Known, keep_what_is_known
from appliance.sweep.lost import StorageLost, storage_failure
from appliance.sweep.results import write_outputs
from appliance.sweep.space import Base, Space, inside, load_space, split_params, trial_overrides
from appliance.sweep.storage import Heartbeat, Shared
from appliance.sweep.study import (
    DB,
    STUDY,
    DiskFull,
    adopt,
    disk_full_words,
    finished_trials,
    load_study,
    locked,
    put_back,
    queued,
    record,
    requeue_dead,
    requeue_stale,
    result_line,
    running_trials,
)
from appliance.sweep.trials import TrialRunner, check_gpus, check_parallel, failed_result, run_trial


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
    shared: Shared | None = None  # a study shared by workers (--storage); None: the folder's study.db
    study_name: str = STUDY  # the shared study's name (--study-name)
    gpus: list[str] | None = None  # CUDA_VISIBLE_DEVICES of each slot: one trial per GPU at once


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
    if options.trials < 1 or options.parallel < 1:
        raise ConfigError("--trials and --parallel must be at least 1")
    check_gpus(options)
    base = Base(
        env, profile, str(Path(config_file).resolve()) if config_file else None, list(overrides or [])
    )
    cfg = base.resolve()
    space = load_space(env, space_file, base)
    if options.parallel > 1 and not options.ray_address:
        check_parallel(cfg, space.params, options.parallel)
    baseline = _baseline(cfg, space) if options.baseline else None
    out = Path(out_dir)
    check_output(out, "sweep folder", folder=True)
    for note in space.notes:
        yield f"space fitted to your config: {note}"
    with locked(out):
        study = load_study(
            out,
            create=True,
            seed=options.seed,
            startup=options.startup_trials or max(2, options.trials // 3),
            shared=options.shared,
            name=options.study_name,
        )
        known = Known()
        try:
            yield from _run(study, out, base, cfg, space, baseline, options, trial, known)
        except Exception as e:
            filled = _disk_filled(e)
            if filled is None:
                why = storage_failure(e)
                if why is None:
                    raise
                lost = e if isinstance(e, StorageLost) else StorageLost(why)
                where = (
                    f"study '{options.study_name}' in {options.shared.shown}"
                    if options.shared
                    else str(out / DB)
                )
                yield from keep_what_is_known(known, lost, space, out, env, where)  # raises its one line
                raise
            yield from write_outputs(study, space, out, env, filled=filled)  # raises its one line
            raise


def _disk_filled(error: Exception) -> tuple[str, str | None] | None:
    """Why the disk filled and the trial results the study could not record, if ``error`` is a full
    disk while the sweep ran (the study's own words, or SQLAlchemy's); None for any other error."""
    if isinstance(error, DiskFull):
        return error.why, error.unrecorded
    if not isinstance(error, ApplianceError) and disk_full(error):
        return disk_full_words(error), None
    return None


def _run(
    study: Any,
    out: Path,
    base: Base,
    cfg: Config,
    space: Space,
    baseline: dict[str, Any] | None,
    options: Options,
    trial: Callable[[dict[str, Any]], dict[str, Any]],
    known: Known,
) -> Iterator[str]:
    """The sweep in its locked folder, from adopting the study to its outputs; ``known`` keeps what
    the study held as last read, and every result measured here, for a storage lost meanwhile."""
    env = base.env
    shared = options.shared
    where = f"study '{options.study_name}' in {shared.shown}" if shared else str(out / DB)
    adopt(study, out, base, cfg, space, where)
    if shared is not None:  # two workers that started at once: the second one to write sees the first
        adopt(study, out, base, cfg, space, where)
    if shared is None:
        requeue_stale(study)  # the folder is ours alone: a trial left RUNNING was a dead sweep's
    beats = Heartbeat(study, shared, requeue_dead) if shared else None
    try:
        if beats is not None:
            beats.fail_stale()
        finished, requeued = finished_trials(study), queued(study)
        if finished or requeued or (shared and running_trials(study)):
            verb = "joining" if shared else "resuming"
            yield f"{verb} {where}: {len(finished)} trials done, {requeued} interrupted ones run again"
        elif baseline is not None and not study.trials:
            study.enqueue_trial(baseline, user_attrs={"baseline": True})
        known.refresh(study)
        yield from _loop(study, base, space, options, trial, beats, where, known)
    finally:
        if beats is not None:
            beats.close()
    yield from write_outputs(study, space, out, env)


def _to_start(study: Any, options: Options) -> int:
    """Trials still to start: --trials less those finished and those running (in every worker)."""
    return options.trials - len(finished_trials(study)) - running_trials(study)


def _loop(
    study: Any,
    base: Base,
    space: Space,
    options: Options,
    trial: Callable[[dict[str, Any]], dict[str, Any]],
    beats: Heartbeat | None,
    where: str,
    known: Known,
) -> Iterator[str]:
    """Ask, start and record trials until --trials are done or the budget is spent; a worker of a
    shared study then waits for the other workers' trials (they may fail and run again here)."""

    distributions = space.distributions()
    runner = TrialRunner(options, trial)
    running: dict[int, Any] = {}
    sweep_start = time.perf_counter()
    waiting = False
    with stop_signals() as guard:
        try:
            while True:
                left = None
                if options.budget_seconds is not None:
                    left = options.budget_seconds - (time.perf_counter() - sweep_start)
                if beats is not None:
                    beats.fail_stale()
                while (
                    len(running) < options.parallel
                    and (left is None or left > 0)
                    and _to_start(study, options) > 0
                ):
                    with guard.deferred():
                        asked = study.ask(distributions)
                        running[asked.number] = asked  # before it starts: in-process, it runs in start
                        if beats is not None:
                            beats.add(asked)
                    refused = _start(runner, study, asked, base, space, options, left)
                    if refused:
                        _forget(running, asked.number, beats)
                        yield refused
                if not running:
                    if left is not None and left <= 0:
                        yield f"--budget-seconds {options.budget_seconds:g} spent: no more trials start"
                        break
                    others = running_trials(study) if beats is not None else 0
                    if not others:
                        break
                    if not waiting:
                        yield f"waiting for {others} trials of other workers in {where}"
                        waiting = True
                    time.sleep(min(5.0, beats.shared.heartbeat) if beats is not None else 1.0)
                    continue
                results = runner.wait()
                for number, _ in results:
                    if beats is not None:
                        beats.remove(running[number])
                yield from _record_all(study, running, results, guard, known)
                known.refresh(study)
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


def _forget(running: dict[int, Any], number: int, beats: Heartbeat | None) -> None:
    asked = running.pop(number)
    if beats is not None:
        beats.remove(asked)


def _record_all(
    study: Any, running: dict[int, Any], results: list[tuple[int, Any]], guard: Any, known: Known
) -> Iterator[str]:
    """Record each finished trial in the study; on a full disk, :class:`DiskFull` names every result
    of this batch that was not recorded (they are measured: the line keeps them); on a storage lost,
    :class:`StorageLost` carries them (the driver keeps them in the sweep folder)."""
    for i, (number, result) in enumerate(results):
        try:
            with guard.deferred():
                asked = running.pop(number)
                line = record(study, asked, result)
                known.measured(asked, result)
        except DiskFull as e:
            later = [result_line(n, r) for n, r in results[i + 1 :]]
            raise DiskFull(e.why, "; ".join([e.unrecorded or "", *later]).strip("; ")) from None
        except StorageLost as e:
            later = [(running.pop(n), r) for n, r in results[i + 1 :]]
            raise StorageLost(e.why, [*e.unrecorded, *later]) from None
        yield line


def _start(
    runner: TrialRunner,
    study: Any,
    trial: Any,
    base: Base,
    space: Space,
    options: Options,
    left: float | None,
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
