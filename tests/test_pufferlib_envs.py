"""PufferLib 4.0's env format on our runtime (appliance/pufferlib_envs.py, envs/compat4/): a folder in
that format is compiled unchanged, registered as pufferlib:NAME and stepped, benched and trained like
our own Ocean envs. The env here, tests/data/pufferlib4/ocean/corridor, is written in the format for
these tests (two agents per env, two action heads, byte observations, rand_r on its own seed word)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import one_line_error

from appliance import _ocean, ocean, pufferlib_envs
from appliance.cli import cli
from appliance.errors import ConfigError

DATA = Path(__file__).parent / "data" / "pufferlib4"
CORRIDOR = DATA / "ocean" / "corridor"
KEYHOLE = DATA / "ocean" / "keyhole"  # an action-masked env (MY_ACTION_MASK)
INI = "[base]\nenv_name = {name}\n\n[vec]\ntotal_agents = 64\n\n[env]\n{env}\n"
ENV_KEYS = "num_agents = 2\nlength = 12\nmax_steps = 24"
KEYHOLE_KEYS = "num_agents = 2\nmax_steps = 16"

pytestmark = [
    pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler"),
    pytest.mark.usefixtures("env_cache"),  # conftest: every build in a cache of the test's own
]


def variant(tmp_path: Path, name: str, env_keys: str = ENV_KEYS, edit=None, source: Path = CORRIDOR) -> Path:
    """A copy of the corridor env (or of ``source``) named ``name`` (a new name: a process registers
    each name once), its ini in the snapshot layout's config/ folder, its binding.c changed by ``edit``."""
    folder = tmp_path / "ocean" / name
    shutil.copytree(source, folder)
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / f"{name}.ini").write_text(INI.format(name=name, env=env_keys))
    if edit:
        binding = folder / "binding.c"
        binding.write_text(edit(binding.read_text()))
    return folder


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def train_briefly(tmp_path: Path, name: str, run_id: str) -> list[dict]:
    """``pufferlib:NAME`` trained 20,000 agent-steps through the CLI (64 envs, minibatches of 1,024):
    its metrics records."""
    trained = run(
        "train", f"pufferlib:{name}", "--no-dashboard", "--stop-steps", "20000", "--run-id", run_id,
        "--train.data-dir", str(tmp_path / "runs"), "--vec.num-envs", "64", "--train.minibatch-size", "1024",
        "--train.max-minibatch-size", "1024",
    )  # fmt: skip
    assert trained.exit_code == 0, trained.output
    return [
        json.loads(line) for line in (tmp_path / "runs" / run_id / "metrics.jsonl").read_text().splitlines()
    ]


def test_a_folder_in_the_format_builds_and_describes_itself_from_its_binding_and_ini():
    built = pufferlib_envs.build(CORRIDOR)
    assert built.name == "pufferlib:corridor"
    name = pufferlib_envs.load_library(built)
    info = ocean.describe(name)
    assert info["agents_per_env"] == 2  # my_init read num_agents from config/corridor.ini
    assert (info["obs_size"], info["obs_dtype"]) == (16, "uint8")  # ByteTensor
    assert info["action_nvec"] == [3, 2]  # ACT_SIZES: two heads
    assert info["params"] == {"num_agents": 2.0, "length": 12.0, "max_steps": 24.0}
    # my_log's names for the fields it exports; the one it does not (strides) by its place; n last
    assert info["log_names"] == ["perf", "score", "episode_return", "episode_length", "log_4", "n"]
    recipe = built.recipe.read_text()
    assert "learning_rate: 0.01" in recipe and "num_envs: 256" in recipe  # [train] over default.ini; 512 / 2


def test_a_build_is_cached_by_its_sources_hash_and_a_changed_source_builds_anew(tmp_path):
    folder = variant(tmp_path, "corridor_cache")
    first = pufferlib_envs.build(folder)
    mtime = first.library.stat().st_mtime_ns
    again = pufferlib_envs.build(folder)
    assert again.library == first.library and again.library.stat().st_mtime_ns == mtime
    (folder / "corridor.h").write_text((folder / "corridor.h").read_text() + "\n/* changed */\n")
    changed = pufferlib_envs.build(folder)
    assert changed.library != first.library and changed.library.is_file()
    assert pufferlib_envs.current("corridor_cache").library == changed.library


def test_stepping_on_our_runtime_is_seeded_per_env_and_the_same_for_any_thread_count():
    from appliance.vector import native

    name = pufferlib_envs.load_library(pufferlib_envs.build(CORRIDOR))
    rng = np.random.default_rng(0)
    actions = np.stack([rng.integers(0, 3, (64, 40)), rng.integers(0, 2, (64, 40))], axis=-1).astype(np.int32)

    def trajectory(threads: int, seed: int) -> np.ndarray:
        with native.make(name, num_envs=32, num_threads=threads, seed=seed) as vec:
            obs, _ = vec.reset(seed)
            frames = [obs.copy()]
            for t in range(40):
                obs, _, _, truncations, _ = vec.step(actions[:, t])
                frames.append(obs.copy())
                assert not truncations.any()  # the format has no truncations
            return np.stack(frames)

    one, two = trajectory(1, 7), trajectory(2, 7)
    assert one.shape == (41, 64, 16)
    assert np.array_equal(one, two)
    assert not np.array_equal(one[0], trajectory(1, 8)[0])  # the start cell is drawn from the env's stream
    assert (one.sum(axis=-1) == 1).all()  # one-hot cells, written straight into our buffer


def test_rewards_terminals_and_logs_cross_the_boundary():
    from appliance.vector import native

    name = pufferlib_envs.load_library(pufferlib_envs.build(CORRIDOR))
    with native.make(name, num_envs=8, num_threads=1, seed=0) as vec:
        vec.reset(0)
        right = np.tile(np.array([[2, 1]], dtype=np.int32), (16, 1))  # right, two cells a step
        ended = np.zeros(16, dtype=bool)
        for _ in range(6):
            _, rewards, terminals, _, _ = vec.step(right)
            assert np.isclose(rewards, -0.01).sum() + (rewards == 1.0).sum() == rewards.size
            assert np.array_equal(terminals, rewards == 1.0)  # float terminals became our flags
            ended |= terminals
        assert ended.all()  # from any start cell of 12, two cells a step reach the end within 6
        stats = vec.log()
    assert stats["perf"] == 1.0 and stats["n"] >= 16


def test_the_episode_count_is_the_log_field_named_n_wherever_the_struct_holds_it(tmp_path):
    """PufferLib 4.0's Log is divided by its field n, which need not be last (its cartpole has score
    after it): ours divided by the last field, so every statistic was a ratio of two others."""
    from appliance.vector import native

    folder = variant(tmp_path, "corridor_n_first")
    header = folder / "corridor.h"
    header.write_text(
        header.read_text().replace("    float strides;\n    float n;\n", "    float n;\n    float strides;\n")
    )
    name = pufferlib_envs.load_library(pufferlib_envs.build(folder))
    info = ocean.describe(name)
    assert info["log_names"] == ["perf", "score", "episode_return", "episode_length", "n", "log_5"]
    with native.make(name, num_envs=8, num_threads=1, seed=0) as vec:
        vec.reset(0)
        right = np.tile(np.array([[2, 1]], dtype=np.int32), (16, 1))
        for _ in range(6):
            vec.step(right)
        stats = vec.log()
    assert stats["perf"] == 1.0 and stats["n"] >= 16  # every agent reached the end within 6 steps
    assert 1.0 <= stats["log_5"] <= 6.0  # strides an episode: one per step, as the struct's field counts


def corridor_frames(name: str, steps: int = 30) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observations, rewards and terminals of 16 corridor envs under fixed random actions."""
    from appliance.vector import native

    rng = np.random.default_rng(3)
    actions = np.stack([rng.integers(0, 3, (32, steps)), rng.integers(0, 2, (32, steps))], -1).astype(
        np.int32
    )
    frames, rewards, terminals = [], [], []
    with native.make(name, num_envs=16, num_threads=1, seed=5) as vec:
        obs, _ = vec.reset(5)
        frames.append(obs.copy())
        for t in range(steps):
            obs, rew, term, _, _ = vec.step(actions[:, t])
            frames.append(obs.copy())
            rewards.append(rew.copy())
            terminals.append(term.copy())
    return np.stack(frames), np.stack(rewards), np.stack(terminals)


def test_the_formats_earlier_dialect_with_double_actions_steps_as_the_current_one(tmp_path):
    """OBS_TYPE/ACT_TYPE in place of OBS_TENSOR_T, and a struct whose actions are double (blastar,
    convert, snake, whisker_racer in the pinned snapshot): the element types come from the struct."""
    folder = variant(
        tmp_path,
        "corridor_dialect",
        edit=lambda b: b.replace(
            "#define OBS_TENSOR_T ByteTensor", "#define OBS_TYPE UNSIGNED_CHAR\n#define ACT_TYPE DOUBLE"
        ),
    )
    header = folder / "corridor.h"
    header.write_text(header.read_text().replace("    float* actions;", "    double* actions;"))
    name = pufferlib_envs.load_library(pufferlib_envs.build(folder))
    assert ocean.describe(name)["obs_dtype"] == "uint8"
    reference = corridor_frames(pufferlib_envs.load_library(pufferlib_envs.build(CORRIDOR)))
    for ours, theirs in zip(corridor_frames(name), reference, strict=True):
        assert np.array_equal(ours, theirs)
    assert reference[2].any()  # some episodes ended: the double actions moved the agents


PERM_ENV = """
#define MY_USES_PERM
#define MY_USES_TAGS
#define MY_VEC_STEP corridor_vec_step
"""
PERM_SETUP = """
void my_setup_perm(StaticVec* vec, Env* env, int slot_base) {
    for (int s = 0; s < env->num_agents; s++) {
        int phys = vec->agent_perm ? vec->agent_perm[slot_base + s] : slot_base + s;
        env->slot_obs[s] = (unsigned char*)vec->observations + (size_t)phys * OBS_SIZE * obs_element_size();
        env->slot_reward[s] = vec->rewards + phys;
    }
    env->perm_calls++;
}

void corridor_vec_step(StaticVec* vec) { (void)vec; abort(); }
"""


def test_per_slot_pointers_from_my_setup_perm_point_at_the_envs_own_rows(tmp_path):
    """MY_USES_PERM: the env keeps a pointer per agent slot, set by its my_setup_perm from the vector's
    rows (identity permutation); MY_USES_TAGS leaves tags 0; MY_VEC_STEP, a whole-vector step the
    format's own vector never calls, is not called here either (this one aborts if it is)."""
    folder = variant(
        tmp_path,
        "corridor_perm",
        edit=lambda b: (PERM_ENV + b + PERM_SETUP).replace(
            "void my_init(Env* env, Dict* kwargs) {",
            "void my_init(Env* env, Dict* kwargs) {\n    env->tag = 0;",
        ),
    )
    header = folder / "corridor.h"
    text = header.read_text().replace(
        "    unsigned int rng;",
        "    unsigned int rng;\n    unsigned char* slot_obs[8];\n    float* slot_reward[8];\n    int perm_calls;\n"
        "    int tag;\n    int boundary_reached;",
    )
    # observe through the slot's pointer and pay through it, as a permuted env does
    text = text.replace(
        "unsigned char* obs = env->observations + a * CORRIDOR_CELLS;",
        "unsigned char* obs = env->slot_obs[a];",
    )
    text = text.replace("env->rewards[a] = reward;", "*env->slot_reward[a] = reward;")
    header.write_text(text)
    name = pufferlib_envs.load_library(pufferlib_envs.build(folder))
    reference = corridor_frames(pufferlib_envs.load_library(pufferlib_envs.build(CORRIDOR)))
    for ours, theirs in zip(corridor_frames(name), reference, strict=True):
        assert np.array_equal(ours, theirs)


def test_an_env_that_opens_its_data_relative_to_the_checkout_is_told_where_to_run_from(tmp_path, monkeypatch):
    """The format's envs open resources/NAME/... relative to the checkout's root, where PufferLib runs
    them: a build elsewhere crashes in my_init, and the one line says which folder to run it from."""
    opens = """void my_init(Env* env, Dict* kwargs) {
    FILE* f = fopen("resources/corridor/map.txt", "r");
    if (!f) { fprintf(stderr, "corridor: no map\\n"); abort(); }
    fclose(f);"""
    folder = variant(
        tmp_path, "corridor_data", edit=lambda b: b.replace("void my_init(Env* env, Dict* kwargs) {", opens)
    )
    (tmp_path / "resources" / "corridor").mkdir(parents=True)
    (tmp_path / "resources" / "corridor" / "map.txt").write_text("map\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    one_line_error(
        run("envs", "build", str(folder)), "crashed (SIGABRT)", f"run it from {tmp_path.resolve()}"
    )
    monkeypatch.chdir(tmp_path)
    built = run("envs", "build", str(folder))
    assert built.exit_code == 0, built.output


def test_env_kwargs_are_the_config_env_section_and_overridable():
    from appliance.config import resolve

    name = pufferlib_envs.load_library(pufferlib_envs.build(CORRIDOR))
    cfg = resolve(env=name, overrides=["--env.length", "6"])
    assert cfg.env.length == 6 and cfg.env.num_agents == 2
    assert (
        cfg.policy.core == "mingru" and cfg.train.learning_rate == 0.01
    )  # the ini's recipe is the env's layer
    assert ocean.describe(name, length=6)["agents_per_env"] == 2
    one_line = run("config", name, "--env.lenght", "6")
    one_line_error(one_line, "lenght", "length")


def test_a_profiles_envs_are_agent_rows_for_an_env_of_many_agents(tmp_path):
    """The cpu profile's 256 envs are 256 agent rows: an env of 8 agents gets 32 envs (convert, 1,024
    agents an env, got 256 envs, 262,144 agents, and did not train 1 M steps in 30 minutes). Without a
    profile nothing is converted; a user's --vec.num-envs is kept."""
    from appliance.config import resolve

    name = pufferlib_envs.load_library(
        pufferlib_envs.build(
            variant(tmp_path, "corridor_crowd", ENV_KEYS.replace("num_agents = 2", "num_agents = 8"))
        )
    )
    profile = resolve(profile="cpu").vec.num_envs  # the profile's rows
    cfg = resolve(env=name, profile="cpu")
    assert profile % 8 == 0 and cfg.vec.num_envs == profile // 8
    assert cfg.history[("vec", "num_envs")][-1][0].startswith("set by resolve (the profile's")
    assert resolve(env=name).vec.num_envs == resolve().vec.num_envs  # no profile: nothing to convert
    assert resolve(env=name, profile="cpu", overrides=["--vec.num-envs", "100"]).vec.num_envs == 100


def test_ini_keys_my_init_never_reads_are_left_out_of_the_env_section(tmp_path):
    # an [env] key the binding does not read would be a knob that does nothing; dino's ini has a
    # num_envs there, which would also shadow the vector's own argument
    folder = variant(tmp_path, "corridor_unread", ENV_KEYS + "\nnum_envs = 1024\nunused = 0.5")
    built = pufferlib_envs.build(folder)
    assert built.meta["params"] == ["num_agents", "length", "max_steps"]
    assert built.meta["unread_env_keys"] == ["num_envs", "unused"]
    assert "num_envs" not in ocean.describe(pufferlib_envs.load_library(built))["params"]


def test_continuous_actions_are_a_box_of_floats_that_reach_the_env_as_they_are(tmp_path):
    from appliance.vector import native

    # ACT_SIZES all 1 is the format's continuous actions: the corridor then moves by int(action) cells
    folder = variant(
        tmp_path, "corridor_continuous", edit=lambda b: b.replace("ACT_SIZES {3, 2}", "ACT_SIZES {1, 1}")
    )
    name = pufferlib_envs.load_library(pufferlib_envs.build(folder))
    info = ocean.describe(name)
    assert info["action_continuous"] is True and info["action_nvec"] == [1, 1]
    with native.make(name, num_envs=4, num_threads=1, seed=0) as vec:
        assert str(vec.single_action_space) == "Box(-1.0, 1.0, (2,), float32)"
        obs, _ = vec.reset(0)
        start = obs.argmax(axis=-1)
        # direction 2.0 (right) with stride 0.0 (one cell): the floats arrive unconverted
        obs, *_ = vec.step(np.tile(np.array([[2.0, 0.0]], dtype=np.float32), (8, 1)))
        moved = start + 1 < 11  # an agent that reaches the end (cell 11) starts again elsewhere
        assert moved.any() and np.array_equal(obs.argmax(axis=-1)[moved], start[moved] + 1)
        bad = np.zeros((8, 2), dtype=np.float32)
        bad[3, 1] = np.nan
        with pytest.raises(ValueError, match="not a finite number"):
            vec.step(bad)


VEC_INIT = """
Env* my_vec_init(int* num_envs_out, int* starts, int* counts, Dict* vec_kwargs, Dict* env_kwargs) {
    int per_env = dict_get(env_kwargs, "num_agents")->value;
    int n = (int)dict_get(vec_kwargs, "total_agents")->value / per_env;
    Env* envs = calloc(n, sizeof(Env));
    int* shared = malloc(sizeof(int));
    *shared = 7;  /* one corridor length for every env, as a map shared by all */
    for (int i = 0; i < n; i++) {
        my_init(&envs[i], env_kwargs);
        envs[i].length = *shared;
        envs[i].shared = shared;
    }
    *num_envs_out = n;
    starts[0] = 0;
    counts[0] = n;
    return envs;
}

void my_vec_close(Env* envs) {
    fprintf(stderr, "my_vec_close freed the shared length %d\\n", *envs[0].shared);
    free(envs[0].shared);
}
"""


def test_state_made_for_the_whole_vector_by_my_vec_init_is_each_envs_and_freed_once(tmp_path, capfd):
    from appliance.vector import native

    def edit(binding: str) -> str:
        binding = binding.replace(
            '#include "vecenv.h"', '#define MY_VEC_INIT\n#define MY_VEC_CLOSE\n#include "vecenv.h"'
        )
        return binding + VEC_INIT

    folder = variant(tmp_path, "corridor_vec_init", edit=edit)
    name = pufferlib_envs.load_library(pufferlib_envs.build(folder))
    with native.make(name, num_envs=16, num_threads=2, seed=0) as vec:
        obs, _ = vec.reset(0)
        assert (obs.argmax(axis=-1) < 6).all()  # starts drawn below the shared length 7, not the ini's 12
        right = np.tile(np.array([[2, 1]], dtype=np.int32), (32, 1))
        for _ in range(4):
            vec.step(right)
        assert vec.log()["episode_length"] <= 3
    assert capfd.readouterr().err.count("my_vec_close freed the shared length 7") == 1


def test_the_folder_itself_names_the_env(tmp_path):
    from appliance.config import resolve

    folder = variant(tmp_path, "corridor_path")
    cfg = resolve(env=str(folder))
    assert cfg.env_name == "pufferlib:corridor_path"


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("missing", ["no such folder"]),
        ("file", ["is a file"]),
        ("no-binding", ["has no binding.c"]),
        ("no-macro", ["does not #define ACT_SIZES"]),
        ("pufferlib3", ["PufferLib 3.0's format"]),
        ("vec-hook", ["MY_SHARED", "not supported"]),
        ("dialect-type", ["OBS_TYPE is 'HALF'", "FLOAT or CHAR or UNSIGNED_CHAR"]),
        ("compile-error", ["failed to compile", "error", "build.log"]),
        ("missing-kwarg", ["reads kwarg 'length'", "lacks"]),
        ("abort-in-init", ["crashed (SIGABRT) in my_init", "its last words: corridor: no map"]),
        ("obs-overrun", ["writes 16 bytes past the end of its observation rows (its OBS_SIZE 8, 2 agent(s)"]),
        ("abort-in-step", ["crashed (signal 6) in its first 256 steps", "its last words: corridor: lost"]),
    ],
)
def test_bad_input_gets_one_line_naming_what_to_fix(tmp_path, case, fragments):
    if case == "missing":
        path = tmp_path / "nowhere"
    elif case == "file":
        path = tmp_path / "a-file"
        path.write_text("x")
    elif case == "no-binding":
        path = tmp_path / "ocean" / "empty"
        path.mkdir(parents=True)
    else:
        edits = {
            "no-macro": lambda b: b.replace("#define ACT_SIZES {3, 2}\n", ""),
            "pufferlib3": lambda b: b.replace('#include "vecenv.h"', '#include "../env_binding.h"'),
            "vec-hook": lambda b: "#define MY_SHARED\n" + b,
            "dialect-type": lambda b: b.replace("#define OBS_TENSOR_T ByteTensor", "#define OBS_TYPE HALF"),
            "compile-error": lambda b: b + "\nint broken(void) { return undeclared_thing; }\n",
            "missing-kwarg": lambda b: b,
            "obs-overrun": lambda b: b.replace("#define OBS_SIZE 16", "#define OBS_SIZE 8"),
            "abort-in-step": lambda b: b.replace(
                '#include "corridor.h"',
                '#include <stdio.h>\n#include <stdlib.h>\n#define c_step corridor_step\n#include "corridor.h"\n#undef c_step\n'
                'static void c_step(Corridor* env) {\n    if (env->pos[0] > 8) { fprintf(stderr, "corridor: lost\\n"); abort(); }\n'
                "    corridor_step(env);\n}",
            ),
            "abort-in-init": lambda b: b.replace(
                "void my_init(Env* env, Dict* kwargs) {",
                'void my_init(Env* env, Dict* kwargs) {\n    fprintf(stderr, "corridor: no map\\n");\n    abort();',
            ),
        }
        keys = "num_agents = 2\nmax_steps = 24" if case == "missing-kwarg" else ENV_KEYS
        path = variant(tmp_path, f"corridor_{case.replace('-', '_')}", keys, edits[case])
    result = run("envs", "build", str(path))
    out = one_line_error(result, *fragments)
    if case == "compile-error":
        log = Path(out.split("full log: ")[1].rstrip(")"))
        assert "undeclared_thing" in log.read_text()


def test_an_env_not_built_is_named_with_the_command_that_builds_it():
    with pytest.raises(ConfigError, match="envs build PATH/TO/ocean/never_built"):
        ocean.ocean_name("pufferlib:never_built")
    one_line_error(run("train", "pufferlib:never_built"), "is not built", "envs build")


def test_a_library_built_against_other_headers_or_not_by_envs_build_is_refused(tmp_path):
    import subprocess

    other = tmp_path / "other.c"
    other.write_text(
        "int ocean_plugin_abi(void) { return 1; }\nconst void* ocean_plugin_spec(void) { return 0; }\n"
    )
    foreign = tmp_path / "foreign.c"
    foreign.write_text("int something_else(void) { return 0; }\n")
    for src in (other, foreign):
        subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(src.with_suffix(".so"))], check=True)
    with pytest.raises(ValueError, match="other runtime headers"):
        _ocean.load_plugin(str(other.with_suffix(".so")))
    with pytest.raises(ValueError, match="not an env library built by"):
        _ocean.load_plugin(str(foreign.with_suffix(".so")))
    with pytest.raises(ValueError, match="cannot load env library"):
        _ocean.load_plugin(str(other))  # C source, not a library


def test_envs_build_then_sps_and_a_few_epochs_of_training_through_the_cli(tmp_path):
    folder = variant(tmp_path, "corridor_cli")
    built = run("envs", "build", str(folder))
    assert built.exit_code == 0, built.output
    assert "built pufferlib:corridor_cli" in built.output and "num_agents, length, max_steps" in built.output
    sps = run("envs", "sps", "pufferlib:corridor_cli", "--seconds", "0.2", "--threads", "1")
    assert sps.exit_code == 0 and "pufferlib:corridor_cli" in sps.output
    records = train_briefly(tmp_path, "corridor_cli", "corridor")
    assert records and records[-1]["global_step"] >= 20000


def test_a_my_vec_init_that_makes_no_envs_is_one_line_naming_the_env(tmp_path):
    # tower_climb's my_vec_init makes no envs when its maps file is missing: a ConfigError, not a crash
    # or a MemoryError from deep inside
    from appliance.vector import native

    def edit(binding: str) -> str:
        binding = binding.replace('#include "vecenv.h"', '#define MY_VEC_INIT\n#include "vecenv.h"')
        return binding + (
            "\nEnv* my_vec_init(int* n, int* s, int* c, Dict* v, Dict* e) {\n"
            '    fprintf(stderr, "no maps\\n");\n    *n = 0;\n    return NULL;\n}\n'
        )

    name = pufferlib_envs.load_library(pufferlib_envs.build(variant(tmp_path, "corridor_no_maps", edit=edit)))
    with pytest.raises(ConfigError, match="corridor_no_maps: its my_vec_init made 0 envs"):
        native.make(name, num_envs=4, num_threads=1, seed=0)


def test_vector_bench_times_a_folder_on_our_backends_and_its_worker_processes_load_it(tmp_path):
    """`vector-bench --env FOLDER`: built and named; the multiprocessing backend's workers load the
    library themselves (they were refused as an unknown env); two agents per env leave gymnasium's
    single-agent vectors out, said in one line, not a reshape traceback."""
    folder = variant(tmp_path, "corridor_vecbench")
    out = tmp_path / "vb.json"
    result = run(
        "vector-bench", "--env", str(folder), "--seconds", "0.1", "--num-envs", "4", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "only our backends are timed" in result.output
    families = {r["family"] for r in json.loads(out.read_text())["rows"]}
    assert any(f.startswith("native") for f in families) and any(
        f.startswith("multiprocessing") for f in families
    )
    assert not any("gymnasium" in f for f in families)


RAYLIB = pufferlib_envs.find_raylib()  # before the fixture points the env cache at a scratch folder
DRAWS = """void c_render(Corridor* env) {
    if (!IsWindowReady()) InitWindow(16 * 10, 40, "corridor");
    BeginDrawing();
    ClearBackground(BLACK);
    DrawRectangle(env->pos[0] * 10, 10, 10, 20, RED);
    EndDrawing();
}"""


def drawing_corridor(tmp_path: Path, name: str) -> Path:
    folder = variant(tmp_path, name)
    header = folder / "corridor.h"
    text = header.read_text().replace('#include "raylib_free.h"', '#include "raylib.h"')
    header.write_text(text.replace("void c_render(Corridor* env) { (void)env; }", DRAWS))
    return folder


def test_envs_show_draws_the_envs_own_raylib_picture_on_a_private_display(tmp_path, monkeypatch):
    """c_render draws through raylib into a window; with no $DISPLAY the process starts its own Xvfb,
    reads the window back into the frame, and the GIF shows the agent's square where the env put it.
    CI installs both and sets PUFFER_TEST_RAYLIB=required: there it must run, not skip."""
    from PIL import Image

    if RAYLIB is None or shutil.which("Xvfb") is None:
        if os.environ.get("PUFFER_TEST_RAYLIB") == "required":
            pytest.fail("PUFFER_TEST_RAYLIB=required, but raylib or Xvfb is missing")
        pytest.skip("needs raylib (puffer-bench envs raylib) and Xvfb (apt install xvfb libgl1-mesa-dri)")

    monkeypatch.setenv("PUFFER_RAYLIB", str(RAYLIB))
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("PUFFER4_RENDER", raising=False)
    monkeypatch.setattr(pufferlib_envs, "_display", {})
    folder = drawing_corridor(tmp_path, "corridor_draws")
    gif = tmp_path / "corridor.gif"
    result = run("envs", "show", str(folder), "--frames", "3", "--gif", str(gif))
    assert result.exit_code == 0, result.output
    frame = np.asarray(Image.open(gif).convert("RGB")).astype(int)
    red = (frame[..., 0] > 150) & (frame[..., 1] < 100)
    assert red.any() and red.mean() < 0.2  # the agent's square, not a red screen
    xvfb = pufferlib_envs._display.get("xvfb")
    assert xvfb is not None and xvfb.poll() is None  # ours, alive until the process ends
    pufferlib_envs._stop_xvfb(xvfb)


def test_without_a_display_frames_are_black_and_the_user_is_told_how_to_get_one(
    tmp_path, monkeypatch, capsys
):
    if RAYLIB is None:
        pytest.skip("needs raylib (puffer-bench envs raylib)")
    monkeypatch.setenv("PUFFER_RAYLIB", str(RAYLIB))
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("PUFFER4_RENDER", raising=False)
    monkeypatch.setattr(pufferlib_envs, "_display", {})
    from appliance.vector import native

    name = pufferlib_envs.load_library(pufferlib_envs.build(drawing_corridor(tmp_path, "corridor_dark")))
    monkeypatch.setattr(pufferlib_envs.shutil, "which", lambda name: None)  # no Xvfb on this machine
    with native.make(name, num_envs=1, num_threads=1) as vec:
        vec.reset(0)
        frame = vec.render(0)  # raylib would end the process opening a window with no display
    assert frame.shape == (360, 480, 3) and not frame.any()
    assert "install Xvfb" in capsys.readouterr().err


def test_a_build_for_older_runtime_headers_is_built_again_from_its_folder(tmp_path, capfd):
    """An upgrade that changes the runtime's tables (the plugin ABI) leaves older builds in the cache:
    `pufferlib:NAME` builds the env again from the folder it came from, saying so, instead of refusing."""
    import subprocess

    folder = variant(tmp_path, "corridor_stale")
    built = pufferlib_envs.build(folder)
    stub = tmp_path / "stale.c"
    stub.write_text(
        "int ocean_plugin_abi(void) { return 1; }\nconst void* ocean_plugin_spec(void) { return 0; }\n"
    )
    subprocess.run(["gcc", "-shared", "-fPIC", str(stub), "-o", str(built.library)], check=True)
    name = pufferlib_envs.load("pufferlib:corridor_stale")
    assert name == "pufferlib:corridor_stale" and ocean.describe(name)["agents_per_env"] == 2
    assert "built for an older puffer-bench: building it again" in capfd.readouterr().err


def test_the_inis_torch_network_is_the_recipes_core():
    """double_pendulum.ini asks its torch trainer for an MLP ([torch] network = MLP); the recipe built
    a MinGRU whatever the ini said."""
    train = {"train": {"learning_rate": 0.01}}
    assert pufferlib_envs.recipe({**train, "torch": {"network": "MLP"}}, 1)["policy"]["core"] == "mlp"
    assert pufferlib_envs.recipe({**train, "torch": {"network": "MinGRU"}}, 1)["policy"]["core"] == "mingru"
    assert pufferlib_envs.recipe(train, 1)["policy"]["core"] == "mingru"  # default.ini's, when none is said
    with pytest.raises(ConfigError, match=r"\[torch\] network = 'Transformer' has no core of ours"):
        pufferlib_envs.recipe({**train, "torch": {"network": "Transformer"}}, 1)


def test_an_action_mask_ends_each_observation_and_is_the_mask_the_env_judges_actions_by(tmp_path):
    """MY_ACTION_MASK: each row is the env's OBS_SIZE observations, then its mask as 0/1 (the layout's
    action_mask); actions the tail allows are never forbidden, and ones it forbids always are."""
    from appliance import vector

    built = pufferlib_envs.build(variant(tmp_path, "keyhole_rows", KEYHOLE_KEYS, source=KEYHOLE))
    pufferlib_envs.load_library(built)
    info = ocean.describe(built.name)
    assert info["action_mask"] == 6 and info["obs_size"] == 12 and info["obs_tail"] == 6
    vec = vector.make(built.name, num_envs=8, seed=3)
    try:
        assert vec.action_mask == 6 and vec.single_observation_space.shape == (12,)
        obs, _ = vec.reset(seed=3)
        rng = np.random.default_rng(0)
        for keep in (True, False):
            for _ in range(64):  # 4 episodes of 16 steps
                mask = obs[:, 6:]
                assert set(np.unique(mask)) <= {0.0, 1.0} and (mask.sum(1) >= 1).all()
                assert (mask[np.arange(len(obs)), obs[:, :6].argmax(1)] == 1).all()  # the key is allowed
                weights = (mask if keep else 1 - mask) + 1e-9
                actions = np.array([rng.choice(6, p=w / w.sum()) for w in weights], np.int32)
                if not keep:
                    actions = np.where(mask.all(1), 0, actions)  # nothing forbidden to take: any
                obs, *_ = vec.step(actions)
            forbidden = vec.log()["forbidden"]
            assert (forbidden == 0) if keep else (forbidden > 0.5), (keep, forbidden)
    finally:
        vec.close()


@pytest.mark.parametrize(
    "macro, fragment",
    [
        ("OBS_SIZE 6", "writes 16 bytes past the end of its observation rows (its OBS_SIZE 4, 2 agent(s)"),
        (
            "MY_ACTION_MASK 6",
            "writes 4 bytes past the end of its action mask rows (its MY_ACTION_MASK 4, 2 agent(s)",
        ),
    ],
)
def test_a_masked_env_that_writes_past_its_slots_buffers_is_refused(tmp_path, macro, fragment):
    """A masked env writes its observations and mask into buffers of its slot, not our rows: the
    build's guarded run checks those too (keyhole writes 6 of each per agent; here it declares 4)."""
    name = f"keyhole_{macro.split()[0].lower()}"
    folder = variant(
        tmp_path,
        name,
        KEYHOLE_KEYS,
        lambda b: b.replace(f"#define {macro}", f"#define {macro[:-1]}4"),
        KEYHOLE,
    )
    one_line_error(run("envs", "build", str(folder)), fragment)


def test_an_action_masked_envs_training_never_takes_a_forbidden_action(tmp_path):
    """Trained through the CLI on the defaults, the policy samples only what each step's mask allows:
    keyhole's forbidden count stays 0 in every epoch (half its actions are forbidden at a time)."""
    shown = run("envs", "build", str(variant(tmp_path, "keyhole_cli", KEYHOLE_KEYS, source=KEYHOLE)))
    assert shown.exit_code == 0, shown.output
    assert "MY_ACTION_MASK: each observation ends with the action mask" in shown.output, shown.output
    records = [r for r in train_briefly(tmp_path, "keyhole_cli", "keyhole") if r.get("env/n")]
    assert records and records[-1]["global_step"] >= 20000
    assert all(r["env/forbidden"] == 0 for r in records), [r["env/forbidden"] for r in records]
