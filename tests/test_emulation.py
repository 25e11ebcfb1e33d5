"""Emulation: structured spaces round-trip exactly (hypothesis-generated), actions map back, agents come and go."""

from __future__ import annotations

import re
from functools import partial

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.emulation import ActionCodec, SpaceCodec, emulate, make_factory
from appliance.errors import ConfigError, EnvContractError
from appliance.testing import (
    BROKEN_RULES,
    STRUCTURED_OBS,
    BrokenAgents,
    BrokenEnv,
    ComingAndGoing,
    StructuredEnv,
)

DTYPES = [np.float32, np.float64, np.uint8, np.int8, np.int32, np.int64]


@st.composite
def leaf_spaces(draw):
    kind = draw(st.sampled_from(["box", "discrete", "multidiscrete", "multibinary"]))
    if kind == "box":
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
        if np.dtype(dtype).kind == "f":
            return spaces.Box(-2.0, 2.0, shape, dtype)
        return spaces.Box(0, 100, shape, dtype)
    if kind == "discrete":
        return spaces.Discrete(draw(st.integers(1, 9)), start=draw(st.integers(-3, 3)))
    if kind == "multidiscrete":
        return spaces.MultiDiscrete(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    return spaces.MultiBinary(draw(st.integers(1, 5)))


def nested(children):
    return st.one_of(
        st.dictionaries(st.text("abcdef", min_size=1, max_size=4), children, min_size=1, max_size=3).map(
            spaces.Dict
        ),
        st.lists(children, min_size=1, max_size=3).map(lambda xs: spaces.Tuple(tuple(xs))),
    )


structured = st.recursive(leaf_spaces(), nested, max_leaves=6)


def assert_same(a, b):
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@settings(max_examples=150, deadline=None)
@given(space=structured, seed=st.integers(0, 2**16))
def test_observation_round_trip_is_exact(space, seed):
    space.seed(seed)
    codec = SpaceCodec(space)
    sample = space.sample()
    flat = codec.flatten(sample)
    assert flat.shape == (codec.size,) and flat.dtype == codec.dtype
    assert codec.flat_space.shape == (codec.size,)
    assert_same(sample, codec.unflatten(flat))


@settings(max_examples=60, deadline=None)
@given(space=structured, seed=st.integers(0, 2**16), batch=st.integers(1, 4))
def test_batched_unflatten_restores_each_row(space, seed, batch):
    space.seed(seed)
    codec = SpaceCodec(space)
    samples = [space.sample() for _ in range(batch)]
    flat = np.stack([codec.flatten(s) for s in samples])
    restored = codec.unflatten(flat)
    for i, sample in enumerate(samples):
        assert_same(sample, _index(restored, i))


def _index(tree, i):
    if isinstance(tree, dict):
        return {k: _index(v, i) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_index(v, i) for v in tree)
    value = np.asarray(tree)[i]
    return value


@settings(max_examples=150, deadline=None)
@given(space=structured, seed=st.integers(0, 2**16))
def test_action_round_trip(space, seed):
    space.seed(seed)
    codec = ActionCodec(space)
    action = space.sample()
    flat = codec.flatten(action)
    assert flat.shape == (codec.size,)
    back = codec.unflatten(flat)
    assert space.contains(back)
    assert_same(action, back) if codec.kind == "discrete" else None
    if codec.kind != "discrete":  # float transport: equal values, exact dtypes
        np.testing.assert_allclose(codec.flatten(back), flat, rtol=1e-6)


def test_mixed_dtypes_travel_as_bytes_and_same_dtypes_do_not():
    assert SpaceCodec(STRUCTURED_OBS).dtype == np.uint8
    same = SpaceCodec(spaces.Tuple((spaces.Box(0, 1, (2,), np.float32), spaces.Box(-1, 1, (3,), np.float32))))
    assert same.dtype == np.float32 and same.size == 5
    assert same.flat_space.low.tolist() == [0, 0, -1, -1, -1]


def test_action_kinds():
    assert ActionCodec(spaces.Discrete(5)).flat_space == spaces.Discrete(5)
    md = ActionCodec(spaces.Dict({"a": spaces.Discrete(3), "b": spaces.MultiBinary(2)})).flat_space
    assert isinstance(md, spaces.MultiDiscrete) and md.nvec.tolist() == [3, 2, 2]
    mixed = ActionCodec(spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32))))
    assert mixed.kind == "mixed" and mixed.flat_space.shape == (3,)
    assert mixed.unflatten(np.array([2.2, 0.5, -0.5]))[0] == 2


def test_unsupported_space_is_a_clear_error():
    with pytest.raises(ConfigError, match="cannot emulate space Text"):
        SpaceCodec(spaces.Text(5))


def test_structured_env_emulated_end_to_end():
    em = emulate(StructuredEnv(length=3))
    obs = np.zeros((1, em.obs_codec.size), em.obs_codec.dtype)
    mask = np.zeros(1, bool)
    em.reset(0, obs, mask)
    assert STRUCTURED_OBS.contains(em.obs_codec.unflatten(obs[0]))
    rew, term, trunc = np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool)
    actions = np.array([[2, 1, 3]], np.int32)  # move=2, power=[1, 3]
    info = None
    for _ in range(3):
        info = em.step(actions, obs, rew, term, trunc, mask)
    assert em.env.last_action["move"] == 2 and em.env.last_action["power"].tolist() == [1, 3]
    assert term[0] and info == {"episode_return": 6.0, "episode_length": 3}


def test_pettingzoo_agents_come_and_go_with_a_mask():
    em = emulate(ComingAndGoing(num_agents=3, life=6))
    n = em.num_agents
    obs = np.zeros((n, 2), np.float32)
    mask = np.zeros(n, bool)
    rew, term, trunc = np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)
    em.reset(0, obs, mask)
    seen_masks, episodes = [], 0
    for _ in range(20):
        expected_live = np.isin(np.arange(n), [em.index[a] for a in em.env.agents])
        info = em.step(np.full((n,), 1, np.int32), obs, rew, term, trunc, mask)
        episodes += info is not None
        assert (rew[expected_live] == 1).all(), "live agents get their reward"
        assert (obs[~mask] == 0).all(), "absent agents see zeros"
        seen_masks.append(tuple(mask))
    assert len(set(seen_masks)) > 2 and episodes >= 2


def test_make_factory_errors():
    with pytest.raises(ConfigError, match="did you mean 'CartPole-v1'"):
        make_factory("CartPole-v9")
    with pytest.raises(ConfigError, match="expected a gymnasium.Env or a pettingzoo.ParallelEnv"):
        emulate(object())


def test_parallel_env_from_aec_to_parallel_is_recognized_before_reset():
    """aec_to_parallel's env has no ``agents`` until reset: emulation goes by type, not attributes."""
    from appliance.testing import take_turns_parallel

    env = take_turns_parallel()
    assert not hasattr(env, "agents")
    em = emulate(env)
    n = em.num_agents
    obs, mask = np.zeros((n, 2), np.float32), np.zeros(n, bool)
    rew, term, trunc = np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)
    em.reset(0, obs, mask)
    assert n == 2 and mask.all() and (obs.sum(1) == 1).all()
    infos = []
    for _ in range(16):
        right = obs.argmax(1).astype(np.int32)  # repeat the bit: +1 each
        info = em.step(right, obs, rew, term, trunc, mask)
        assert (rew == 1).all()
        infos += [info] if info else []
    assert infos[0] == {"episode_return": 16.0, "episode_length": 8} and len(infos) == 2


def test_aec_envs_get_a_clear_error():
    from appliance.testing import TakeTurns

    with pytest.raises(ConfigError, match="AEC env; wrap it with .*aec_to_parallel"):
        emulate(TakeTurns())


def test_envs_named_by_import_path():
    """package.module:factory (Gymnasium or PettingZoo) and module:Env-v0 ids make envs, with
    one-line errors for bad paths; the config takes them like Gymnasium ids."""
    from appliance.config import resolve

    factory = make_factory("appliance.testing:take_turns_parallel")
    assert emulate(factory()).num_agents == 2
    assert emulate(make_factory("appliance.testing:ColourBandit")()).num_agents == 1
    assert emulate(make_factory("gymnasium.envs.classic_control:CartPole-v1")()).num_agents == 1
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module'"):
        make_factory("no_such_module:Env")
    with pytest.raises(ConfigError, match="has no callable 'Nope'"):
        make_factory("appliance.testing:Nope")
    cfg = resolve(env="appliance.testing:take_turns_parallel")
    assert cfg.vec.backend == "multiprocessing" and "appliance.testing:take_turns_parallel" in cfg.sources


# ----------------------------------------------------------------------------- env contracts
# Each rule: a tiny env breaking it (appliance.testing.BrokenEnv / BrokenAgents) through a real vector,
# and the one-line EnvContractError naming the env, the call and the rule. Without the checks each
# of these was a deep traceback (a broadcast error, a KeyError, an unpacking error) or passed silently.

CONTRACTS = {
    "reset_none": r"^BrokenEnv: reset\(\) returned None; it must return \(observation, info\)$",
    "reset_bare": r"^BrokenEnv: reset\(\) returned an ndarray of shape \(4,\) and dtype float32 \(a bare "
    r"observation\?\); it must return \(observation, info\)$",
    "reset_info": r"^BrokenEnv: reset\(\) returned \(observation, None\); the second item must be the info dict$",
    "step_4": r"^BrokenEnv: step\(\) returned 4 values \(observation, reward, done, info: the old gym API\); "
    r"it must return 5: \(observation, reward, terminated, truncated, info\)$",
    "obs_shape": r"^BrokenEnv: step\(\) returned an observation of shape \(7,\); its observation_space is "
    r"Box\(4,\) float32$",
    "obs_dtype": r"^BrokenEnv: step\(\) returned an observation of dtype float32, which does not cast to uint8 "
    r"without losing values; its observation_space is Box\(4,\) uint8$",
    "obs_nan": r"^BrokenEnv: reset\(\) returned an observation holding NaN or Inf$",
    "reward_shape": r"^BrokenEnv: step\(\) returned a reward of shape \(1,\); a reward must be one number$",
    "reward_nan": r"^BrokenEnv: step\(\) returned a reward of nan; rewards must be finite$",
    "terminated_int": r"^BrokenEnv: step\(\) returned terminated of type int \(0\); it must be a bool$",
    "info_list": r"^BrokenEnv: step\(\) returned info of type list; it must be a dict$",
    "spaces_change": r"^BrokenEnv: action_space changed from Discrete\(2\) to Discrete\(3\); the vector's "
    r"buffers hold the first, so an env must keep its spaces$",
    "instance_spaces": r"^BrokenEnv: an instance was made with action_space Discrete\([23]\), the first with "
    r"Discrete\([23]\); every instance must have the same spaces$",
    "no_space": r"^BrokenEnv: observation_space is None, not a gymnasium.spaces.Space; set it in __init__$",
}


def _contract_error(env, backend="serial", num_envs=2, steps=25, **kwargs):
    """The EnvContractError a vector of ``env`` raises within ``steps`` steps (episodes are 10 long)."""
    from appliance import vector

    with (
        pytest.raises(EnvContractError) as err,
        vector.make(env, backend=backend, num_envs=num_envs, **kwargs) as vec,
    ):
        vec.reset(0)
        actions = np.zeros((vec.num_agents, *vec.single_action_space.shape), np.int64)
        for _ in range(steps):
            vec.step(actions)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_contract_rules_cover_every_broken_env():
    assert set(CONTRACTS) == set(BROKEN_RULES)


@pytest.mark.parametrize("rule", list(CONTRACTS))
def test_a_broken_env_contract_is_one_line_naming_env_call_and_rule(rule):
    message = _contract_error(partial(BrokenEnv, rule))
    assert re.match(CONTRACTS[rule], message), message


@pytest.mark.parametrize("rule", ["reset_bare", "obs_shape", "terminated_int", "instance_spaces"])
def test_a_multiprocessing_worker_raises_the_same_line(rule):
    """In a worker the same check raises in the main process with the same message (the vector closed)."""
    serial = _contract_error(partial(BrokenEnv, rule), num_envs=4)
    workers = _contract_error(partial(BrokenEnv, rule), backend="multiprocessing", num_envs=4, num_workers=2)
    assert re.match(CONTRACTS[rule], workers), workers
    if rule != "instance_spaces":  # which instance differs depends on the process
        assert workers == serial


PETTINGZOO = {
    "intruder": r"^broken_agents: step\(\) returned an observation for 'intruder', which is not in "
    r"possible_agents \['a', 'b'\]$",
    "missing": r"^broken_agents: step\(\) returned no observation for 'b', which is in env.agents$",
    "reward_key": r"^broken_agents: step\(\) returned a reward for 'intruder', which is not in possible_agents",
    "lists": r"^broken_agents: step\(\) returned rewards as a list of 2 items; a ParallelEnv returns one dict "
    r"per item, keyed by agent$",
    "terminated_str": r"^broken_agents: step\(\) returned terminated for 'a' of type str; it must be a bool$",
}


@pytest.mark.parametrize("rule", list(PETTINGZOO))
def test_pettingzoo_agent_keys_are_checked(rule):
    message = _contract_error(partial(BrokenAgents, rule))
    assert re.match(PETTINGZOO[rule], message), message


def test_gymnasium_wrappers_rejecting_a_broken_step_give_the_same_line():
    """A registered id is wrapped by gymnasium.make (TimeLimit unpacks step into five, the env
    checker asserts on reset): their errors come back as the contract the env broke."""
    import gymnasium

    gymnasium.register("BrokenContract-v0", entry_point=BrokenEnv, max_episode_steps=50)
    try:
        em = emulate(gymnasium.make("BrokenContract-v0", rule="step_4"))
        obs, mask = np.zeros((1, 4), np.float32), np.zeros(1, bool)
        rew, term, trunc = np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool)
        em.reset(0, obs, mask)
        em.step(np.zeros(1, np.int32), obs, rew, term, trunc, mask)
        with pytest.raises(EnvContractError, match=r"^BrokenContract-v0: step\(\) returned 4 values"):
            em.step(np.zeros(1, np.int32), obs, rew, term, trunc, mask)
        em = emulate(gymnasium.make("BrokenContract-v0", rule="reset_info"))
        with pytest.raises(
            EnvContractError, match=r"^BrokenContract-v0: reset\(\) returned what Gymnasium's"
        ):
            em.reset(0, obs, mask)
    finally:
        gymnasium.registry.pop("BrokenContract-v0")


def test_well_behaved_envs_pass_through_unchanged():
    """float64 observations for a float32 space, numpy scalars and bools, Python ints for a Discrete
    space: all fine, and a structured env's missing key is named."""

    class Loose(gymnasium.Env):
        observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

        def reset(self, seed=None, options=None):
            return [0.1, 0.2, 0.3], {}

        def step(self, action):
            return np.full(3, 0.5), np.float32(1.5), np.bool_(False), False, {}

    em = emulate(Loose())
    obs, mask = np.zeros((1, 3), np.float32), np.zeros(1, bool)
    rew, term, trunc = np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool)
    em.reset(0, obs, mask)
    np.testing.assert_allclose(obs[0], [0.1, 0.2, 0.3], rtol=1e-6)
    em.step(np.zeros((1, 1), np.float32), obs, rew, term, trunc, mask)
    assert obs[0].tolist() == [0.5] * 3 and rew[0] == 1.5

    class NoGrid(StructuredEnv):
        def step(self, action):
            sample, *rest = super().step(action)
            del sample["grid"]
            return (sample, *rest)

    em = emulate(NoGrid())
    obs = np.zeros((1, em.obs_codec.size), em.obs_codec.dtype)
    em.reset(0, obs, mask)
    with pytest.raises(
        EnvContractError, match=r"^NoGrid: step\(\) returned an observation without \['grid'\]"
    ):
        em.step(np.array([[2, 1, 3]], np.int32), obs, rew, term, trunc, mask)


@pytest.mark.slow
def test_a_ray_worker_raises_the_same_line():
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'puffer-bench[ray]'")
    env = partial(BrokenEnv, "obs_shape")
    assert _contract_error(env, backend="ray", num_envs=2, num_workers=2) == _contract_error(env)
