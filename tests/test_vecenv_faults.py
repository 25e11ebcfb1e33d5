"""A factory's gymnasium VectorEnv (appliance.vector.gymvec) under the contract every env source has
(docs/reliability.md): each fault over each kind of VectorEnv is one line naming the env and the call,
within ``vec.recv_timeout``, with the vector closed and its worker processes ended; and the workers
die with their parent however it dies.

Kinds: gymnasium's ``AsyncVectorEnv`` (worker processes), its ``SyncVectorEnv`` (this process), and a
VectorEnv that returns its arrays itself as ale-py's ``AtariVectorEnv`` and EnvPool's pool do."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from appliance import vector
from appliance.errors import ApplianceError, EnvContractError
from appliance.vector.base import WorkerError

N, AT, TIMEOUT = 3, 5, 2.0  # envs; the step at which the fault comes; vec.recv_timeout
HERE = Path(__file__).resolve().parent


class Faulty(gymnasium.Env):
    """A 4-float env whose env 1 does ``fault`` at step ``AT`` (or in reset)."""

    observation_space = spaces.Box(-1, 1, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int, fault: str) -> None:
        self.index, self.fault, self.t = index, fault, 0

    def _now(self) -> bool:
        return self.index == 1 and self.t == AT

    def reset(self, *, seed=None, options=None):
        self.t = 0
        if self.index == 1 and self.fault == "hang in reset":
            time.sleep(3600)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        if self._now():
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "raise":
                raise RuntimeError("the env broke at step 5")
            if self.fault == "exit":
                os._exit(3)
            if self.fault == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
        reward = float("nan") if self._now() and self.fault == "nan reward" else 1.0
        return np.zeros(4, np.float32), reward, False, False, {}


class Arrays(gymnasium.vector.VectorEnv):
    """A VectorEnv that steps its envs itself and returns arrays (as ale-py's and EnvPool's do)."""

    metadata = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}  # noqa: RUF012

    def __init__(self, num_envs: int, fault: str) -> None:
        self.num_envs, self.fault, self.t = num_envs, fault, 0
        self.single_observation_space = Faulty.observation_space
        self.single_action_space = Faulty.action_space
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        if self.fault == "hang in reset":
            time.sleep(3600)
        return np.zeros((self.num_envs, 4), np.float32), {}

    def step(self, actions):
        self.t += 1
        n, now = self.num_envs, self.t == AT
        obs, rewards = np.zeros((n, 4), np.float32), np.ones(n, np.float32)
        if now:
            if self.fault == "hang":
                time.sleep(3600)
            if self.fault == "raise":
                raise RuntimeError("the env broke at step 5")
            if self.fault == "nan reward":
                rewards[1] = np.nan
            if self.fault == "obs shape":
                obs = np.zeros((n, 5), np.float32)
            if self.fault == "obs dtype":
                obs = obs.astype(np.float64)
            if self.fault == "obs batch":
                obs = np.zeros((n - 1, 4), np.float32)
            if self.fault == "reward shape":
                rewards = np.ones((n, 2), np.float32)
        return obs, rewards, np.zeros(n, bool), np.zeros(n, bool), {}


def faulty_vector(num_envs: int = N, kind: str = "sync", fault: str = "none") -> gymnasium.vector.VectorEnv:
    if kind == "arrays":
        return Arrays(num_envs, fault)
    fns = [functools.partial(Faulty, i, fault) for i in range(num_envs)]
    if kind == "async":
        return gymnasium.vector.AsyncVectorEnv(fns, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
    return gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)


def _workers(vec) -> list[int]:
    return [p.pid for p in getattr(vec.env, "processes", None) or []]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our child, not reaped yet) is no running process
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


KINDS = ["async", "sync", "arrays"]
FAULTS = {  # fault: (kinds it applies to, the call, what the line says)
    "hang": (KINDS, "step", "did not return within 2 s (vec.recv_timeout)"),
    "hang in reset": (KINDS, "reset", "did not return within 2 s (vec.recv_timeout)"),
    "raise": (KINDS, "step", "RuntimeError: the env broke at step 5"),
    "exit": (["async"], "step", "worker 1 (pid"),
    "killed": (["async"], "step", "killed by SIGKILL"),
    "nan reward": (KINDS, "step", "rewards must be finite, got nan for env 1"),
    "obs shape": (["arrays"], "step", "observations must have shape (3, 4) (3 envs of (4,)), got (3, 5)"),
    "obs dtype": (["arrays"], "step", "observations must be float32 as its single_observation_space says"),
    "obs batch": (["arrays"], "step", "observations must have shape (3, 4)"),
    "reward shape": (["arrays"], "step", "rewards must have shape (3,), one per env, got (3, 2)"),
}
CASES = [(kind, fault) for fault, (kinds, _, _) in FAULTS.items() for kind in kinds]


@pytest.mark.parametrize(("kind", "fault"), CASES, ids=[f"{k}-{f}" for k, f in CASES])
def test_every_fault_of_every_vector_env_kind_is_one_line_naming_the_env_and_the_call(kind, fault):
    _, call, says = FAULTS[fault]
    vec = vector.make(
        functools.partial(faulty_vector, kind=kind, fault=fault), backend="serial", recv_timeout=TIMEOUT
    )
    assert type(vec).__name__ == "GymVector"
    workers = _workers(vec)
    start = time.monotonic()
    with pytest.raises(ApplianceError) as caught:
        vec.async_reset(0)
        vec.recv()
        for _ in range(AT + 2):
            vec.send(np.zeros(N, np.int64))
            vec.recv()
    took = time.monotonic() - start
    message = str(caught.value)
    assert isinstance(caught.value, WorkerError | EnvContractError)
    label = {"async": "AsyncVectorEnv", "sync": "SyncVectorEnv", "arrays": "Arrays"}[kind]
    assert "\n" not in message and message.startswith(f"partial ({label}): the VectorEnv's {call}"), message
    assert says in message, message
    assert took < TIMEOUT + 8, took
    vec.close()  # again: nothing left to do, nothing raised
    deadline = time.time() + 5
    while any(_alive(p) for p in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not [p for p in workers if _alive(p)], "worker processes left running"


def test_a_good_vector_env_of_every_kind_still_steps():
    for kind in KINDS:
        vec = vector.make(functools.partial(faulty_vector, kind=kind), backend="serial", recv_timeout=TIMEOUT)
        try:
            vec.async_reset(0)
            for _ in range(AT + 3):
                obs, rewards, *_ = vec.recv()
                assert obs.shape == (N, 4) and rewards.dtype == np.float32
                vec.send(np.zeros(N, np.int64))
        finally:
            vec.close()


_HOLDER = """
import functools, sys, time
sys.path.insert(0, {here!r})
import numpy as np
from appliance import vector
from test_vecenv_faults import faulty_vector
vec = vector.make(functools.partial(faulty_vector, kind="async", fault="hang"), backend="serial", recv_timeout=600)
print(" ".join(str(p.pid) for p in vec.env.processes), flush=True)
vec.async_reset(0)
vec.recv()
for _ in range(10):
    vec.send(np.zeros(vec.num_envs, np.int64))  # step 5 hangs in worker 1
"""


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_vector_env_workers_die_with_a_parent_killed_or_terminated_mid_step(how):
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER.format(here=str(HERE))], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == N, proc.stderr.read()
        time.sleep(1.5)  # the parent waits on the hung step
        proc.send_signal(getattr(signal, how))
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.time() + 5
    while any(_alive(p) for p in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not [p for p in workers if _alive(p)], f"workers left running after {how} of their parent"


ASKED: list[int] = []  # the num_envs each call of big_vector was given


def big_vector(num_envs: int = 2) -> gymnasium.vector.VectorEnv:
    """A VectorEnv factory whose every env holds 4 MiB (touched, so resident), as an emulator's
    state does."""
    ASKED.append(num_envs)
    vec = faulty_vector(num_envs, "arrays")
    vec.held = np.ones((num_envs, 2**20), np.float32)
    return vec


def test_a_vector_env_too_big_for_this_machine_is_refused_before_it_is_made(monkeypatch):
    """Measured on small vectors (what each env holds), a vector of 10 million of them is refused with
    the figures before the factory is asked for it: ale-py's 20,000 Atari envs used to run for minutes
    in silence."""
    ASKED.clear()
    with pytest.raises(ApplianceError, match=r"^vec.num_envs 10,000,000 of .* needs about .* of memory") as e:
        vector.make("test_vecenv_faults:big_vector", backend="serial", num_envs=10_000_000)
    assert "including" in str(e.value) and "use at most about" in str(e.value), str(e.value)
    assert max(ASKED) < 100, ASKED  # only the small measuring vectors were made
    ASKED.clear()
    vec = vector.make("test_vecenv_faults:big_vector", backend="serial", num_envs=100)  # 400 MiB: fits
    try:
        assert vec.num_envs == 100 and ASKED[-1] == 100
    finally:
        vec.close()


_LOADED: list[np.ndarray] = []  # what rom_vector loads once per process, as ALE loads its ROMs


def rom_vector(num_envs: int = 2) -> gymnasium.vector.VectorEnv:
    """big_vector whose first call also loads 64 MiB that every later vector shares."""
    if not _LOADED:
        _LOADED.append(np.ones(2**24, np.float32))
    return big_vector(num_envs)


@pytest.mark.parametrize("factory", ["big_vector", "rom_vector"])
def test_a_vector_env_too_big_is_refused_after_a_big_one_was_made_and_closed(factory):
    """Memory that a closed vector (or a first call's one-time load) left to malloc is reused by the
    measuring vectors: measured on resident memory alone, what one env holds came out 0 and a
    vector of 10 million envs was made, to fail deep inside numpy (a CI run's MemoryError)."""
    _LOADED.clear()
    vector.make(f"test_vecenv_faults:{factory}", backend="serial", num_envs=100).close()
    with pytest.raises(ApplianceError, match=r"^vec.num_envs 10,000,000 of .* needs about .* of memory"):
        vector.make(f"test_vecenv_faults:{factory}", backend="serial", num_envs=10_000_000)
    _LOADED.clear()
    with pytest.raises(ApplianceError, match=r"^vec.num_envs 10,000,000 of .* needs about .* of memory"):
        vector.make("test_vecenv_faults:rom_vector", backend="serial", num_envs=10_000_000)
    _LOADED.clear()
