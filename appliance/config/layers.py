"""One layer of a config (a YAML file, a profile, the command line) checked key by key against the
schema and merged in: unknown keys and sections named with the nearest valid one, values typed,
choices and ranges checked."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from appliance.config.files import defaults
from appliance.config.schema import CHOICES, RANGES, SECTIONS, Range, _type_name, check_value, coerce
from appliance.errors import ConfigError

# ----------------------------------------------------------------------------- the order

# Each layer as --show-origin names it; DERIVED: a value resolve sets itself (a Python env's process
# backend), right after the defaults.
DEFAULT, PARAMSPEC, ENV_YAML, PROFILE, ENV_PROFILE, FAMILY, RESUMED, CONFIG_FILE, COMMAND_LINE, DERIVED = (
    "built-in default",
    "env ParamSpec",
    "env YAML",
    "hardware profile",
    "env YAML for the profile",
    "family YAML",
    "the resumed run's config",
    "--config file",
    "command line",
    "set by resolve",
)


@dataclass(frozen=True)
class Layer:
    """One layer of :func:`~appliance.config.resolve`: its name (as ``--show-origin`` prints it),
    where its values come from, and what it holds."""

    name: str
    source: str
    holds: str


# The layers in the order resolve applies them, later wins: declared here once; docs/configuration.md
# (its "Layers" list), default.yaml's header and `config --explain` are made from it.
ORDER: tuple[Layer, ...] = (
    Layer(
        DEFAULT,
        "appliance/config/keys.py, rendered as appliance/defaults/default.yaml",
        "every key: its type, default, range or choices and meaning",
    ),
    Layer(
        PARAMSPEC,
        "envs/ENV.h (read from appliance._ocean)",
        "an Ocean env's parameters: the `env` section's keys, types, defaults and ranges",
    ),
    Layer(
        ENV_YAML,
        "appliance/defaults/envs/ENV.yaml",
        "the env's tuned values, if any (a Gymnasium id: appliance/defaults/gymnasium/ID.yaml, whose `env` "
        "section defines that section)",
    ),
    Layer(
        PROFILE,
        "bench/profiles/PROFILE.yaml",
        "sizes for a class of machine (`--gpu PROFILE`, else detected from the GPU); a GPU no measured "
        "profile names gets its architecture's (`ampere`, `ada`, `hopper`, ...), derived from its memory "
        "and compute capability (appliance/config/hardware.py)",
    ),
    Layer(
        ENV_PROFILE,
        "`profiles.PROFILE` in the env's YAML",
        "the env's own values on that class of machine (first those of the measured profile a profile is "
        "like: h200 like h100, a derived one like the measured profile of its memory)",
    ),
    Layer(
        FAMILY,
        "appliance/defaults/families/FAMILY.yaml",
        "a Gymnasium id's or import path's family defaults (classic control, ...) when it has no YAML "
        "of its own; after the profile: a family's sizes are what its learning needs",
    ),
    Layer(RESUMED, "RUN/config.yaml", "with `train --resume RUN`: the run's own config"),
    Layer(CONFIG_FILE, "`--config FILE`", "the user's YAML (e.g. from autotune --save)"),
    Layer(
        COMMAND_LINE,
        "`--section.key VALUE`",
        "command-line overrides (dashes or underscores: `--train.learning-rate 3e-4`)",
    ),
)
# Every name --show-origin may print: the layers, then the values resolve derives itself.
LAYERS = (*(layer.name for layer in ORDER), DERIVED)


def order_text(indent: str = "") -> list[str]:
    """The layers as numbered lines, later wins (for a YAML header or a docstring)."""
    return [f"{indent}{i}. {layer.name}: {layer.source}" for i, layer in enumerate(ORDER, 1)]


# ----------------------------------------------------------------------------- layers


def _cli_name(section: str, key: str) -> str:
    return f"--{section}.{key.replace('_', '-')}"


def _nearest(name: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def unknown_name(kind: str, name: str, known: list[str], plural: str, also: str = "") -> ConfigError:
    """ "unknown env 'breakuot'; did you mean 'breakout'? known envs: ..." as a ConfigError."""
    guess = _nearest(name, known)
    hint = f"did you mean '{guess}'? " if guess else ""
    return ConfigError(f"unknown {kind} '{name}'; {hint}{plural}: {', '.join(known)}{also}")


def _nearest_strict(name: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.85)
    return matches[0] if matches else None


# puffer-bench train's own flags, which users also try as config keys (--train.tensorboard)
TRAIN_FLAGS = {
    "tensorboard": "--tensorboard",
    "wandb": "--wandb",
    "run_id": "--run-id",
    "resume": "--resume",
    "stop_steps": "--stop-steps",
    "no_dashboard": "--no-dashboard",
    "dashboard": "--no-dashboard",
    "family": "--family",
    "report": "--report",
    "nproc": "--nproc",
}


def _unknown_key(section: str, key: str, schema: Mapping[str, Mapping[str, Any]], source: str) -> ConfigError:
    cli = source == "command line"

    def name(s: str, k: str) -> str:
        return _cli_name(s, k) if cli else f"{s}.{k}"

    shown = name(section, key)
    flag = TRAIN_FLAGS.get(key.replace("-", "_"))
    if flag and cli and key not in schema.get(section, {}):  # --train.tensorboard: a flag, not a key
        return ConfigError(
            f"unknown config key {shown} (from {source}); {flag} is a flag of puffer-bench train, not a "
            f"config key: use {flag}"
        )
    if section not in schema:
        guess = _nearest(section, SECTIONS)
        hint = f"did you mean '{guess}'? " if guess else ""
        return ConfigError(
            f"unknown config section '{section}' (from {source}); {hint}valid sections: {', '.join(SECTIONS)}"
        )
    # the same section first; then the same key name in another section (--vec.learning-rate)
    guess = _nearest(key, schema[section])
    other = (
        None
        if guess
        else next(
            (name(s, m) for s in SECTIONS if s != section for m in [_nearest_strict(key, schema[s])] if m),
            None,
        )
    )
    if guess or other:
        hint = f"did you mean {name(section, guess) if guess else other}?"
    elif schema[section]:
        hint = f"valid keys in {section}: {', '.join(sorted(schema[section]))}"
    else:
        hint = f"section '{section}' has no keys here" + (
            " (env parameters come with an env: puffer-bench config ENV)" if section == "env" else ""
        )
    return ConfigError(f"unknown config key {shown} (from {source}); {hint}")


def _apply(
    data: dict[str, dict[str, Any]],
    layer: Mapping[str, Any],
    schema: Mapping[str, Mapping[str, Any]],
    source: str,
    ranges: Mapping[tuple[str, str], Range] = RANGES,
) -> None:
    """Check ``layer`` against ``schema`` (and numbers against ``ranges``) and merge it into ``data`` in place."""
    for section, values in layer.items():
        if section not in schema:
            raise _unknown_key(str(section), "", schema, source)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"section '{section}' in {source} must be a mapping of keys, not {values!r}")
        for key, value in values.items():
            key = str(key)
            if key not in schema[section]:
                raise _unknown_key(section, key, schema, source)
            default = schema[section][key]
            name = _cli_name(section, key) if source == "command line" else f"{section}.{key}"
            choices = CHOICES.get((section, key))
            if choices is not None:
                if value not in choices:
                    guess = _nearest(str(value), choices)
                    hint = f"did you mean '{guess}'? " if guess else ""
                    raise ConfigError(
                        f"{name} (from {source}): {value!r} is not a valid choice; {hint}choose one of: {', '.join(choices)}"
                    )
                data[section][key] = value
                continue
            try:
                data[section][key] = coerce(value, default)
            except ValueError:
                raise ConfigError(
                    f"{name} (from {source}): expected {_type_name(default)}, got {value!r}"
                ) from None
            check_value(section, key, data[section][key], f"{name} (from {source})", ranges)


def check_layer(layer: Mapping[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """``layer`` (sections of keys, as in a config file) typed and checked like a ``--config`` file's
    (types, choices, ranges; not env parameters), without merging it into a config: the values as
    typed, section by section. For what a run folder or checkpoint says it was trained with."""
    base = defaults()
    schema = {s: dict(base.get(s) or {}) for s in SECTIONS}
    data = {s: dict(v) for s, v in schema.items()}
    _apply(data, layer, schema, source)
    return {str(s): {str(k): data[str(s)][str(k)] for k in (v or {})} for s, v in layer.items()}


def parse_overrides(args: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Turn ``['--train.learning-rate', '3e-4', '--vec.zero-copy=false']`` into a layer.

    Values stay strings here; :func:`resolve` types them. A flag with no value (``--train.compile``)
    means ``true``; it is checked to be a bool key when typed.
    """
    tokens = list(args)
    layer: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or len(token) <= 2:
            raise ConfigError(
                f"unexpected argument {token!r}; overrides look like --section.key VALUE (e.g. --train.learning-rate 3e-4)"
            )
        name, sep, value = token[2:].partition("=")
        if not sep:
            if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                value = tokens[i + 1]
                i += 1
            else:
                value = "true"
        i += 1
        section, dot, key = name.partition(".")
        if not dot or not key:
            raise ConfigError(
                f"override --{name} needs the form --section.key VALUE (sections: {', '.join(SECTIONS)})"
            )
        layer.setdefault(section.replace("-", "_"), {})[key.replace("-", "_")] = value
    return layer
