"""A factory's gymnasium VectorEnv as a vector source (appliance.vector.gymvec): used as it is, with
either autoreset mode giving the trainer the same episodes."""

from __future__ import annotations

import functools
import importlib.util

import gymnasium
import numpy as np
import pytest

from appliance import vector
from appliance.config import resolve
from appliance.errors import ConfigError
from appliance.testing import cartpole_vector
from appliance.train import Trainer

FACTORY = "appliance.testing:cartpole_vector"


def run(mode: str, steps: int, num_envs: int = 2) -> list[tuple]:
    """Every recv of a CartPole VectorEnv in ``mode`` under constant action 0."""
    vec = vector.make(functools.partial(cartpole_vector, num_envs, mode), backend="serial")
    try:
        vec.async_reset(3)
        out = []
        for _ in range(steps):
            obs, rew, term, trunc, infos, _, masks = (
                np.copy(x) if isinstance(x, np.ndarray) else x for x in vec.recv()
            )
            out.append((obs, rew, term | trunc, infos, masks))
            vec.send(np.zeros(num_envs, np.int32))
        return out
    finally:
        vec.close()


def test_a_factory_returning_a_vector_env_is_used_as_it_is():
    vec = vector.make(FACTORY, backend="multiprocessing", num_envs=3)
    try:
        assert type(vec).__name__ == "GymVector"
        assert isinstance(vec.env, gymnasium.vector.SyncVectorEnv)  # not re-wrapped per sub-env
        assert vec.num_envs == 3 == vec.env.num_envs  # the factory was given vec.num_envs
        assert vec.single_observation_space.shape == (4,)
        obs, _ = vec.reset(0)
        assert obs.shape == (3, 4)
    finally:
        vec.close()


def test_next_step_autoreset_gives_the_same_episodes_as_same_step():
    same, nxt = run("SameStep", 60), run("NextStep", 60)
    for env in range(2):
        same_eps, next_eps = (
            [(i["episode_length"], i["episode_return"]) for step in r for i in step[3] if i["env"] == env]
            for r in (same, nxt)
        )
        assert len(next_eps) >= 2 and next_eps == same_eps[: len(next_eps)]
        assert all(length == ret for length, ret in same_eps)  # CartPole: +1 a step
    assert all(r[4].all() for r in same)  # SameStep: nothing masked
    # NextStep: the row holding an episode's last observation keeps its reward and done flag but is
    # masked (its action is ignored); the next row is the new episode's first, reward 0, not done,
    # and holds the same first observation SameStep returned on its done step
    same_firsts = {i: [s[0][i] for s in same if s[2][i]] for i in range(2)}
    seen = {0: 0, 1: 0}
    for t, (_, rew, done, _, masks) in enumerate(nxt[:-1]):
        assert (masks == ~done).all()
        for i in np.flatnonzero(done):
            assert rew[i] == 1.0
            after = nxt[t + 1]
            assert after[1][i] == 0.0 and not after[2][i] and after[4][i]
            np.testing.assert_array_equal(after[0][i], same_firsts[i][seen[i]])
            seen[i] += 1
    assert sum(seen.values()) >= 4


@pytest.mark.parametrize("mode", ["SameStep", "NextStep"])
def test_the_trainer_trains_on_a_vector_env_and_counts_its_episodes(mode):
    cfg = resolve(
        env=FACTORY,
        overrides=[
            *("--env.autoreset-mode", mode),
            *("--vec.num-envs", "4"),
            *("--train.device", "cpu"),
            *("--train.bptt-horizon", "8"),
            *("--train.minibatch-size", "32"),
            *("--policy.core", "mlp"),
        ],
    )
    trainer = Trainer(cfg, vector.make_from_config(cfg))
    try:
        for _ in range(4):
            trainer.evaluate()
            losses = trainer.train()
        assert np.isfinite(losses["policy_loss"])
        assert trainer.env_stats["n"] >= 1 and trainer.env_stats["episode_return"] >= 8
        # NextStep: the ignored action on each last observation is no agent-step
        assert trainer.global_step <= 4 * 32 and (mode == "NextStep") == (trainer.global_step < 4 * 32)
    finally:
        trainer.close()


def test_bad_vector_envs_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="backend ray"):
        vector.make(FACTORY, backend="ray", num_envs=2)
    with pytest.raises(ConfigError, match="batch_size must be 2"):
        vector.make(FACTORY, backend="multiprocessing", num_envs=2, batch_size=1, num_workers=1)
    disabled = functools.partial(cartpole_vector, 2, "Disabled")
    with pytest.raises(ConfigError, match="autoreset_mode is Disabled"):
        vector.make(disabled, backend="serial")


def test_ale_atari_vector_env_trains_as_a_source():
    pytest.importorskip("ale_py", reason="ale-py is the atari extra: pip install 'ale-py>=0.10'")
    vec = vector.make("appliance.emulation.atari:vector", backend="serial", num_envs=2, game="ALE/Pong-v5")
    try:
        assert type(vec.env).__name__ == "AtariVectorEnv"
        assert vec.single_observation_space.shape == (4, 84, 84)
        obs, _ = vec.reset(0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        obs, rew, *_ = vec.step(np.zeros(2, np.int32))
        assert obs.shape == (2, 4, 84, 84) and rew.shape == (2,)
    finally:
        vec.close()


def test_an_ale_id_is_stepped_by_ale_pys_vector_env_by_default():
    """``vec.preprocess auto`` turns an ALE id into ale-py's AtariVectorEnv (the same frames as the
    Python preprocessing, 507 against 70-111 agent-steps/s on 2 cores: docs/vectorization.md);
    ``atari`` keeps the Python workers; ``ale_vector`` on another env is one line."""
    assert vector.ale_vector_source("CartPole-v1", "auto", 4, {}) == ("CartPole-v1", {}, "auto")
    with pytest.raises(ConfigError, match="ale_vector applies to Arcade Learning Environment ids"):
        vector.ale_vector_source("CartPole-v1", "ale_vector", 4, {})
    pytest.importorskip("ale_py", reason="ale-py is the atari extra: pip install 'ale-py>=0.10'")
    assert vector.ale_vector_source("ALE/Pong-v5", "atari", 4, {}) == ("ALE/Pong-v5", {}, "atari")
    made = vector.ale_vector_source("ALE/Pong-v5", "auto", 4, {"repeat_action_probability": 0.0})
    assert made == (
        vector.ALE_VECTOR,
        {"repeat_action_probability": 0.0, "game": "ALE/Pong-v5", "num_envs": 4},
        "none",
    )
    vec = vector.make_from_config(resolve(env="ALE/Pong-v5", overrides=["--vec.num-envs", "2"]))
    try:
        assert type(vec.env).__name__ == "AtariVectorEnv" and vec.single_observation_space.shape == (
            4,
            84,
            84,
        )
    finally:
        vec.close()


def test_vector_bench_times_a_vector_env_beside_our_backends():
    from click.testing import CliRunner

    from appliance.bench import vectorbench
    from appliance.bench.vecsps import measure
    from appliance.cli import cli

    _, target = vectorbench.resolve_env("cartpole", None)
    found = vectorbench.approaches(target, 1, FACTORY, {"autoreset_mode": "SameStep"}, [3])
    assert all(a.sizes == [3] for a in found)
    names = [a.family for a in found]
    assert f"VectorEnv {FACTORY}" in names and "multiprocessing (1 workers)" in names
    vec = found[0].build(3)
    try:
        assert type(vec).__name__ == "GymVector" and vec.num_envs == 3 and not vec.next_step
        m = measure(vec, seconds=0.05, warmup=0.01)
        assert m.steps == 3 * m.batches and m.sps > 0
    finally:
        vec.close()
    result = CliRunner().invoke(cli, ["vector-bench", "--vector-env-param", "game=pong"])
    assert result.exit_code == 2 and "--vector-env-param needs --vector-env" in result.output


class FakePool:
    """EnvPool's gymnasium API as its docs describe it: single-env spaces, batched arrays, a
    ``config`` dict, NextStep autoreset (here: CartPoles in a NextStep SyncVectorEnv)."""

    def __init__(self, num_envs):
        self.inner = cartpole_vector(num_envs, "NextStep")
        self.config = {"num_envs": num_envs}
        self.observation_space = self.inner.single_observation_space
        self.action_space = self.inner.single_action_space
        self.closed = False

    def reset(self):
        return self.inner.reset(seed=3)

    def step(self, actions):
        return self.inner.step(actions)

    def close(self):
        self.closed = True
        self.inner.close()


def test_an_envpool_pool_is_a_next_step_vector_env_source():
    from appliance.vector.gymvec import EnvPoolVector

    pool = FakePool(2)
    vec = vector.make(lambda: EnvPoolVector(pool), backend="serial")
    try:
        assert vec.num_envs == 2 and vec.next_step and vec.single_observation_space.shape == (4,)
        vec.async_reset(0)
        ended = []
        for _ in range(60):
            ended += vec.recv()[4]
            vec.send(np.zeros(2, np.int32))
        assert ended and all(i["episode_length"] == i["episode_return"] for i in ended)
    finally:
        vec.close()
    assert pool.closed
    if importlib.util.find_spec("envpool") is None:
        with pytest.raises(ConfigError, match="needs EnvPool"):
            vector.make("appliance.vector.gymvec:envpool", backend="serial", num_envs=2)


def test_envpool_itself_steps_pong_as_a_vector_env_source():
    """EnvPool 1.2.5 (where installed; not a dependency): its Pong-v5 pool through
    ``appliance.vector.gymvec:envpool`` gives the atari family's frames, and its episodes end and
    are reported (random play loses a game of Pong within a few thousand steps)."""
    pytest.importorskip("envpool", reason="EnvPool is not installed (pip install envpool)")
    vec = vector.make(
        "appliance.vector.gymvec:envpool", backend="serial", num_envs=2, task_id="Pong-v5", recv_timeout=120
    )
    try:
        assert type(vec.env).__name__ == "EnvPoolVector" and vec.next_step
        assert vec.single_observation_space.shape == (4, 84, 84) and vec.single_action_space.n == 6
        vec.async_reset(0)
        ended, rng = [], np.random.default_rng(0)
        for _ in range(6000):
            obs, *_, infos, _, _ = vec.recv()
            ended += infos
            if len(ended) >= 2:
                break
            vec.send(rng.integers(0, 6, 2))
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert len(ended) >= 2 and all(-21 <= i["episode_return"] <= 21 for i in ended)
    finally:
        vec.close()


def test_the_ranks_memory_check_closes_the_vector_env_it_made(monkeypatch):
    from appliance.train import distributed

    made = []

    def factory(num_envs=2):
        made.append(cartpole_vector(num_envs))
        return made[-1]

    import appliance.testing

    monkeypatch.setattr(appliance.testing, "cartpole_vector_probe", factory, raising=False)
    cfg = resolve(env="appliance.testing:cartpole_vector_probe", overrides=["--train.device", "cpu"])
    made.clear()  # the family's look at the spaces made (and closed) one too
    distributed.check_ranks_fit(cfg, 1)
    assert len(made) == 1 and made[0].closed
