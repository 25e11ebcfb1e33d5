"""Commands that scale out: sweep (data-parallel training is ``train --nproc``)."""

from __future__ import annotations

import sys

import click

from appliance.cli.common import (
    OVERRIDES,
    PROFILE,
    PROFILE_HELP,
    cli,
    count,
    duration,
    print_table,
    split_env,
)
from appliance.errors import ConfigError


@cli.command(context_settings=OVERRIDES)
@click.option("--gpu", "profile", metavar="PROFILE", type=PROFILE, help=PROFILE_HELP)
@click.option(
    "--trials",
    default=20,
    show_default=True,
    type=count(100_000),
    help="Trials in the study (a resumed one counts its own).",
)
@click.option(
    "--parallel",
    type=count(1024),
    help="Trials at once (processes, or Ray tasks)  [default: 1; with --gpus, one per GPU]",
)
@click.option(
    "--gpus",
    metavar="N|auto",
    help="Run up to one trial per GPU at once, each process with its own CUDA_VISIBLE_DEVICES "
    "('auto': every GPU torch sees).",
)
@click.option(
    "--storage",
    metavar="URL",
    help="A study shared by sweep workers on several machines: postgresql://USER:PASSWORD@HOST:PORT/DB "
    "or journal:///PATH/study.log (default: study.db in the sweep folder).",
)
@click.option(
    "--study-name",
    default="sweep",
    show_default=True,
    help="The study's name in --storage (workers with the same name join one study).",
)
@click.option(
    "--heartbeat",
    type=count(3600),
    help="With --storage: seconds between a worker's heartbeats; a trial with none for twice that "
    "fails and runs again  [default: 30]",
)
@click.option(
    "--budget-seconds",
    type=duration(),
    help="Wall seconds for the whole sweep: no trial starts after them, a running trial stops at them.",
)
@click.option("--trial-seconds", type=duration(), help="Stop each trial after this many seconds of training.")
@click.option(
    "--space",
    "space_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Search space YAML (default: appliance/defaults/sweep.yaml).",
)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Base config of every trial.")
@click.option("--out", help="Sweep folder (default: train.data_dir/sweep-ENV); run again to resume.")
@click.option("--ray-address", help="Run trials as Ray tasks on this cluster ('local': a runtime here).")
@click.option(
    "--seed", default=0, show_default=True, type=count(2**32 - 1, low=0), help="Seed of the sampler."
)
@click.option("--no-baseline", is_flag=True, help="Do not run your config as trial 0.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def sweep(
    profile: str | None,
    trials: int,
    parallel: int | None,
    gpus: str | None,
    storage: str | None,
    study_name: str,
    heartbeat: int | None,
    budget_seconds: float | None,
    trial_seconds: float | None,
    space_file: str | None,
    config_file: str | None,
    out: str | None,
    ray_address: str | None,
    seed: int,
    no_baseline: bool,
    args: tuple[str, ...],
) -> None:
    """Search hyperparameters of ENV for score against wall time (Optuna, multi-objective).

    \b
    puffer-bench sweep ENV [--gpu PROFILE] --trials N [--parallel K] [--budget-seconds S]
                       [--space FILE] [--ray-address A] [--gpus N|auto]
                       [--storage URL [--study-name NAME]] [--section.key VALUE ...]
    Every trial's base config is resolved as train resolves it: the profile (detected, or --gpu),
    --config, then the overrides (e.g. --train.total-timesteps 3e5). Run the same command again to
    resume; a stop signal keeps every finished trial.
    Writes trials.md, pareto.png and best.yaml (for train --config) to the sweep folder.
    With --storage, workers on several machines (each with its own sweep folder) share one study.
    """
    from pathlib import Path

    from appliance import sweep as sw
    from appliance.config.runs import pick_profile
    from appliance.signals import Interrupted, stop_signals
    from appliance.sweep.storage import HEARTBEAT
    from appliance.sweep.storage import parse as parse_storage
    from appliance.sweep.trials import gpu_slots

    env, overrides = split_env(args)
    if env is None:
        raise ConfigError("sweep needs an ENV: an Ocean env (puffer-bench envs) or a Gymnasium id")
    shared = parse_storage(storage, heartbeat or HEARTBEAT) if storage else None
    if shared is None and heartbeat is not None:
        raise ConfigError(
            "--heartbeat is for workers sharing a study (--storage); one folder's sweep has none"
        )
    if shared is None and study_name != sw.STUDY:
        raise ConfigError(
            "--study-name names a study in --storage; a sweep folder holds one study: pass --out"
        )
    slots = gpu_slots(gpus) if gpus else None
    base = sw.Base(env, pick_profile(profile), config_file, overrides)
    folder = Path(out) if out else Path(base.resolve().train.data_dir) / f"sweep-{env}"
    options = sw.Options(
        trials=trials,
        parallel=parallel or (len(slots) if slots else 1),
        gpus=slots,
        shared=shared,
        study_name=study_name,
        budget_seconds=budget_seconds,
        trial_seconds=trial_seconds,
        ray_address=ray_address,
        seed=seed,
        baseline=not no_baseline,
    )
    with stop_signals():  # a signal outside the trials (writing the outputs) is one line too
        try:
            for line in sw.sweep(env, folder, options, space_file, config_file, overrides, base.profile):
                click.echo(line)
            study = sw.open_study(folder, shared, study_name)
            space = sw.load_space(env, space_file, base)
        except sw.Stopped as e:
            click.echo(str(e), err=True)
            sys.exit(e.exit_code)
        except Interrupted as e:
            where = shared.shown if shared else folder / sw.DB
            click.echo(f"interrupted ({e.name}): {where} holds every finished trial; run again", err=True)
            sys.exit(128 + e.signum)
    columns, body = sw.table(study)
    keep = [i for i, c in enumerate(columns) if "." not in c]  # the params are in trials.md
    print_table(
        f"sweep of {env} ({folder})", [columns[i] for i in keep], ([r[i] for i in keep] for r in body), 2
    )
    for line in sw.summary(study, space):
        click.echo(line)
