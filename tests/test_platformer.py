"""The pixel platformer (envs/platformer.h): its rules, its levels, its frames, and that the policy
reads them with a CNN."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from appliance.config import resolve
from appliance.vector import native

ROOT = Path(__file__).resolve().parents[1]
STAY, LEFT, RIGHT, JUMP, JUMP_RIGHT, JUMP_LEFT = range(6)
SKY, GROUND, GOAL, ENEMY, PLAYER = 0, 96, 160, 200, 255


def make(num_envs=4, seed=0, **params):
    return native.make("platformer", num_envs=num_envs, num_threads=1, seed=seed, **params)


def player_column(text: str) -> tuple[int, int, list[str]]:
    rows = text.splitlines()
    for y, row in enumerate(rows):
        if "P" in row:
            return row.index("P"), y, rows
    raise AssertionError("no player in the text render:\n" + text)


def play(vec, action, steps):
    """Step every env with ``action``; per env, the last text render that showed the player before
    each step that ended an episode by a terminal (not a truncation). A fall leaves the view a few
    steps before it ends the episode."""
    vec.reset(0)
    actions = np.full(vec.num_agents, action, np.int32)
    before_end: list[list[str]] = [[] for _ in range(vec.num_agents)]
    texts = [""] * vec.num_agents
    for _ in range(steps):
        for i in range(vec.num_agents):
            text = vec.render_text(i)
            texts[i] = text if "P" in text else texts[i]
        _, _, term, trunc, _ = vec.step(actions)
        assert not (term & trunc).any(), "an episode ends one way"
        for i in np.flatnonzero(term):
            before_end[i].append(texts[i])
    return before_end


def test_layout_declares_a_stacked_uint8_frame_and_the_policy_reads_it_with_a_cnn():
    from appliance.train.policy import Policy

    with make() as vec:
        space = vec.single_observation_space
        assert space.shape == (2, 48, 48) and space.dtype == np.uint8
        assert vec.info["obs_shape"] == (2, 48, 48) and vec.info["obs_size"] == 2 * 48 * 48
        assert vec.observations.shape == (4, 2, 48, 48)
        policy = Policy(space, vec.single_action_space, core="mlp", hidden_size=32)
    assert policy.encoder_choice[0] == "nature"
    config = resolve(env="platformer")
    assert config.policy["encoder"] == "auto"  # the CNN comes from the frame, not from a flag


def test_the_frame_shows_the_player_ground_and_sky_and_stacks_the_previous_one():
    with make(num_envs=2, enemy_rate=0.0) as vec:
        obs, _ = vec.reset(3)
        frame = obs[0, 1]
        assert set(np.unique(obs)) <= {SKY, GROUND, GOAL, ENEMY, PLAYER}
        assert (frame == PLAYER).sum() == 12, "the player is 3x4 pixels"
        assert (frame[-8:] == GROUND).all(), "the start stands on two tiles of ground"
        assert (frame[:8] == SKY).all(), "the top two rows are sky"
        np.testing.assert_array_equal(obs[:, 0], obs[:, 1])  # a new episode: both planes the first frame
        current = obs[:, 1].copy()
        obs = vec.step(np.full(2, RIGHT, np.int32))[0]
        np.testing.assert_array_equal(obs[:, 0], current)  # the previous frame moved to plane 0
        assert not np.array_equal(obs[:, 1], current), "running right changes the frame"


def test_levels_are_reproducible_for_a_seed_and_differ_by_seed_and_episode():
    def first_texts(seed):
        with make(num_envs=8, seed=seed) as vec:
            vec.reset(seed)
            return [vec.render_text(i) for i in range(8)]

    a, b, c = first_texts(1), first_texts(1), first_texts(2)
    assert a == b, "the same seed builds the same levels"
    assert a != c, "another seed builds other levels"
    assert len(set(a)) == 8, "each env has its own level"
    with make(num_envs=1, seed=1, max_steps=50) as vec:  # a truncation starts a new episode, a new level
        vec.reset(1)
        levels = []
        for _ in range(4):
            levels.append(vec.render_text(0))
            for _ in range(50):
                vec.step(np.array([STAY], np.int32))
    assert len(set(levels)) == 4, "no level repeats from episode to episode"


def test_reaching_the_goal_ends_the_episode_with_success():
    # no gaps, no enemies: jumping right over every step reaches the goal
    with make(num_envs=8, length=32, max_gap=0, enemy_rate=0.0) as vec:
        vec.reset(0)
        rewards, goals = [], 0
        for _ in range(200):
            _, rew, term, trunc, _ = vec.step(np.full(8, JUMP_RIGHT, np.int32))
            rewards.append(rew.copy())
            goals += int(term.sum())
            assert not trunc.any()
        stats = vec.log()
    assert goals >= 8 and stats["n"] == goals
    assert stats["perf"] == 1.0 and stats["score"] == 1.0 and stats["fell"] == 0 and stats["hit"] == 0
    assert max(r.max() for r in rewards) > 1.0, "the goal pays 1 over the step's progress"
    assert stats["episode_return"] == pytest.approx(2.0, abs=0.02), "progress 1 in all, the goal 1"


def test_falling_into_a_gap_ends_the_episode():
    # no enemies; running right without jumping: each terminal is a fall over a gap, or the goal of a
    # level with no gap or step up on the way
    with make(num_envs=16, enemy_rate=0.0, max_gap=4, max_steps=300) as vec:
        before_end = play(vec, RIGHT, 600)
        stats = vec.log()
    terminals = sum(len(t) for t in before_end)
    falls = stats["fell"] * stats["n"]
    assert falls > terminals / 2 and falls + stats["perf"] * stats["n"] == pytest.approx(terminals)
    assert stats["hit"] == 0
    over_gap = 0
    for texts in before_end:
        for text in texts:
            x, y, rows = player_column(text)
            if all(row[x] != "#" for row in rows[y:]):
                over_gap += 1
            else:
                assert "G" in "".join(row[x : x + 3] for row in rows), (
                    "not over a gap, so at the goal:\n" + text
                )
    assert over_gap == pytest.approx(falls)


def test_touching_an_enemy_ends_the_episode():
    # no gaps, an enemy on every long flat run; running right without jumping runs into them
    with make(num_envs=16, enemy_rate=1.0, max_gap=0, max_steps=300) as vec:
        obs, _ = vec.reset(0)
        right = np.full(16, RIGHT, np.int32)
        hits = 0
        for _ in range(600):
            frames = obs[:, 1].copy()  # what the env showed before this step
            obs, _, term, _, _ = vec.step(right)
            for i in np.flatnonzero(term):
                hits += 1
                ys, xs = np.nonzero(frames[i] == PLAYER)
                # the enemy, 4 px wide, shows beside the 3 px wide player even where they overlap
                near = frames[i][max(0, ys.min() - 4) : ys.max() + 5, max(0, xs.min() - 4) : xs.max() + 5]
                assert (near == ENEMY).any(), "an enemy was next to the player"
        stats = vec.log()
    assert hits > 0 and stats["hit"] * stats["n"] == pytest.approx(hits)
    assert stats["perf"] == 0 and stats["fell"] == 0


def test_standing_still_is_truncated_at_max_steps_with_no_reward():
    with make(num_envs=2, max_steps=60) as vec:
        vec.reset(0)
        for i in range(60):
            _, rew, term, trunc, _ = vec.step(np.full(2, STAY, np.int32))
            assert not term.any() and (rew == 0).all()
            assert trunc.all() == (i == 59)
        stats = vec.log()
    assert stats["timeout"] == 1.0 and stats["perf"] == 0 and stats["episode_length"] == 60


def test_bad_parameters_are_one_line_errors():
    from appliance.errors import ConfigError

    for bad in ({"length": 8}, {"max_gap": 9}, {"enemy_rate": 1.5}, {"length": 32.5}):
        with pytest.raises((ConfigError, ValueError, TypeError)) as info:
            make(**bad).close()
        assert "\n" not in str(info.value) and next(iter(bad)) in str(info.value)


HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "platformer.h"
static long calls = 0;
static int counting = 0;
void* __real_malloc(size_t n);
void* __real_calloc(size_t n, size_t m);
void* __real_realloc(void* p, size_t n);
void* __wrap_malloc(size_t n) { calls += counting; return __real_malloc(n); }
void* __wrap_calloc(size_t n, size_t m) { calls += counting; return __real_calloc(n, m); }
void* __wrap_realloc(void* p, size_t n) { calls += counting; return __real_realloc(p, n); }
int main(void) {
    double p[4] = {64, 400, 3, 0.6};
    Layout L; platformer_layout(p, &L);
    uint8_t* obs = malloc(L.obs_size);
    int32_t act = 0; float rew = 0; uint8_t term = 0, trunc = 0;
    Platformer* env = calloc(1, sizeof(Platformer));
    Rng rng; rng_seed(&rng, 7, 0);
    platformer_init(env, p, (Buffers){obs, &act, &rew, &term, &trunc}, rng);
    platformer_reset(env);
    Rng actions; rng_seed(&actions, 9, 1);
    long episodes = 0;
    counting = 1;
    for (int i = 0; i < 200000; i++) {
        act = (int32_t)rng_below(&actions, 6);
        platformer_step(env);
        episodes += term | trunc;
    }
    counting = 0;
    printf("%ld %ld\n", calls, episodes);
    return 0;
}
"""


def test_step_allocates_nothing(tmp_path):
    """200,000 random steps (and the resets inside them) under a malloc/calloc/realloc counter."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed for the C-level tests"
    source = tmp_path / "harness.c"
    source.write_text(HARNESS)
    binary = tmp_path / "harness"
    wrap = "-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc"
    subprocess.run(
        [cc, "-std=c11", "-O1", f"-I{ROOT / 'envs'}", str(source), str(ROOT / "envs/vecenv.c"), wrap,
         "-o", str(binary), "-lm", "-pthread"],
        check=True,
    )  # fmt: skip
    calls, episodes = map(
        int, subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.split()
    )
    assert episodes > 100, "the steps crossed many resets"
    assert calls == 0, f"{calls} allocations in step"
