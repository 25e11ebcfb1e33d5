"""Commands that train and play policies: train, eval."""

from __future__ import annotations

import sys
from typing import Any

import click

from appliance.cli.common import (
    OVERRIDES,
    PROFILE,
    PROFILE_HELP,
    Number,
    check_out,
    cli,
    count,
    split_env,
)
from appliance.cli.envs import save_gif
from appliance.errors import ConfigError

# ----------------------------------------------------------------------------- training


@cli.command(context_settings=OVERRIDES)
@click.option("--gpu", "profile", metavar="PROFILE", type=PROFILE, help=PROFILE_HELP)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Your YAML config (e.g. from autotune --save).",
)
@click.option(
    "--family",
    metavar="NAME",
    help="Defaults for an env without its own: classic, continuous, atari, multiagent or none "
    "(default: read from the env's spaces and registration).",
)
@click.option("--run-id", help="Name of the run folder under train.data_dir (default: ENV-UTC time).")
@click.option(
    "--resume",
    "resume",
    metavar="RUN|latest",
    help="Continue a run with its own config (ENV may be left out): weights, optimizer, counters.",
)
@click.option(
    "--load-model-path", metavar="PATH|latest", help="Start from these weights (a run folder or model.pt)."
)
@click.option(
    "--no-dashboard",
    is_flag=True,
    help="Plain log lines instead of the live dashboard (default when not a TTY).",
)
@click.option(
    "--profile-trace",
    type=click.Path(dir_okay=False),
    help="Run 3 epochs under torch.profiler, write a Chrome/Perfetto trace and FILE.ops.txt (ops by their own time; on a GPU by device time too), stop.",
)
@click.option("--tensorboard", is_flag=True, help="Also write TensorBoard events to the run folder.")
@click.option(
    "--wandb", "use_wandb", is_flag=True, help="Also log to Weights & Biases (needs wandb installed)."
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False),
    help="At the end, write fingerprint, config, SPS and phase breakdown as JSON.",
)
@click.option(
    "--stop-steps",
    type=Number(1, 2**63 - 1, integer=True),
    metavar="N",
    help="End after N agent-steps; the learning-rate schedule still spans train.total_timesteps.",
)
@click.option(
    "--nproc",
    default=1,
    show_default=True,
    type=count(2**31 - 1),  # at most one per GPU or usable core: checked with the rest of the launch
    help="Data-parallel ranks on this machine (torch.distributed; one GPU each, or CPU with gloo).",
)
@click.option(
    "--nnodes",
    default=1,
    show_default=True,
    type=count(4096),
    help="Machines in the job (each runs this command).",
)
@click.option(
    "--node-rank",
    default=0,
    show_default=True,
    type=count(4095, low=0),
    help="This machine's index among --nnodes.",
)
@click.option("--master-addr", default="127.0.0.1", show_default=True, help="Address of node 0.")
@click.option(
    "--master-port",
    type=Number(0, 65535, integer=True, why=" (0 for a free one)"),
    help="Port on node 0 (default or 0: a free one; set it for --nnodes > 1).",
)
@click.option(
    "--autotune",
    "autotune",
    metavar="off|on|redo",
    help="On a machine not tuned for this recipe yet, time env threads/workers and engine buffers "
    "(about a minute, once) and keep the fastest; redo measures again (default: on, or $PUFFER_AUTOTUNE).",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def train(**options: Any) -> None:
    """Train a PPO policy on ENV (an Ocean env or a Gymnasium id).

    \b
    puffer-bench train ENV [--gpu PROFILE] [--config FILE] [--section.key VALUE ...]
    e.g. puffer-bench train squared --train.device cpu --train.total-timesteps 2e6
    puffer-bench train --resume RUN [--section.key VALUE ...]: the run's config, these over it
    With --nproc N: N ranks, each with vec.num_envs envs; total-timesteps counts all ranks.
    """
    try:
        _train(**options)
    except KeyboardInterrupt:  # Ctrl-C while starting up, before the session takes the stop signals
        kept = f"{options['resume']} is kept as it was" if options["resume"] else "nothing was kept"
        click.echo(
            f"error: interrupted (SIGINT) before the first epoch ended: nothing was trained; {kept}", err=True
        )
        click.get_current_context().exit(128 + 2)


def _train(
    profile: str | None,
    config_file: str | None,
    family: str | None,
    run_id: str | None,
    resume: str | None,
    load_model_path: str | None,
    no_dashboard: bool,
    profile_trace: str | None,
    tensorboard: bool,
    use_wandb: bool,
    report: str | None,
    stop_steps: int | None,
    nproc: int,
    nnodes: int,
    node_rank: int,
    master_addr: str,
    master_port: int | None,
    autotune: str | None,
    args: tuple[str, ...],
) -> None:
    from appliance.config.autotune import mode as autotune_mode
    from appliance.config.runs import run_config
    from appliance.train import launcher, session
    from appliance.train.resume import resume_config

    env, overrides = split_env(args)
    if env is None and not resume:
        raise ConfigError("train needs an ENV: an Ocean env (puffer-bench envs) or a Gymnasium id")
    where = launcher.Launch(nproc, nnodes, node_rank, master_addr, master_port or None)
    if nproc == nnodes == 1 and master_port is not None:
        raise ConfigError(
            f"--master-port {master_port} is for a job of several ranks (--nproc or --nnodes above 1); "
            "one process trains without one: drop it"
        )
    where.check()  # --node-rank 5 of one machine is refused on one process too
    notes: list[str] = []
    if resume:
        cfg, notes = resume_config(resume, env, profile, config_file, overrides, family=family)
    else:
        cfg = run_config(env, profile, config_file, overrides, family=family)
    options = session.Options(
        run_id=run_id,
        resume=resume,
        load_model_path=load_model_path,
        dashboard=not no_dashboard and sys.stdout.isatty(),
        profile_trace=profile_trace,
        tensorboard=tensorboard,
        wandb=use_wandb,
        report=report,
        stop_steps=stop_steps,
        notes=tuple(notes),
    )
    if autotune_mode(autotune) != "off" and not resume and nproc == nnodes == 1:
        from appliance.tune.selftune import autotune_run

        session.check_outputs(options)  # an unwritable --report is refused before the tuning's minute
        autotune_run(cfg, autotune, click.echo)
    if nproc > 1 or nnodes > 1:
        from appliance.train import distributed

        lines = distributed.train(cfg, options, where)
    else:
        lines = session.train(cfg, options)
    for line, err in lines:
        click.echo(line, err=err)


@cli.command("eval", context_settings=OVERRIDES)
@click.option(
    "--load-model-path", default="latest", show_default=True, metavar="PATH|latest", help="Weights to run."
)
@click.option("--episodes", default=5, show_default=True, type=count(1_000_000), help="Episodes to play.")
@click.option(
    "--gif", type=click.Path(dir_okay=False), help="Write the first episode as an animated GIF (Ocean envs)."
)
@click.option(
    "--greedy", is_flag=True, help="Play the most likely action (the mean for Box actions), not a sample."
)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Your YAML config.")
@click.option("--gpu", "profile", metavar="PROFILE", type=PROFILE, help=PROFILE_HELP)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def evaluate(
    load_model_path: str,
    episodes: int,
    gif: str | None,
    greedy: bool,
    config_file: str | None,
    profile: str | None,
    args: tuple[str, ...],
) -> None:
    """Run a trained policy on ENV and print episode scores (render frames with --gif)."""
    import numpy as np

    from appliance.config.runs import run_config
    from appliance.train.evaluate import play
    from appliance.train.runs import find_checkpoint

    env, overrides = split_env(args)
    if env is None:
        raise ConfigError("eval needs an ENV")
    check_out(gif, "--gif")
    cfg = run_config(env, profile, config_file, [*overrides, "--vec.num-envs", "1", "--vec.num-workers", "1"])

    def show(i: int, stats: dict[str, float]) -> None:
        if "score" in stats or "perf" in stats:
            perf = f"  perf {stats['perf']:.3f}" if "perf" in stats else ""
            click.echo(
                f"episode {i}: score {stats.get('score', stats.get('episode_return', float('nan'))):.4g}{perf}"
            )
        else:
            click.echo(f"episode {i}: return {stats['episode_return']:.4g}  length {stats['episode_length']}")

    scores, frames = play(
        cfg,
        find_checkpoint(cfg.train.data_dir, load_model_path),
        episodes,
        record=bool(gif),
        on_episode=show,
        greedy=greedy,
    )
    if scores:
        click.echo(f"mean over {len(scores)} episodes: {np.mean(scores):.4g}")
    if gif:
        if frames:
            save_gif(frames, gif, duration_ms=60)
        else:
            click.echo("--gif renders Ocean envs only", err=True)
