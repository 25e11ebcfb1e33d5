"""Commands about this machine and its envs: info, config, envs (list, show, sps), vector-bench, autotune."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
import yaml

from appliance.cli.common import (
    CONTEXT,
    OVERRIDES,
    PROFILE,
    PROFILE_HELP,
    IntList,
    NameList,
    Number,
    check_out,
    cli,
    core_count,
    count,
    duration,
    env_params,
    pick_profile,
    print_table,
    run_config,
    split_env,
    usable_cores,
    write_json,
    write_out,
)
from appliance.redact import redact, redact_tree

if TYPE_CHECKING:
    from appliance.config import Config

# ----------------------------------------------------------------------------- info, config


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
        click.echo(json.dumps({**fp, "profile": {"name": chosen.name, "why": chosen.why}}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="machine fingerprint", show_header=False, box=None)
    for field, value in summary(fp):
        table.add_row(field, value)
    table.add_row("profile", f"{chosen.name}: {chosen.why}")
    table.add_row("profiles", f"{', '.join(profile_names())} (--gpu NAME)")
    Console().print(table)


ALL_KEYS = "\0all"  # --explain with no KEY


@cli.command(context_settings=OVERRIDES)
@click.option("--gpu", "profile", metavar="PROFILE", type=PROFILE, help=PROFILE_HELP)
@click.option(
    "--config", "config_file", type=click.Path(dir_okay=False), help="Your YAML config, after the profile."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@click.option("--family", metavar="NAME", help="A non-Ocean env's family of defaults (see train --help).")
@click.option(
    "--explain",
    metavar="[KEY]",
    is_flag=False,
    flag_value=ALL_KEYS,
    help="Explain KEY (e.g. train.learning_rate): type, range, default, meaning, and with ENV the value "
    "it resolves to; without KEY, every key by section.",
)
@click.option("--show-origin", is_flag=True, help="Beside each value, the layer that set it.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def config(
    profile: str | None,
    config_file: str | None,
    as_json: bool,
    family: str | None,
    explain: str | None,
    show_origin: bool,
    args: tuple[str, ...],
) -> None:
    """Print the resolved config a run would use: what train ENV runs with the same options, on
    this machine's hardware profile (detected, or --gpu).

    \b
    puffer-bench config [ENV] [--gpu PROFILE] [--config FILE] [--section.key VALUE ...]
    puffer-bench config [ENV] --show-origin     each value with the layer that set it
    puffer-bench config [ENV] --explain [KEY]   what a key means (all keys without KEY)
    e.g. puffer-bench config breakout --gpu 4090 --train.learning-rate 3e-4
    """
    from appliance.config import explain as explained

    env, overrides = split_env(args)
    if explain is not None and (as_json or show_origin):
        raise click.BadParameter(
            "--explain prints text: leave out --json and --show-origin", param_hint="--explain"
        )
    if show_origin and as_json:
        raise click.BadParameter(
            "a value's layer is shown in text, not JSON: leave out --json", param_hint="--show-origin"
        )
    if explain is not None:
        info = None if explain == ALL_KEYS else explained.find(explain)  # unknown: one line, first
        if env is None and not overrides and not config_file:  # the schema alone
            click.echo(explained.all_text() if info is None else explained.text(info))
            return
        cfg = run_config(env, profile, config_file, overrides, family=family)

        def resolved(section: str, key: str) -> str:
            value = _value(cfg[section][key])
            return f"{env or 'this run'} (profile {cfg.profile}): {value}, set by {cfg.origin(section, key)}"

        if info is None:
            click.echo(explained.all_text(resolved))
        else:
            click.echo(explained.text(info, resolved(info.section, info.key)))
        return
    cfg = run_config(env, profile, config_file, overrides, family=family)
    if show_origin:
        click.echo(redact(origin_text(cfg)))
        return
    shown = redact_tree(cfg.to_dict())  # an API key or a URL's password given as a flag is not printed
    text = (
        json.dumps(shown, indent=2)
        if as_json
        else yaml.safe_dump(shown, sort_keys=False, default_flow_style=False)
    )
    click.echo(text.rstrip("\n"))


def _value(value: Any) -> str:
    """A value as YAML shows it: text bare (empty as ""), anything else as JSON (full float digits)."""
    return value if isinstance(value, str) and value.strip() == value and value else json.dumps(value)


def origin_text(cfg: Config) -> str:
    """The resolved config as YAML-like lines, each value with the layer that set it as a comment."""
    from appliance.config import SECTIONS

    head = [
        f"# env: {cfg.env_name or '(none)'}, profile: {cfg.profile}"
        + (f", family: {cfg.family.name or 'none'}" if cfg.family else "")
    ]
    lines = []
    for section in SECTIONS:
        values = cfg[section]
        lines.append(f"{section}:" + ("" if values else " {}"))
        rows = [(f"  {key}: {_value(value)}", cfg.origin(section, key)) for key, value in values.items()]
        width = max((len(r[0]) for r in rows), default=0)
        lines += [f"{text.ljust(width)}  # {where}" for text, where in rows]
    return "\n".join(head + lines)


# ----------------------------------------------------------------------------- envs


@cli.group(invoke_without_command=True, context_settings=CONTEXT)
@click.pass_context
def envs(ctx: click.Context) -> None:
    """Ocean C envs: list them, watch one, measure their speed."""
    if ctx.invoked_subcommand is not None:
        return
    from appliance.ocean import available

    rows = []
    for d in available():
        nvec = d["action_nvec"]
        action = f"Discrete({nvec[0]})" if len(nvec) == 1 else f"MultiDiscrete({nvec})"
        itemsize = 4 if d["obs_dtype"] == "float32" else 1
        obs = f"{d['obs_dtype']}[{d['obs_size']}]"
        rows.append([d["name"], str(d["agents_per_env"]), obs, action, str(d["obs_size"] * itemsize)])
    print_table(
        "Ocean envs", ("env", "agents/env", "observation", "action", "bytes/agent-step"), rows, left=5
    )


@envs.command("build", context_settings=CONTEXT)
@click.argument("path", type=click.Path(file_okay=False))
@click.option(
    "--ini",
    type=click.Path(dir_okay=False),
    help="The env's ini (default: NAME.ini beside it or config/NAME.ini).",
)
@click.option(
    "--raylib", "raylib", type=click.Path(file_okay=False), help="raylib 5.5 (include/, lib/libraylib.a)."
)
@click.option("--force", is_flag=True, help="Build again even if this source hash is built.")
def envs_build(path: str, ini: str | None, raylib: str | None, force: bool) -> None:
    """Compile a PufferLib 4.0 env folder (ocean/NAME/) against our runtime, as env pufferlib:NAME.

    Cached per hash of its sources and ini; afterwards `train pufferlib:NAME`, `envs sps pufferlib:NAME`.
    """
    from appliance import pufferlib_envs

    built = pufferlib_envs.build(path, ini=ini, raylib=raylib, force=force)
    meta = built.meta
    click.echo(f"built {built.name}: {built.library}")
    click.echo(
        f"  kwargs from {meta.get('ini') or 'no ini found (the env reads none)'}: {', '.join(meta['params']) or 'none'}"
    )
    if meta.get("skipped_env_keys"):
        click.echo(
            f"  [env] keys with text values, not passed (kwargs are numbers): {', '.join(meta['skipped_env_keys'])}"
        )
    if meta.get("action_mask"):
        click.echo("  MY_ACTION_MASK: the env writes its action mask; the policy does not apply it yet")
    click.echo(f"  train it: puffer-bench train {built.name}")


@envs.command("raylib", context_settings=CONTEXT)
def envs_raylib() -> None:
    """Unpack raylib 5.5 (which PufferLib envs include) into the env cache, from the pufferlib 3.0.0 sdist."""
    from appliance import pufferlib_envs

    click.echo(pufferlib_envs.fetch_raylib(progress=lambda m: click.echo(m, err=True)))


@envs.command("show", context_settings=CONTEXT)
@click.argument("name")
@click.option(
    "--frames", default=4, show_default=True, type=count(10_000), help="Random-policy steps to draw."
)
@click.option("--gif", type=click.Path(dir_okay=False), help="Also write an animated GIF of --frames steps.")
@click.option("--seed", default=0, show_default=True, type=count(2**63 - 1, low=0))
def envs_show(name: str, frames: int, gif: str | None, seed: int) -> None:
    """Draw a few random-policy frames of env NAME in the terminal (and optionally a GIF)."""
    from appliance import ocean
    from appliance.bench.envsps import random_actions
    from appliance.vector import native

    check_out(gif, "--gif")
    name = ocean.canonical(name)
    _, params = env_params(name)
    with native.make(name, num_envs=1, num_threads=1, seed=seed, **params) as vec:
        vec.reset(seed)
        actions = random_actions(vec, count=max(frames, 1), seed=seed)
        images = [vec.render(0).copy()]
        for i in range(frames):
            if i < 4 or gif is None:
                click.echo(f"--- {name} step {i} (random actions)")
                click.echo(vec.render_text(0))
            vec.step(actions[i])
            images.append(vec.render(0).copy())
        stats = vec.log()
        if stats:
            click.echo("episodes finished: " + ", ".join(f"{k}={v:.3g}" for k, v in stats.items()))
    if gif:
        save_gif(images, gif, duration_ms=80)


def save_gif(frames: list[Any], path: str, duration_ms: int) -> None:
    """Frames (HxWx3 uint8) as an animated GIF, scaled up by whole pixels to about 256 px."""
    import io

    import numpy as np
    from PIL import Image

    scale = max(1, 256 // max(frames[0].shape[:2]))
    pil = [Image.fromarray(np.kron(f, np.ones((scale, scale, 1), dtype=np.uint8))) for f in frames]
    buf = io.BytesIO()
    pil[0].save(buf, format="GIF", save_all=True, append_images=pil[1:], duration=duration_ms, loop=0)
    write_out(path, buf.getvalue(), "--gif")
    click.echo(f"wrote {len(pil)} frames to {path}")


@envs.command("sps", context_settings=CONTEXT)
@click.argument("names", required=False, type=NameList())
@click.option(
    "--threads",
    type=IntList(1, usable_cores, why=" (the usable cores here)"),
    help="Comma-separated thread counts, at most the usable cores (default: 1,2 where there are 2).",
)
@click.option(
    "--seconds", default=2.0, show_default=True, type=duration(), help="Timed seconds per measurement."
)
@click.option("--num-envs", type=count(2**31 - 1), help="Envs per vector (default: the env's vec.num_envs).")
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False), help="Also write the rows (with fingerprint) here."
)
def envs_sps(
    names: list[str] | None,
    threads: list[int] | None,
    seconds: float,
    num_envs: int | None,
    json_out: str | None,
) -> None:
    """Env-only agent-steps per second with random actions, per thread count.

    NAMES is a comma-separated list (default: every env). Prints SPS and the scaling efficiency
    SPS_T / (T * SPS_1).
    """
    from appliance import ocean
    from appliance.bench.envsps import scaling, table_rows

    check_out(json_out)
    threads = threads or [t for t in (1, 2) if t <= usable_cores()]
    names = [ocean.canonical(n) for n in names] if names is not None else None
    known = ocean.names()
    selected = names if names is not None else known
    for n in selected:
        if n not in known:
            raise click.BadParameter(f"unknown env {n!r}; known: {', '.join(known)}", param_hint="NAMES")
    rows = []
    for n in selected:
        default_envs, params = env_params(n, num_envs)  # a num_envs too big for memory is refused here
        rows += scaling(
            n,
            threads,
            num_envs=num_envs or default_envs,
            seconds=seconds,
            progress=lambda r: click.echo(
                f"  {r['env']:<10} {r['threads']:>3} threads  {r['sps'] / 1e6:8.3f} M SPS", err=True
            ),
            **params,
        )
    columns = ("env", "agents", "threads", "M SPS", "efficiency")
    print_table("env-only agent-steps per second (random actions)", columns, table_rows(rows), left=0)
    write_json(json_out, "envs-sps", {"seconds": seconds, "rows": rows})


# ----------------------------------------------------------------------------- vectorization


@cli.command("vector-bench", context_settings=CONTEXT)
@click.option(
    "--env", "env", default="cartpole", show_default=True, help="cartpole, a Gymnasium id, ocean:NAME, pufferlib:NAME or a PufferLib env folder."
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

    from appliance.bench import autotune as tuner
    from appliance.ocean import ocean_name
    from appliance.sysinfo import fingerprint, physical_cores

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
