"""Cost-aware hyperparameter sweeps: Optuna's multi-objective TPE over score and wall seconds.

``puffer-bench sweep ENV --trials N`` asks Optuna for settings from a search space
(``appliance/defaults/sweep.yaml``, or ``--space FILE``), trains each trial through
:func:`appliance.train.loop.run` until the score target, its steps or ``--trial-seconds`` run out,
and tells Optuna two objectives: the final score (maximize) and the wall seconds it took (minimize).
The Pareto front of the two is the answer, as in PufferLib's Protein: for each cost the best score.

* **Trials in parallel**: ``--parallel K`` local processes (each with ``cores / K`` threads), or Ray
  tasks on a cluster with ``--ray-address`` (``local`` starts a Ray runtime here). The driver
  alone talks to the study (ask/tell), so one SQLite file is enough.
* **Pruning**: Optuna's pruners are single-objective only, so a trial prunes itself: after
  ``prune.warmup`` of its steps, a trial whose score curve is more than ``prune.margin`` below the
  median of the finished trials' curves at the same step stops (the driver hands each trial the
  finished curves when it starts).
* **Resume**: the study lives in ``<sweep folder>/study.db``; running the same command again goes
  on where it stopped, and trials that were running when it was interrupted run again.
* **Output**: ``trials.md`` (the table), ``pareto.png`` (score against seconds, the front joined),
  ``best.yaml`` (the best trade-off: the fastest trial at the target, else the best score), which
  ``puffer-bench train ENV --config best.yaml`` takes as is.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import yaml

from appliance.config import check_layer, read_yaml, resolve
from appliance.errors import ConfigError
from appliance.paths import defaults_dir
from appliance.report_io import write_bytes_atomic

STUDY = "sweep"
INTERRUPTED = "interrupted; run again"
DB = "study.db"


# ----------------------------------------------------------------------------- the search space


@dataclass
class Space:
    """What a sweep varies, what it maximizes and when it prunes (see ``defaults/sweep.yaml``)."""

    params: dict[str, dict[str, Any]]
    metric: str = "episode_return"
    target: float | None = None
    window: int = 5
    warmup: float = 0.3
    margin: float = 0.05
    min_trials: int = 2

    def distributions(self) -> dict[str, Any]:
        import optuna.distributions as d

        out: dict[str, Any] = {}
        for name, spec in self.params.items():
            if "choices" in spec:
                out[name] = d.CategoricalDistribution(list(spec["choices"]))
            elif spec.get("int"):
                out[name] = d.IntDistribution(int(spec["low"]), int(spec["high"]), log=bool(spec.get("log")))
            else:
                out[name] = d.FloatDistribution(
                    float(spec["low"]), float(spec["high"]), log=bool(spec.get("log"))
                )
        return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in (over or {}).items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _mapping(value: Any, where: str, path: Path) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"sweep space {path}: {where} must be a mapping, got {type(value).__name__}")
    return value


def load_space(env: str, path: str | Path | None = None) -> Space:
    """The search space for ``env``: the file's top level with its ``envs.<env>`` entry merged over.

    A space file may come from elsewhere: every field is checked, every value a trial could take (each
    choice, both ends of a range) is held to its key's range, and one point of the space resolves as
    a config (names, env parameters, memory): a bad one is one line naming the file and the key before
    any trial starts."""
    path = Path(path) if path else defaults_dir() / "sweep.yaml"
    data = read_yaml(path, "sweep space")
    for_env = _mapping(_mapping(data.get("envs"), "envs", path).get(env), f"envs.{env}", path)
    merged = _merge({k: v for k, v in data.items() if k != "envs"}, for_env)
    params = {k: v for k, v in _mapping(merged.get("space"), "space", path).items() if v is not None}
    if not params:
        raise ConfigError(f"{path}: 'space' names no parameter to sweep")
    for name, spec in params.items():
        section, _, key = str(name).partition(".")
        if not key or section not in ("train", "policy", "vec", "env"):
            raise ConfigError(f"{path}: space key {name!r} must be section.key (train, policy, vec or env)")
        choices = spec.get("choices") if isinstance(spec, dict) else None
        ranged = isinstance(spec, dict) and _finite(spec.get("low")) and _finite(spec.get("high"))
        ok = (isinstance(choices, list) and len(choices) > 0) or (ranged and spec["low"] < spec["high"])
        if not ok:
            raise ConfigError(
                f"{path}: {name} needs {{low, high}} (numbers) with low < high, or {{choices: [...]}}"
            )
        if ranged and spec.get("log") and spec["low"] <= 0:
            raise ConfigError(f"{path}: {name} samples a logarithm (log: true), so low must be above 0")
        for value in choices if choices is not None else (spec["low"], spec["high"]):
            value = int(value) if spec.get("int") and _finite(value) else value
            try:  # each value within the key's range (env parameters: checked as a trial resolves them)
                if section != "env":
                    check_layer({section: {key: value}}, "the space")
            except ConfigError as e:
                raise ConfigError(f"sweep space {path}: {name} value {value!r}: {e}") from None
    first = {s: {k: _sample_value(spec)} for s, k, spec in _split(params)}
    try:
        resolve(env=env, overrides=first)  # the names exist, and one point of the space resolves
    except ConfigError as e:
        raise ConfigError(f"sweep space {path}: {e}") from None
    objective = _mapping(merged.get("objective"), "objective", path)
    prune = _mapping(merged.get("prune"), "prune", path)
    target = objective.get("target")
    if target is not None and not _finite(target):
        raise ConfigError(
            f"sweep space {path}: objective.target must be a finite number or null, got {target!r}"
        )
    numbers = {
        "objective.window": objective.get("window", 5),
        "prune.warmup": prune.get("warmup", 0.3),
        "prune.margin": prune.get("margin", 0.05),
        "prune.min_trials": prune.get("min_trials", 2),
    }
    for where, value in numbers.items():
        if not (_finite(value) and value >= 0):
            raise ConfigError(f"sweep space {path}: {where} must be a finite number >= 0, got {value!r}")
    if not isinstance(objective.get("metric", "episode_return"), str):
        raise ConfigError(f"sweep space {path}: objective.metric must be the name of a logged metric")
    return Space(
        params=params,
        metric=objective.get("metric", "episode_return"),
        target=None if objective.get("target") is None else float(objective["target"]),
        window=max(1, int(objective.get("window", 5))),
        warmup=float(prune.get("warmup", 0.3)),
        margin=float(prune.get("margin", 0.05)),
        min_trials=int(prune.get("min_trials", 2)),
    )


def _split(params: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    for name, spec in params.items():
        section, _, key = name.partition(".")
        yield section, key, spec


def _sample_value(spec: dict[str, Any]) -> Any:
    if "choices" in spec:
        return spec["choices"][0]
    return int(spec["low"]) if spec.get("int") else float(spec["low"])


def trial_overrides(cfg: Any, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Sampled params as config sections; a minibatch larger than the batch is cut to the batch."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in params.items():
        section, _, key = name.partition(".")
        out.setdefault(section, {})[key] = value
    train, vec = out.get("train", {}), out.get("vec", {})
    horizon = int(train.get("bptt_horizon", cfg.train.bptt_horizon))
    envs = int(vec.get("num_envs", cfg.vec.num_envs))
    if "minibatch_size" in train and cfg.train.batch_size == "auto":
        train["minibatch_size"] = min(int(train["minibatch_size"]), envs * horizon)
    return out


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
    """Train one trial; a plain function of plain data so a process pool or Ray can run it.

    Returns state (complete | pruned | fail), score, seconds, steps, curve [[step, score], ...] and
    error. ``spec``: cfg (Config), metric, target, window, seconds, threads, reference curves,
    warmup, margin, min_trials.
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
            min_epochs=window,
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


# ----------------------------------------------------------------------------- the sweep


@dataclass
class Options:
    trials: int
    parallel: int = 1
    budget_seconds: float | None = None  # no trial starts after this much sweep time
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
) -> Iterator[str]:
    """Run (or resume) the sweep in ``out_dir``; yields progress lines. Outputs: see the module doc."""
    import optuna
    from optuna.trial import TrialState

    if options.trials < 1 or options.parallel < 1:
        raise ConfigError("--trials and --parallel must be at least 1")
    space = load_space(env, space_file)
    base = resolve(env=env, config_file=config_file, overrides=overrides or [])
    baseline = _baseline(base, space) if options.baseline else None  # checked before anything is written
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(
        seed=options.seed,
        n_startup_trials=options.startup_trials or max(2, options.trials // 3),
        multivariate=True,
    )
    study = optuna.create_study(
        study_name=STUDY,
        storage=f"sqlite:///{out / DB}",
        directions=["maximize", "minimize"],
        sampler=sampler,
        load_if_exists=True,
    )
    given = {
        "env": env,
        "metric": space.metric,
        "overrides": list(overrides or []),
        "config_file": str(Path(config_file).resolve()) if config_file else None,
    }
    if study.user_attrs.get("env") not in (None, env):
        raise ConfigError(f"{out} holds a sweep of {study.user_attrs['env']}, not {env}; pick another --out")
    for k, v in given.items():
        study.set_user_attr(k, v)
    # trials a previous run left running (it was interrupted) run again with the same settings
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for t in stale:
        study._storage.set_trial_user_attr(t._trial_id, "error", INTERRUPTED)
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"baseline": True} if t.user_attrs.get("baseline") else None)
    finished = _finished(study)
    if finished or stale:
        yield f"resuming {out / DB}: {len(finished)} trials done, {len(stale)} interrupted ones run again"
    elif baseline is not None:
        study.enqueue_trial(baseline, user_attrs={"baseline": True})

    distributions = space.distributions()
    remaining = options.trials - len(finished)
    runner = _Runner(options)
    pending: dict[Future[Any], Any] = {}
    sweep_start = time.perf_counter()
    try:
        while remaining > 0 or pending:
            out_of_time = (
                options.budget_seconds is not None
                and time.perf_counter() - sweep_start > options.budget_seconds
            )
            while remaining > 0 and len(pending) < options.parallel and not out_of_time:
                trial = study.ask(distributions)
                cfg = resolve(
                    env=env,
                    config_file=config_file,
                    overrides=_merge(_as_sections(overrides or []), trial_overrides(base, trial.params)),
                )
                if options.parallel > 1 and cfg.vec.num_threads == "auto":
                    cfg.data["vec"]["num_threads"] = runner.threads
                spec = {
                    "cfg": cfg,
                    "metric": space.metric,
                    "target": space.target,
                    "window": space.window,
                    "seconds": options.trial_seconds,
                    "threads": runner.threads,
                    "reference": [t.user_attrs.get("curve", []) for t in _finished(study, complete=True)],
                    "warmup": space.warmup,
                    "margin": space.margin,
                    "min_trials": space.min_trials,
                }
                pending[runner.submit(spec)] = trial
                remaining -= 1
            if not pending:
                if out_of_time:
                    yield f"--budget-seconds {options.budget_seconds:g} spent: no more trials start"
                break
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                trial = pending.pop(fut)
                result = fut.result()
                yield _tell(study, trial, result)
    except BaseException:
        runner.close(abort=True)
        raise
    runner.close()
    yield from write_outputs(study, space, out, env)


def _as_sections(overrides: list[str]) -> dict[str, dict[str, Any]]:
    from appliance.config import parse_overrides

    return parse_overrides(overrides)


def _baseline(base: Any, space: Space) -> dict[str, Any]:
    """The config as given, as values of the swept params (each must lie in the space)."""
    params = {}
    for section, key, spec in _split(space.params):
        value = base[section][key]
        inside = value in spec["choices"] if "choices" in spec else spec["low"] <= value <= spec["high"]
        if not inside:
            raise ConfigError(
                f"the baseline trial (your config) has {section}.{key} = {value}, outside the space "
                f"{spec}; widen the space or pass --no-baseline"
            )
        params[f"{section}.{key}"] = value
    return params


def _finished(study: Any, complete: bool = False) -> list[Any]:
    from optuna.trial import TrialState

    states = (TrialState.COMPLETE,) if complete else (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return [
        t for t in study.get_trials(deepcopy=False, states=states) if t.user_attrs.get("error") != INTERRUPTED
    ]


def _tell(study: Any, trial: Any, result: dict[str, Any]) -> str:
    from optuna.trial import TrialState

    for k in ("curve", "steps", "error", "reason"):
        if result.get(k) is not None:
            trial.set_user_attr(k, result[k])
    if result.get("score") is not None:
        trial.set_user_attr("score", result["score"])
    trial.set_user_attr("seconds", result["seconds"])
    state = result["state"]
    if state == "complete":
        study.tell(trial, [result["score"], result["seconds"]])
        what = f"score {result['score']:.3f} in {result['seconds']:.1f} s ({result['reason']})"
    elif state == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
        what = f"pruned: {result['error']}"
    else:
        study.tell(trial, state=TrialState.FAIL)
        what = f"failed: {result['error']}"
    return f"trial {trial.number}: {what}"


class _Runner:
    """Runs trial specs: in this process (--parallel 1), a spawn process pool, or Ray tasks."""

    def __init__(self, options: Options) -> None:
        import psutil

        self.parallel = options.parallel
        cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
        self.threads = max(1, cores // self.parallel) if self.parallel > 1 else None
        self.pool: ProcessPoolExecutor | None = None
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
            self.remote = ray.remote(num_cpus=1)(run_trial)
            self.threads = 1
        elif self.parallel > 1:
            self.pool = ProcessPoolExecutor(self.parallel, mp_context=get_context("spawn"))

    def submit(self, spec: dict[str, Any]) -> Future[Any]:
        if self.ray is not None:
            return self.remote.remote(spec).future()
        if self.pool is not None:
            return self.pool.submit(run_trial, spec)
        fut: Future[Any] = Future()
        fut.set_result(run_trial(spec))
        return fut

    def close(self, abort: bool = False) -> None:
        if self.pool is not None:
            procs = list((getattr(self.pool, "_processes", None) or {}).values())
            self.pool.shutdown(wait=not abort, cancel_futures=True)
            if abort:  # a sweep interrupted mid-trial leaves no trial running
                for proc in procs:
                    proc.terminate()
        if self.ray is not None:
            self.ray.shutdown()


# ----------------------------------------------------------------------------- results


def open_study(out: str | Path) -> Any:
    """The study of the sweep folder ``out`` (for reading its trials)."""
    import optuna

    return optuna.load_study(study_name=STUDY, storage=f"sqlite:///{Path(out) / DB}")


def rows(study: Any) -> list[dict[str, Any]]:
    """One dict per finished trial: number, state, score, seconds, steps, on the front, params."""
    from optuna.trial import TrialState

    front = {t.number for t in study.best_trials}
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.RUNNING or t.user_attrs.get("error") == INTERRUPTED:
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
    columns, body = table(study)
    lines = [
        f"# Sweep of {env}: {space.metric} (maximize) against wall seconds (minimize)",
        "",
        "`*`: on the Pareto front. " + (f"Target {space.metric} {space.target:g}." if space.target else ""),
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(row) + " |" for row in body),
        "",
    ]
    write_bytes_atomic(out / "trials.md", "\n".join(lines).encode())
    yield f"wrote {out / 'trials.md'}"
    if plot_pareto(study, space, out / "pareto.png", env):
        yield f"wrote {out / 'pareto.png'}"
    best = best_trade_off(study, space.target)
    if best is None:
        yield "no trial completed: no best.yaml"
        return
    sections = best_config(env, study, best)
    header = (
        f"# puffer-bench sweep {env}: trial {best.number}, {space.metric} {best.values[0]:.4g} "
        f"in {best.values[1]:.1f} s. Use: puffer-bench train {env} --config {out / 'best.yaml'}\n"
    )
    write_bytes_atomic(out / "best.yaml", (header + yaml.safe_dump(sections, sort_keys=True)).encode())
    yield f"wrote {out / 'best.yaml'} (trial {best.number})"


def best_config(env: str, study: Any, trial: Any) -> dict[str, dict[str, Any]]:
    """The trial's config as a ``--config`` file: every value that differs from the env's defaults
    (the sweep's base config file and overrides, and the trial's params), typed as the config types it."""
    config_file, overrides = study.user_attrs.get("config_file"), study.user_attrs.get("overrides", [])
    base = resolve(env=env, config_file=config_file, overrides=overrides)
    cfg = resolve(
        env=env,
        config_file=config_file,
        overrides=_merge(_as_sections(overrides), trial_overrides(base, trial.params)),
    )
    defaults = resolve(env=env)
    out: dict[str, dict[str, Any]] = {}
    for section in ("vec", "train", "policy", "env"):
        for key, value in cfg[section].items():
            if defaults[section].get(key) != value:
                out.setdefault(section, {})[key] = value
    return out


def plot_pareto(study: Any, space: Space, path: Path, env: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = [r for r in rows(study) if r["score"] is not None and r["seconds"] is not None]
    if not trials:
        return False
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
    ax.set_ylabel(space.metric)
    ax.set_title(f"sweep of {env}: {len(trials)} trials")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return True


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
