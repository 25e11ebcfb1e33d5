"""The envs commands: list the Ocean envs, build a PufferLib 4.0-format one, watch one, measure their speed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from appliance.cli.common import (
    CONTEXT,
    IntList,
    NameList,
    check_out,
    cli,
    count,
    duration,
    env_params,
    print_table,
    usable_cores,
    write_json,
    write_out,
)

if TYPE_CHECKING:
    pass

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
@click.option(
    "--spaces",
    type=click.Path(dir_okay=False),
    help="A PufferLib 3.0 env's spaces file (default: NAME.spaces.ini or spaces.ini beside binding.c).",
)
@click.option("--force", is_flag=True, help="Build again even if this source hash is built.")
def envs_build(path: str, ini: str | None, raylib: str | None, spaces: str | None, force: bool) -> None:
    """Compile a PufferLib env folder (ocean/NAME/) against our runtime, as env pufferlib:NAME.

    PufferLib 4.0's format builds as it is; the 3.0 format (env_binding.h) also needs its spaces,
    which its NAME.py declares (--spaces; docs/envs.md). Cached per hash of its sources and ini;
    afterwards `train pufferlib:NAME`, `envs sps pufferlib:NAME`.
    """
    from appliance import pufferlib_envs

    built = pufferlib_envs.build(path, ini=ini, raylib=raylib, force=force, spaces=spaces)
    meta = built.meta
    click.echo(f"built {built.name}: {built.library}")
    if meta.get("spaces"):
        sp = meta["spaces"]
        sizes = sp["action_sizes"]
        acts = (
            f"Box({len(sizes)})"
            if all(n == 1 for n in sizes)
            else f"{'Discrete' if len(sizes) == 1 else 'MultiDiscrete'}({sizes[0] if len(sizes) == 1 else sizes})"
        )
        fixed = f"; fixed by them: {', '.join(sp['fixed'])}" if sp["fixed"] else ""
        click.echo(f"  PufferLib 3.0 format, spaces from {sp['file']}: {sp['obs_dtype']}[{sp['obs_size']}], {acts}, "
                   f"{sp['agents']} agent(s) an env{fixed}")  # fmt: skip
    click.echo(
        f"  kwargs from {meta.get('ini') or 'no ini found (the env reads none)'}: {', '.join(meta['params']) or 'none'}"
    )
    if meta.get("skipped_env_keys"):
        click.echo(
            f"  [env] keys with text values, not passed (kwargs are numbers): {', '.join(meta['skipped_env_keys'])}"
        )
    if meta.get("action_mask"):
        click.echo(
            "  MY_ACTION_MASK: each observation ends with the action mask; the policy samples only allowed actions"
        )
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
