"""The shipped YAMLs checked against the layers they sit in: every env (Ocean envs, Gymnasium ids with
a YAML of their own, each family) resolved on every hardware profile and on none, as
:func:`~appliance.config.resolve` does for ``train`` (a profile) and for ``envs sps`` (none).

A shipped value is *dead* when it can never apply: in every resolution it takes part in, a later
layer replaces it. A profile's value (a hardware profile's, or an env YAML's ``profiles.NAME``) is
also dead where it only restates the value beneath it: a profile holds what a class of machine needs
changed. An env's or family's own value equal to default.yaml's is not: it states the recipe the env
was measured with (breakout.ini's ``bptt_horizon 64``), which a change of default.yaml must not move.
tests/test_config_dead_values.py keeps the shipped YAMLs free of dead values.

``python -m appliance.config.audit snapshot FILE`` writes every resolution as JSON (to compare before
and after an edit of the YAMLs: ``... compare BEFORE AFTER``); ``dead`` lists the dead values."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from appliance.config.build import Config, resolve
from appliance.config.families import CHOICES as FAMILIES
from appliance.config.files import env_names, profile_names
from appliance.config.layers import (
    COMMAND_LINE,
    CONFIG_FILE,
    DEFAULT,
    DERIVED,
    ENV_PROFILE,
    PARAMSPEC,
    PROFILE,
)
from appliance.paths import defaults_dir
from appliance.sysinfo.cpu import CPU_KINDS, acting_as

NOT_SHIPPED = (DEFAULT, PARAMSPEC, DERIVED, CONFIG_FILE, COMMAND_LINE)  # the declared defaults are the schema
PROFILE_META = {("bench", "profile"), ("bench", "expected_gpu")}  # set from a profile's name and gpu
FAMILY_PROBE = "CartPole-v1"  # any Gymnasium id: a family named with --family is applied as it is


def resolutions() -> Iterator[tuple[str, str | None, str | None, str | None]]:
    """(env, profile, family, CPU kind) for every env with shipped defaults, on every profile and on
    none; the cpu profile on each kind of CPU (an env's ``profiles.cpu.KIND``)."""
    envs: list[tuple[str, str | None]] = [(name, None) for name in env_names()]
    envs += [(p.stem, None) for p in sorted((defaults_dir() / "gymnasium").glob("*.yaml"))]
    envs += [(FAMILY_PROBE, f) for f in FAMILIES if f not in ("auto", "none")]
    for env, family in envs:
        for profile in [None, *profile_names()]:
            for kind in CPU_KINDS if profile == "cpu" else (None,):
                yield env, profile, family, kind


def _name(env: str, profile: str | None, family: str | None, kind: str | None = None) -> str:
    return (
        f"{env} --gpu {profile or '(none)'}"
        + (f" --family {family}" if family else "")
        + (f" (a CPU of the {kind} kind)" if kind else "")
    )


def _resolve(env: str, profile: str | None, family: str | None, kind: str | None) -> Config:
    with acting_as(kind) if kind else contextlib.nullcontext():
        return resolve(env=env, profile=profile, family=family)


def resolve_all() -> dict[str, Config]:
    return {_name(*r): _resolve(*r) for r in resolutions()}


def snapshot() -> dict[str, Any]:
    """Every resolution's values (not where they came from): what each command would run."""
    out = {}
    for name, cfg in resolve_all().items():
        data = cfg.to_dict()
        data.pop("sources")
        out[name] = data
    return out


def dead_values(configs: dict[str, Config] | None = None) -> list[str]:
    """``layer: section.key = value`` for each shipped value no resolution needs, with why."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    effective: set[tuple[str, str, str]] = set()
    for name, cfg in (configs or resolve_all()).items():
        for (section, key), steps in cfg.history.items():
            for i, (label, value) in enumerate(steps):
                if label.startswith(NOT_SHIPPED) or (section, key) in PROFILE_META:
                    continue
                entry = (label, section, key)
                if i < len(steps) - 1:
                    seen.setdefault(entry, []).append(f"is replaced by {steps[-1][0]} in {name}")
                elif label.startswith((PROFILE, ENV_PROFILE)) and steps[i - 1][1] == value:
                    seen.setdefault(entry, []).append(f"restates {steps[i - 1][0]} beneath it in {name}")
                else:
                    effective.add(entry)
    return [
        f"{label}: {section}.{key} never applies: it {why[0]} (and in all {len(why)} resolutions it is in)"
        for (label, section, key), why in sorted(seen.items())
        if (label, section, key) not in effective
    ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["snapshot"] and len(args) == 2:
        Path(args[1]).write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {args[1]}: {sum(1 for _ in resolutions())} resolutions")
        return 0
    if args[:1] == ["compare"] and len(args) == 3:
        before, after = (json.loads(Path(a).read_text(encoding="utf-8")) for a in args[1:])
        differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        for k in differ:
            print(f"differs: {k}")
        print(f"{len(before)} resolutions before, {len(after)} after, {len(differ)} differ")
        return 1 if differ else 0
    if args == ["dead"]:
        dead = dead_values()
        print("\n".join(dead) if dead else "no dead values")
        return 1 if dead else 0
    print(
        "usage: python -m appliance.config.audit snapshot FILE | compare BEFORE AFTER | dead", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
