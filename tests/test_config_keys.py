"""Each config key declared once, typed (appliance/config/keys.py): the checks, the defaults,
default.yaml, docs/configuration.md and `config --explain` are made from the declarations; a resolved
config hands out its sections typed; the layer order is declared once (appliance/config/layers.py)
and is the order resolve applies the layers in; the recipe variants name the values the peers'
recipes really give them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from appliance import pufferlib_envs
from appliance.config import (
    CHOICES,
    NON_EMPTY,
    RANGES,
    SECTIONS,
    PolicyConfig,
    TrainConfig,
    VecConfig,
    defaults,
    explain,
    keys,
    read_yaml,
    resolve,
)
from appliance.config.layers import DERIVED, LAYERS, ORDER

ROOT = Path(__file__).resolve().parents[1]


def test_every_key_is_declared_once_with_a_type_a_default_and_a_meaning():
    declared = keys.declared()
    names = [d.name for d in declared]
    assert len(names) == len(set(names))
    assert [s for s in SECTIONS if keys.SECTION_TYPES[s] is not None] == ["vec", "train", "policy", "bench"]
    for d in declared:
        assert d.meaning.strip() and "\n" not in d.meaning, f"{d.name}: a one-line meaning"
        if d.choices is not None:  # a Literal: its default is one of its values
            assert d.default in d.choices, d.name
        if d.valid is not None:  # a number's default lies in its range
            for v in d.default if isinstance(d.default, list) else [d.default]:
                assert v == keys.AUTO or d.valid.contains(v), d.name
        if d.non_empty:
            assert d.default not in ("", []), d.name
    # the checks' tables are the declarations, nothing more
    assert set(CHOICES) == {(d.section, d.key) for d in declared if d.choices}
    assert set(RANGES) == {(d.section, d.key) for d in declared if d.valid}
    assert {(d.section, d.key) for d in declared if d.non_empty} == NON_EMPTY
    assert defaults() == {s: {d.key: d.default for d in declared if d.section == s} for s in SECTIONS}


def test_default_yaml_is_the_declarations_written_out():
    path = ROOT / "appliance" / "defaults" / "default.yaml"
    assert path.read_text(encoding="utf-8") == explain.default_yaml(), (
        "appliance/defaults/default.yaml is stale: python -m appliance.config.explain"
    )
    written = read_yaml(path, "default config")
    base = defaults()
    assert written == base
    for section in SECTIONS:  # the same keys, in order, of the same types (30.0 stays a float)
        assert list(written[section]) == list(base[section])
        assert [type(v) for v in written[section].values()] == [type(v) for v in base[section].values()]


def test_default_yaml_and_the_page_go_stale_together(tmp_path, monkeypatch):
    page, default = tmp_path / "configuration.md", tmp_path / "default.yaml"
    monkeypatch.setattr(explain, "PAGE", page)
    monkeypatch.setattr(explain, "DEFAULT_YAML", default)
    assert explain.main([]) == 0 and explain.main(["--check"]) == 0
    default.write_text(default.read_text().replace("learning_rate: 0.015", "learning_rate: 0.02"))
    assert explain.main(["--check"]) == 1


def test_a_resolved_config_hands_out_its_sections_typed():
    cfg = resolve("breakout", "cpu")
    assert isinstance(cfg.train, TrainConfig) and isinstance(cfg.vec, VecConfig)
    assert isinstance(cfg.policy, PolicyConfig)
    for section in ("vec", "train", "policy", "bench"):
        typed = getattr(cfg, section)
        assert dict(typed) == cfg.data[section]  # every key, as resolved
        assert list(typed) == list(cfg.data[section])
    assert cfg.train.learning_rate == cfg.train["learning_rate"] == cfg.data["train"]["learning_rate"]
    assert dict(cfg.env) == cfg.data["env"]  # an env's own parameters: a mapping
    with pytest.raises(AttributeError, match="did you mean learning_rate"):
        _ = cfg.train.learnin_rate
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.seed = 3  # type: ignore[misc]
    cfg.data["train"]["seed"] = 5  # a rank's own seed: the next read sees it
    assert cfg.train.seed == 5


def _layer(label: str) -> str:
    return max(
        (n for n in LAYERS if label.startswith(n)), key=len
    )  # "env YAML for the profile", not "env YAML"


def test_the_layer_order_is_the_order_resolve_applies_them(tmp_path):
    """Every layer a value's history names is one of ORDER's (or DERIVED), and each key's history
    runs in ORDER's order: the declared order is the code's."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("train:\n  ent_coef: 0.02\n  seed: 3\n")
    resumed = tmp_path / "run" / "config.yaml"
    resumed.parent.mkdir()
    resumed.write_text("train:\n  ent_coef: 0.01\n  seed: 2\n")
    rank = {name: i for i, name in enumerate(layer.name for layer in ORDER)}
    for cfg in (
        resolve("breakout", "cpu", mine, ["--train.seed", "7"], resumed=resumed),
        resolve("CartPole-v1", "4090", family="classic"),
    ):
        for (section, key), steps in cfg.history.items():
            names = [_layer(label) for label, _ in steps]
            ordered = [rank[n] for n in names if n != DERIVED]
            assert ordered == sorted(ordered), f"{section}.{key}: {names}"
    seed = [
        label
        for label, _ in resolve("breakout", "cpu", mine, ["--train.seed", "7"], resumed=resumed).history[
            ("train", "seed")
        ]
    ]
    assert [_layer(s) for s in seed] == [
        "built-in default", "the resumed run's config", "--config file", "command line"
    ]  # fmt: skip


def test_the_layer_order_is_written_nowhere_else():
    """The prose that listed the layers by hand now points at the generated list."""
    for path in ("README.md", "docs/training.md", "appliance/config/__init__.py"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert "configuration.md" in text, path
        assert not re.search(r"default\.yaml`? <|defaults < env", text), f"{path} lists the layers itself"
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\d+\. ([^:]+):", page.split("## Layers", 1)[1].split("## ", 1)[0], re.M)
    assert listed == [layer.name for layer in ORDER]


def _variants(recipe: str) -> dict[tuple[str, str], object]:
    return {
        (d.section, d.key): d.variants[recipe]
        for d in keys.declared()
        if recipe in d.variants and not isinstance(d.variants[recipe], keys.FromRecipe)
    }


def test_the_pufferlib4_variants_are_what_its_recipe_switches_set():
    switches = pufferlib_envs.RECIPE_SWITCHES
    fixed = _variants("pufferlib4")
    assert fixed, "no PufferLib 4.0 variant declared"
    for (section, key), value in fixed.items():
        assert switches[section].get(key) == value, f"{section}.{key}"
    from_ini = {d.key for d in keys.declared() if isinstance(d.variants.get("pufferlib4"), keys.FromRecipe)}
    mapped = {ours for ours, _, _ in pufferlib_envs.TRAIN_KEYS} | {
        "prio_beta1"
    }  # prio_beta1: from two of them
    assert from_ini <= mapped


@pytest.mark.parametrize(
    "recipe,folder", [("pufferlib3", "bench/parity"), ("pufferlib4", "bench/parity/pufferlib4")]
)
def test_the_parity_configs_run_the_declared_variants(recipe, folder):
    fixed = _variants(recipe)
    configs = [p for p in sorted((ROOT / folder).glob("*.yaml")) if not p.name.startswith("sweep")]
    assert configs
    for path in configs:
        cfg = resolve(path.stem, None, path)
        for (section, key), value in fixed.items():
            assert cfg.data[section][key] == value, f"{path.name}: {section}.{key}"


def test_no_component_takes_an_untyped_config():
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "appliance").rglob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\b(cfg|hp): Any\b", line)
    ]
    assert found == []


def test_the_generated_yaml_is_a_usable_config_file(tmp_path):
    """default.yaml, given as --config, changes nothing: it is the default layer."""
    path = ROOT / "appliance" / "defaults" / "default.yaml"
    assert resolve(config_file=path).data == resolve().data
    assert yaml.safe_load(path.read_text())["env"] == {}


def test_explain_names_a_recipe_variants_values():
    from click.testing import CliRunner

    from appliance.cli import cli

    result = CliRunner().invoke(cli, ["config", "--explain", "train.vtrace_rho_on"])
    assert result.exit_code == 0, result.output
    assert "  recipe variants: PufferLib 3.0: td_error, PufferLib 4.0: reward" in result.output.splitlines()
    plain = CliRunner().invoke(cli, ["config", "--explain", "train.gamma"])
    assert "recipe variants" not in plain.output  # one algorithm: most keys are no variant
