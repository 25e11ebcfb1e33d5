"""The ``puffer-bench`` command line.

Every command reports user errors (:class:`~appliance.errors.ApplianceError`) in one line on stderr
and exits with the error's code (2 for configuration errors), never with a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

import appliance
from appliance.errors import ApplianceError

CONTEXT = {"help_option_names": ["-h", "--help"]}
OVERRIDES = {"ignore_unknown_options": True, "allow_extra_args": True, **CONTEXT}


class _Group(click.Group):
    """A click group that turns ApplianceError into a one-line message and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApplianceError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(appliance.__version__, "-V", "--version", prog_name="puffer-bench")
def cli() -> None:
    """puffer-bench: how fast is this machine for reinforcement learning?

    Run a command with --help for its options. Config overrides use the form
    --section.key VALUE (e.g. --train.learning-rate 3e-4).
    """


def _split_env(args: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """``[ENV] [--section.key VALUE ...]``: the env is the first token if it is not an option."""
    if args and not args[0].startswith("-"):
        return args[0], list(args[1:])
    return None, list(args)


# ----------------------------------------------------------------------------- info


def _format_bytes(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the fingerprint as JSON.")
def info(as_json: bool) -> None:
    """Print this machine's fingerprint (CPU, RAM, OS, versions, GPUs)."""
    from appliance.sysinfo import fingerprint

    fp = fingerprint()
    if as_json:
        click.echo(json.dumps(fp, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="machine fingerprint", show_header=False, box=None)
    cpu = fp["cpu"]
    table.add_row("CPU", f"{cpu['model']} ({cpu['arch']})")
    table.add_row(
        "cores",
        f"{cpu['physical_cores']} physical, {cpu['logical_cores']} logical, {cpu['usable_cores']} usable",
    )
    table.add_row("RAM", _format_bytes(fp["ram_bytes"]))
    table.add_row("OS", fp["os"]["platform"])
    table.add_row("Python", fp["python"])
    for name, version in fp["versions"].items():
        table.add_row(name, str(version) if version else "-")
    git = fp["git"]
    table.add_row(
        "git", f"{git['commit'][:12]}{' (dirty)' if git['dirty'] else ''}" if git else "- (not a checkout)"
    )
    table.add_row("host", fp["host_hash"])
    for gpu in fp["gpus"]:
        link = f"PCIe gen{gpu['pcie_gen']} x{gpu['pcie_width']} (max gen{gpu['pcie_max_gen']} x{gpu['pcie_max_width']})"
        table.add_row(
            f"GPU {gpu['index']}",
            f"{gpu['name']}, {_format_bytes(gpu['memory_total_bytes'])}, {link}, "
            f"SM {gpu['sm_clock_max_mhz']} MHz max, {gpu['power_limit_w']} W limit",
        )
    if not fp["gpus"]:
        table.add_row("GPU", f"none ({fp['gpu_error']})")
    Console().print(table)


# ----------------------------------------------------------------------------- config


@cli.command(context_settings=OVERRIDES)
@click.option(
    "--gpu", "profile", metavar="PROFILE", help="Hardware profile from bench/profiles (e.g. 4090, h100, cpu)."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Your YAML config, applied after the profile.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def config(profile: str | None, config_file: str | None, as_json: bool, args: tuple[str, ...]) -> None:
    """Print the resolved config a run would use.

    \b
    puffer-bench config [ENV] [--gpu PROFILE] [--config FILE] [--section.key VALUE ...]
    e.g. puffer-bench config breakout --gpu 4090 --train.learning-rate 3e-4
    """
    from appliance.config import resolve

    env, overrides = _split_env(args)
    cfg = resolve(env=env, profile=profile, config_file=config_file, overrides=overrides)
    click.echo((cfg.to_json() if as_json else cfg.to_yaml()).rstrip("\n"))


# ----------------------------------------------------------------------------- envs


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"expected positive ints, got {text!r}")
    return values


def _env_params(name: str) -> tuple[int, dict[str, Any]]:
    """The env's default num_envs and parameters from its config YAML."""
    from appliance.config import resolve

    cfg = resolve(env=name)
    return cfg.vec.num_envs, dict(cfg.env)


@cli.group(invoke_without_command=True, context_settings=CONTEXT)
@click.pass_context
def envs(ctx: click.Context) -> None:
    """Ocean C envs: list them, watch one, measure their speed."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.table import Table

    from appliance.envs import available

    table = Table(title="Ocean envs")
    for col in ("env", "agents/env", "observation", "action", "bytes/agent-step"):
        table.add_column(col)
    for d in available():
        nvec = d["action_nvec"]
        action = f"Discrete({nvec[0]})" if len(nvec) == 1 else f"MultiDiscrete({nvec})"
        itemsize = 4 if d["obs_dtype"] == "float32" else 1
        table.add_row(
            d["name"],
            str(d["agents_per_env"]),
            f"{d['obs_dtype']}[{d['obs_size']}]",
            action,
            str(d["obs_size"] * itemsize),
        )
    Console().print(table)


@envs.command("show", context_settings=CONTEXT)
@click.argument("name")
@click.option("--frames", default=4, show_default=True, help="Random-policy steps to draw.")
@click.option("--gif", type=click.Path(dir_okay=False), help="Also write an animated GIF of --frames steps.")
@click.option("--seed", default=0, show_default=True)
def envs_show(name: str, frames: int, gif: str | None, seed: int) -> None:
    """Draw a few random-policy frames of env NAME in the terminal (and optionally a GIF)."""
    import numpy as np

    from appliance import envs as ocean
    from appliance.bench.envsps import random_actions

    _, params = _env_params(name)
    with ocean.make(name, num_envs=1, num_threads=1, seed=seed, **params) as vec:
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
        from PIL import Image

        scale = max(1, 256 // max(images[0].shape[:2]))
        pil = [Image.fromarray(np.kron(f, np.ones((scale, scale, 1), dtype=np.uint8))) for f in images]
        pil[0].save(gif, save_all=True, append_images=pil[1:], duration=80, loop=0)
        click.echo(f"wrote {len(pil)} frames to {gif}")


@envs.command("sps", context_settings=CONTEXT)
@click.argument("names", required=False)
@click.option("--threads", default="1,2", show_default=True, help="Comma-separated thread counts.")
@click.option("--seconds", default=2.0, show_default=True, help="Timed seconds per measurement.")
@click.option("--num-envs", type=int, help="Envs per vector (default: the env's vec.num_envs).")
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False),
    help="Also write the rows (with fingerprint) to this JSON file.",
)
def envs_sps(
    names: str | None, threads: str, seconds: float, num_envs: int | None, json_out: str | None
) -> None:
    """Env-only agent-steps per second with random actions, per thread count.

    NAMES is a comma-separated list (default: every env). Prints SPS and the scaling efficiency
    SPS_T / (T * SPS_1).
    """
    from rich.console import Console
    from rich.table import Table

    from appliance import envs as ocean
    from appliance.bench.envsps import scaling

    thread_counts = _int_list(threads)
    selected = [n for n in names.split(",") if n] if names else ocean.names()
    known = ocean.names()
    for n in selected:
        if n not in known:
            raise click.BadParameter(f"unknown env {n!r}; known: {', '.join(known)}", param_hint="NAMES")
    console = Console(stderr=True)
    rows = []
    for n in selected:
        default_envs, params = _env_params(n)
        count = num_envs or default_envs
        rows += scaling(
            n,
            thread_counts,
            num_envs=count,
            seconds=seconds,
            progress=lambda r: console.print(
                f"  {r['env']:<10} {r['threads']:>3} threads  {r['sps'] / 1e6:8.3f} M SPS"
            ),
            **params,
        )
    table = Table(title="env-only agent-steps per second (random actions)")
    for col in ("env", "agents", "threads", "M SPS", "efficiency"):
        table.add_column(col, justify="right")
    for r in rows:
        eff = "-" if r["efficiency"] is None else f"{100 * r['efficiency']:.0f}%"
        table.add_row(r["env"], str(r["num_agents"]), str(r["threads"]), f"{r['sps'] / 1e6:.3f}", eff)
    Console().print(table)
    if json_out:
        from appliance.report_io import write_json_atomic
        from appliance.sysinfo import fingerprint

        write_json_atomic(
            json_out, {"kind": "envs-sps", "fingerprint": fingerprint(), "seconds": seconds, "rows": rows}
        )
        click.echo(f"wrote {json_out}")


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="puffer-bench")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
