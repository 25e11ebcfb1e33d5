"""Kinds of CPU (issue 60, part 4): the cpu profile tells a CPU with bfloat16 units from one with
AVX-512 only, AVX2 only, AVX only or none of these, takes an env's settings for that kind (``profiles.cpu.KIND`` in
its YAML), says the kind in the profile's line, and ``PUFFER_CPU_KIND`` makes a CPU act as a lesser
kind (torch capped to its ISA, float32) so that one machine can measure the others."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from appliance.cli import cli
from appliance.config import hardware, resolve
from appliance.errors import ConfigError
from appliance.paths import defaults_dir
from appliance.sysinfo import cpu as syscpu


@pytest.fixture
def cpu_of(monkeypatch):
    """Make this CPU's own kind ``kind`` (what /proc/cpuinfo's flags would say), no emulation."""

    def make(kind: str) -> None:
        monkeypatch.setattr(syscpu, "_REAL_KIND", kind)
        monkeypatch.delenv(syscpu.KIND_VARIABLE, raising=False)

    return make


def breakout_profiles() -> dict:
    return yaml.safe_load((defaults_dir() / "envs" / "breakout.yaml").read_text())["profiles"]


@pytest.mark.parametrize(
    ("isa", "kind"),
    [
        ({"avx2": True, "avx512": True, "amx": True, "bf16": True}, "bf16"),  # Sapphire Rapids
        ({"avx2": True, "avx512": True, "amx": False, "bf16": True}, "bf16"),  # Zen 4
        ({"avx2": True, "avx512": True, "amx": False, "bf16": False}, "avx512"),  # Ice Lake
        ({"avx2": True, "avx512": False, "amx": False, "bf16": False}, "avx2"),  # Zen 2/3
        ({"avx": True, "avx2": False, "avx512": False, "amx": False, "bf16": False}, "avx"),  # Sandy Bridge
        ({"avx": False, "avx2": False, "avx512": False, "amx": False, "bf16": False}, "older"),  # Westmere
    ],
)
def test_a_cpus_kind_follows_its_features(isa, kind):
    assert syscpu.kind_of(isa) == kind


def test_a_cpu_acts_as_a_lesser_kind_and_never_a_greater_one():
    assert syscpu.emulated_kind("bf16", {}) is None
    assert syscpu.emulated_kind("bf16", {"PUFFER_CPU_KIND": "AVX2"}) == "avx2"
    assert syscpu.emulated_kind("bf16", {"PUFFER_CPU_KIND": "avx512"}) == "avx512"
    assert syscpu.emulated_kind("avx512", {"PUFFER_CPU_KIND": "avx512"}) is None  # its own kind
    with pytest.raises(ConfigError, match="of the avx2 kind and can act only as avx2, avx, older") as e:
        syscpu.emulated_kind("avx2", {"PUFFER_CPU_KIND": "bf16"})
    assert "\n" not in str(e.value)
    with pytest.raises(
        ConfigError, match="avx3: not a CPU kind; the kinds are bf16, avx512, avx2, avx, older"
    ):
        syscpu.emulated_kind("bf16", {"PUFFER_CPU_KIND": "avx3"})


def caps_set(environ):
    """(ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS) as set in ``environ``."""
    return tuple(environ[v] for v in syscpu.TORCH_CAPS)


def test_an_emulated_kind_caps_torchs_kernels_unless_the_user_capped_them():
    """ATen's kernels and the matrix libraries beneath them (oneDNN, MKL) alike: on an Intel CPU with
    AVX-512 units MKL's float32 GEMM would otherwise run its AVX-512 code for an emulated AVX2 CPU."""
    environ = {"PUFFER_CPU_KIND": "avx2"}
    syscpu.cap_torch(environ)
    assert environ == {
        "PUFFER_CPU_KIND": "avx2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    }
    environ = {"PUFFER_CPU_KIND": "older"}
    syscpu.cap_torch(environ)
    assert caps_set(environ) == ("default", "SSE41", "SSE4_2")
    environ = {"PUFFER_CPU_KIND": "avx"}  # ATen has no AVX-only kernels; oneDNN and MKL do
    syscpu.cap_torch(environ)
    assert caps_set(environ) == ("default", "AVX", "AVX")
    environ = {
        "PUFFER_CPU_KIND": "avx512",
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    }
    syscpu.cap_torch(environ)
    assert caps_set(environ) == ("default", "AVX512_CORE", "AVX2")
    environ = {"PUFFER_CPU_KIND": "bf16"}
    syscpu.cap_torch(environ)
    assert environ == {"PUFFER_CPU_KIND": "bf16"}


def test_an_emulated_kind_without_bf16_trains_in_float32(monkeypatch):
    """precision auto on a bf16 CPU acting as a lesser kind is float32, as on a real one of that kind."""
    import torch

    from appliance import sysinfo
    from appliance.train.make import resolve_precision

    real = syscpu.cpu_details()
    for emulated, precision in ((None, "bfloat16"), ("avx512", "float32"), ("avx2", "float32")):
        details = {**real, "isa": {**real["isa"], "bf16": True}, "kind": "bf16", "emulated_kind": emulated}
        monkeypatch.setattr(sysinfo, "cpu_details", lambda details=details: details)
        assert resolve_precision("auto", torch.device("cpu")) == precision, emulated


@pytest.mark.parametrize("kind", syscpu.CPU_KINDS)
def test_breakouts_cpu_profile_takes_the_settings_of_the_cpus_kind(cpu_of, kind):
    """The defaults a user gets: the cpu profile, then breakout's section for this kind of CPU (if it
    has one), named in the config's history; the command line still wins."""
    cpu_of(kind)
    profiles = breakout_profiles()
    assert any(str(name).startswith("cpu.") for name in profiles), "breakout refines its cpu profile by kind"
    cfg = resolve(env="breakout", profile="cpu")
    refined = profiles.get(f"cpu.{kind}") or {}
    for section, values in {**profiles["cpu"], **refined}.items():
        for key, value in values.items():
            if key in refined.get(section, {}):
                value = refined[section][key]
                assert cfg.origin(section, key).endswith(f"breakout.yaml, profiles.cpu.{kind})")
            assert cfg.data[section][key] == value, (kind, section, key)
    bare = resolve(env="breakout", profile="cpu", overrides=["--train.replay-ratio", "1"])
    assert bare.train.replay_ratio == 1


def test_an_emulated_kind_takes_that_kinds_settings_and_says_so(cpu_of, monkeypatch):
    """What a user emulating an AVX CPU on a bf16 one gets: the avx section, and the profile's line
    says the kind is emulated."""
    cpu_of("bf16")
    profiles = breakout_profiles()
    monkeypatch.setenv("PUFFER_CPU_KIND", "avx")
    cfg = resolve(env="breakout", profile="cpu")
    for section, values in profiles["cpu.avx"].items():
        for key, value in values.items():
            assert cfg.data[section][key] == value
            assert cfg.origin(section, key).endswith("breakout.yaml, profiles.cpu.avx)")
    line = hardware.why("cpu")
    assert "a CPU of the avx kind (AVX, no AVX2" in line
    assert "emulated by PUFFER_CPU_KIND on a CPU of the bf16 kind" in line


def test_a_bad_kind_is_one_line_from_the_command_line(cpu_of, monkeypatch):
    cpu_of("avx2")
    monkeypatch.setenv("PUFFER_CPU_KIND", "bf16")
    result = CliRunner().invoke(cli, ["config", "breakout", "--gpu", "cpu"])
    out = result.output.strip()
    assert result.exit_code == 2 and len(out.splitlines()) == 1, out
    assert "PUFFER_CPU_KIND=bf16: this CPU is of the avx2 kind" in out


def test_an_unknown_cpu_kind_section_in_an_env_yaml_is_refused(tmp_path, monkeypatch):
    import appliance.config.build as build

    path = tmp_path / "breakout.yaml"
    path.write_text("profiles:\n  cpu.avx3: {train: {replay_ratio: 0.5}}\n")
    monkeypatch.setattr(build, "env_yaml", lambda env: path)
    with pytest.raises(ConfigError, match=r"unknown profiles: cpu.avx3 \(a hardware profile, or cpu.KIND"):
        resolve(env="breakout", profile="cpu")


def test_the_config_audit_resolves_the_cpu_profile_on_every_kind(cpu_of):
    """A value that a kind's section replaces is live on the other kinds, and each kind's section is
    checked too: were the audit to resolve only this CPU's kind, an AVX machine would call the
    default rollout_int16 dead (tests/test_config_dead_values.py) and a bf16 one would never check
    cpu.avx."""
    from appliance.config import audit

    cpu_of("avx2")
    runs = [r for r in audit.resolutions() if r[0] == "breakout"]
    configs = {audit._name(*r): audit._resolve(*r) for r in runs}
    names = [audit._name(*r) for r in runs if r[1] == "cpu"]
    assert names == [f"breakout --gpu cpu (a CPU of the {k} kind)" for k in syscpu.CPU_KINDS]
    int16 = {name: configs[name].train.rollout_int16 for name in names}
    assert list(int16.values()) == [k in ("avx", "older") for k in syscpu.CPU_KINDS], int16
    assert configs[names[3]].train.rollout_int16 == breakout_profiles()["cpu.avx"]["train"]["rollout_int16"]


def test_a_fingerprint_says_whether_the_kind_was_emulated():
    from appliance.sysinfo import machine_facts

    own = {"cpu": {"kind": "avx2", "emulated_kind": None}}
    emulated = {"cpu": {"kind": "bf16", "emulated_kind": "avx2", "isa": {"bf16": True}}}
    assert machine_facts(own)["CPU kind"] == "avx2"
    assert machine_facts(emulated)["CPU kind"] == "avx2 (emulated; its own: bf16)"
    assert syscpu.bf16_units(emulated["cpu"]) is False
    assert syscpu.bf16_units({"isa": {"bf16": True}, "emulated_kind": None}) is True


def test_a_fingerprint_records_the_isa_caps_its_libraries_ran_under(monkeypatch):
    """An emulated kind's caps (or a user's own) slow a run: its report says so, and compare sees it."""
    from appliance.sysinfo import fingerprint, machine_facts, summary
    from appliance.sysinfo.cpu import cpu_details

    for variable in syscpu.TORCH_CAPS:
        monkeypatch.delenv(variable, raising=False)
    assert cpu_details()["library_caps"] == {}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    caps = cpu_details()["library_caps"]
    assert caps == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    label = "ISA caps (torch's libraries)"
    assert (
        machine_facts({"cpu": {"library_caps": caps}})[label]
        == "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2"
    )
    assert machine_facts({"cpu": {"library_caps": {}}})[label] == "none"
    assert machine_facts({"cpu": {}})[label] is None  # a report from before the field: not recorded
    rows = dict(summary(fingerprint(calibration=False)))
    assert rows["ISA caps"] == "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2"  # puffer-bench info's row


@pytest.mark.parametrize(
    ("vendor", "kind", "warned"),
    [
        ("AuthenticAMD", "older", True),
        ("AuthenticAMD", "avx", True),
        ("AuthenticAMD", "avx2", False),  # MKL's own code on an AMD CPU is AVX2's: no wider
        ("GenuineIntel", "older", False),  # MKL honours its cap on Intel's CPUs
        (None, "older", False),  # a vendor unknown: nothing claimed
    ],
)
def test_emulating_a_kind_below_avx2_on_a_cpu_not_intels_says_mkl_runs_wider(
    cpu_of, monkeypatch, vendor, kind, warned
):
    """On AMD hosts MKL ignored MKL_ENABLE_INSTRUCTIONS, so the emulated older kind ran its rollout's
    products at AVX2 and took 522-668 s to breakout's perf 0.9 where a faithful emulation on an Intel
    CPU ran about 1.3-1.7x slower: train's first line says so where it happens, and the fingerprint
    marks MKL's cap as ignored."""
    from appliance.sysinfo import machine_facts

    cpu_of("bf16")
    monkeypatch.setattr(syscpu, "_REAL_VENDOR", [vendor])
    monkeypatch.setenv("PUFFER_CPU_KIND", kind)
    resolve(env="breakout", profile="cpu")
    line = hardware.why("cpu")
    assert f"a CPU of the {kind} kind" in line
    assert ("MKL ignores its cap on a CPU that is not Intel's" in line) == warned, line
    monkeypatch.delenv("PUFFER_CPU_KIND")
    assert "MKL ignores" not in hardware.why("cpu")  # its own kind: nothing capped

    caps = {"MKL_ENABLE_INSTRUCTIONS": syscpu.TORCH_CAPS["MKL_ENABLE_INSTRUCTIONS"][kind]}
    ignored = syscpu.mkl_cap_ignored(caps, vendor)
    assert ignored == (vendor == "AuthenticAMD")
    assert syscpu.mkl_cap_ignored({}, vendor) is False  # no cap set: none to ignore
    facts = machine_facts({"cpu": {"library_caps": caps, "mkl_cap_ignored": ignored}})
    assert facts["ISA caps (torch's libraries)"].endswith("(MKL's ignored: not an Intel CPU)") == ignored


def test_the_fingerprint_says_whether_mkl_honoured_its_cap_on_this_cpu(monkeypatch):
    from appliance.sysinfo.cpu import cpu_details

    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    details = cpu_details()
    assert details["mkl_cap_ignored"] == (details["vendor"] not in (None, "GenuineIntel"))
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS")
    assert cpu_details()["mkl_cap_ignored"] is False


def test_a_parity_config_is_the_peers_settings_on_every_kind_of_cpu():
    """A learning comparison with PufferLib runs its settings whatever the CPU: no kind's section of an
    env YAML may show through a bench/parity config (PufferLib 3.0's breakout trained half of each
    batch on a float32 CPU when its config left train.replay_ratio to the layers beneath)."""
    from conftest import parity_configs

    paths = parity_configs("**/*.yaml")
    assert any(p.stem == "breakout" for p in paths)
    for path in paths:
        seen = []
        for kind in syscpu.CPU_KINDS:
            with syscpu.acting_as(kind):
                cfg = resolve(env=path.stem, profile="cpu", config_file=path)
            seen.append({s: cfg.data[s] for s in ("vec", "train", "policy", "env")})
        assert all(s == seen[0] for s in seen), path
