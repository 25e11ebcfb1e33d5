"""An Ocean env's section of the config, from the one place its parameters are defined: the env's C
``ParamSpec`` table (``envs/<name>.h``: name, type, default, range), read through
:func:`appliance.ocean.params`. The env's YAML (``defaults/envs/<name>.yaml``) may only set tuned
values in that schema; :func:`yaml_problems` says where it does more (tests/test_env_params.py)."""

from __future__ import annotations

from typing import Any

from appliance.config.files import env_yaml, read_yaml
from appliance.config.schema import Range, coerce


def env_defaults(env: str) -> dict[str, int | float]:
    """The env section before any layer: every parameter at its C default, typed as C declares it."""
    from appliance import ocean

    return {key: p.default for key, p in ocean.params(env).items()}


def env_ranges(env: str) -> dict[tuple[str, str], Range]:
    """The C range of every parameter, keyed like :data:`~appliance.config.schema.RANGES`."""
    from appliance import ocean

    return {("env", key): Range(p.low, p.high) for key, p in ocean.params(env).items()}


def yaml_problems(env: str) -> list[str]:
    """What the env's YAML gets wrong about its ``env:`` section, one line each: a key the ParamSpec
    does not have, a value of the wrong type or outside the C range, or one that merely repeats the
    C default (the YAML holds tuned values only). Profiles' ``env`` sections included."""
    from appliance import ocean

    path = env_yaml(env)
    if path is None:
        return []
    layer = read_yaml(path, "env config")
    sections: list[tuple[str, Any]] = [("env", layer.get("env"))]
    for profile, values in (layer.get("profiles") or {}).items():
        if isinstance(values, dict):
            sections.append((f"profiles.{profile}.env", values.get("env")))
    spec, problems = ocean.params(env), []
    for where, values in sections:
        for key, value in (values or {}).items():
            name = f"{path.name}: {where}.{key}"
            p = spec.get(str(key))
            if p is None:
                problems.append(f"{name} is not a parameter of {env} (its ParamSpec has: {', '.join(spec)})")
                continue
            try:
                typed = coerce(value, p.default)
            except ValueError:
                problems.append(f"{name} = {value!r} is not {'an int' if p.type is int else 'a float'}")
                continue
            if not Range(p.low, p.high).contains(typed):
                problems.append(f"{name} = {value!r} is outside the C range [{p.low:g}, {p.high:g}]")
            elif where == "env" and typed == p.default:
                problems.append(f"{name} = {value!r} repeats the C default; remove it from the YAML")
    return problems
