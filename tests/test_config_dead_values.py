"""No shipped YAML holds a value that can never apply (appliance/config/audit.py): every env x
hardware profile (and no profile, as `envs sps` resolves) is resolved and each shipped value must
change at least one of them."""

from __future__ import annotations

import shutil

from appliance.config import audit, files
from appliance.config.build import Config


def test_no_shipped_yaml_holds_a_dead_value():
    assert audit.dead_values() == []


def test_a_profile_value_that_restates_what_it_overrides_is_found(tmp_path, monkeypatch):
    profiles = tmp_path / "profiles"
    shutil.copytree(files.profile_dir(), profiles)
    with open(profiles / "cpu.yaml", "a") as f:
        f.write("bench:\n  threads: [1, 2]\n")  # default.yaml's
    monkeypatch.setattr(files, "profile_dir", lambda: profiles)
    one = {"squared --gpu cpu": audit.resolve(env="squared", profile="cpu")}
    dead = [d for d in audit.dead_values(one) if d.startswith("hardware profile")]
    assert len(dead) == 1 and dead[0].startswith(f"hardware profile ({profiles / 'cpu.yaml'}): bench.threads")
    assert "restates built-in default" in dead[0]


def test_a_value_every_later_layer_replaces_is_found_and_a_recipe_pin_is_not():
    history = {
        ("train", "gamma"): [
            ("built-in default (d)", 0.995),
            ("env YAML (e)", 0.9),
            ("hardware profile (p)", 0.8),
        ],
        ("train", "bptt_horizon"): [("built-in default (d)", 64), ("env YAML (e)", 64)],  # states the recipe
    }
    cfg = Config(
        {"vec": {}, "train": {"gamma": 0.8, "bptt_horizon": 64}, "policy": {}, "env": {}, "bench": {}}
    )
    cfg.history = history
    assert audit.dead_values({"x": cfg}) == [
        "env YAML (e): train.gamma never applies: it is replaced by hardware profile (p) in x "
        "(and in all 1 resolutions it is in)"
    ]


def test_every_env_and_profile_is_resolved():
    runs = list(audit.resolutions())
    assert ("breakout", None, None, None) in runs and ("breakout", "h100", None, None) in runs
    assert ("Pendulum-v1", "cpu", None, "avx2") in runs and ("CartPole-v1", "4090", "atari", None) in runs
    assert [r[3] for r in runs if r[:3] == ("breakout", "cpu", None)] == [
        "bf16",
        "avx512",
        "avx2",
        "avx",
        "older",
    ]
