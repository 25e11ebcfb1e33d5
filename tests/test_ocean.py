"""Ocean C envs through appliance.ocean: spaces, bounds, episodes, logs, determinism, bad input."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from appliance import _ocean, ocean
from appliance.bench.envsps import random_actions, scaling
from appliance.config import env_names, resolve
from appliance.errors import ConfigError
from appliance.vector import native

NAMES = ocean.names()
ROOT = Path(__file__).resolve().parents[1]
MULTI_AGENT = ["snake", "target"]


def make(name, num_envs=4, num_threads=1, seed=0, **params):
    return native.make(
        name, num_envs=num_envs, num_threads=num_threads, seed=seed, **{**resolve(env=name).env, **params}
    )


def rollout(vec, steps, seed=0, action_seed=0):
    """Step with a fixed random action sequence; return stacked obs, rewards, terminals, truncations."""
    actions = random_actions(vec, count=steps, seed=action_seed)
    obs, _ = vec.reset(seed)
    out = {"obs": [obs.copy()], "rew": [], "term": [], "trunc": []}
    for a in actions:
        obs, rew, term, trunc, _ = vec.step(a)
        out["obs"].append(obs.copy())
        out["rew"].append(rew.copy())
        out["term"].append(term.copy())
        out["trunc"].append(trunc.copy())
    return {k: np.stack(v) for k, v in out.items()}


def test_the_shipped_envs_are_registered_and_each_is_a_config_env():
    shipped = {"squared", "target", "breakout", "pong", "snake", "connect4", "g2048", "go", "benchmark"}
    assert shipped <= set(NAMES)  # a new env adds itself (registry.h), with no list here to edit
    assert env_names() == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_spaces_match_buffers(name):
    with make(name) as vec:
        info = vec.info
        assert vec.observations.shape == (vec.num_agents, *vec.single_observation_space.shape)
        assert vec.observations.dtype == vec.single_observation_space.dtype
        assert vec.num_agents == 4 * info["agents_per_env"]
        nvec = info["action_nvec"]
        assert vec.actions.shape == ((vec.num_agents,) if len(nvec) == 1 else (vec.num_agents, len(nvec)))
        sample = np.stack([vec.single_action_space.sample() for _ in range(vec.num_agents)])
        vec.step(sample.reshape(vec.actions.shape).astype(np.int32))
        for buf in (vec.observations, vec.actions, vec.rewards, vec.terminals):
            assert buf.ctypes.data % 64 == 0 and buf.flags.c_contiguous


@pytest.mark.parametrize("name", NAMES)
def test_obs_in_bounds_episodes_end_and_logs_aggregate(name):
    with make(name, num_envs=4, num_threads=2, seed=1) as vec:
        low, high = vec.single_observation_space.low, vec.single_observation_space.high
        actions = random_actions(vec, count=64, seed=1)
        vec.reset(1)
        ended = 0
        for i in range(10_000):
            obs, rew, term, trunc, _ = vec.step(actions[i % 64])
            if i % 10 == 0 or term.any() or trunc.any():
                o = obs.astype(np.float64)
                assert np.isfinite(o).all(), f"non-finite obs at step {i}"
                outside = (o < low) | (o > high)
                assert not outside.any(), (
                    f"obs element {np.argwhere(outside)[0]} outside its bounds at step {i}"
                )
                assert np.isfinite(rew).all()
            ended += int(term.sum() + trunc.sum())
        stats = vec.log()
        assert {"perf", "score", "episode_return", "episode_length", "n"} <= set(stats)
        if name == "target":  # never ends, as PufferLib's: a record per agent every log_ticks steps
            assert ended == 0 and stats["n"] == 10_000 // 512 * vec.num_agents
        else:
            assert ended > 0, "no episode ended in 10k steps"
            assert stats["n"] == ended, "every finished episode is logged exactly once"
        assert 0.0 <= stats["perf"] <= 1.0 and stats["episode_length"] > 0
        assert vec.log() == {}, "log() zeroes what it reported"


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_trajectory_for_any_thread_count(name):
    runs = []
    for threads in (1, 2, 3, 4, 8):  # 3: ranges of unequal length; 8 on 2 cores: oversubscribed
        with make(name, num_envs=16, num_threads=threads, seed=5) as vec:
            runs.append(rollout(vec, 300, seed=5))
    for other in runs[1:]:
        for key in runs[0]:
            np.testing.assert_array_equal(runs[0][key], other[key], err_msg=key)


@pytest.mark.parametrize("name", NAMES)
def test_different_seeds_differ(name):
    with make(name, num_envs=4, seed=0) as vec:
        a = rollout(vec, 200, seed=1)
        b = rollout(vec, 200, seed=2)
    assert not np.array_equal(a["obs"], b["obs"])


@pytest.mark.parametrize("name", NAMES)
def test_envs_do_not_leak_into_each_other(name):
    """Env 0's trajectory does not depend on what the other envs are told to do."""
    with make(name, num_envs=3, seed=4) as vec:
        k = vec.agents_per_env
        base = random_actions(vec, count=150, seed=0)
        other = random_actions(vec, count=150, seed=99)
        mixed = [np.concatenate([b[:k], o[k:]]) for b, o in zip(base, other, strict=True)]
        vec.reset(4)
        first = [vec.step(a)[0][:k].copy() for a in base]
        vec.reset(4)
        second = [vec.step(a)[0][:k].copy() for a in mixed]
    np.testing.assert_array_equal(np.stack(first), np.stack(second))


@pytest.mark.parametrize("name", MULTI_AGENT)
def test_multi_agent_rows_are_separate_agents(name):
    with make(name, num_envs=2, seed=0) as vec:
        assert vec.agents_per_env > 1
        obs, _ = vec.reset(0)
        rows = obs[: vec.agents_per_env]
        assert len({r.tobytes() for r in rows}) == vec.agents_per_env, "each agent sees its own observation"


def test_target_agents_move_by_their_own_action():
    with make("target", num_envs=1, seed=0) as vec:
        obs, _ = vec.reset(0)
        before = obs[:, -2:].copy()  # own x, y (PufferLib's layout ends with them)
        actions = np.tile(np.array([4, 2], dtype=np.int32), (vec.num_agents, 1))  # heading, speed unchanged
        actions[0] = (4, 3)  # agent 0 speeds up along heading 0: to the right
        obs, *_ = vec.step(actions)
        assert obs[0, -2] > before[0, -2]
        np.testing.assert_allclose(obs[1:, -2:], before[1:, -2:])


# ----------------------------------------------------------------------------- bad input


def test_bad_action_dtype_shape_value():
    with make("breakout", num_envs=4) as vec:
        with pytest.raises(TypeError, match="breakout: actions must be integers"):
            vec.step(np.zeros(4, dtype=np.float32))
        with pytest.raises(ValueError, match=r"breakout: actions have shape \(3,\); expected \(4,\)"):
            vec.step(np.zeros(3, dtype=np.int32))
        bad = np.zeros(4, dtype=np.int32)
        bad[2] = 3
        with pytest.raises(
            ValueError, match=r"breakout: action 3 for agent 2 \(env 2\) is out of range; valid: 0\.\.2"
        ):
            vec.step(bad)
        with pytest.raises(ValueError, match="breakout: action -1 for agent 0"):
            vec.step(np.array([-1, 0, 0, 0], dtype=np.int64))
        with pytest.raises(ValueError, match="out of range"):
            vec.step(np.array([0, 0, 0, 2**32 + 1], dtype=np.int64))  # would wrap to 1 in int32
        vec.step(np.array([0, 1, 2, 1], dtype=np.int64))  # other integer dtypes are fine


def test_the_first_bad_action_is_named_and_no_env_steps():
    """C checks all actions in one vectorized pass and only then looks for the first bad one."""
    with make("breakout", num_envs=1024) as vec:
        vec.reset(0)
        before = vec.observations.copy()
        actions = np.zeros(1024, dtype=np.int32)
        actions[[1000, 517, 1023]] = [7, -2, 3]
        with pytest.raises(ValueError, match=r"action -2 for agent 517 \(env 517\) is out of range"):
            vec.step(actions)
        np.testing.assert_array_equal(vec.observations, before)
        actions[517] = 0
        with pytest.raises(ValueError, match=r"action 7 for agent 1000 "):
            vec.step(actions)
        actions[1000] = 0
        with pytest.raises(ValueError, match=r"action 3 for agent 1023 "):  # the last row alone
            vec.step(actions)
        actions[1023] = 2
        vec.step(actions)


def test_bad_multidiscrete_value_names_dimension():
    with make("target", num_envs=1) as vec:
        actions = np.ones((8, 2), dtype=np.int32)
        actions[5, 1] = 5
        with pytest.raises(
            ValueError,
            match=r"target: action 5 for agent 5 \(env 0, dimension 1\) is out of range; valid: 0\.\.4",
        ):
            vec.step(actions)


def test_bad_params_and_sizes():
    with pytest.raises(ConfigError, match="unknown parameter 'frame_skip'.*frameskip"):
        native.make("breakout", num_envs=2, frame_skip=4)
    with pytest.raises(ConfigError, match=r"'frameskip' = 0 is outside its valid range \[1, 16\]"):
        native.make("breakout", num_envs=2, frameskip=0)
    with pytest.raises(ConfigError, match="unknown Ocean env 'breakot'"):
        native.make("breakot", num_envs=2)
    with pytest.raises(ConfigError, match="num_envs must be a positive int"):
        native.make("squared", num_envs=0)
    with pytest.raises(ConfigError, match=r"num_threads \(3\) > num_envs \(2\)"):
        native.make("squared", num_envs=2, num_threads=3)


def test_binding_checks_buffers_at_creation():
    n = 4
    good = {
        "observations": np.zeros((n, 121), np.uint8),
        "actions": np.zeros(n, np.int32),
        "rewards": np.zeros(n, np.float32),
        "terminals": np.zeros(n, np.bool_),
        "truncations": np.zeros(n, np.bool_),
    }

    def create(**changes):
        bufs = {**good, **changes}
        return _ocean.Vec(
            "squared",
            n,
            bufs["observations"],
            bufs["actions"],
            bufs["rewards"],
            bufs["terminals"],
            bufs["truncations"],
        )

    create().close()
    with pytest.raises(TypeError, match="observations has dtype format 'f'.*expected 'B'"):
        create(observations=np.zeros((n, 121), np.float32))
    with pytest.raises(ValueError, match=r"rewards has the wrong shape; expected \(4, 1\)"):
        create(rewards=np.zeros(n + 1, np.float32))
    with pytest.raises(ValueError, match="observations must be C-contiguous"):
        create(observations=np.zeros((n, 242), np.uint8)[:, ::2])
    misaligned = np.zeros(4 * n + 1, np.uint8)[1:].view(np.float32)
    with pytest.raises(ValueError, match="rewards is not aligned to 4 bytes"):
        create(rewards=misaligned)
    with pytest.raises(TypeError, match="actions must be a writable array"):
        create(actions=np.zeros(n, np.int32).tobytes())


def test_close_is_idempotent_and_use_after_close_is_an_error():
    vec = make("squared")
    vec.close()
    vec.close()
    with pytest.raises(RuntimeError, match="closed"):
        vec.step(np.zeros(4, np.int32))


# ----------------------------------------------------------------------------- rendering and scores


@pytest.mark.parametrize("name", NAMES)
def test_render_frame_and_text(name):
    with make(name, num_envs=2) as vec:
        vec.reset(0)
        frame = vec.render(1)
        assert frame.shape == (*vec.info["frame"], 3) and frame.dtype == np.uint8
        assert frame.any(), "the frame shows something"
        text = vec.render_text(0)
        assert len(text.splitlines()) == vec.info["text"][0]
        with pytest.raises(IndexError):
            vec.render(2)


def test_breakout_random_policy_scores():
    with make("breakout", num_envs=16, seed=0) as vec:
        actions = random_actions(vec, count=64)
        vec.reset(0)
        for i in range(3000):
            vec.step(actions[i % 64])
        stats = vec.log()
    assert stats["n"] > 0 and stats["score"] > 0


def test_breakout_scripted_paddle_clears_the_wall():
    """A paddle that tracks the ball (aiming off-centre to vary the angle) clears a whole wall (432)."""
    width = 576.0
    with make("breakout", num_envs=4, seed=3, frameskip=1) as vec:
        obs, _ = vec.reset(3)
        score, best = np.zeros(4), 0.0
        for t in range(40_000):
            paddle_x, ball_x, paddle_w = obs[:, 0] * width, obs[:, 2] * width, obs[:, 9] * 62.0
            aim = ball_x + 16 - paddle_w / 2 - 0.6 * np.sin(t / 37.0 + np.arange(4)) * paddle_w / 2
            action = np.where(paddle_x < aim - 4, 2, np.where(paddle_x > aim + 4, 1, 0)).astype(np.int32)
            obs, rew, term, trunc, _ = vec.step(action)
            score += rew
            best = max(best, score.max())
            score[term | trunc] = 0
            if best >= 432:
                break
    assert best >= 432


def test_pong_tracking_paddle_beats_random():
    def play(policy):
        with make("pong", num_envs=4, seed=0) as vec:
            obs, _ = vec.reset(0)
            rng = np.random.default_rng(0)
            total = 0.0
            for _ in range(4000):
                obs, rew, *_ = vec.step(policy(obs, rng))
                total += rew.sum()
            return total

    def track(obs, rng):
        # PufferLib's obs: paddle (y + 35) / 640 is its centre over the height; action 1 moves it down (+y)
        paddle_centre, ball_centre = obs[:, 0], obs[:, 3] + 16 / 640
        return np.where(
            ball_centre < paddle_centre - 0.02, 2, np.where(ball_centre > paddle_centre + 0.02, 1, 0)
        ).astype(np.int32)

    assert play(track) > play(lambda obs, rng: rng.integers(0, 3, 4).astype(np.int32)) + 10


@pytest.mark.parametrize("return_reward", [0.1, 0.0])
def test_pong_return_reward_is_what_a_return_pays(return_reward):
    # 3.0's pong pays 0.1 for a return and 4.0's nothing: the tracking paddle returns most balls
    with make("pong", num_envs=4, seed=0, return_reward=return_reward) as vec:
        obs, _ = vec.reset(0)
        paid = set()
        for _ in range(3000):
            paddle_centre, ball_centre = obs[:, 0], obs[:, 3] + 16 / 640
            action = np.where(
                ball_centre < paddle_centre - 0.02, 2, np.where(ball_centre > paddle_centre + 0.02, 1, 0)
            )
            obs, rew, *_ = vec.step(action.astype(np.int32))
            paid |= {round(float(r), 4) for r in rew}
    assert paid - {0.0, 1.0, -1.0} == ({0.1} if return_reward else set())


def test_connect4_opponent_depth_matters():
    def random_win_rate(depth):
        with make("connect4", num_envs=32, seed=0, depth=depth) as vec:
            actions = random_actions(vec, count=64)
            vec.reset(0)
            for i in range(1500):
                vec.step(actions[i % 64])
            return vec.log()["perf"]

    assert random_win_rate(0) > random_win_rate(3) + 0.1


def test_g2048_and_go_rules_hold():
    with make("g2048", num_envs=1, seed=0) as vec:
        obs, _ = vec.reset(0)
        assert (obs > 0).sum() == 2, "a new game starts with two tiles"
    with make("go", num_envs=1, seed=0) as vec:  # PufferLib's 7x7: black stones, white stones, captures
        obs, _ = vec.reset(0)
        assert not obs.any(), "an empty board"
        obs, rew, *_ = vec.step(np.array([25], np.int32))  # action p + 1: the centre point 24
        assert obs[0, 24] == 1 and obs[0, :49].sum() == 1 and rew[0] == 0.0
        assert obs[0, 49:98].sum() == 1 and obs[0, 49 + 24] == 0, "the opponent answered with one stone"
        obs, rew, *_ = vec.step(np.array([25], np.int32))  # occupied: invalid, and the opponent waits
        assert rew[0] == pytest.approx(-0.5393516) and obs[0, :98].sum() == 2


# ----------------------------------------------------------------------------- speed benchmark and C


def test_scaling_reports_sps_and_efficiency():
    rows = scaling("squared", [1, 2], num_envs=64, seconds=0.1)
    assert [r["threads"] for r in rows] == [1, 2]
    assert all(r["sps"] > 0 and r["steps"] > 0 for r in rows)
    assert rows[0]["efficiency"] == pytest.approx(1.0)
    assert rows[1]["efficiency"] == pytest.approx(rows[1]["sps"] / (2 * rows[0]["sps"]))


@pytest.mark.slow
def test_c_envs_under_address_and_ub_sanitizers(tmp_path):
    """Every env, a few thousand random steps, built with -fsanitize=address,undefined."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed for the C-level tests"
    binary = tmp_path / "debug"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-O1",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer",
            f"-I{ROOT / 'envs'}",
            str(ROOT / "envs/debug.c"),
            str(ROOT / "envs/vecenv.c"),
            "-o",
            str(binary),
            "-lm",
            "-pthread",
        ],
        check=True,
    )
    result = subprocess.run(
        [str(binary), "all", "3000", "8", "2"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" ok") == len(NAMES)


def _build(binary: Path, source: str, *flags: str) -> Path:
    """envs/<source> with envs/vecenv.c, as the C harness tests build them."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed for the C-level tests"
    envs = ROOT / "envs"
    command = [cc, "-std=c11", "-O1", "-g", *flags, f"-I{envs}", str(envs / source), str(envs / "vecenv.c")]
    subprocess.run([*command, "-o", str(binary), "-lm", "-pthread"], check=True)
    return binary


def _json(*command) -> dict:
    import json

    return json.loads(
        subprocess.run([str(c) for c in command], capture_output=True, text=True, check=True).stdout
    )


@pytest.mark.slow
@pytest.mark.parametrize("sanitize", ["address,undefined", "thread"])
def test_the_thread_pool_under_sanitizers(tmp_path, sanitize):
    """envs/pool_debug.c: every item of every job exactly once for 1-32 threads (with stalls), the
    caller taking over a slow worker's range, sleeping workers shutting down; ASan+UBSan and TSan."""
    flags = [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer"]
    if "undefined" in sanitize:
        flags.append("-fno-sanitize-recover=undefined")
    binary = _build(tmp_path / "pool_debug", "pool_debug.c", *flags)
    result = subprocess.run([str(binary), "100"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": ok") == 9 and "WARNING" not in result.stderr


def test_pool_bench_reports_the_pools_cost_and_its_calls(tmp_path):
    """envs/pool_bench.c: the no-op env's step with and without the pool, an empty job, and (built
    with -DPOOL_STATS) futex, yield and piece counts per step; without the counters, no counts."""
    counting = _build(tmp_path / "counting", "pool_bench.c", "-DPOOL_STATS")
    row = _json(counting, "benchmark", 256, 2, 0.05, 0, "work=0", "obs_bytes=1", "episode_length=1000000")
    assert (row["env"], row["num_envs"], row["threads"]) == ("benchmark", 256, 2)
    assert row["steps"] > 0 and row["work_ns"] > 0 and 0 < row["empty_ns"] < row["step_ns"]
    assert row["overhead_ns"] == pytest.approx(row["step_ns"] - row["work_ns"] / 2, abs=0.1)
    assert row["caller_chunks_per_step"] + row["worker_chunks_per_step"] >= 1  # someone stepped the envs
    assert row["futex_wait_per_step"] >= 0 and row["yield_per_step"] >= 0
    plain = _build(tmp_path / "plain", "pool_bench.c")
    row = _json(plain, "squared", 64, 1, 0.02)
    assert "futex_wait_per_step" not in row and row["threads"] == 1
    bad = subprocess.run(
        [str(plain), "squared", "8", "1", "0.01", "0", "nosuch=1"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "no parameter 'nosuch'" in bad.stderr


@pytest.mark.slow
def test_pool_overhead_compares_two_builds_in_turns(tmp_path):
    """tools/pool_overhead.py builds the harness against two envs/ trees and runs them A B, B A."""
    import json
    import sys

    out = tmp_path / "overhead"
    tool = ROOT / "tools/pool_overhead.py"
    args = ["--a", ".", "--b", ".", "--rounds", "2", "--seconds", "0.02", "--config", "benchmark:64:2"]
    subprocess.run(
        [sys.executable, str(tool), *args, "--out", str(out)], check=True, capture_output=True, timeout=600
    )
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["order"] == ["AB", "BA"]
    entry = result["configs"]["benchmark:64:2"]
    assert len(entry["figures"]["step_ns"]["a"]) == 2 and entry["figures"]["step_ns"]["ratio"] > 0
    assert set(entry["counts"]) == {"A", "B"}  # this tree's vecenv.c has the counters
    assert "B / A" in out.with_suffix(".md").read_text()


@pytest.mark.slow
def test_template_env_compiles_and_passes_the_c_checks(tmp_path):
    """envs/template.h is a working env: built beside the harness, it passes the same checks."""
    cc = shutil.which("cc") or shutil.which("gcc")
    unit = tmp_path / "template_unit.c"
    unit.write_text('#include "template.h"\n')
    binary = tmp_path / "debug"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-O1",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            f"-I{ROOT / 'envs'}",
            str(ROOT / "envs/debug.c"),
            str(ROOT / "envs/vecenv.c"),
            str(unit),
            "-o",
            str(binary),
            "-lm",
            "-pthread",
        ],
        check=True,
    )
    result = subprocess.run([str(binary), "template", "2000"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "template" in result.stdout and " ok" in result.stdout, (
        result.stdout + result.stderr
    )


@pytest.mark.parametrize("name", NAMES)
def test_observations_reach_the_policy_on_a_scale_near_one(name):
    """The policy divides each observation element by its declared bound (ObsToFloat), so every
    element's bound must fit its values: go once declared one bound of 1e6 for its 0/1 board planes
    and its capture counts alike, and its board reached the policy as 1e-6."""
    import torch

    from appliance.train.policy import ObsToFloat

    with make(name, num_envs=8, num_threads=1, seed=0) as vec:
        features = ObsToFloat(vec.single_observation_space)
        actions = random_actions(vec, count=16, seed=0)
        vec.reset(0)
        largest = 0.0
        for i in range(200):
            obs = vec.step(actions[i % 16])[0]
            largest = max(largest, float(features(torch.as_tensor(obs)).abs().max()))
        assert 0.1 <= largest <= 1.0 + 1e-6, largest  # g2048 under random play: 7 of its 17
