"""Commands that scale out: sweep (data-parallel training is ``train --nproc``)."""

from __future__ import annotations

import click

from appliance.cli.common import OVERRIDES, cli, count, duration, print_table, split_env
from appliance.errors import ConfigError


@cli.command(context_settings=OVERRIDES)
@click.option(
    "--trials",
    default=20,
    show_default=True,
    type=count(100_000),
    help="Trials in the study (a resumed one counts its own).",
)
@click.option(
    "--parallel",
    default=1,
    show_default=True,
    type=count(1024),
    help="Trials at once (processes, or Ray tasks).",
)
@click.option("--budget-seconds", type=duration(), help="Start no trial after this many seconds of sweeping.")
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
    trials: int,
    parallel: int,
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
    puffer-bench sweep ENV --trials N [--parallel K] [--budget-seconds S] [--space FILE]
                       [--ray-address A] [--section.key VALUE ...]
    The overrides set every trial's base config (e.g. --train.total-timesteps 3e5).
    Writes trials.md, pareto.png and best.yaml (for train --config) to the sweep folder.
    """
    from pathlib import Path

    from appliance.bench import sweep as sw
    from appliance.config import resolve

    env, overrides = split_env(args)
    if env is None:
        raise ConfigError("sweep needs an ENV: an Ocean env (puffer-bench envs) or a Gymnasium id")
    base = resolve(env=env, config_file=config_file, overrides=overrides)
    folder = Path(out) if out else Path(base.train.data_dir) / f"sweep-{env}"
    options = sw.Options(
        trials=trials,
        parallel=parallel,
        budget_seconds=budget_seconds,
        trial_seconds=trial_seconds,
        ray_address=ray_address,
        seed=seed,
        baseline=not no_baseline,
    )
    for line in sw.sweep(env, folder, options, space_file, config_file, overrides):
        click.echo(line)
    study, space = sw.open_study(folder), sw.load_space(env, space_file)
    columns, body = sw.table(study)
    keep = [i for i, c in enumerate(columns) if "." not in c]  # the params are in trials.md
    print_table(
        f"sweep of {env} ({folder})", [columns[i] for i in keep], ([r[i] for i in keep] for r in body), 2
    )
    for line in sw.summary(study, space):
        click.echo(line)
