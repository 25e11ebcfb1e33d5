"""The config a run uses: the layers resolved in order (see :mod:`appliance.config`) into a
:class:`Config`, and the checks across keys made before any env starts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from appliance.config import families, files
from appliance.config.env_params import env_defaults, env_ranges
from appliance.config.files import (
    _is_gymnasium_id,
    defaults,
    env_names,
    env_yaml,
    is_import_path,
    profile_names,
    read_yaml,
)
from appliance.config.keys import BenchConfig, PolicyConfig, TrainConfig, VecConfig
from appliance.config.layers import (
    COMMAND_LINE,
    CONFIG_FILE,
    DEFAULT,
    DERIVED,
    ENV_PROFILE,
    ENV_YAML,
    FAMILY,
    PARAMSPEC,
    PROFILE,
    RESUMED,
    _apply,
    _nearest,
    parse_overrides,
)
from appliance.config.memory import check_memory
from appliance.config.schema import AUTO, RANGES, SECTIONS
from appliance.errors import ConfigError
from appliance.paths import defaults_dir, repo_path
from appliance.sysinfo.cpu import CPU_KINDS, cpu_kind

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
        family: families.Family | None = None,
        history: dict[tuple[str, str], list[tuple[str, Any]]] | None = None,
    ) -> None:
        self.data = data
        self.env_name = env_name
        self.profile = profile
        self.sources = sources or []
        self.family = family  # a non-Ocean env's family (appliance.config.families); None for Ocean envs
        # (section, key) -> every (layer, value) that set it, in order: the last is the value's origin
        self.history = history or {}

    def origin(self, section: str, key: str) -> str:
        """Which layer set ``section.key`` last: ``hardware profile (bench/profiles/cpu.yaml)``; the
        layers are named as in :data:`~appliance.config.layers.LAYERS`."""
        steps = self.history.get((section, key))
        return steps[-1][0] if steps else DEFAULT

    # each section typed as its declaration (appliance/config/keys.py): a copy of the resolved values
    @property
    def vec(self) -> VecConfig:
        return VecConfig.from_mapping(self.data["vec"])

    @property
    def train(self) -> TrainConfig:
        return TrainConfig.from_mapping(self.data["train"])

    @property
    def policy(self) -> PolicyConfig:
        return PolicyConfig.from_mapping(self.data["policy"])

    @property
    def env(self) -> Section:
        """The env's own parameters (:data:`~appliance.config.keys.EnvParams`), a read-only view."""
        return Section("env", self.data["env"])

    @property
    def bench(self) -> BenchConfig:
        return BenchConfig.from_mapping(self.data["bench"])

    def __getattr__(self, section: str) -> Any:
        raise AttributeError(f"config has no section '{section}'")

    def __getitem__(self, section: str) -> dict[str, Any]:
        return self.data[section]

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (copied), ready for YAML, JSON and reports."""
        out: dict[str, Any] = {
            "env_name": self.env_name,
            "profile": self.profile,
            "family": self.family.name if self.family else None,
            "sources": list(self.sources),
        }
        out.update(json.loads(json.dumps(self.data)))
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


SAVED_META = ("env_name", "profile", "family", "sources")  # what Config.to_dict adds to the sections


History = dict[tuple[str, str], list[tuple[str, Any]]]


def _record(
    history: History, data: Mapping[str, Mapping[str, Any]], layer: Mapping[str, Any], label: str
) -> None:
    """Note ``label`` and the value it gave (typed, after the layer was applied) for every key ``layer`` sets."""
    for section, values in layer.items():
        if isinstance(values, Mapping):
            for key in values:
                s, k = str(section), str(key)
                history.setdefault((s, k), []).append((label, data[s][k]))


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
    family: str | None = None,
    resumed: str | Path | None = None,
) -> Config:
    """Build the config a run would use; see the module docstring for the layers. ``family``
    (``--family``): a non-Ocean env's family, ``auto`` or None to detect it (:mod:`~appliance.config.families`).
    ``resumed``: the config.yaml of the run ``--resume`` continues, a layer over the family's and
    under ``config_file`` and the command line (its own env_name/profile/family/sources set nothing)."""
    if env is not None:
        from appliance import ocean

        env = ocean.canonical(env)  # a PufferLib env folder or pufferlib:NAME: built and loaded
    base = defaults()
    per_profile: dict[str, Any] = {}
    schema: dict[str, dict[str, Any]] = {s: dict(base.get(s) or {}) for s in SECTIONS}
    data: dict[str, dict[str, Any]] = {s: dict(v) for s, v in schema.items()}
    sources = [str(defaults_dir() / "default.yaml")]
    history: History = {}
    _record(history, data, data, f"{DEFAULT} ({repo_path(sources[0])})")

    env_path, ranges, family_of = None, RANGES, None
    python_env = env is not None and env not in env_names() and (_is_gymnasium_id(env) or is_import_path(env))
    if python_env:
        # a Gymnasium id or package.module:factory: its env section is keyword arguments for
        # gymnasium.make; Python envs need a process backend. Its defaults: its own YAML
        # (defaults/gymnasium/<id>.yaml) if it has one, else its family's, applied after the profile.
        data["vec"]["backend"] = "multiprocessing"
        _record(history, data, {"vec": {"backend": 0}}, f"{DERIVED} (a Python env needs a process backend)")
        sources.append(env if is_import_path(env) else f"gymnasium:{env}")
        overrides = list(overrides) if not isinstance(overrides, Mapping) else overrides
        given = overrides if isinstance(overrides, Mapping) else parse_overrides(overrides)
        timeout = (given.get("vec") or {}).get("recv_timeout", data["vec"]["recv_timeout"])
        try:
            timeout = float(timeout) if float(timeout) > 0 else data["vec"]["recv_timeout"]
        except (TypeError, ValueError):
            timeout = data["vec"]["recv_timeout"]  # a bad value: refused below, where the layer is checked
        family_of = families.choose(env, family, timeout=timeout)
        if family in (None, "auto") or family_of.name is None:
            env_path = families.own_yaml(env)
    elif env is not None:
        known = env_names()
        if env not in known:
            from appliance.config import gymids

            raise gymids.unknown_env(env)
        if family not in (None, "auto", "none"):
            raise ConfigError(
                f"--family {family}: families are for Gymnasium ids and import paths; {env} is an Ocean env "
                "with defaults of its own (defaults/envs/)"
            )
        # the env's C ParamSpec defines the env section (keys, types, defaults, ranges); its YAML,
        # if any, is a layer of tuned values checked against it like every other layer
        schema["env"] = env_defaults(env)
        data["env"] = dict(schema["env"])
        _record(history, data, {"env": data["env"]}, f"{PARAMSPEC} (envs/{env}.h)")
        ranges = {**RANGES, **env_ranges(env)}
        env_path = env_yaml(env)
    if env_path is not None:
        path = env_path
        layer = read_yaml(path, "env config")
        per_profile = layer.pop("profiles", None) or {}
        if not isinstance(per_profile, dict) or not all(isinstance(v, dict) for v in per_profile.values()):
            raise ConfigError(f"section 'profiles' in {path} must map profile names to config sections")
        per_profile = {str(k): v for k, v in per_profile.items()}  # 4090: an int to YAML
        unknown = sorted(set(per_profile) - set(profile_names()) - {f"cpu.{k}" for k in CPU_KINDS})
        if unknown:
            raise ConfigError(
                f"section 'profiles' in {path} names unknown profiles: {', '.join(unknown)} "
                f"(a hardware profile, or cpu.KIND for a kind of CPU: {', '.join(CPU_KINDS)})"
            )
        if ranges is RANGES:  # a Gymnasium id's YAML: its env section (keyword arguments) defines it
            env_params = layer.pop("env", None) or {}
            if not isinstance(env_params, dict):
                raise ConfigError(f"section 'env' in {path} must be a mapping of env parameters")
            schema["env"] = dict(env_params)
            data["env"] = dict(env_params)
            _record(history, data, {"env": env_params}, f"{ENV_YAML} ({repo_path(path)})")
        _apply(data, layer, schema, str(path), ranges)
        _record(history, data, layer, f"{ENV_YAML} ({repo_path(path)})")
        sources.append(str(path))

    if profile is not None:
        known = profile_names()
        if profile not in known:
            from appliance.config import hardware

            raise hardware.unknown_profile(profile)
        path = files.profile_dir() / f"{profile}.yaml"
        if profile in files.ARCHITECTURES and not path.is_file():  # derived from a GPU's properties
            from appliance.config import hardware

            derived = hardware.derive(profile, hardware.detected_gpu(profile))
            layer, meta, where = derived.layer, derived.meta, f"{profile}, {derived.short}"
            source = f"hardware profile {profile}, {derived.fitted}"
        else:
            layer, meta = _strip_profile_meta(read_yaml(path, "hardware profile"), path)
            where, source = repo_path(path), str(path)
        _apply(data, layer, schema, str(where), ranges)
        data["bench"]["profile"] = profile
        data["bench"]["expected_gpu"] = str(meta.get("gpu", ""))
        meta_keys = {"profile": 0, "expected_gpu": 0}
        _record(
            history,
            data,
            {**layer, "bench": {**(layer.get("bench") or {}), **meta_keys}},
            f"{PROFILE} ({where})",
        )
        sources.append(source)
        # the env's own values for this profile; first those for the measured profile it is like
        # (h200 like h100, a derived profile like the measured one of its memory); then, on the cpu
        # profile, those for this kind of CPU (profiles.cpu.avx2: what its arithmetic is fastest at)
        names = [n for n in (str(meta.get("like") or ""), profile) if n]
        if profile == "cpu" and env_path is not None and any(k.startswith("cpu.") for k in per_profile):
            names.append(f"cpu.{cpu_kind()}")
        for name in dict.fromkeys(names):
            if env_path is not None and per_profile.get(name):
                _apply(data, per_profile[name], schema, f"{env_path} (profiles.{name})", ranges)
                where = f"{ENV_PROFILE} ({repo_path(env_path)}, profiles.{name})"
                _record(history, data, per_profile[name], where)
                sources.append(f"{env_path} (profiles.{name})")

    if env is not None and profile is not None:
        _profile_envs_as_agents(env, data, history)

    if family_of is not None and family_of.path is not None:
        # after the profile: a family's sizes are what its learning needs, not a machine's throughput
        path = family_of.path
        layer = read_yaml(path, "family defaults")
        _apply(data, layer, schema, str(path), ranges)
        _record(history, data, layer, f"{FAMILY} ({repo_path(path)})")
        sources.append(str(path))

    if resumed is not None:
        path = Path(resumed)
        layer = {
            k: v
            for k, v in read_yaml(path, "the resumed run's config", follow=False).items()
            if k not in SAVED_META
        }
        if python_env:
            _open_env_keys(layer, schema)
        layer, gone = _known_keys(layer, schema)
        _apply(data, layer, schema, str(path), ranges)
        if gone:  # a run saved by an older version: keys since removed do not stop its resume
            sources.append(f"{path} (keys no longer known, not applied: {', '.join(gone)})")
        _record(history, data, layer, f"{RESUMED} ({path})")
        sources.append(f"{path} (resumed run)")

    if config_file is not None:
        path = Path(config_file)
        layer = read_yaml(path, "config file")
        if isinstance(layer.get("profile"), dict):  # a saved autotune profile carries its metadata
            layer, _ = _strip_profile_meta(layer, path)
        if python_env:
            _open_env_keys(layer, schema)
        _apply(data, layer, schema, str(path), ranges)
        _record(history, data, layer, f"{CONFIG_FILE} ({repo_path(path)})")
        sources.append(str(path))

    layer = overrides if isinstance(overrides, Mapping) else parse_overrides(overrides)
    if layer:
        if python_env:
            _open_env_keys(layer, schema)
        _apply(data, layer, schema, "command line", ranges)
        for section, values in layer.items():
            for key in values or {}:
                flag = f"--{section}.{str(key).replace('_', '-')}"
                _record(history, data, {section: {key: 0}}, f"{COMMAND_LINE} ({flag})")
        sources.append("command line")

    _fit_to_horizon(data, history)
    check_batch(data["train"], in_transitions(data))
    if data["vec"]["backend"] == "native" and data["train"]["engine"] != "off":
        check_buffers(data["train"]["buffers"], data["vec"]["num_envs"])
    if env is not None and env in env_names():
        check_memory(env, data)
    return Config(data, env_name=env, profile=profile, sources=sources, family=family_of, history=history)


def _known_keys(
    layer: Mapping[str, Any], schema: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, Any], list[str]]:
    """``layer`` without the sections and keys ``schema`` does not know, and their dotted names."""
    kept: dict[str, Any] = {}
    gone: list[str] = []
    for section, values in layer.items():
        if section not in schema or not isinstance(values, Mapping):
            gone.append(str(section))
            continue
        kept[section] = {k: v for k, v in values.items() if k in schema[section]}
        gone += [f"{section}.{k}" for k in values if k not in schema[section]]
    return kept, gone


def _open_env_keys(layer: Mapping[str, Any], schema: dict[str, dict[str, Any]]) -> None:
    """A non-Ocean env's section is open: each key a layer gives is a keyword argument for
    ``gymnasium.make`` (or the import path's factory), typed as YAML types it (``--env.frameskip 1``
    an int, ``--env.continuous true`` a bool) unless an earlier layer fixed its type."""
    values = layer.get("env")
    if not isinstance(values, Mapping):
        return
    for key, value in values.items():
        if str(key) not in schema["env"]:
            try:
                typed = yaml.safe_load(value) if isinstance(value, str) else value
            except yaml.YAMLError:
                typed = value
            if typed is None:
                raise ConfigError(f"env.{key}: a value is needed (None is not passed to the env)")
            schema["env"][str(key)] = typed


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


def _profile_envs_as_agents(env: str, data: dict[str, Any], history: History) -> None:
    """A hardware profile's ``vec.num_envs`` sizes the vector for a machine in agent rows (the cpu
    profile's 256); a PufferLib env of many agents each (convert: 1,024) given that many envs would
    step 262,144 agents on 2 cores. So where the profile set the envs of a PufferLib env with more
    than one agent per env, they become the profile's count over the env's agents (at least 1),
    noted as derived. Our Ocean envs and values a user or an env's own profile section set are kept."""
    from appliance import ocean

    if not env.startswith("pufferlib:"):
        return
    label = (history.get(("vec", "num_envs")) or [("", None)])[-1][0]
    if not label.startswith(PROFILE):
        return
    agents = int(ocean.describe(env).get("agents_per_env", 1))
    if agents <= 1:
        return
    rows = int(data["vec"]["num_envs"])
    data["vec"]["num_envs"] = max(1, rows // agents)
    _record(
        history, data, {"vec": {"num_envs": 0}},
        f"{DERIVED} (the profile's {rows:,} agent rows over {agents:,} agents an env)",
    )  # fmt: skip


def _fit_to_horizon(data: dict[str, Any], history: History) -> None:
    """A minibatch (or its chunk, ``max_minibatch_size``) that no user set, from a layer other than the
    horizon's (the cpu profile's 2,048 over a PufferLib env's ini horizon of 48: laser_puzzle), is
    rounded down to whole segments of ``bptt_horizon``, noted as derived; one the user set on the
    command line or in ``--config`` is refused by :func:`check_batch` as before. Minibatches drawn
    in single transitions (:func:`in_transitions`) need no whole segments and are left as they are."""
    train = data["train"]
    horizon = train["bptt_horizon"]
    if in_transitions(data):
        return
    for key in ("minibatch_size", "max_minibatch_size"):
        value = train[key]
        if not isinstance(value, int) or isinstance(value, bool) or value % horizon == 0:
            continue
        label = (history.get(("train", key)) or [("", None)])[-1][0]
        if label.startswith((COMMAND_LINE, CONFIG_FILE)):
            continue
        train[key] = max(horizon, value // horizon * horizon)
        _record(history, data, {"train": {key: 0}}, f"{DERIVED} (whole segments of bptt_horizon {horizon})")


def draws_transitions(unit: str, recurrent: bool, prio_alpha: float) -> bool:
    """Whether minibatches are drawn in single transitions: ``train.minibatch_unit`` ``transitions``,
    or ``auto`` with a core without state and uniform sampling (``prio_alpha`` 0)."""
    return unit == "transitions" or (unit == "auto" and not recurrent and prio_alpha == 0)


def in_transitions(data: Mapping[str, Any]) -> bool:
    """:func:`draws_transitions` for a config (the mlp core is the one without state)."""
    train = data["train"]
    recurrent = data.get("policy", {}).get("core") != "mlp"
    return draws_transitions(train.get("minibatch_unit", "auto"), recurrent, train.get("prio_alpha"))


def check_batch(train: Mapping[str, Any], transitions: bool = False) -> None:
    """The trainer's batch rules that hold for any number of envs: a minibatch (and the largest chunk
    of one, ``max_minibatch_size``) is whole segments of ``bptt_horizon`` steps, unless minibatches
    are drawn in single ``transitions``, and an explicit ``batch_size`` is whole segments and whole
    minibatches. With ``batch_size auto`` the batch is agents x horizon, known once the vector exists;
    the Trainer checks that one."""
    horizon, minibatch = train["bptt_horizon"], train["minibatch_size"]
    if transitions:
        horizon = 1  # any number of steps makes a minibatch
    if minibatch % horizon:
        raise ConfigError(
            f"train.minibatch_size ({minibatch}) must be a multiple of train.bptt_horizon ({horizon}); "
            f"e.g. {max(horizon, minibatch // horizon * horizon)}"
        )
    if train["max_minibatch_size"] % horizon:
        raise ConfigError(
            f"train.max_minibatch_size ({train['max_minibatch_size']}) must be a multiple of "
            f"train.bptt_horizon ({horizon})"
        )
    batch = train["batch_size"]
    if batch != AUTO and (batch % horizon or batch % minibatch):
        raise ConfigError(
            f"train.batch_size ({batch}) must be a multiple of train.bptt_horizon ({horizon}) and of "
            f"train.minibatch_size ({minibatch}); or 'auto' (agents x bptt_horizon)"
        )


def batch_for_agents(train: Any, num_agents: int, transitions: bool = False) -> int:
    """The batch of a trainer with ``num_agents`` agents (``auto``: agents x horizon), after every
    batch rule: :func:`check_batch`'s (minibatches in single ``transitions`` or whole segments), and
    that each agent has a row of the batch and the minibatch divides it. ``train`` is the config's
    train section (a mapping or its attribute view)."""
    get = train.get if isinstance(train, Mapping) else lambda key: getattr(train, key)
    keys = ("bptt_horizon", "minibatch_size", "max_minibatch_size", "batch_size")
    check_batch({k: get(k) for k in keys}, transitions)
    horizon, minibatch = get("bptt_horizon"), get("minibatch_size")
    rows = num_agents * horizon
    batch = rows if get("batch_size") == AUTO else int(get("batch_size"))
    if batch < rows:
        raise ConfigError(
            f"train.batch_size ({batch}) must be at least num_agents * bptt_horizon ({rows}) so every "
            f"agent has a row; use 'auto' for {rows}"
        )
    if batch % minibatch:
        raise ConfigError(
            f"train.minibatch_size ({minibatch}) must divide the batch ({batch} = {num_agents} agents x "
            f"{horizon} steps); e.g. {max(horizon, min(batch, minibatch) // horizon * horizon)}"
        )
    return batch
