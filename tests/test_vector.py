"""Vector backends: one API, identical results, async batches, and every fault path cleaned up."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial
from pathlib import Path

import numpy as np
import psutil
import pytest

from appliance import vector
from appliance.errors import ConfigError
from appliance.testing import ComingAndGoing, CountingEnv, StructuredEnv
from appliance.vector.sizes import check_sizes

ROOT = Path(__file__).resolve().parents[1]


def shm_segments() -> set[str]:
    """This process's segments (puffer_<pid>_...): other test runs on the machine make their own."""
    return {p for p in os.listdir("/dev/shm") if p.startswith(f"puffer_{os.getpid()}_")}


def children() -> list[psutil.Process]:
    """Live child processes, less multiprocessing's resource tracker: one per Python process, kept on
    purpose (it unlinks our shared memory should this process be killed)."""
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(c.cmdline()):
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test must leave no worker process and no shared memory behind."""
    before = shm_segments()
    yield
    gc.collect()
    deadline = time.monotonic() + 5
    while children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not children(), f"child processes left: {children()}"
    assert shm_segments() - before == set(), "shared memory left in /dev/shm"


def actions_for(vec, steps, seed=0):
    rng = np.random.default_rng(seed)
    space = vec.single_action_space
    if hasattr(space, "nvec"):
        return [
            rng.integers(0, space.nvec, size=(vec.agents_per_batch, len(space.nvec))) for _ in range(steps)
        ]
    return [rng.integers(0, space.n, size=vec.agents_per_batch) for _ in range(steps)]


def trajectory(vec, steps, seed=3):
    obs, _ = vec.reset(seed)
    out = [obs.copy()]
    rewards, dones = [], []
    for a in actions_for(vec, steps):
        obs, rew, term, trunc, _ = vec.step(a)
        out.append(obs.copy())
        rewards.append(rew.copy())
        dones.append((term | trunc).copy())
    return np.stack(out), np.stack(rewards), np.stack(dones)


# ----------------------------------------------------------------------------- equivalence


@pytest.mark.parametrize("env", ["breakout", "target", "snake"])
def test_serial_multiprocessing_and_native_agree_step_for_step(env):
    results = {}
    params = {"log_ticks": 128} if env == "target" else {}  # logs a window every 128 steps (it never ends)
    with vector.make(env, backend="serial", num_envs=4, **params) as vec:
        results["serial"] = trajectory(vec, 300)
    with vector.make(env, backend="multiprocessing", num_envs=4, num_workers=2, **params) as vec:
        results["multiprocessing"] = trajectory(vec, 300)
        assert vec.num_agents == vec.agents_per_batch
    with vector.make(env, backend="native", num_envs=4, num_threads=2, **params) as vec:
        results["native"] = trajectory(vec, 300)
    for name in ("multiprocessing", "native"):
        for a, b in zip(results["serial"], results[name], strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    if env != "target":  # target never ends, as PufferLib's
        assert results["serial"][2].any(), "episodes ended during the comparison"
    assert results["serial"][1].any(), "rewards during the comparison"


def test_emulated_gymnasium_env_agrees_across_backends():
    with vector.make("CartPole-v1", backend="serial", num_envs=4) as vec:
        serial = trajectory(vec, 120)
        assert vec.single_observation_space.shape == (4,)
    with vector.make("CartPole-v1", backend="multiprocessing", num_envs=4, num_workers=2) as vec:
        mp = trajectory(vec, 120)
    for a, b in zip(serial, mp, strict=True):
        np.testing.assert_array_equal(a, b)


def test_structured_env_flattened_in_workers_and_restored():
    with vector.make(StructuredEnv, backend="multiprocessing", num_envs=2, num_workers=2) as vec:
        obs, _ = vec.reset(0)
        assert obs.dtype == np.uint8  # mixed dtypes travel as bytes
        restored = vec.obs_codec.unflatten(obs)
        assert restored["pos"].dtype == np.float32 and restored["pos"].shape == (2, 2)
        assert restored["grid"].shape == (2, 3, 3) and restored["mode"].dtype == np.int64
        assert vec.single_action_space.nvec.tolist() == [3, 2, 4]
        vec.step(np.array([[2, 1, 3], [0, 0, 0]]))


@pytest.mark.parametrize("backend", ["serial", "multiprocessing"])
def test_multi_agent_emulation_masks(backend):
    kwargs = {"num_workers": 2} if backend == "multiprocessing" else {}
    with vector.make(partial(ComingAndGoing, 3, 6), backend=backend, num_envs=2, **kwargs) as vec:
        assert vec.num_agents == 6 and vec.agents_per_env == 3
        vec.reset(0)
        seen = set()
        for _ in range(12):
            vec.send(np.ones(6, np.int64))
            obs, _rew, _term, _trunc, _infos, _ids, mask = vec.recv()
            assert (obs[~mask] == 0).all()
            seen.add(tuple(mask))
        assert len(seen) > 2, "agents come and go"


# ----------------------------------------------------------------------------- async batches


@pytest.mark.parametrize("zero_copy", [True, False])
def test_async_batches_return_the_right_agents(zero_copy):
    """CountingEnv's first observation entry is its env's seed, seed + env index: ids must match it."""
    seed = 100
    with vector.make(
        partial(CountingEnv, length=7),
        backend="multiprocessing",
        num_envs=8,
        num_workers=4,
        batch_size=4,
        zero_copy=zero_copy,
        overwork=True,
    ) as vec:
        assert vec.agents_per_batch == 4
        vec.async_reset(seed)
        served = set()
        deadline = (
            time.monotonic() + 20
        )  # first-ready batches: a worker the OS has not run yet waits its turn
        i = 0
        while i < 40 or (served != set(range(8)) and time.monotonic() < deadline):
            i += 1
            obs, _rew, _term, _trunc, _infos, ids, masks = vec.recv()
            assert obs.shape == (4, 2) and len(ids) == 4 and masks.all()
            np.testing.assert_array_equal(obs[:, 0], seed + ids)
            if zero_copy:
                assert np.array_equal(ids, np.arange(ids[0], ids[0] + 4)), (
                    "zero-copy batches are contiguous blocks"
                )
            served.update(ids.tolist())
            vec.send(np.full(4, i % 4))
        assert served == set(range(8))


def test_sync_recv_returns_views_with_zero_copy_and_copies_without():
    with vector.make("squared", backend="multiprocessing", num_envs=4, num_workers=2, zero_copy=True) as vec:
        a, _ = vec.reset(0)
        b, *_ = vec.step(np.zeros(4, np.int64))
        assert np.shares_memory(a, b)
    with vector.make("squared", backend="multiprocessing", num_envs=4, num_workers=2, zero_copy=False) as vec:
        a, _ = vec.reset(0)
        a = a.copy()
        b, *_ = vec.step(np.zeros(4, np.int64))
        assert not np.shares_memory(a, b)


def test_infos_travel_only_when_there_are_some():
    with vector.make(
        partial(CountingEnv, length=3), backend="multiprocessing", num_envs=2, num_workers=2
    ) as vec:
        vec.reset(0)
        counts = [len(vec.step(np.zeros(2, np.int64))[4]) for _ in range(6)]
    assert counts == [0, 0, 2, 0, 0, 2]


# ----------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"num_envs": 10, "num_workers": 4},
            r"num_envs \(10\) must be divisible by num_workers \(4\).*num_envs=8 or 12",
        ),
        (
            {"num_envs": 8, "num_workers": 2, "batch_size": 3},
            r"batch_size \(3\) must be a multiple of envs_per_worker \(4 = num_envs 8 / num_workers 2\).*batch_size=4",
        ),
        (
            {"num_envs": 12, "num_workers": 3, "batch_size": 8, "cores": 4},
            r"zero_copy needs num_workers \(3\) divisible.*valid batch_size values: 4, 12",
        ),
        (
            {"num_envs": 8, "num_workers": 4, "cores": 2},
            r"num_workers \(4\) > physical cores \(2\).*overwork=True",
        ),
        ({"num_envs": 2, "num_workers": 4, "overwork": True}, r"num_workers \(4\) > num_envs \(2\)"),
        ({"num_envs": 0}, "num_envs must be a positive int"),
        ({"num_envs": 8, "batch_size": 16}, r"batch_size \(16\) > num_envs \(8\)"),
    ],
)
def test_size_rules_name_the_rule_and_valid_values(kwargs, message):
    args = {
        "num_envs": 8,
        "num_workers": 2,
        "batch_size": None,
        "zero_copy": True,
        "overwork": False,
        "cores": 8,
        **kwargs,
    }
    with pytest.raises(ConfigError, match=message):
        check_sizes(
            args["num_envs"],
            args["num_workers"],
            args["batch_size"],
            args["zero_copy"],
            args["overwork"],
            args["cores"],
        )


def test_size_rules_apply_through_make_and_defaults_fit_the_cores():
    with pytest.raises(ConfigError, match="must be divisible by num_workers"):
        vector.make("squared", backend="multiprocessing", num_envs=5, num_workers=2)
    with pytest.raises(ConfigError, match="unknown backend 'multiproc'; did you mean 'multiprocessing'"):
        vector.make("squared", backend="multiproc", num_envs=4)
    with pytest.raises(ConfigError, match="native backend runs Ocean C envs only"):
        vector.make("CartPole-v1", backend="native", num_envs=4)
    with pytest.raises(ConfigError, match="native backend steps all envs at once"):
        vector.make("squared", backend="native", num_envs=4, batch_size=2)
    sizes = check_sizes(12, "auto", "auto", True, False, cores=psutil.cpu_count(logical=False) or 1)
    assert sizes.num_workers <= (psutil.cpu_count(logical=False) or 1) and 12 % sizes.num_workers == 0


# ----------------------------------------------------------------------------- faults


def test_bad_actions_are_rejected_before_anything_is_sent():
    with vector.make("breakout", backend="multiprocessing", num_envs=4, num_workers=2) as vec:
        vec.reset(0)
        with pytest.raises(TypeError, match="actions must be integers"):
            vec.send(np.zeros(4, np.float32))
        with pytest.raises(ValueError, match=r"actions have shape \(3,\); expected \(4,\)"):
            vec.send(np.zeros(3, np.int64))
        with pytest.raises(ValueError, match="action 7 for agent 1 is out of range"):
            vec.send(np.array([0, 7, 0, 0]))
        obs, *_ = vec.step(np.zeros(4, np.int64))  # still usable: nothing was sent
        assert obs.shape == (4, 118)


def test_env_exception_is_reraised_with_worker_traceback_and_env_index():
    with vector.make(
        partial(CountingEnv, length=50, fail_at=3), backend="multiprocessing", num_envs=4, num_workers=2
    ) as vec:
        vec.reset(0)
        vec.step(np.zeros(4, np.int64))
        vec.step(np.zeros(4, np.int64))
        with pytest.raises(vector.WorkerError) as err:
            vec.step(np.zeros(4, np.int64))
        message = str(err.value)
        assert "worker 0 (envs 0..1): env 0 raised in step" in message
        assert "Traceback" in message and "CountingEnv failed on purpose at step 3" in message
        assert vec.closed


def test_env_exception_in_serial_names_the_env():
    with vector.make(partial(CountingEnv, fail_at=2), backend="serial", num_envs=2) as vec:
        vec.reset(0)
        vec.step(np.zeros(2, np.int64))
        with pytest.raises(vector.WorkerError, match="env 0 raised in step"):
            vec.step(np.zeros(2, np.int64))


def test_a_killed_worker_is_detected_within_a_second():
    with vector.make("squared", backend="multiprocessing", num_envs=4, num_workers=2) as vec:
        vec.reset(0)
        victim = vec.pids[1]
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.1)
        vec.send(np.zeros(4, np.int64))
        start = time.monotonic()
        with pytest.raises(vector.WorkerError, match=r"worker 1 \(envs 2..3\) was killed by signal SIGKILL"):
            vec.recv()
        assert time.monotonic() - start < 1.0
        assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE


def test_a_worker_dying_mid_step_is_reported():
    with vector.make(
        partial(CountingEnv, length=50, kill_at=2), backend="multiprocessing", num_envs=2, num_workers=2
    ) as vec:
        vec.reset(0)
        vec.step(np.zeros(2, np.int64))
        with pytest.raises(vector.WorkerError, match="killed by signal SIGKILL"):
            vec.step(np.zeros(2, np.int64))


def test_recv_timeout_is_configurable():
    with vector.make(
        partial(CountingEnv, length=50, sleep_at=2, sleep_s=3.0),
        backend="multiprocessing",
        num_envs=2,
        num_workers=2,
        recv_timeout=0.3,
    ) as vec:
        vec.reset(0)
        vec.step(np.zeros(2, np.int64))
        start = time.monotonic()
        with pytest.raises(vector.WorkerError, match=r"recv timed out after 0.3 s: worker 0 \(envs 0..0\)"):
            vec.step(np.zeros(2, np.int64))
        assert time.monotonic() - start < 2.0


def test_env_creation_failure_is_reported_not_hung():
    def broken():
        raise OSError("no such ROM")

    with pytest.raises(ConfigError, match="creating env .* failed: OSError: no such ROM"):
        vector.make(broken, backend="multiprocessing", num_envs=2, num_workers=2)


def test_close_is_idempotent_and_gc_closes():
    vec = vector.make("squared", backend="multiprocessing", num_envs=4, num_workers=2)
    pids = vec.pids
    vec.close()
    vec.close()
    assert vec.closed and not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
    )
    with pytest.raises(RuntimeError, match="closed"):
        vec.reset(0)
    vec = vector.make("squared", backend="multiprocessing", num_envs=4, num_workers=2)
    obs, _ = vec.reset(0)  # a zero-copy view outliving the vector must not keep /dev/shm entries
    del vec
    gc.collect()
    assert obs.shape == (4, 121)


SCRIPT = """
import faulthandler, os, signal, sys, time
import numpy as np
from appliance import vector
if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1)  # the test asks for a stack dump if this ever hangs
    # an interactive Ctrl-C; a background job (CI under nohup ... &) inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    vec = vector.make("squared", backend="multiprocessing", num_envs=4, num_workers=2)
    vec.reset(0)
    print(" ".join(map(str, vec.pids)), flush=True)
    mode = sys.argv[1]
    if mode == "exit":
        sys.exit(0)  # no close(): interpreter exit must clean up
    if mode == "sigint":
        while True:
            vec.step(np.zeros(4, np.int64))
"""


def test_ray_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"pip install 'puffer-bench\[ray\]'"):
        vector.make("squared", backend="ray", num_envs=2, num_workers=2)


@pytest.mark.parametrize("mode", ["exit", "sigint"])
def test_interpreter_exit_and_ctrl_c_leave_nothing_behind(mode, tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.Popen(
        [sys.executable, str(script), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    if mode == "sigint":
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # dump every thread's stack, then make sure nothing is left
        time.sleep(1)
        for p in [*pids, proc.pid]:
            with contextlib.suppress(psutil.Error):
                psutil.Process(p).kill()
        pytest.fail(
            f"{mode}: the main process did not exit within 20 s; its stderr:\n{proc.communicate()[1]}"
        )
    if mode == "sigint":
        assert "KeyboardInterrupt" in proc.stderr.read()
    deadline = time.monotonic() + 5
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(psutil.pid_exists(p) for p in pids), "workers outlived the main process"


# ----------------------------------------------------------------------------- ray


@pytest.mark.slow
def test_ray_backend_matches_serial_and_batches_async():
    ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'puffer-bench[ray]'")
    with vector.make("breakout", backend="serial", num_envs=4) as vec:
        serial = trajectory(vec, 60)
    with vector.make("breakout", backend="ray", num_envs=4, num_workers=2) as vec:
        remote = trajectory(vec, 60)
    for a, b in zip(serial, remote, strict=True):
        np.testing.assert_array_equal(a, b)
    with vector.make(
        partial(CountingEnv, length=5), backend="ray", num_envs=4, num_workers=2, batch_size=2
    ) as vec:
        vec.async_reset(10)
        served = set()
        for _ in range(8):
            obs, _, _, _, _, ids, _ = vec.recv()
            np.testing.assert_array_equal(obs[:, 0], 10 + ids)
            served.update(ids.tolist())
            vec.send(np.zeros(2, np.int64))
        assert served == {0, 1, 2, 3}
        obs, *_ = vec.recv()
        kept = obs.copy()
    assert not ray.is_initialized(), "the runtime the vector started is stopped on close"
    # what recv handed out is the vector's own copy, not a view into the object store just torn down
    obs += 1
    np.testing.assert_array_equal(obs, kept + 1)


@pytest.mark.slow
def test_ray_env_error_is_reported():
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'puffer-bench[ray]'")
    with vector.make(partial(CountingEnv, fail_at=2), backend="ray", num_envs=2, num_workers=2) as vec:
        vec.reset(0)
        vec.step(np.zeros(2, np.int64))
        with pytest.raises(vector.WorkerError, match="CountingEnv failed on purpose"):
            vec.step(np.zeros(2, np.int64))
