"""Every config key explained in one place (its declaration in appliance/config/keys.py, read by the
checks as schema.py's MEANINGS, RANGES and CHOICES): every key has a meaning, `config --explain` and
`config --show-origin` print it, and docs/configuration.md is generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from appliance.cli import cli
from appliance.config import SECTIONS, defaults, explain
from appliance.config.runs import run_config
from appliance.config.schema import MEANINGS


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_every_default_key_has_a_meaning_and_every_meaning_a_key():
    base = defaults()
    keys = {(s, k) for s in SECTIONS for k in base.get(s) or {}}
    described = {(s, k) for s, entries in MEANINGS.items() for k in entries}
    assert set(MEANINGS) == set(SECTIONS)
    assert keys - described == set(), "keys of default.yaml without a meaning in schema.MEANINGS"
    assert described - keys == set(), "schema.MEANINGS describes keys default.yaml no longer has"
    for s, k in keys:
        meaning = MEANINGS[s][k]
        assert meaning.strip() and "\n" not in meaning, f"{s}.{k}: a one-line meaning"


def test_a_key_is_described_with_its_type_range_default_and_meaning():
    info = explain.find("train.learning_rate")
    assert (info.type, info.allowed, info.default) == ("a float", "> 0 and <= 10", 0.015)
    assert explain.find("--train.learning-rate") == info  # as on the command line
    assert explain.find("learning_rate") == info  # the only key of that name
    assert explain.find("vec.backend").allowed == "native | serial | multiprocessing | ray"
    assert explain.find("train.batch_size").type == "'auto' or an int"
    assert explain.find("bench.threads").type == "a list of ints"


def test_explain_one_key_and_all_keys():
    result = run("config", "--explain", "train.learning_rate")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("train.learning_rate: the optimizer's step size")
    assert "  type:    a float" in lines and "  allowed: > 0 and <= 10" in lines
    assert "  default: 0.015" in lines
    every = run("config", "--explain")
    assert every.exit_code == 0
    for section in SECTIONS:
        assert f"[{section}]" in every.output
    assert every.output.count(" = ") == sum(len(defaults().get(s) or {}) for s in SECTIONS)


@pytest.fixture
def bf16_cpu(monkeypatch):
    """A CPU of the bf16 kind, which breakout's cpu profile does not refine (an AVX one takes its
    rollout_int16 from profiles.cpu.avx): what these tests read must not depend on the CPU they run on."""
    from appliance.sysinfo import cpu as syscpu

    monkeypatch.setattr(syscpu, "_REAL_KIND", "bf16")
    monkeypatch.delenv(syscpu.KIND_VARIABLE, raising=False)


def test_explain_with_an_env_adds_the_value_it_resolves_to_and_its_layer(bf16_cpu):
    result = run("config", "breakout", "--gpu", "cpu", "--explain", "policy.hidden-size")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "  breakout (profile cpu): 64, set by env YAML for the profile "
        "(appliance/defaults/envs/breakout.yaml, profiles.cpu)"
    )
    result = run("config", "squared", "--gpu", "4090", "--explain", "vec.num_envs", "--vec.num-envs", "512")
    assert (
        result.output.splitlines()[-1]
        == "  squared (profile 4090): 512, set by command line (--vec.num-envs)"
    )
    every = run("config", "squared", "--gpu", "cpu", "--explain")  # every key, each with its value
    assert every.exit_code == 0, every.output
    assert (
        "      squared (profile cpu): 256, set by hardware profile (bench/profiles/cpu.yaml)" in every.output
    )
    assert every.output.count("squared (profile cpu): ") == sum(
        len(defaults().get(s) or {}) for s in SECTIONS
    )


def test_explain_an_unknown_key_is_one_line_with_a_guess():
    result = run("config", "--explain", "train.learnin_rate")
    assert result.exit_code == 2
    assert (
        result.output == "error: unknown config key 'train.learnin_rate'; did you mean train.learning_rate?\n"
    )
    result = run("config", "--explain", "vec.numenvs")
    assert result.exit_code == 2 and "did you mean vec.num_envs?" in result.output
    assert len(result.output.splitlines()) == 1


def test_show_origin_prints_what_train_runs_with_each_layer(tmp_path, bf16_cpu):
    user = tmp_path / "mine.yaml"
    user.write_text("train:\n  ent_coef: 0.02\n")
    args = ("breakout", "--gpu", "cpu", "--config", str(user), "--train.seed", "7")
    result = run("config", *args, "--show-origin")
    assert result.exit_code == 0, result.output
    shown: dict[tuple[str, str], tuple[object, str]] = {}
    section = ""
    for line in result.output.splitlines()[1:]:
        if not line.startswith(" "):
            section = line.split(":")[0]
            continue
        value, origin = line.split("  # ")
        key, _, text = value.strip().partition(": ")
        shown[(section, key)] = (yaml.safe_load(text), origin)
    cfg = run_config("breakout", "cpu", str(user), ["--train.seed", "7"])  # what train resolves
    assert {k: v for k, (v, _) in shown.items()} == {(s, k): v for s in SECTIONS for k, v in cfg[s].items()}
    assert shown[("train", "seed")][1] == "command line (--train.seed)"
    assert shown[("train", "ent_coef")][1] == f"--config file ({user})"
    assert shown[("train", "device")][1] == "hardware profile (bench/profiles/cpu.yaml)"
    assert shown[("train", "learning_rate")][1] == "env YAML (appliance/defaults/envs/breakout.yaml)"
    assert shown[("policy", "hidden_size")][1].endswith("breakout.yaml, profiles.cpu)")
    assert shown[("train", "anneal_lr")][1] == "built-in default (appliance/defaults/default.yaml)"
    assert shown[("env", "frameskip")][1] == "env ParamSpec (envs/breakout.h)"


def test_show_origin_names_a_family_and_the_process_backend():
    cfg = run_config("CartPole-v1", "4090", None, [], family="classic")
    assert cfg.origin("train", "learning_rate") == "family YAML (appliance/defaults/families/classic.yaml)"
    assert cfg.origin("train", "precision") == "hardware profile (bench/profiles/4090.yaml)"
    assert cfg.origin("vec", "backend") == "family YAML (appliance/defaults/families/classic.yaml)"
    cfg = run_config("Pendulum-v1", "cpu", None, [])
    assert cfg.origin("vec", "backend") == "set by resolve (a Python env needs a process backend)"
    assert cfg.history[("vec", "backend")][0][1] == "native"  # each layer's value, in order


def test_configuration_page_is_not_stale(tmp_path, monkeypatch):
    # the page in this checkout (an installed package, as in the image, has no docs/ beside it)
    monkeypatch.setattr(explain, "PAGE", Path(__file__).resolve().parents[1] / "docs" / "configuration.md")
    assert explain.main(["--check"]) == 0, (
        "docs/configuration.md is stale: python -m appliance.config.explain"
    )
    stale = tmp_path / "configuration.md"
    stale.write_text(explain.markdown().replace("a float", "a flaot", 1))
    monkeypatch.setattr(explain, "PAGE", stale)
    assert explain.main(["--check"]) == 1
    # regenerating writes default.yaml too: a copy here (the installed one is read-only in the image)
    monkeypatch.setattr(explain, "DEFAULT_YAML", tmp_path / "default.yaml")
    assert explain.main([]) == 0 and explain.main(["--check"]) == 0  # regenerated


def test_explain_and_show_origin_refuse_what_they_cannot_print_in_one_line():
    for args in (("--explain", ""), ("--show-origin", "--json"), ("--explain", "train.seed", "--json")):
        result = run("config", *args)
        assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    result = run("config", "--explain", "env.width")  # an env's own parameter, not the schema's
    assert result.exit_code == 2 and "puffer-bench envs show ENV" in result.output


def test_a_layer_is_named_by_its_repository_path_from_a_wheel_too(tmp_path, monkeypatch):
    """A wheel keeps bench/ under appliance/_data/: its profiles are still bench/profiles/NAME.yaml
    (the Docker image's --show-origin said appliance/_data/bench/profiles/cpu.yaml)."""
    from appliance import paths

    package = tmp_path / "site" / "appliance"
    (package / "_data" / "bench" / "profiles").mkdir(parents=True)
    (package / "defaults").mkdir()
    monkeypatch.setattr(paths, "PACKAGE_DIR", package)
    assert paths.repo_path(package / "_data" / "bench" / "profiles" / "cpu.yaml") == "bench/profiles/cpu.yaml"
    assert paths.repo_path(package / "defaults" / "default.yaml") == "appliance/defaults/default.yaml"
    assert paths.repo_path(tmp_path / "mine.yaml") == str(tmp_path / "mine.yaml")
