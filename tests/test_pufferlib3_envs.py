"""PufferLib 3.0's env format on our runtime (appliance/pufferlib3.py, envs/compat3/): a folder whose
binding.c includes env_binding.h and writes my_init(Env*, PyObject*, PyObject*) is compiled unchanged
against our header, with the spaces its NAME.py would declare read from a spaces file. The env here,
tests/data/pufferlib3/ocean/beacon, is written in that format for these tests (two agents per env,
an observation size set by a kwarg, int32 actions and byte terminals)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import one_line_error

from appliance import ocean, pufferlib3, pufferlib_envs
from appliance.cli import cli
from appliance.errors import ConfigError

DATA = Path(__file__).parent / "data" / "pufferlib3"
BEACON = DATA / "ocean" / "beacon"

pytestmark = [
    pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler"),
    pytest.mark.usefixtures("env_cache"),  # conftest: every build in a cache of the test's own
]


def variant(tmp_path: Path, name: str, spaces: str | None = None, edit=None, env: str | None = None) -> Path:
    """A copy of beacon named ``name`` (a process registers each name once), with its spaces file,
    binding.c or ini [env] changed."""
    folder = tmp_path / "ocean" / name
    shutil.copytree(BEACON, folder)
    (folder / "beacon.spaces.ini").rename(folder / f"{name}.spaces.ini")
    if spaces is not None:
        (folder / f"{name}.spaces.ini").write_text(spaces)
    if edit:
        (folder / "binding.c").write_text(edit((folder / "binding.c").read_text()))
    (tmp_path / "config").mkdir(exist_ok=True)
    ini = (DATA / "config" / "beacon.ini").read_text().replace("env_name = beacon", f"env_name = {name}")
    if env is not None:
        ini = ini.replace("agents = 2\nwidth = 10\nmax_steps = 30", env)
    (tmp_path / "config" / f"{name}.ini").write_text(ini)
    return folder


def test_a_3_0_folder_builds_with_the_spaces_its_python_side_would_declare():
    built = pufferlib_envs.build(BEACON)  # beacon.spaces.ini beside binding.c, config/beacon.ini
    assert built.meta["format"] == "3.0"
    assert built.meta["spaces"]["fixed"] == ["agents", "width"]
    name = pufferlib_envs.load_library(built)
    info = ocean.describe(name)
    assert info["agents_per_env"] == 2  # the spaces file's agents, not a struct field
    assert (info["obs_size"], info["obs_dtype"]) == (10, "float32")  # observations = width
    assert info["action_nvec"] == [3]
    assert info["params"] == {"width": 10.0, "max_steps": 30.0, "num_agents": 2.0}  # num_agents: [kwargs]
    assert info["log_names"] == ["perf", "score", "episode_return", "episode_length", "n"]  # from my_log
    assert "learning_rate: 0.01" in built.recipe.read_text()
    # a kwarg the spaces depend on is fixed: another value would not fit the buffers
    with pytest.raises(ConfigError, match=r"'width' = 12 is outside its valid range \[10, 10\]"):
        ocean.describe(name, width=12)
    ocean.describe(name, max_steps=5)  # the others are free


def test_int_actions_byte_terminals_and_logs_cross_the_boundary():
    from appliance.vector import native

    name = pufferlib_envs.load_library(pufferlib_envs.build(BEACON))
    with native.make(name, num_envs=8, num_threads=2, seed=0) as vec:
        obs, _ = vec.reset(0)
        assert obs.shape == (16, 10) and (obs.sum(axis=1) == 1).all()  # one-hot, in our rows
        right = np.full(16, 2, dtype=np.int32)
        ended = np.zeros(16, dtype=bool)
        for _ in range(9):
            _, rewards, terminals, truncations, _ = vec.step(right)
            assert np.array_equal(terminals, rewards == 1.0) and not truncations.any()
            assert np.isclose(rewards, -0.01).sum() + (rewards == 1.0).sum() == 16
            ended |= terminals
        assert ended.all()  # from any start of 9 cells, 9 steps right reach the beacon
        stats = vec.log()
    assert stats["perf"] == 1.0 and stats["n"] >= 16


def test_envs_build_names_the_format_then_it_trains_a_few_epochs(tmp_path):
    out = CliRunner().invoke(cli, ["envs", "build", str(BEACON)])
    assert out.exit_code == 0, out.output
    assert (
        "PufferLib 3.0 format" in out.output and "float32[10], Discrete(3), 2 agent(s) an env" in out.output
    )
    out = CliRunner().invoke(cli, ["train", "pufferlib:beacon", "--gpu", "cpu", "--no-dashboard", "--stop-steps",
                                   "20000", "--vec.num-envs", "64", "--train.data-dir", str(tmp_path)])  # fmt: skip
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("no spaces file", ["PufferLib 3.0's format", "--spaces FILE"]),
        ("unknown name", ["[spaces] observations", "'wdth' is not a key of the env's ini [env]"]),
        ("a call", ["only numbers, [env] keys"]),
        ("bad actions", ["'discrete N'", "'box K'"]),
        ("bad dtype", ["obs_dtype is 'int8'"]),
        ("dtype not the struct's", ["failed to compile", "observation dtype is not the Env struct"]),
        ("no observations", ["lacks 'observations'"]),
        ("unknown key", ["has no key 'shape'"]),
        ("zero agents", ["[spaces] agents is 0"]),
        ("shared hook", ["MY_SHARED", "not supported"]),
        (
            "too few observations",
            ["bytes past the end of its observation rows (its spaces file's observations = 5"],
        ),
    ],
)
def test_bad_spaces_or_bindings_get_one_line_naming_what_to_fix(tmp_path, case, fragments):
    base = "[spaces]\nobservations = width\nobs_dtype = float32\nactions = discrete 3\nagents = agents\n" \
           "[kwargs]\nnum_agents = agents\n"  # fmt: skip
    spaces, edit = base, None
    if case == "unknown name":
        spaces = base.replace("observations = width", "observations = wdth")
    elif case == "a call":
        spaces = base.replace("observations = width", "observations = __import__('os').getpid()")
    elif case == "bad actions":
        spaces = base.replace("discrete 3", "discrete")
    elif case == "bad dtype":
        spaces = base.replace("float32", "int8")
    elif case == "dtype not the struct's":
        spaces = base.replace("float32", "uint8")
    elif case == "no observations":
        spaces = base.replace("observations = width\n", "")
    elif case == "unknown key":
        spaces = base.replace("agents = agents\n", "agents = agents\nshape = 3\n", 1)
    elif case == "zero agents":
        spaces = base.replace("agents = agents", "agents = agents - 2", 1)
    elif case == "too few observations":
        spaces = base.replace("observations = width", "observations = width // 2")
    elif case == "shared hook":
        edit = lambda text: text.replace("#define Env Beacon", "#define Env Beacon\n#define MY_SHARED")  # noqa: E731
    name = "b_" + case.replace(" ", "_").replace("'", "")
    folder = variant(tmp_path, name, spaces, edit)
    if case == "no spaces file":
        (folder / f"{name}.spaces.ini").unlink()
    out = CliRunner().invoke(cli, ["envs", "build", str(folder)])
    message = one_line_error(out)
    for fragment in fragments:
        assert fragment in message, message


def test_spaces_given_for_a_4_0_folder_or_missing_are_refused(tmp_path):
    corridor = Path(__file__).parent / "data" / "pufferlib4" / "ocean" / "corridor"
    spaces = tmp_path / "s.ini"
    spaces.write_text("[spaces]\nobservations = 4\nactions = discrete 2\n")
    message = one_line_error(
        CliRunner().invoke(cli, ["envs", "build", str(corridor), "--spaces", str(spaces)])
    )
    assert "--spaces is for PufferLib 3.0-format folders" in message
    message = one_line_error(
        CliRunner().invoke(cli, ["envs", "build", str(BEACON), "--spaces", str(tmp_path / "no")])
    )
    assert "no such file" in message


def test_expressions_read_kwargs_lists_and_arithmetic_and_nothing_else():
    env = {"vision": 3, "num_agents": [8, 4], "size": 8}
    assert pufferlib3.evaluate("(2*vision + 1)*(2*vision + 1)", env, "x") == (49, {"vision"})
    assert pufferlib3.evaluate("num_agents[0]", env, "x")[0] == 8
    assert pufferlib3.evaluate("size*size*8 // 2 % 100", env, "x")[0] == 56
    for bad in ("size.bit_length()", "[1, 2]", "size // 0", "size / 2", "num_agents[5]", "lambda: 1"):
        with pytest.raises(ConfigError):
            pufferlib3.evaluate(bad, env, "x")
