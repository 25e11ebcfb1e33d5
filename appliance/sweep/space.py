"""The search space of a sweep: read, checked whole before any trial, and fitted to the config.

A space file (``appliance/defaults/sweep.yaml``, or ``--space FILE``) names config keys to vary,
the objective and the pruning rule. :func:`load_space` checks all of it before the first trial:
its keys (with a "did you mean"), types, finite numbers, ranges, and every choice and bound through
the config validation a trial's config goes through (:class:`Base`). The shipped space is fitted to
the config every trial starts from, so trial 0 (the config as given) always lies inside it; a
``--space FILE`` is taken as written.

A space file may come from elsewhere: it is read by :func:`appliance.config.read_yaml`, the bounded
reader of every shared YAML file (size, nesting, values through aliases), and every refusal is one
line naming the file and the key.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.config import Config, parse_overrides, read_yaml, resolve
from appliance.errors import ConfigError
from appliance.paths import defaults_dir

SECTIONS = ("vec", "train", "policy", "env")  # what a trial's config is made of
TOP_KEYS = ("objective", "space", "prune", "envs")
SPEC_KEYS = ("low", "high", "log", "int", "choices")
OBJECTIVE_KEYS = ("metric", "target", "window")
PRUNE_KEYS = ("warmup", "margin", "min_trials")


@dataclass
class Base:
    """What every trial's config starts from: the env, hardware profile, --config file, overrides."""

    env: str
    profile: str | None = None
    config_file: str | None = None
    overrides: list[str] = field(default_factory=list)

    def resolve(self, extra: Mapping[str, Mapping[str, Any]] | None = None) -> Config:
        layer = merge(parse_overrides(self.overrides), dict(extra or {}))
        return resolve(env=self.env, profile=self.profile, config_file=self.config_file, overrides=layer)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in (over or {}).items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def sections_of(cfg: Config) -> dict[str, dict[str, Any]]:
    """The trial-relevant sections of a config as plain JSON data (what the study stores)."""
    return json.loads(json.dumps({s: dict(cfg[s]) for s in SECTIONS}))


@dataclass
class Space:
    """What a sweep varies, what it maximizes and when it prunes (see ``defaults/sweep.yaml``)."""

    params: dict[str, dict[str, Any]]
    metric: str = "episode_return"
    target: float | None = None
    window: int = 5
    warmup: float = 0.3
    margin: float = 0.05
    min_trials: int = 2
    notes: list[str] = field(default_factory=list)  # how the shipped space was fitted to the config
    source: str = ""

    def distributions(self) -> dict[str, Any]:
        import optuna.distributions as d

        out: dict[str, Any] = {}
        for name, spec in self.params.items():
            if "choices" in spec:
                out[name] = d.CategoricalDistribution(list(spec["choices"]))
            elif spec.get("int"):
                out[name] = d.IntDistribution(int(spec["low"]), int(spec["high"]), log=bool(spec.get("log")))
            else:
                out[name] = d.FloatDistribution(
                    float(spec["low"]), float(spec["high"]), log=bool(spec.get("log"))
                )
        return out


def _keys(where: str, data: Any, known: tuple[str, ...]) -> dict[str, Any]:
    """``data`` as a mapping whose keys are all ``known`` (None is empty); else a one-line error."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping, not {type(data).__name__} {_short(data)}")
    for key in data:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean '{near[0]}'? " if near else ""
            raise ConfigError(f"{where}: unknown key {key!r}; {hint}valid: {', '.join(known)}")
    return data


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(where: str, value: Any, whole: bool = False) -> int | float:
    """A finite int or float (not a bool, not text); ``whole``: an int."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number, not {_short(value)}")
    if not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, not {value}")
    if whole:
        if not float(value).is_integer():
            raise ConfigError(f"{where} must be a whole number, not {value}")
        return int(value)
    return value


def _param(where: str, spec: Any) -> dict[str, Any]:
    """One space entry, checked and normalized: {choices: [...]} or {low, high, log, int}."""
    spec = _keys(where, spec, SPEC_KEYS)
    if "choices" in spec:
        if set(spec) - {"choices"}:
            raise ConfigError(f"{where}: choices go alone (no {', '.join(sorted(set(spec) - {'choices'}))})")
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: choices must be a non-empty list, not {_short(choices)}")
        for i, c in enumerate(choices):
            if c is not None and not isinstance(c, bool | int | float | str):
                raise ConfigError(
                    f"{where}: choice {i + 1} must be a number, text or a bool, not {_short(c)}"
                )
            if isinstance(c, float) and not math.isfinite(c):
                raise ConfigError(f"{where}: choice {i + 1} must be a finite number, not {c}")
        repeated = [c for i, c in enumerate(choices) if c in choices[:i]]
        if repeated:
            raise ConfigError(f"{where}: choice {repeated[0]!r} is listed twice")
        return {"choices": list(choices)}
    if "low" not in spec or "high" not in spec:
        raise ConfigError(f"{where} needs {{low, high}} (a range) or {{choices: [...]}}")
    for flag in ("log", "int"):
        if flag in spec and not isinstance(spec[flag], bool):
            raise ConfigError(f"{where}.{flag} must be true or false, not {_short(spec[flag])}")
    whole = bool(spec.get("int"))
    low, high = _number(f"{where}.low", spec["low"], whole), _number(f"{where}.high", spec["high"], whole)
    if not low < high:
        raise ConfigError(f"{where} needs low < high, got low {low} and high {high}")
    if spec.get("log") and low <= 0:
        raise ConfigError(f"{where}: a log range needs low > 0, got {low}")
    return {"low": low, "high": high, "log": bool(spec.get("log")), "int": whole}


def load_space(env: str, path: str | Path | None = None, base: Base | None = None) -> Space:
    """The search space for ``env``: the file's top level with its ``envs.<env>`` entry merged over.

    Checked whole, before any trial: keys, types, finite numbers, ranges and every choice and bound
    through the config validation of ``base`` (the env's defaults when not given). The shipped
    space (no ``path``) is fitted to ``base``'s config (see :func:`_fit`).
    """
    shipped = path is None
    path = Path(path) if path else defaults_dir() / "sweep.yaml"
    base = base or Base(env)
    data = _keys(str(path), read_yaml(path, "sweep space"), TOP_KEYS)
    envs = _keys(f"{path}: envs", data.get("envs"), tuple(str(k) for k in data.get("envs") or {}))
    own = envs.get(env)
    if own is not None and not isinstance(own, dict):
        raise ConfigError(f"{path}: envs.{env} must be a mapping, not {_short(own)}")
    merged = merge({k: v for k, v in data.items() if k != "envs"}, own or {})
    objective = _keys(f"{path}: objective", merged.get("objective"), OBJECTIVE_KEYS)
    prune = _keys(f"{path}: prune", merged.get("prune"), PRUNE_KEYS)
    raw = merged.get("space")
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(f"{path}: space must be a mapping of section.key entries, not {_short(raw)}")
    params: dict[str, dict[str, Any]] = {}
    for name, spec in (raw or {}).items():
        if spec is None:
            continue  # not swept (an env's entry can switch a key off)
        section, _, key = str(name).partition(".")
        if not key or section not in SECTIONS:
            raise ConfigError(f"{path}: space key {name!r} must be section.key (train, policy, vec or env)")
        params[str(name)] = _param(f"{path}: {name}", spec)
    if not params:
        raise ConfigError(f"{path}: 'space' names no parameter to sweep")
    metric = objective.get("metric", "episode_return")
    if not isinstance(metric, str) or not metric.strip():
        raise ConfigError(f"{path}: objective.metric must be the name of an env stat, not {_short(metric)}")
    target = objective.get("target")
    space = Space(
        params=params,
        metric=metric,
        target=None if target is None else float(_number(f"{path}: objective.target", target)),
        window=int(_number(f"{path}: objective.window", objective.get("window", 5), whole=True)),
        warmup=float(_number(f"{path}: prune.warmup", prune.get("warmup", 0.3))),
        margin=float(_number(f"{path}: prune.margin", prune.get("margin", 0.05))),
        min_trials=int(_number(f"{path}: prune.min_trials", prune.get("min_trials", 2), whole=True)),
        source=str(path),
    )
    if space.window < 1:
        raise ConfigError(f"{path}: objective.window must be at least 1 epoch, got {space.window}")
    if not 0 <= space.warmup <= 1:
        raise ConfigError(f"{path}: prune.warmup is a share of a trial's steps, 0 to 1, got {space.warmup}")
    if space.margin < 0:
        raise ConfigError(f"{path}: prune.margin must be 0 or more, got {space.margin}")
    if space.min_trials < 1:
        raise ConfigError(f"{path}: prune.min_trials must be at least 1, got {space.min_trials}")
    cfg = base.resolve()
    if shipped:
        space.notes = _fit(space.params, cfg)
    for name, spec in space.params.items():
        _check_values(space, name, spec, base, drop=shipped)
    return space


def _check_values(space: Space, name: str, spec: dict[str, Any], base: Base, drop: bool) -> None:
    """Every choice (or both bounds) of ``name`` through the config validation a trial goes through.
    ``drop``: a refused choice of the shipped space is left out (and noted) rather than refused."""
    section, _, key = name.partition(".")
    values = spec["choices"] if "choices" in spec else [spec["low"], spec["high"]]
    kept = []
    for value in values:
        try:
            base.resolve({section: {key: value}})
        except ConfigError as e:
            msg = str(e)
            prefix = f"--{section}.{key.replace('_', '-')} (from command line): "
            msg = msg[len(prefix) :] if msg.startswith(prefix) else msg
            if drop and "choices" in spec:
                space.notes.append(f"{name}: left out {value!r} ({msg})")
                continue
            what = "choice" if "choices" in spec else ("low" if value == spec["low"] else "high")
            raise ConfigError(f"{space.source}: {name}: {what} {value!r} is not valid here: {msg}") from None
        kept.append(value)
    if "choices" in spec:
        if not kept:
            raise ConfigError(f"{space.source}: {name}: no choice is valid for this config (see above)")
        spec["choices"] = kept


def _fit(params: dict[str, dict[str, Any]], cfg: Config) -> list[str]:
    """Fit the shipped space to ``cfg`` so the config as given lies inside it; returns what changed.

    A range is widened to hold the config's value. A ladder of sizes (choices, powers of two apart)
    is moved by the power of two that brings its nearest rung onto the value (breakout's 8,192 envs
    turn 64-512 into 1,024-8,192), or the value joins the list when no power of two does.
    """
    notes = []
    for name, spec in params.items():
        section, _, key = name.partition(".")
        value = cfg[section].get(key)
        if inside(spec, value):
            continue
        if "choices" in spec:
            before = list(spec["choices"])
            spec["choices"] = _ladder(before, value)
            notes.append(f"{name}: choices {before} -> {spec['choices']} (your config has {value})")
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            before = f"{spec['low']:g}-{spec['high']:g}"
            spec["low"], spec["high"] = min(spec["low"], value), max(spec["high"], value)
            notes.append(
                f"{name}: range {before} -> {spec['low']:g}-{spec['high']:g} (your config has {value:g})"
            )
    return notes


def inside(spec: dict[str, Any], value: Any) -> bool:
    if "choices" in spec:
        return value in spec["choices"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False  # e.g. 'auto' against a range of numbers
    return spec["low"] <= value <= spec["high"]


def _ladder(choices: list[Any], value: Any) -> list[Any]:
    numbers = all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in choices)
    if numbers and isinstance(value, int) and not isinstance(value, bool) and value > 0:
        for rung in sorted(choices, key=lambda c: abs(math.log(value / c))):
            shift = math.log2(value / rung)
            if shift.is_integer():
                moved = [c * 2.0**shift for c in choices]
                if all(m.is_integer() and m >= 1 for m in moved):
                    return [int(m) for m in moved]
    return [*choices, value]


def split_params(params: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    for name, spec in params.items():
        section, _, key = name.partition(".")
        yield section, key, spec


def trial_overrides(cfg: Config, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Sampled params as config sections; a minibatch larger than the batch is cut to the batch."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in params.items():
        section, _, key = name.partition(".")
        out.setdefault(section, {})[key] = value
    train, vec = out.get("train", {}), out.get("vec", {})
    horizon = int(train.get("bptt_horizon", cfg.train.bptt_horizon))
    envs = int(vec.get("num_envs", cfg.vec.num_envs))
    if "minibatch_size" in train and cfg.train.batch_size == "auto":
        train["minibatch_size"] = min(int(train["minibatch_size"]), envs * horizon)
    return out
