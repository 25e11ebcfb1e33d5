"""Layered, typed configuration.

Layers, later wins::

    appliance/defaults/default.yaml        every key and its type
    envs/<env>.h, its ParamSpec table      an Ocean env's parameters: the ``env`` section's keys,
                                           types, defaults and ranges (read from appliance._ocean)
    appliance/defaults/envs/<env>.yaml     the env's tuned values, if any (a Gymnasium id:
                                           defaults/gymnasium/<id>.yaml, whose ``env`` section
                                           defines that section)
    bench/profiles/<profile>.yaml          sizes for a class of machine (``--gpu 4090``)
    profiles.<profile> in the env's YAML   the env's own values on that class of machine
    families/<family>.yaml                 a Gymnasium id's family defaults (classic control ...)
    <run>/config.yaml                      with ``train --resume RUN``: the run's own config
    --config FILE                          the user's YAML
    --section.key VALUE                    command-line overrides (dashes or underscores)

The default of a key fixes its type; every layer is checked against it, and a bad key or value is a
:class:`~appliance.errors.ConfigError` that names the key, where it came from, the expected type and
the nearest valid key. Every number is also checked against its range in :data:`RANGES` (NaN and
infinity never pass), an Ocean env's parameters against the env's own ranges, and the buffers a run
would allocate against the memory available: all when the config is resolved, before any env,
worker or Ray cluster starts. The result is a plain nested dict (:meth:`Config.to_dict`) with
attribute access on top (``cfg.train.learning_rate``).

The package, one job a module: :mod:`~appliance.config.files` (bounded YAML reads, the shipped
defaults, env and profile names), :mod:`~appliance.config.schema` (sections, choices, ranges,
typing, each key's meaning), :mod:`~appliance.config.layers` (one layer checked and merged,
overrides parsed),
:mod:`~appliance.config.env_params` (an Ocean env's section from its ParamSpec),
:mod:`~appliance.config.build` (:func:`resolve`, :class:`Config`, the checks across keys) and
:mod:`~appliance.config.memory` (the buffers' size against the memory available);
:mod:`~appliance.config.explain` (every key described: ``config --explain``, docs/configuration.md)
and :mod:`~appliance.config.audit` (the shipped YAMLs against every env x profile: no dead values).
Each resolved value keeps the layers that set it (``Config.history``, ``config --show-origin``).
Import from ``appliance.config``.
"""

from appliance.config.build import Config, Section, check_batch, check_buffers, resolve
from appliance.config.env_params import env_defaults, env_ranges, yaml_problems
from appliance.config.files import (
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_VALUES,
    _is_gymnasium_id,
    defaults,
    detect_profile,
    env_names,
    env_yaml,
    gpu_matches,
    is_import_path,
    profile_dir,
    profile_names,
    read_yaml,
)
from appliance.config.layers import check_layer, parse_overrides, unknown_name
from appliance.config.memory import check_memory, estimate_memory
from appliance.config.schema import (
    AT_LEAST_1,
    AUTO,
    CHOICES,
    INT32,
    NON_EMPTY,
    NON_NEGATIVE,
    POSITIVE,
    RANGES,
    SECTIONS,
    UNIT,
    Range,
    check_value,
    coerce,
)
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
    "Config",
    "ConfigError",
    "Range",
    "Section",
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
