"""Layered, typed configuration.

Every key is declared once, in :mod:`~appliance.config.keys`: one dataclass a section
(:class:`VecConfig`, :class:`TrainConfig`, :class:`PolicyConfig`, :class:`BenchConfig`; the ``env``
section is each env's own parameters), each field with its type, default, range or choices and
meaning. The layers a config is resolved from are declared once too, in order, later wins:
:data:`appliance.config.layers.ORDER` (listed in docs/configuration.md#layers, which is generated
from it).

The default of a key fixes its type; every layer is checked against it, and a bad key or value is a
:class:`~appliance.errors.ConfigError` that names the key, where it came from, the expected type and
the nearest valid key. Every number is also checked against its range in :data:`RANGES` (NaN and
infinity never pass), an Ocean env's parameters against the env's own ranges, and the buffers a run
would allocate against the memory available: all when the config is resolved, before any env,
worker or Ray cluster starts. The result is a plain nested dict (:meth:`Config.to_dict`); each
section is read typed (``cfg.train`` is a :class:`TrainConfig`: ``cfg.train.learning_rate``).

The package, one job a module: :mod:`~appliance.config.keys` (every key declared),
:mod:`~appliance.config.files` (bounded YAML reads, the defaults, env and profile names),
:mod:`~appliance.config.schema` (the checks' tables made from the declarations, typing),
:mod:`~appliance.config.layers` (the layers' order; one layer checked and merged, overrides parsed),
:mod:`~appliance.config.env_params` (an Ocean env's section from its ParamSpec),
:mod:`~appliance.config.build` (:func:`resolve`, :class:`Config`, the checks across keys) and
:mod:`~appliance.config.memory` (the buffers' size against the memory available);
:mod:`~appliance.config.explain` (every key described: ``config --explain``, docs/configuration.md,
default.yaml) and :mod:`~appliance.config.audit` (the shipped YAMLs against every env x profile: no
dead values). Each resolved value keeps the layers that set it (``Config.history``, ``config
--show-origin``). Import from ``appliance.config``.
"""

from appliance.config.build import Config, Section, check_batch, check_buffers, resolve
from appliance.config.env_params import env_defaults, env_ranges, yaml_problems
from appliance.config.files import (
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_VALUES,
    _is_gymnasium_id,
    defaults,
    env_names,
    env_yaml,
    gpu_matches,
    is_import_path,
    profile_dir,
    profile_names,
    read_yaml,
)
from appliance.config.hardware import detect_profile
from appliance.config.keys import (
    AT_LEAST_1,
    AUTO,
    INT32,
    NON_NEGATIVE,
    POSITIVE,
    SECTIONS,
    UNIT,
    BenchConfig,
    EnvParams,
    PolicyConfig,
    Range,
    TrainConfig,
    VecConfig,
)
from appliance.config.layers import check_layer, parse_overrides, unknown_name
from appliance.config.memory import check_memory, estimate_memory
from appliance.config.schema import CHOICES, NON_EMPTY, RANGES, check_value, coerce
from appliance.errors import ConfigError

__all__ = [
    "AT_LEAST_1",
    "AUTO",
    "CHOICES",
    "INT32",
    "MAX_YAML_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_VALUES",
    "NON_EMPTY",
    "NON_NEGATIVE",
    "POSITIVE",
    "RANGES",
    "SECTIONS",
    "UNIT",
    "BenchConfig",
    "Config",
    "ConfigError",
    "EnvParams",
    "PolicyConfig",
    "Range",
    "Section",
    "TrainConfig",
    "VecConfig",
    "_is_gymnasium_id",
    "check_batch",
    "check_buffers",
    "check_layer",
    "check_memory",
    "check_value",
    "coerce",
    "defaults",
    "detect_profile",
    "env_defaults",
    "env_names",
    "env_ranges",
    "env_yaml",
    "estimate_memory",
    "gpu_matches",
    "is_import_path",
    "parse_overrides",
    "profile_dir",
    "profile_names",
    "read_yaml",
    "resolve",
    "unknown_name",
    "yaml_problems",
]
