"""The files a config is read from: bounded, strict YAML reads, the shipped defaults, the env and
hardware profile names, and which profile a machine's GPU calls for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from appliance.config.keys import default_values
from appliance.errors import ConfigError
from appliance.paths import data_dir, defaults_dir
from appliance.report_io import needs_whole_characters, read_bounded, whole_characters

MAX_YAML_BYTES = 4 * 2**20  # configs, suites, profiles and sweep spaces are a few KiB
MAX_YAML_DEPTH = 32
MAX_YAML_VALUES = 1_000_000  # after aliases: a "billion laughs" file expands past it


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping that gives one key twice: plain YAML keeps the later value and drops the earlier one
    without a word, so a second ``train:`` section would silently replace the first."""


def strict_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses a key given twice in one mapping, at any level.

    The error (:class:`DuplicateKeyError`) names the key by its path (``train.learning_rate``) and
    the lines of both. Keys a ``<<`` merge brings in may be overridden, as YAML means them to be."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_unique_keys(loader, node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_unique_keys(loader: yaml.SafeLoader, root: yaml.Node) -> None:
    """Walk the composed document (each node once, so aliases cost nothing) for a repeated key."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, where = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack += [(item, f"{where}[{i}]") for i, item in enumerate(node.value)]
        if not isinstance(node, yaml.MappingNode):
            continue
        lines: dict[Any, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                stack.append((value_node, where))
                continue
            key = loader.construct_object(key_node) if isinstance(key_node, yaml.ScalarNode) else key_node
            text = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key)
            name = f"{where}.{text}" if where else text
            mark = key_node.start_mark
            if key in lines:
                first = lines[key]
                at = (
                    f"line {mark.line + 1}, columns {first.column + 1} and {mark.column + 1}"
                    if first.line == mark.line
                    else f"lines {first.line + 1} and {mark.line + 1}"
                )
                raise DuplicateKeyError(
                    problem=f"key '{name}' is given twice, on {at} (the later would silently replace "
                    "the earlier); keep one"
                )
            lines[key] = mark
            stack.append((value_node, name))


def read_yaml(path: Path, what: str = "config file", follow: bool = True) -> dict[str, Any]:
    """Read a YAML mapping; a missing file, bad YAML or a non-mapping is a ConfigError.

    These files may come from elsewhere (a suite or config someone shared), so the file is bounded
    (:data:`MAX_YAML_BYTES`), and so is what it holds: nesting (:data:`MAX_YAML_DEPTH`) and values
    counted through aliases (:data:`MAX_YAML_VALUES`). It is read strictly (:func:`strict_load`): a
    key or section given twice is refused, naming both lines. Every refusal is one line naming the
    file, a FIFO, device or folder included (:func:`report_io.open_input`); ``follow=False`` (a run's
    own ``config.yaml``) refuses a symbolic link too."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise ConfigError(f"{what} not found: {path}")
    raw = read_bounded(path, what, ConfigError, MAX_YAML_BYTES, follow)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{what} {path} is not UTF-8 text: byte 0x{raw[e.start]:02x} on line {line}; save it as UTF-8"
        ) from None
    try:
        data = strict_load(text)
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
    return whole_characters(data) if needs_whole_characters(text) else data


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
    """The default layer: every key's declared default (:mod:`appliance.config.keys`; default.yaml
    is its rendering, kept equal by tests/test_config_keys.py), a fresh copy."""
    return default_values()


def env_names() -> list[str]:
    """The Ocean envs compiled into ``appliance._ocean`` (each may have a YAML of tuned values)."""
    from appliance import ocean

    return ocean.names()


def env_yaml(env: str) -> Path | None:
    """An Ocean env's YAML of tuned values (``defaults/envs/<env>.yaml``), or None where it has none; a
    PufferLib-format env's is the recipe its build wrote from its ini (:mod:`appliance.pufferlib_envs`)."""
    from appliance import pufferlib_envs

    if env.startswith(pufferlib_envs.PREFIX):
        built = pufferlib_envs.current(env)
        return built.recipe if built is not None and built.recipe.is_file() else None
    path = defaults_dir() / "envs" / f"{env}.yaml"
    return path if path.is_file() else None


def _is_gymnasium_id(env: str) -> bool:
    """Whether ``env`` is a Gymnasium id, the plugin its namespace names imported first
    (:func:`appliance.config.gymids.registered`: ``ALE/Pong-v5`` imports ale_py)."""
    from appliance.config import gymids

    return gymids.registered(env)


def is_import_path(env: str) -> bool:
    """``package.module:factory`` or ``module:Env-v0`` (not ``ocean:NAME``): a Python env to import."""
    module, sep, attr = env.partition(":")
    return bool(sep and module and attr and module != "ocean")


def profile_dir() -> Path:
    return data_dir("bench") / "profiles"


# GPU architectures: each a profile derived from a GPU's properties (appliance.config.hardware)
ARCHITECTURES = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")


# what an unknown profile's error adds to the list of valid ones
LIST_PROFILES = " (measured profiles, then GPU architectures; puffer-bench info says which this machine gets)"


def measured_names() -> list[str]:
    """The profiles written as YAML (bench/profiles/NAME.yaml), each for one class of machine."""
    return sorted(p.stem for p in profile_dir().glob("*.yaml"))


def profile_names() -> list[str]:
    """Every hardware profile: the measured ones (YAML), then the GPU architectures."""
    return measured_names() + [a for a in ARCHITECTURES if not (profile_dir() / f"{a}.yaml").is_file()]


def gpu_matches(expected: str, name: str) -> bool:
    """Whether a GPU's name (from NVML) is the one a profile expects ("4090" in "NVIDIA GeForce RTX 4090")."""
    return expected.replace(" ", "").lower() in name.replace(" ", "").lower()
