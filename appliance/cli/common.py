"""What every command shares: the click group, one-line errors, option parsing and table printing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

import appliance
from appliance.errors import ApplianceError

CONTEXT = {"help_option_names": ["-h", "--help"]}
OVERRIDES = {"ignore_unknown_options": True, "allow_extra_args": True, **CONTEXT}
PROFILE_HELP = "Hardware profile from bench/profiles (e.g. cpu, 4090, h100; default: detected)."


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


def pick_profile(given: str | None) -> str:
    """The hardware profile a command uses: ``--gpu NAME`` if given, else detected from this machine's
    GPUs the way ``run`` does (``cpu`` without a GPU)."""
    if given:
        return given
    from appliance.config import detect_profile
    from appliance.sysinfo import gpu_info

    return detect_profile(gpu_info()[0])


def split_env(args: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """``[ENV] [--section.key VALUE ...]``: the env is the first token if it is not an option."""
    if args and not args[0].startswith("-"):
        return args[0], list(args[1:])
    return None, list(args)


def print_table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]], left: int = 1) -> None:
    """A rich table: the first ``left`` columns left-aligned, the rest right-aligned."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < left else "right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def check_out(path: str | None, option: str = "--json") -> None:
    """Refuse an output file that could not be written, before the work that would fill it."""
    if path:
        from pathlib import Path

        from appliance.errors import ConfigError
        from appliance.report_io import unwritable

        problem = unwritable(Path(path).parent)
        if problem:
            raise ConfigError(f"{option} {path}: {problem}")


def write_json(path: str | None, kind: str, data: dict[str, Any]) -> None:
    """Optionally save a command's rows with this machine's fingerprint, atomically."""
    if path:
        from appliance.report_io import write_json_atomic
        from appliance.sysinfo import fingerprint

        write_json_atomic(path, {"kind": kind, "fingerprint": fingerprint(), **data})
        click.echo(f"wrote {path}")


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"expected positive ints, got {text!r}")
    return values


def env_params(name: str) -> tuple[int, dict[str, Any]]:
    """The env's default num_envs and parameters from its config YAML."""
    from appliance.config import resolve

    cfg = resolve(env=name)
    return cfg.vec.num_envs, dict(cfg.env)
