"""What a config value may be, as the checks read it: the sections, the keys with a fixed set of
choices, the range of every number (:data:`RANGES`), each key's meaning, all made from the
declarations of :mod:`~appliance.config.keys`; and the typing of values from YAML and the command
line (the default of a key fixes its type)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import yaml

from appliance.config.files import strict_load
from appliance.config.keys import AUTO, SECTIONS, Range, declared
from appliance.errors import ConfigError

# The tables the checks read, each made from the declarations of appliance/config/keys.py (where a
# key is declared once: type, default, range or choices, meaning).
_DECLARED = declared()
# String keys that take one of a fixed set of values (checked with a "did you mean"): a Literal type.
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    (d.section, d.key): d.choices for d in _DECLARED if d.choices is not None
}
# The range of every number (a list's range applies to each element), checked for every layer as it
# is applied.
RANGES: dict[tuple[str, str], Range] = {(d.section, d.key): d.valid for d in _DECLARED if d.valid is not None}
# What each key means, section by section, one line each (`puffer-bench config --explain` and
# docs/configuration.md). The env section's keys are an env's own (its ParamSpec, or keyword arguments
# for gymnasium.make), described by `puffer-bench envs show ENV`.
MEANINGS: dict[str, dict[str, str]] = {
    s: {d.key: d.meaning for d in _DECLARED if d.section == s} for s in SECTIONS
}
# String keys and lists that must not be empty (paths, thread counts).
NON_EMPTY = {(d.section, d.key) for d in _DECLARED if d.non_empty}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


# ----------------------------------------------------------------------------- typing


def _type_name(default: Any) -> str:
    if default == AUTO:
        return "'auto' or a number"
    return {bool: "a bool", int: "an int", float: "a float", str: "a string", list: "a list"}.get(
        type(default), type(default).__name__
    )


def _number(value: Any) -> int | float | None:
    """Parse ints and floats, including strings like '3e-4' that YAML 1.1 leaves as text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _whole(number: int | float) -> bool:
    """An int, or a float with no fraction (float() of a 400-digit int would overflow)."""
    return isinstance(number, int) or number.is_integer()


def coerce(value: Any, default: Any) -> Any:
    """Convert ``value`` to the type of ``default``; raise ValueError if it cannot be."""
    if default == AUTO:
        if isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
        number = _number(value)
        if number is None:
            raise ValueError
        return int(number) if _whole(number) else number
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError
    if isinstance(default, int):
        number = _number(value)
        if number is None or not _whole(number):
            raise ValueError
        return int(number)
    if isinstance(default, float):
        number = _number(value)
        if number is None:
            raise ValueError
        return float(number)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError
        return value
    if isinstance(default, list):
        if isinstance(value, str):
            text = value.strip()
            try:
                value = strict_load(text) if text.startswith("[") else [v for v in text.split(",") if v]
            except (yaml.YAMLError, RecursionError):  # '[1' is not a list: the caller names the key
                raise ValueError from None
        if not isinstance(value, list):
            raise ValueError
        if default:
            return [coerce(v, default[0]) for v in value]
        return value
    raise ValueError


def check_value(
    section: str,
    key: str,
    value: Any,
    name: str | None = None,
    ranges: Mapping[tuple[str, str], Range] = RANGES,
) -> None:
    """Raise a ConfigError if a typed value is outside its range in ``ranges`` (:data:`RANGES`, and an
    Ocean env's parameter ranges while its config is resolved), or is an empty path or list."""
    name = name or f"{section}.{key}"
    if (section, key) in NON_EMPTY and (value == [] or (isinstance(value, str) and not value.strip())):
        raise ConfigError(f"{name}: must not be empty")
    valid = ranges.get((section, key))
    if valid is None:
        return
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue  # 'auto', or a type error reported by coerce
        if not valid.contains(v):
            what = (
                "is not a finite number"
                if isinstance(v, float) and not math.isfinite(v)
                else "is out of range"
            )
            kind = "an int" if isinstance(v, int) else "a number"
            shown = repr(v) if len(repr(v)) <= 30 else f"{str(v)[:12]}... ({len(str(v))} digits)"
            raise ConfigError(f"{name}: {shown} {what}; expected {kind} {valid}")
