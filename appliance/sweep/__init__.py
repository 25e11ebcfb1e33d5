"""Cost-aware hyperparameter sweeps: Optuna's multi-objective TPE over score and wall seconds.

``puffer-bench sweep ENV --trials N`` asks Optuna for settings from a search space
(``appliance/defaults/sweep.yaml``, or ``--space FILE``), trains each trial through
:func:`appliance.train.loop.run` until the score target, its steps or its time run out, and tells
Optuna two objectives: the final score (maximize) and the wall seconds it took (minimize). The
Pareto front of the two is the answer, as in PufferLib's Protein: for each cost the best score.

* **The base config** of every trial is resolved as ``train`` resolves it: the hardware profile
  (``--gpu``, else detected), ``--config`` and the overrides. The space
  (:mod:`appliance.sweep.space`) is checked whole before the first trial, and the shipped one
  is fitted to the base config, so trial 0, the config as given, always lies inside it.
* **Trials in parallel**: ``--parallel K`` processes (each with ``cores / K`` threads), one per
  trial, or Ray tasks with ``--ray-address`` (``local`` starts a Ray runtime here). The driver alone
  talks to the study (ask/tell). ``--gpus N`` runs up to one trial per GPU, each process with its own
  ``CUDA_VISIBLE_DEVICES``. A trial whose process dies (a
  segfault, the OOM killer) fails with its signal and the sweep goes on. Trial processes ignore
  Ctrl-C (the driver stops them) and die with the driver (the kernel's parent-death signal).
* **Pruning**: Optuna's pruners are single-objective only, so a trial prunes itself: after
  ``prune.warmup`` of its steps, a trial whose score curve is more than ``prune.margin`` below the
  median of the finished trials' curves at the same step stops (the driver hands each trial the
  finished curves when it starts).
* **The sweep folder** (:mod:`appliance.sweep.study`) is locked while a sweep runs in it (a
  second one is refused, naming the first). The study lives in ``<sweep folder>/study.db`` with the
  base config it was started with; running the same command again goes on where it stopped (a
  changed base config is refused), and trials that were running when it stopped run again (once:
  a trial running when the sweep died twice is marked failed). A damaged, foreign or old-schema
  ``study.db`` is one line saying what to do.
* **Workers sharing a study** (:mod:`appliance.sweep.storage`): with ``--storage URL``
  (PostgreSQL, or a journal file on a shared file system) sweep workers on several machines join one
  study by name, each with its own sweep folder; a worker that stops sending heartbeats has its
  trials failed by the others and their settings run again once.
* **Time**: ``--trial-seconds`` stops a trial once its score window is full; ``--budget-seconds``
  bounds the whole sweep: no trial starts after it, and a trial stops at the first epoch past it.
* **Output**: ``trials.md`` (the table), ``pareto.png`` (score against seconds, the front joined),
  ``best.yaml`` (the best trade-off: the fastest trial at the target, else the best score), which
  ``puffer-bench train ENV --config best.yaml`` takes as is. A disk that fills keeps what fits.

The package by job: :mod:`~appliance.sweep.space` (the search space), :mod:`~appliance.sweep.study`
(the folder's lock, ``study.db``, resume), :mod:`~appliance.sweep.storage` (a shared study), :mod:`~appliance.sweep.trials` (one trial, and running
trials in processes or Ray tasks), :mod:`~appliance.sweep.driver` (:func:`sweep`),
:mod:`~appliance.sweep.results` (the table, the front, the output files), :mod:`~appliance.sweep.lost`
(the storage failing, told from other errors) and :mod:`~appliance.sweep.kept` (what is known kept
when it fails).
"""

from __future__ import annotations

from appliance.sweep.driver import Options, Stopped, sweep
from appliance.sweep.results import (
    best_config,
    best_trade_off,
    pareto_png,
    rows,
    summary,
    table,
    write_outputs,
)
from appliance.sweep.space import Base, Space, load_space, trial_overrides
from appliance.sweep.study import DB, INTERRUPTED, STUDY, locked, open_study
from appliance.sweep.trials import median_at, run_trial

__all__ = [
    "DB",
    "INTERRUPTED",
    "STUDY",
    "Base",
    "Options",
    "Space",
    "Stopped",
    "best_config",
    "best_trade_off",
    "load_space",
    "locked",
    "median_at",
    "open_study",
    "pareto_png",
    "rows",
    "run_trial",
    "summary",
    "sweep",
    "table",
    "trial_overrides",
    "write_outputs",
]
