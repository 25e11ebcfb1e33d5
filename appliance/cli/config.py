"""The config command: the resolved config a run would use, each value's layer, every key explained."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
import yaml

from appliance.cli.common import (
    OVERRIDES,
    PROFILE,
    PROFILE_HELP,
    cli,
    split_env,
)
from appliance.redact import redact, redact_tree

if TYPE_CHECKING:
    from appliance.config import Config

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
    from appliance.config.runs import run_config

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
