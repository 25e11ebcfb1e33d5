"""Commands about this machine: info (its fingerprint), vector-bench and autotune (its speed)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
import yaml

from appliance.cli.common import (
    CONTEXT,
    PROFILE,
    PROFILE_HELP,
    IntList,
    Number,
    check_out,
    cli,
    core_count,
    count,
    duration,
    env_params,
    print_table,
    write_json,
    write_out,
)

if TYPE_CHECKING:
    pass

# ----------------------------------------------------------------------------- info


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the fingerprint as JSON.")
def info(as_json: bool) -> None:
    """Print this machine's fingerprint (CPU, RAM, OS, versions, GPUs) and the hardware profile
    train and run pick here, with why."""
    from appliance.config import hardware, profile_names
    from appliance.sysinfo import fingerprint, summary

    fp = fingerprint()
    chosen = hardware.detect()
    if as_json:
        click.echo(
            json.dumps({**fp, "profile": {"name": chosen.name, "why": hardware.detected_why()}}, indent=2)
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="machine fingerprint", show_header=False, box=None)
    for field, value in summary(fp):
        table.add_row(field, value)
    table.add_row("profile", f"{chosen.name}: {hardware.detected_why()}")
    table.add_row("profiles", f"{', '.join(profile_names())} (--gpu NAME)")
    Console().print(table)


# ----------------------------------------------------------------------------- vectorization


@cli.command("vector-bench", context_settings=CONTEXT)
@click.option(
    "--env",
    "env",
    default="cartpole",
    show_default=True,
    help="cartpole, a Gymnasium id, ocean:NAME, pufferlib:NAME or a PufferLib env folder.",
)
@click.option(
    "--step-us",
    type=Number(0, 1e6),
    help="Use a Python test env that busy-waits this many microseconds per step.",
)
@click.option("--cores", type=core_count(), help="Cores for every approach (default: physical cores).")
@click.option(
    "--seconds", default=1.0, show_default=True, type=duration(), help="Timed seconds per measurement."
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False),
    help="Also write all samples (with fingerprint) here.",
)
@click.option(
    "--vector-env",
    metavar="MODULE:FACTORY",
    help="Also time an existing gymnasium VectorEnv: a factory taking num_envs "
    "(e.g. appliance.emulation.atari:vector for ale-py's AtariVectorEnv).",
)
@click.option(
    "--vector-env-param",
    "vector_env_params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A keyword argument for --vector-env's factory (repeatable), e.g. game=pong.",
)
@click.option(
    "--num-envs",
    type=IntList(1, 65536),
    help="Time every approach at these num_envs only (e.g. 8, or 8,16), instead of each at several.",
)
def vector_bench(
    env: str,
    step_us: float | None,
    cores: int | None,
    seconds: float,
    json_out: str | None,
    vector_env: str | None,
    vector_env_params: tuple[str, ...],
    num_envs: list[int] | None,
) -> None:
    """Our vector backends against gymnasium's SyncVectorEnv and AsyncVectorEnv, side by side.

    Same env, same cores, random actions; each approach at its best num_envs. Prints SPS and the ratio
    to the faster of gymnasium's two. --vector-env adds an existing VectorEnv (ale-py's
    AtariVectorEnv, EnvPool, ...) as the trainer would run it.
    """
    from appliance.bench import vectorbench
    from appliance.sysinfo import physical_cores

    given = click.get_current_context().get_parameter_source("env")
    if step_us is not None and given is not click.core.ParameterSource.DEFAULT:
        raise click.BadParameter(
            f"--step-us times a test env of its own, not {env}: drop --env, or --step-us to time {env}",
            param_hint="--env",
        )
    check_out(json_out)

    if vector_env_params and not vector_env:
        raise click.BadParameter("--vector-env-param needs --vector-env", param_hint="--vector-env-param")
    params = {}
    for item in vector_env_params:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--vector-env-param")
        params[key.strip()] = yaml.safe_load(value)
    cores = cores or physical_cores()
    result = vectorbench.run(
        env,
        step_us,
        cores,
        seconds,
        progress=lambda r: click.echo(
            f"  {r['family']:<45} num_envs={r['num_envs']:<6} {r['sps']:>12,.0f} SPS", err=True
        ),
        vector_env=vector_env,
        vector_params=params,
        num_envs=num_envs,
    )
    title = f"{result['env']} on {cores} cores: agent-steps/s, best num_envs per approach"
    print_table(title, ("approach", "num_envs", "SPS", "vs best gymnasium"), vectorbench.table_rows(result))
    if result.get("note"):
        click.echo(result["note"])
    write_json(json_out, "vector-bench", result)


@cli.command(context_settings=CONTEXT)
@click.argument("env")
@click.option(
    "--batch-size",
    type=count(2**31 - 1),
    help="Envs the trainer wants per batch; tune everything else around it.",
)
@click.option(
    "--seconds", default=0.5, show_default=True, type=duration(), help="Timed seconds per candidate."
)
@click.option(
    "--max-ram-gb",
    default=8.0,
    show_default=True,
    type=Number(0, 1e6, low_open=True),
    help="Skip configurations whose envs need more RAM.",
)
@click.option(
    "--forward-ms",
    default=0.0,
    show_default=True,
    type=Number(0, 1e6),
    help="Simulated policy time per batch (judges async fairly).",
)
@click.option("--cores", type=core_count(), help="Cores to use (default: physical cores).")
@click.option(
    "--save",
    type=click.Path(dir_okay=False),
    help="Write the fastest config as a YAML profile (for --config).",
)
@click.option("--gpu", "profile", metavar="PROFILE", type=PROFILE, help=PROFILE_HELP)
@click.option(
    "--buffers",
    "buffers_spec",
    default="auto",
    show_default=True,
    type=IntList(1, 256, words=("auto", "none")),  # train.buffers' range
    help="Rollout engine buffer counts to time with the winner (native Ocean envs): auto (1,2,4,8 on a GPU, none on a CPU), none, or e.g. 1,2,4.",
)
def autotune(
    env: str,
    batch_size: int | None,
    seconds: float,
    max_ram_gb: float,
    forward_ms: float,
    cores: int | None,
    save: str | None,
    profile: str | None,
    buffers_spec: str | list[int],
) -> None:
    """Profile ENV, time candidate vector configurations, and pick the fastest.

    ENV is an Ocean name, a Gymnasium id or ocean:NAME. With --save, the winner is written as a
    profile that train and run accept through --config.
    """
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    from appliance.config.runs import pick_profile
    from appliance.ocean import ocean_name
    from appliance.sysinfo import fingerprint, physical_cores
    from appliance.tune import autotune as tuner

    check_out(save, "--save")
    cores = cores or physical_cores()
    counts = tuner.buffer_counts(buffers_spec, _cuda())
    name = ocean_name(env)
    if name is None:  # an unknown name is one line before the table, as an Ocean one is
        from appliance.config import resolve

        resolve(env=env)
    params: dict[str, Any] = env_params(name)[1] if name else {}
    console, rows = Console(), []
    console.print(
        f"profile '{pick_profile(profile)}' (the config a saved result layers on; --gpu NAME to change)"
    )

    def table() -> Table:
        t = Table(title=f"autotune {env} ({cores} cores, {seconds:g} s per candidate)")
        for col in ("backend", "num_envs", "workers/threads", "batch_size", "SPS"):
            t.add_column(col, justify="right")
        for cells in tuner.candidate_rows(rows):
            t.add_row(*cells)
        return t

    with Live(table(), console=console, refresh_per_second=4) as live:
        result = tuner.tune(
            name or env, params, cores, seconds, batch_size, max_ram_gb, forward_ms,
            on_profile=lambda p: console.print(tuner.profile_line(env, p)),
            on_result=lambda r: (rows.append(r), live.update(table())),
        )  # fmt: skip
    console.print(tuner.best_line(result["best"]))
    buffers = None
    if counts and name and result["best"]["backend"] == "native":
        buffers = tuner.tune_buffers(
            name, params, result["best"], counts, pick_profile(profile), max(seconds, 1.0),
            on_result=lambda r: console.print(
                f"  rollout engine, {r['buffers']} buffers (env threads {r['threads']}): {r['sps']:,.0f} agent-steps/s"
            ),
        )  # fmt: skip
        if buffers:
            console.print(f"fastest rollout: train.buffers={buffers['buffers']}")
    if save:
        fit = tuner.fitting_minibatch(name, params, result["best"], pick_profile(profile)) if name else {}
        text = tuner.profile_yaml(
            env, result["best"], forward_ms, fingerprint()["cpu"]["model"], buffers, fit
        )
        write_out(save, text.encode(), "--save")
        console.print(f"wrote {save} (use it with --config {save})")
