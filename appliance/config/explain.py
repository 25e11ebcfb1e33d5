"""Every config key explained: its type, range or choices, default and meaning, gathered from the
schema (:data:`~appliance.config.schema.MEANINGS`, ``RANGES``, ``CHOICES``) and the shipped
default.yaml, for ``puffer-bench config --explain`` and docs/configuration.md.

``python -m appliance.config.explain`` rewrites docs/configuration.md (``make config-docs``);
``--check`` exits 1 where the committed page differs from what it would write."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.config.files import defaults
from appliance.config.layers import _nearest
from appliance.config.schema import AUTO, CHOICES, MEANINGS, NON_EMPTY, RANGES, SECTIONS, _type_name
from appliance.errors import ConfigError


@dataclass(frozen=True)
class KeyInfo:
    """One key of the config as the schema describes it."""

    section: str
    key: str
    type: str
    allowed: str
    default: Any
    meaning: str

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"


def _allowed(section: str, key: str, default: Any) -> str:
    choices = CHOICES.get((section, key))
    if choices is not None:
        return " | ".join(choices)
    if isinstance(default, bool):
        return "true | false"
    valid = RANGES.get((section, key))
    if valid is not None:
        each = "each " if isinstance(default, list) else ""
        return f"{each}{valid}"
    if (section, key) in NON_EMPTY:
        return "not empty"
    return "any text" if isinstance(default, str) else "any"


def _typed(section: str, key: str, default: Any) -> str:
    if (section, key) in CHOICES:
        return "a choice"
    if default == AUTO and (section, key) in RANGES:
        return "'auto' or an int" if _whole_range(section, key) else "'auto' or a number"
    if isinstance(default, list) and default:
        return f"a list of {_type_name(default[0]).split(' ', 1)[1]}s"
    return _type_name(default)


def _whole_range(section: str, key: str) -> bool:
    """Whether the key counts things (its range's bounds are whole: workers, envs, passes)."""
    return (section, key) in {
        ("vec", "num_threads"),
        ("vec", "num_workers"),
        ("vec", "batch_size"),
        ("train", "batch_size"),
    }


def describe() -> list[KeyInfo]:
    """Every key of default.yaml, section by section, in the file's order."""
    base = defaults()
    out = []
    for section in SECTIONS:
        for key, default in (base.get(section) or {}).items():
            meaning = MEANINGS.get(section, {}).get(key, "")
            out.append(
                KeyInfo(
                    section,
                    key,
                    _typed(section, key, default),
                    _allowed(section, key, default),
                    default,
                    meaning,
                )
            )
    return out


def find(name: str) -> KeyInfo:
    """The key ``train.learning_rate`` (dashes, or a leading ``--``, as on the command line) or a
    one-line ConfigError with the nearest key."""
    keys = {info.name: info for info in describe()}
    wanted = name.strip().removeprefix("--").replace("-", "_")
    if wanted in keys:
        return keys[wanted]
    section, _, key = wanted.partition(".")
    bare = [n for n in keys if n.endswith(f".{wanted}")] if not key else []
    if len(bare) == 1:  # learning_rate: the one key of that name
        return keys[bare[0]]
    if section == "env" and key:
        raise ConfigError(
            f"env.{key} is an env's own parameter: `puffer-bench envs show ENV` lists an Ocean env's, "
            "`puffer-bench config ENV` shows their values"
        )
    guess = _nearest(wanted, keys) or (_nearest(key, [n.split(".", 1)[1] for n in keys]) if key else None)
    if guess and "." not in guess:
        guess = next(n for n in keys if n.split(".", 1)[1] == guess)
    hint = (
        f"; did you mean {guess}?" if guess else f"; sections: {', '.join(s for s in SECTIONS if s != 'env')}"
    )
    raise ConfigError(f"unknown config key '{name}'{hint}")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return '""' if value == "" else value
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def text(info: KeyInfo, resolved: str | None = None) -> str:
    """A key explained in a few lines (and ``resolved``: the value an env and profile give it)."""
    lines = [
        f"{info.name}: {info.meaning}",
        f"  type:    {info.type}",
        f"  allowed: {info.allowed}",
        f"  default: {_shown(info.default)}",
    ]
    if resolved is not None:
        lines.append(f"  {resolved}")
    return "\n".join(lines)


def all_text(resolved: Callable[[str, str], str] | None = None) -> str:
    """Every key, grouped by section: name, type, allowed values, default and meaning (and
    ``resolved(section, key)``: a line with the value an env and profile give it, where given)."""
    out = []
    for section in SECTIONS:
        infos = [i for i in describe() if i.section == section]
        out.append(f"[{section}]")
        if not infos:
            out.append(f"  {SECTION_NOTES[section]}")
        for i in infos:
            out.append(f"  {i.key} = {_shown(i.default)}  ({i.type}; {i.allowed})")
            out.append(f"      {i.meaning}")
            if resolved is not None:
                out.append(f"      {resolved(i.section, i.key)}")
        out.append("")
    return "\n".join(out).rstrip("\n")


SECTION_NOTES = {
    "vec": "How the envs are made and stepped (appliance/vector).",
    "train": "The PPO trainer (appliance/train): the update, the optimizer, the rollout.",
    "policy": "The network (appliance/train/policy.py): encoder, core, heads.",
    "env": "An env's own parameters: an Ocean env's come from its C ParamSpec (`puffer-bench envs show "
    "ENV` lists them); for a Gymnasium id or import path they are keyword arguments for "
    "gymnasium.make or the factory. default.yaml has none.",
    "bench": "Benchmark suites (appliance/bench) and the hardware profile a config was made for.",
}

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """docs/configuration.md: every key's type, allowed values, default and meaning, by section."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m appliance.config.explain` (make config-docs) from",
        "appliance/config/schema.py and appliance/defaults/default.yaml; edit those, not this page.",
        "tests/test_config_explain.py fails when it is stale. -->",
        "",
        "Every key a run is configured with. A key's default fixes its type; every layer (the layers",
        "are below) is checked against the type and the range or choices here, and a bad value is a",
        "one-line error naming the key and where it came from. `puffer-bench config --explain KEY` prints",
        "one key (`puffer-bench config ENV --explain KEY` adds the value ENV resolves to);",
        "`puffer-bench config ENV --show-origin` prints every value with the layer that set it.",
        "",
        "## Layers",
        "",
        "Later wins:",
        "",
        "1. built-in default: appliance/defaults/default.yaml (an Ocean env's `env` section: its C ParamSpec)",
        "2. env YAML: appliance/defaults/envs/ENV.yaml (a Gymnasium id: appliance/defaults/gymnasium/ID.yaml)",
        "3. hardware profile: bench/profiles/PROFILE.yaml (`--gpu PROFILE`, else detected from the GPU); a",
        "   GPU no measured profile names gets its architecture's (`ampere`, `ada`, `hopper`, ...), derived",
        "   from its memory and compute capability (appliance/config/hardware.py)",
        "4. the env YAML's `profiles.PROFILE` section: the env's own values on that class of machine (first",
        "   those of the measured profile a profile is like: h200 like h100, a derived one like the measured",
        "   profile of its memory)",
        "5. family YAML (a Gymnasium id or import path without a YAML of its own):",
        "   appliance/defaults/families/FAMILY.yaml, after the profile",
        "6. `--config FILE`",
        "7. `--section.key VALUE` on the command line",
        "",
        "A value in a shipped YAML that no resolution would ever use (a later layer replaces it in every",
        "env x profile, no profile included: `envs sps` resolves without one), or a profile value that",
        "restates what it overrides, is refused by tests/test_config_dead_values.py",
        "(`python -m appliance.config.audit dead` lists them). An env's or family's own value equal to",
        "default.yaml's is kept: it pins the recipe the env was measured with.",
        "",
    ]
    for section in SECTIONS:
        lines += [f"## {section}", "", SECTION_NOTES[section], ""]
        infos = [i for i in describe() if i.section == section]
        if not infos:
            continue
        lines += ["| key | type | allowed | default | meaning |", "| --- | --- | --- | --- | --- |"]
        for i in infos:
            lines.append(
                f"| `{i.key}` | {_cell(i.type)} | {_cell(i.allowed)} | `{_shown(i.default)}` | {_cell(i.meaning)} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    page = markdown()
    if args == ["--check"]:
        current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else ""
        if current != page:
            print(f"{PAGE} is stale: run python -m appliance.config.explain", file=sys.stderr)
            return 1
        return 0
    if args:
        print("usage: python -m appliance.config.explain [--check]", file=sys.stderr)
        return 2
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
