"""Layered, typed configuration.

Layers, later wins::

    appliance/defaults/default.yaml        every key and its type
    appliance/defaults/envs/<env>.yaml     the env's parameters (the ``env`` section) and tuned values
    bench/profiles/<profile>.yaml          sizes for a class of machine (``--gpu 4090``)
    profiles.<profile> in the env's YAML   the env's own values on that class of machine
    --config FILE                          the user's YAML
    --section.key VALUE                    command-line overrides (dashes or underscores)

The default of a key fixes its type; every layer is checked against it, and a bad key or value is a
:class:`~appliance.errors.ConfigError` that names the key, where it came from, the expected type and
the nearest valid key. Every number is also checked against its range in :data:`RANGES` (NaN and
infinity never pass), an Ocean env's parameters against the env's own ranges, and the buffers a run
would allocate against the memory available: all when the config is resolved, before any env,
worker or Ray cluster starts. The result is a plain nested dict (:meth:`Config.to_dict`) with
attribute access on top (``cfg.train.learning_rate``).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from appliance.errors import ConfigError
from appliance.paths import data_dir, defaults_dir
from appliance.report_io import read_bounded

SECTIONS = ("vec", "train", "policy", "env", "bench")
AUTO = "auto"
# String keys that take one of a fixed set of values (checked with a "did you mean").
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("vec", "backend"): ("native", "serial", "multiprocessing", "ray"),
    ("train", "device"): ("auto", "cpu", "cuda"),
    ("train", "optimizer"): ("adam", "muon"),
    ("train", "precision"): ("float32", "bfloat16"),
    ("train", "engine"): ("auto", "on", "off"),
    ("policy", "core"): ("mlp", "lstm", "mingru"),
    ("policy", "encoder"): ("auto", "linear", "onehot", "cnn"),
    ("policy", "init"): ("pufferlib", "cleanrl"),
    ("bench", "suite"): ("quick", "full"),
}


@dataclass(frozen=True)
class Range:
    """The valid values of a number: ``low``/``high`` (None: unbounded), each bound included unless
    ``*_open``. Every value must also be finite (no NaN or infinity)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        def bound(x: float) -> str:
            return f"{int(x):,}" if _whole(x) and abs(x) >= 10_000 else f"{x:g}"

        low = None if self.low is None else f"{'>' if self.low_open else '>='} {bound(self.low)}"
        high = None if self.high is None else f"{'<' if self.high_open else '<='} {bound(self.high)}"
        return " and ".join(b for b in (low, high) if b) or "finite"


POSITIVE = Range(0, None, low_open=True)
NON_NEGATIVE = Range(0, None)
AT_LEAST_1 = Range(1, None)
UNIT = Range(0, 1)
INT32 = 2**31 - 1
# The range of every number in default.yaml (a list's range applies to each element); a new numeric
# key needs an entry here (tests/test_config.py checks). Checked for every layer as it is applied.
RANGES: dict[tuple[str, str], Range] = {
    ("vec", "num_envs"): Range(1, INT32),
    ("vec", "num_threads"): Range(1, 4096),
    ("vec", "num_workers"): Range(1, 4096),
    ("vec", "batch_size"): Range(1, INT32),
    ("vec", "recv_timeout"): Range(0, 1e6, low_open=True),
    ("train", "seed"): Range(0, 2**63 - 1),
    ("train", "total_timesteps"): AT_LEAST_1,
    ("train", "learning_rate"): Range(0, 10, low_open=True),
    ("train", "adam_beta1"): Range(0, 1, high_open=True),
    ("train", "adam_beta2"): Range(0, 1, high_open=True),
    ("train", "adam_eps"): Range(0, 1, low_open=True),
    ("train", "gamma"): UNIT,
    ("train", "gae_lambda"): UNIT,
    ("train", "vtrace_rho_clip"): POSITIVE,
    ("train", "vtrace_c_clip"): NON_NEGATIVE,  # 0: one-step TD errors only (PufferLib's go.ini)
    ("train", "prio_alpha"): NON_NEGATIVE,
    ("train", "prio_beta0"): UNIT,
    ("train", "clip_coef"): POSITIVE,
    ("train", "vf_coef"): NON_NEGATIVE,
    ("train", "vf_clip_coef"): POSITIVE,
    ("train", "ent_coef"): NON_NEGATIVE,
    ("train", "max_grad_norm"): POSITIVE,
    ("train", "update_epochs"): Range(1, 10_000),
    ("train", "bptt_horizon"): Range(1, 65_536),
    ("train", "buffers"): Range(1, 256),
    ("train", "batch_size"): AT_LEAST_1,
    ("train", "minibatch_size"): AT_LEAST_1,
    ("train", "max_minibatch_size"): AT_LEAST_1,
    ("train", "reward_clamp"): POSITIVE,
    ("train", "checkpoint_interval"): AT_LEAST_1,
    ("policy", "hidden_size"): Range(1, 65_536),
    ("bench", "repeats"): Range(1, 1000),
    ("bench", "seconds"): Range(0, 1e6, low_open=True),
    ("bench", "threads"): Range(1, 4096),
}
# String keys that must not be empty (paths).
NON_EMPTY = {("train", "data_dir"), ("bench", "out")}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


# ----------------------------------------------------------------------------- files


MAX_YAML_BYTES = 4 * 2**20  # configs, suites, profiles and sweep spaces are a few KiB
MAX_YAML_DEPTH = 32
MAX_YAML_VALUES = 1_000_000  # after aliases: a "billion laughs" file expands past it


def read_yaml(path: Path, what: str = "config file") -> dict[str, Any]:
    """Read a YAML mapping; a missing file, bad YAML or a non-mapping is a ConfigError.

    These files may come from elsewhere (a suite or config someone shared), so the file is bounded
    (:data:`MAX_YAML_BYTES`), and so is what it holds: nesting (:data:`MAX_YAML_DEPTH`) and values
    counted through aliases (:data:`MAX_YAML_VALUES`). Every refusal is one line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    raw = read_bounded(path, what, ConfigError, MAX_YAML_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{what} {path} is not UTF-8 text: byte 0x{raw[e.start]:02x} on line {line}; save it as UTF-8"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(f"bad YAML in {path}: {where}{e.problem or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"bad YAML in {path}: {e}") from None
    except RecursionError:  # the parser recurses per level of nesting
        raise ConfigError(f"{what} {path} nests deeper than {MAX_YAML_DEPTH} levels: refused") from None
    except ValueError as e:  # a value YAML types but Python refuses (an int of 5,000 digits)
        raise ConfigError(f"bad YAML in {path}: {str(e).splitlines()[0] if str(e) else e!r}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping of sections, not a {type(data).__name__}")
    _check_size(data, path, what)
    return data


def _check_size(data: Any, path: Path, what: str) -> None:
    """Refuse nesting beyond :data:`MAX_YAML_DEPTH` and more than :data:`MAX_YAML_VALUES` values
    (counted as a reader walking the data would meet them: an alias counts each time it is used)."""
    stack, seen = [(data, 1)], 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise ConfigError(
                f"{what} {path} holds more than {MAX_YAML_VALUES:,} values (aliases that expand?): refused"
            )
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(f"{what} {path} nests deeper than {MAX_YAML_DEPTH} levels: refused")
        if isinstance(value, dict):
            stack += [(v, depth + 1) for v in value.values()]
        elif isinstance(value, list):
            stack += [(v, depth + 1) for v in value]


def defaults() -> dict[str, dict[str, Any]]:
    return read_yaml(defaults_dir() / "default.yaml", "default config")


def env_names() -> list[str]:
    """Ocean envs that have a config YAML."""
    return sorted(p.stem for p in (defaults_dir() / "envs").glob("*.yaml"))


def _is_gymnasium_id(env: str) -> bool:
    try:
        import gymnasium

        return env in gymnasium.registry
    except ImportError:  # pragma: no cover - gymnasium is a dependency
        return False


def is_import_path(env: str) -> bool:
    """``package.module:factory`` or ``module:Env-v0`` (not ``ocean:NAME``): a Python env to import."""
    module, sep, attr = env.partition(":")
    return bool(sep and module and attr and module != "ocean")


def profile_dir() -> Path:
    return data_dir("bench") / "profiles"


def profile_names() -> list[str]:
    return sorted(p.stem for p in profile_dir().glob("*.yaml"))


def gpu_matches(expected: str, name: str) -> bool:
    """Whether a GPU's name (from NVML) is the one a profile expects ("4090" in "NVIDIA GeForce RTX 4090")."""
    return expected.replace(" ", "").lower() in name.replace(" ", "").lower()


def detect_profile(gpus: list[dict[str, Any]]) -> str:
    """The hardware profile whose expected GPU this machine has; 'cpu' without a GPU or a match."""
    names = [str(g.get("name") or "") for g in gpus]
    for path in sorted(profile_dir().glob("*.yaml")):
        meta = read_yaml(path, "hardware profile").get("profile")
        expected = str(meta.get("gpu") or "") if isinstance(meta, dict) else ""
        if expected and any(gpu_matches(expected, n) for n in names):
            return path.stem
    return "cpu"


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
            value = yaml.safe_load(text) if text.startswith("[") else [v for v in text.split(",") if v]
        if not isinstance(value, list):
            raise ValueError
        if default:
            return [coerce(v, default[0]) for v in value]
        return value
    raise ValueError


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


def _unknown_key(section: str, key: str, schema: Mapping[str, Mapping[str, Any]], source: str) -> ConfigError:
    cli = source == "command line"

    def name(s: str, k: str) -> str:
        return _cli_name(s, k) if cli else f"{s}.{k}"

    shown = name(section, key)
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
) -> None:
    """Check ``layer`` against ``schema`` and merge it into ``data`` in place."""
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
            check_value(section, key, data[section][key], f"{name} (from {source})")


def check_layer(layer: Mapping[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """``layer`` (sections of keys, as in a config file) typed and checked like a ``--config`` file's
    (types, choices, ranges; not env parameters), without merging it into a config: the values as
    typed, section by section. For what a run folder or checkpoint says it was trained with."""
    base = defaults()
    schema = {s: dict(base.get(s) or {}) for s in SECTIONS}
    data = {s: dict(v) for s, v in schema.items()}
    _apply(data, layer, schema, source)
    return {str(s): {str(k): data[str(s)][str(k)] for k in (v or {})} for s, v in layer.items()}


def check_value(section: str, key: str, value: Any, name: str | None = None) -> None:
    """Raise a ConfigError if a typed value is outside its range in :data:`RANGES` (or an empty path)."""
    name = name or f"{section}.{key}"
    if (section, key) in NON_EMPTY and isinstance(value, str) and not value.strip():
        raise ConfigError(f"{name}: must not be empty")
    valid = RANGES.get((section, key))
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


# ----------------------------------------------------------------------------- result


class Section(Mapping[str, Any]):
    """Read-only view of one section with attribute access: ``cfg.train.learning_rate``."""

    def __init__(self, name: str, values: dict[str, Any]) -> None:
        self._name = name
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._values[key]
        except KeyError:
            guess = _nearest(key, self._values)
            hint = f"; did you mean {guess}?" if guess else ""
            raise AttributeError(f"config section '{self._name}' has no key '{key}'{hint}") from None

    def __repr__(self) -> str:
        return f"Section({self._name}, {self._values!r})"


class Config:
    """The resolved configuration: sections plus where it came from."""

    def __init__(
        self,
        data: dict[str, dict[str, Any]],
        env_name: str | None = None,
        profile: str | None = None,
        sources: list[str] | None = None,
    ) -> None:
        self.data = data
        self.env_name = env_name
        self.profile = profile
        self.sources = sources or []

    def __getattr__(self, section: str) -> Section:
        if section in SECTIONS:
            return Section(section, self.data[section])
        raise AttributeError(f"config has no section '{section}'")

    def __getitem__(self, section: str) -> dict[str, Any]:
        return self.data[section]

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (copied), ready for YAML, JSON and reports."""
        out: dict[str, Any] = {
            "env_name": self.env_name,
            "profile": self.profile,
            "sources": list(self.sources),
        }
        out.update(json.loads(json.dumps(self.data)))
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _strip_profile_meta(layer: dict[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    meta = layer.pop("profile", None) or {}
    if not isinstance(meta, dict):
        raise ConfigError(f"'profile' in {path} must be a mapping (name, gpu, description)")
    return layer, meta


def resolve(
    env: str | None = None,
    profile: str | None = None,
    config_file: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Mapping[str, Any]] = (),
) -> Config:
    """Build the config a run would use; see the module docstring for the layers."""
    base = defaults()
    per_profile: dict[str, Any] = {}
    schema: dict[str, dict[str, Any]] = {s: dict(base.get(s) or {}) for s in SECTIONS}
    data: dict[str, dict[str, Any]] = {s: dict(v) for s, v in schema.items()}
    sources = [str(defaults_dir() / "default.yaml")]

    if env is not None and env not in env_names() and (_is_gymnasium_id(env) or is_import_path(env)):
        # a Gymnasium id or package.module:factory: no env YAML and no env parameters; Python envs
        # need a process backend
        data["vec"]["backend"] = "multiprocessing"
        sources.append(env if is_import_path(env) else f"gymnasium:{env}")
    elif env is not None:
        known = env_names()
        if env not in known:
            raise unknown_name("env", env, known, "known envs")
        path = defaults_dir() / "envs" / f"{env}.yaml"
        layer = read_yaml(path, "env config")
        env_params = layer.pop("env", None) or {}
        per_profile = layer.pop("profiles", None) or {}
        if not isinstance(per_profile, dict) or not all(isinstance(v, dict) for v in per_profile.values()):
            raise ConfigError(f"section 'profiles' in {path} must map profile names to config sections")
        per_profile = {str(k): v for k, v in per_profile.items()}  # 4090: an int to YAML
        unknown = sorted(set(per_profile) - set(profile_names()))
        if unknown:
            raise ConfigError(f"section 'profiles' in {path} names unknown profiles: {', '.join(unknown)}")
        if not isinstance(env_params, dict):
            raise ConfigError(f"section 'env' in {path} must be a mapping of env parameters")
        schema["env"] = dict(env_params)  # the env's own parameters define the env section
        data["env"] = dict(env_params)
        _apply(data, layer, schema, str(path))
        sources.append(str(path))

    if profile is not None:
        known = profile_names()
        if profile not in known:
            raise unknown_name("hardware profile", profile, known, "valid profiles")
        path = profile_dir() / f"{profile}.yaml"
        layer, meta = _strip_profile_meta(read_yaml(path, "hardware profile"), path)
        _apply(data, layer, schema, str(path))
        data["bench"]["profile"] = profile
        data["bench"]["expected_gpu"] = str(meta.get("gpu", ""))
        sources.append(str(path))
        if env is not None and per_profile.get(profile):  # the env's own values for this profile
            env_path = defaults_dir() / "envs" / f"{env}.yaml"
            _apply(data, per_profile[profile], schema, f"{env_path} (profiles.{profile})")
            sources.append(f"{env_path} (profiles.{profile})")

    if config_file is not None:
        path = Path(config_file)
        layer = read_yaml(path, "config file")
        if isinstance(layer.get("profile"), dict):  # a saved autotune profile carries its metadata
            layer, _ = _strip_profile_meta(layer, path)
        _apply(data, layer, schema, str(path))
        sources.append(str(path))

    layer = overrides if isinstance(overrides, Mapping) else parse_overrides(overrides)
    if layer:
        _apply(data, layer, schema, "command line")
        sources.append("command line")

    if data["vec"]["backend"] == "native" and data["train"]["engine"] != "off":
        check_buffers(data["train"]["buffers"], data["vec"]["num_envs"])
    if env is not None and env in env_names():
        check_memory(env, data)
    return Config(data, env_name=env, profile=profile, sources=sources)


def check_buffers(buffers: int, num_envs: int) -> None:
    """``train.buffers`` must split ``vec.num_envs`` evenly: the rollout engine's buffers step as many envs each."""
    if not isinstance(buffers, int) or isinstance(buffers, bool) or buffers < 1:
        raise ConfigError(f"train.buffers must be an int >= 1, got {buffers!r}")
    if num_envs % buffers:
        valid = [d for d in range(1, min(num_envs, 64) + 1) if num_envs % d == 0]
        raise ConfigError(
            f"train.buffers ({buffers}) must divide vec.num_envs ({num_envs}) so every rollout buffer steps as many "
            f"envs; valid: {', '.join(map(str, valid))}"
        )


# ----------------------------------------------------------------------------- memory


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def _gpu_present() -> bool:
    """An NVIDIA device node: training buffers may then live in GPU memory, not here."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


def estimate_memory(env: str, data: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Bytes an Ocean env's run would allocate: ``vector`` (observations, actions, rewards, flags and the
    envs themselves) and ``training`` (the trainer's experience: one row per agent and horizon step).
    Checks the env's parameters against their ranges on the way (a ConfigError naming the parameter)."""
    from appliance import ocean

    info = ocean.describe(env, **dict(data["env"]))
    v, t = data["vec"], data["train"]
    num_envs = int(v["num_envs"])
    agents = num_envs * int(info["agents_per_env"])
    obs = int(info["obs_size"]) * (4 if info["obs_dtype"] == "float32" else 1)
    dims = len(info["action_nvec"])
    vector = agents * (obs + 4 * dims + 4 + 3) + num_envs * int(info.get("env_bytes", 0))
    horizon = int(t["bptt_horizon"])
    rows = agents * horizon if t["batch_size"] == AUTO else max(int(t["batch_size"]), agents * horizon)
    hidden = int(data["policy"]["hidden_size"])
    # per row: observation, int64 action, six float32 (logprob, value, reward, done, ratio, mask);
    # per agent: the recurrent state (h and c) twice (current and at each segment start)
    training = rows * (obs + 8 * dims + 6 * 4) + agents * 4 * hidden * 4
    return {"vector": vector, "training": training}


def check_memory(env: str, data: Mapping[str, Mapping[str, Any]], available: int | None = None) -> None:
    """Refuse, with the figures, a config whose buffers cannot fit in the memory available now."""
    import psutil

    need = estimate_memory(env, data)
    t = data["train"]
    on_host = t["device"] == "cpu" or t["cpu_offload"] or (t["device"] == AUTO and not _gpu_present())
    total = need["vector"] + (need["training"] if on_host else 0)
    available = psutil.virtual_memory().available if available is None else available
    if total <= available:
        return
    num_envs = int(data["vec"]["num_envs"])
    fits = max(0, int(num_envs * available / total))
    parts = f"vector {_gib(need['vector'])}"
    if on_host:
        parts += f" + training buffers {_gib(need['training'])}"
    raise ConfigError(
        f"vec.num_envs {num_envs:,} of {env} needs about {_gib(total)} of memory ({parts}) but "
        f"{_gib(available)} is available; use at most about {fits:,} envs"
    )
