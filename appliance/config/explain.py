"""Every config key explained: its type, range or choices, default and meaning, read from its
declaration (:mod:`~appliance.config.keys`), for ``puffer-bench config --explain``, docs/configuration.md
and appliance/defaults/default.yaml (the default layer written out); the layers' order from
:data:`~appliance.config.layers.ORDER`.

``python -m appliance.config.explain`` rewrites docs/configuration.md and default.yaml (``make
config-docs``); ``--check`` exits 1 where a committed file differs from what it would write."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from appliance.config.keys import ENV_NOTE, RECIPES, SECTION_TYPES, SECTIONS, Declared, FromRecipe, declared
from appliance.config.layers import DERIVED, ORDER, _nearest
from appliance.config.schema import _type_name
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
    variants: str = ""  # a recipe variant: the value each peer's recipe gives it

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"


def _allowed(d: Declared) -> str:
    if d.choices is not None:
        return " | ".join(d.choices)
    if isinstance(d.default, bool):
        return "true | false"
    if d.valid is not None:
        each = "each " if isinstance(d.default, list) else ""
        return f"{each}{d.valid}"
    if d.non_empty:
        return "not empty"
    return "any text" if isinstance(d.default, str) else "any"


def _typed(d: Declared) -> str:
    if d.choices is not None:
        return "a choice"
    if d.default == "auto" and d.valid is not None:
        return "'auto' or an int" if d.counts else "'auto' or a number"
    if isinstance(d.default, list) and d.default:
        return f"a list of {_type_name(d.default[0]).split(' ', 1)[1]}s"
    return _type_name(d.default)


def describe() -> list[KeyInfo]:
    """Every declared key, section by section, in declaration order."""
    return [
        KeyInfo(d.section, d.key, _typed(d), _allowed(d), d.default, d.meaning, _variants_text(d))
        for d in declared()
    ]


def _variants_text(d: Declared) -> str:
    return ", ".join(f"{RECIPE_NAMES[r]}: {_plain(d.variants[r])}" for r in RECIPES if r in d.variants)


def _plain(value: object) -> str:
    return str(value) if isinstance(value, FromRecipe) else _shown(value)


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
    if info.variants:
        lines.append(f"  recipe variants: {info.variants}")
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
            if i.variants:
                out.append(f"      recipe variants: {i.variants}")
            if resolved is not None:
                out.append(f"      {resolved(i.section, i.key)}")
        out.append("")
    return "\n".join(out).rstrip("\n")


# each section's note: its declaration's docstring (the env section has none: each env's own)
SECTION_NOTES = {
    section: " ".join((cls.__doc__ or "").split()) if cls is not None else ENV_NOTE
    for section, cls in SECTION_TYPES.items()
}

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
DEFAULT_YAML = Path(__file__).resolve().parents[1] / "defaults" / "default.yaml"
RECIPE_NAMES = {"pufferlib3": "PufferLib 3.0", "pufferlib4": "PufferLib 4.0", "cleanrl": "CleanRL"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def layers_markdown() -> list[str]:
    """The layers, later wins, as a numbered list (docs/configuration.md's "Layers")."""
    lines = []
    for i, layer in enumerate(ORDER, 1):
        lines.append(f"{i}. {layer.name}: {layer.source}; {layer.holds}")
    lines += [
        "",
        f'`--show-origin` names each value\'s layer as above; "{DERIVED}" is a value resolve sets itself',
        "right after the defaults (a Python env's process backend), which the later layers may change.",
    ]
    return lines


def variants_markdown() -> list[str]:
    """The recipe variants: the keys that exist to run the trainer as a peer does, with the value
    each peer's recipe gives them."""
    keys = [d for d in declared() if d.variants]
    lines = [
        "| key | default (ours) | " + " | ".join(RECIPE_NAMES[r] for r in RECIPES) + " | meaning |",
        "| --- | --- |" + " --- |" * len(RECIPES) + " --- |",
    ]
    for d in keys:
        cells = ["" if r not in d.variants else _variant(d.variants[r]) for r in RECIPES]
        lines.append(
            f"| `{d.name}` | `{_shown(d.default)}` | "
            + " | ".join(_cell(c) for c in cells)
            + f" | {_cell(d.meaning)} |"
        )
    return lines


def _variant(value: object) -> str:
    return str(value) if isinstance(value, FromRecipe) else f"`{_shown(value)}`"


def markdown() -> str:
    """docs/configuration.md: the layers, the recipe variants, and every key's type, allowed values,
    default and meaning, by section."""
    lines = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m appliance.config.explain` (make config-docs) from the key",
        "declarations of appliance/config/keys.py and the layer order of appliance/config/layers.py; edit",
        "those, not this page. tests/test_config_explain.py fails when it is stale. -->",
        "",
        "Every key a run is configured with, each declared once, typed, in appliance/config/keys.py (one",
        "dataclass a section: a component gets its section typed, `cfg.train` a `TrainConfig`). A key's",
        "default fixes its type; every layer (below) is checked against the type and the range or choices",
        "here, and a bad value is a one-line error naming the key and where it came from.",
        "`puffer-bench config --explain KEY` prints one key (`puffer-bench config ENV --explain KEY` adds",
        "the value ENV resolves to); `puffer-bench config ENV --show-origin` prints every value with the",
        "layer that set it.",
        "",
        "## Layers",
        "",
        "Later wins:",
        "",
        *layers_markdown(),
        "",
        "A value in a shipped YAML that no resolution would ever use (a later layer replaces it in every",
        "env x profile, no profile included: `envs sps` resolves without one), or a profile value that",
        "restates what it overrides, is refused by tests/test_config_dead_values.py",
        "(`python -m appliance.config.audit dead` lists them). An env's or family's own value equal to",
        "the default is kept: it pins the recipe the env was measured with.",
        "",
        "## Recipe variants",
        "",
        "The trainer is one algorithm; these keys are its variants, each there to run it as a peer's",
        "trainer does (its recipe: PufferLib 3.0's or 4.0's ini, CleanRL's script), named beside the",
        "default, ours. A cell is the value the peer's recipe gives the key (bench/parity/ holds the",
        "PufferLib 3.0 configs; a PufferLib 4.0 env's recipe is written from its ini by",
        "appliance/pufferlib_envs.py); an empty cell: that recipe is not stated for the key. The keys keep",
        "their names in their sections (config files, recipes and parity YAMLs name them so).",
        "",
        *variants_markdown(),
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


def default_yaml() -> str:
    """appliance/defaults/default.yaml: the default layer, every key with its default and meaning, as
    declared in appliance/config/keys.py (the loader takes the defaults from there; this file is their
    rendering, for reading and as a starting point for a --config file)."""
    lines = [
        "# Generated by `python -m appliance.config.explain` (make config-docs) from the key declarations",
        "# of appliance/config/keys.py, where each key is declared once; edit those, not this file",
        "# (tests/test_config_explain.py fails when it is stale). Every key's type, range or choices and",
        '# meaning: docs/configuration.md. A value of `auto` means "derive it at run time".',
        "# Layers, later wins:",
        *(f"#   {i}. {layer.name}: {layer.source}" for i, layer in enumerate(ORDER, 1)),
    ]
    by_section: dict[str, list[Declared]] = {s: [] for s in SECTIONS}
    for d in declared():
        by_section[d.section].append(d)
    for section in SECTIONS:
        lines.append("")
        if not by_section[section]:
            lines.append(f"{section}: {{}}  # each env's own parameters (docs/configuration.md#{section})")
            continue
        lines.append(f"{section}:")
        for d in by_section[section]:
            value = yaml.safe_dump([d.default], default_flow_style=True, width=1000).strip()[1:-1]
            lines.append(f"  {d.key}: {value}  # {d.meaning}")
    return "\n".join(lines) + "\n"


GENERATED = ((lambda: PAGE, markdown), (lambda: DEFAULT_YAML, default_yaml))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--check"]):
        print("usage: python -m appliance.config.explain [--check]", file=sys.stderr)
        return 2
    stale = []
    for where, make in GENERATED:
        path, text = where(), make()
        if args == ["--check"]:
            current = path.read_text(encoding="utf-8") if path.is_file() else ""
            if current != text:
                print(f"{path} is stale: run python -m appliance.config.explain", file=sys.stderr)
                stale.append(path)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
