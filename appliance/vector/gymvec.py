"""An existing ``gymnasium.vector.VectorEnv`` used as it is: ale-py's ``AtariVectorEnv`` (C++ threads),
EnvPool's gymnasium API, gymnasium's ``SyncVectorEnv``/``AsyncVectorEnv``, or any other.

A ``module:factory`` env (or a creator) that returns a VectorEnv is recognised when the vector is
made (:func:`appliance.vector.make`); its sub-envs are not re-wrapped: the VectorEnv steps them its
own way and this class only turns what it returns into the trainer's rows.

Autoreset (``metadata["autoreset_mode"]``, gymnasium 1.x):

* ``SAME_STEP``: the step that ends an episode returns the next episode's first observation, as our
  own backends do; passed through.
* ``NEXT_STEP`` (gymnasium's default, and EnvPool's): the step that ends an episode returns its last
  observation, and the next step ignores the action, resets, and returns reward 0. The row that
  holds the last observation keeps its reward and done flag (the advantage needs them) but has mask
  False, so the ignored action it is given is left out of the loss and of the step count; the reset
  step that follows is the new episode's first row.
* ``DISABLED`` is refused: nothing would reset the envs.

Episode return and length are counted here, per env, from the rewards the VectorEnv returns (an
ALE vector env clips them to -1..1 unless made with ``reward_clipping=False``).

The VectorEnv gets what every other source gets:

* every reset and step is bounded by ``vec.recv_timeout``: gymnasium's ``AsyncVectorEnv`` through its
  own ``*_wait(timeout)``; any other VectorEnv (ale-py's, EnvPool's, ``SyncVectorEnv``) in a helper
  thread the call waits for with the timeout. A call that does not return, a worker that died (named
  with its exit code or signal) or raised is one line naming the env and the call, and the vector
  is closed, its worker processes ended;
* what it returns is checked where it enters (:func:`check_batch`): observations of the declared
  shape and dtype for ``num_envs`` envs, rewards and flags one per env, rewards finite; a broken
  rule is one line naming the env, the call and the rule.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import signal
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from appliance.errors import ConfigError, EnvContractError
from appliance.vector.base import Vector, WorkerError
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource, autoreset_mode


def check_batch(name: str, call: str, n: int, space: Any, result: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a VectorEnv's reset (obs, infos) or step (obs, rewards, terminals, truncations, infos)
    returned, as arrays, checked against its declared spaces for ``n`` envs; one line naming the env,
    the call and the rule otherwise (:class:`EnvContractError`)."""

    def broken(rule: str) -> EnvContractError:
        return EnvContractError(f"{name}: the VectorEnv's {call} broke a rule: {rule}")

    width = 2 if call == "reset" else 5
    if not isinstance(result, tuple | list) or len(result) != width:
        got = f"a {type(result).__name__}" + (
            f" of {len(result)}" if isinstance(result, tuple | list) else ""
        )
        raise broken(f"it must return a tuple of {width} (gymnasium's VectorEnv API), got {got}")
    obs = result[0]
    if not isinstance(obs, np.ndarray):
        raise broken(f"observations must be one array for the {n} envs, got {type(obs).__name__}")
    want = (n, *space.shape)
    if obs.shape != want:
        raise broken(f"observations must have shape {want} ({n} envs of {space.shape}), got {obs.shape}")
    if obs.dtype != space.dtype:
        raise broken(
            f"observations must be {space.dtype} as its single_observation_space says, got {obs.dtype}"
        )
    if call == "reset":
        return obs, result[1]
    out = [obs]
    for what, value, kind in (("rewards", result[1], np.float32), ("terminations", result[2], bool),
                              ("truncations", result[3], bool)):  # fmt: skip
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as e:
            raise broken(f"{what} must be an array of {n} numbers: {e}") from None
        if array.shape != (n,):
            raise broken(f"{what} must have shape ({n},), one per env, got {array.shape}")
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
            raise broken(f"{what} must be numbers, got {array.dtype}")
        array = array.astype(kind, copy=False)
        if kind is np.float32 and not np.isfinite(array).all():
            bad = np.flatnonzero(~np.isfinite(array))
            raise broken(f"rewards must be finite, got {array[bad[0]]} for env {int(bad[0])}")
        out.append(array)
    return (*out, result[4])


class _Caller:
    """A helper thread that makes one call at a time for the main thread, which waits for it at most
    ``timeout`` seconds: a call stuck in C code (ale-py's or EnvPool's threads) cannot hold the run."""

    def __init__(self, name: str) -> None:
        self.calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.busy = False  # a call is in flight (or stuck)
        self.thread = threading.Thread(target=self._serve, name=f"puffer-vecenv-{name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            job = self.calls.get()
            if job is None:
                return
            fn, args = job
            try:
                self.results.put((True, fn(*args)))
            except BaseException as e:
                self.results.put((False, e))

    def call(self, timeout: float, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; raises :class:`queue.Empty` when it has not returned within ``timeout``."""
        self.busy = True
        self.calls.put((fn, args))
        ok, value = self.results.get(timeout=timeout)
        self.busy = False
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self.calls.put(None)


class GymVector(Vector):
    """One live VectorEnv behind the Vector API; synchronous (every env each ``recv``)."""

    backend = "vector-env"

    def __init__(self, source: EnvSource, env: Any, recv_timeout: float = 30.0) -> None:
        n = int(env.num_envs)
        super().__init__(source, Sizes(n, 1, n, n, 1))
        self.env = env
        self.recv_timeout = float(recv_timeout)
        self._async = isinstance(env, AsyncVectorEnv)
        self._caller: _Caller | None = None if self._async else _Caller(source.name)
        self._unclean = False  # a call failed or hung: the env is not asked to close politely
        self.label = f"{source.name} ({type(env).__name__})"  # what every one-line error names
        self.num_threads = 1
        self.next_step = autoreset_mode(env) == "NextStep"
        self.agent_ids = np.arange(n)
        self._returns = np.zeros(n, np.float64)
        self._lengths = np.zeros(n, np.int64)
        self._resetting = np.zeros(n, bool)  # NextStep: these envs reset on the step in flight
        self._all_live = np.ones(n, bool)  # every row's mask where no row is a NextStep reset
        self._result: tuple[Any, ...] | None = None
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.source.name}: this vector is closed")

    def _call(self, what: str, *args: Any) -> tuple[Any, ...]:
        """The VectorEnv's ``reset`` or ``step``, bounded by the timeout, its result checked; a hang, a
        dead worker or an error inside it is one line naming the env and the call."""
        env = self.env
        try:
            if self._async:  # gymnasium's own bound: the workers' pipes polled with the timeout
                with (
                    warnings.catch_warnings()
                ):  # a worker's traceback, as gymnasium warns it: the line below says it
                    warnings.simplefilter("ignore", UserWarning)
                    if what == "reset":
                        env.reset_async(seed=args[0])
                        result = env.reset_wait(timeout=self.recv_timeout)
                    else:
                        env.step_async(args[0])
                        result = env.step_wait(timeout=self.recv_timeout)
            else:
                assert self._caller is not None
                fn = (lambda seed: env.reset(seed=seed)) if what == "reset" else env.step
                result = self._caller.call(self.recv_timeout, fn, *args)
        except (queue.Empty, multiprocessing.TimeoutError):
            self._unclean = True
            self.close()
            raise WorkerError(
                f"{self.label}: the VectorEnv's {what} did not return within {self.recv_timeout:g} s "
                "(vec.recv_timeout); fix the env, or raise --vec.recv-timeout if it is only slow"
            ) from None
        except (EOFError, BrokenPipeError, ConnectionResetError) as e:
            self._unclean = True
            dead = self._dead_workers()
            self.close()
            raise WorkerError(
                f"{self.label}: the VectorEnv's {what} lost a worker: "
                f"{dead or type(e).__name__ + ' on its pipe'}; fix the env"
            ) from None
        except (KeyboardInterrupt, WorkerError, EnvContractError):
            self._unclean = True
            raise
        except Exception as e:
            self._unclean = True
            dead = self._dead_workers()
            self.close()
            first = (str(e).strip().splitlines() or [""])[0]
            where = f" ({dead})" if dead else ""
            raise WorkerError(
                f"{self.label}: the VectorEnv's {what} failed{where}: {type(e).__name__}: {first}"
            ) from None
        try:
            return check_batch(self.label, what, self.num_envs, self.source.observation_space, result)
        except EnvContractError:
            self.close()
            raise

    def _dead_workers(self) -> str:
        """Which of an AsyncVectorEnv's workers are gone, and how ("" when none is known)."""
        processes = list(getattr(self.env, "processes", None) or [])
        deadline = time.monotonic() + 1.0  # a pipe closes a moment before its process is reaped
        while True:
            gone = []
            for i, p in enumerate(processes):
                with contextlib.suppress(Exception):
                    if p.is_alive():  # also reaps one that just died, setting its exit code
                        continue
                    code = p.exitcode
                    how = (
                        f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                    )
                    gone.append(f"worker {i} (pid {p.pid}) {how}")
            if gone or not processes or time.monotonic() > deadline:
                return "; ".join(gone)
            time.sleep(0.05)

    def async_reset(self, seed: int | None = 0) -> None:
        self._check_open()
        obs, _ = self._call("reset", seed)
        n = self.num_envs
        self._returns[:], self._lengths[:], self._resetting[:] = 0.0, 0, False
        self._result = (
            obs,
            np.zeros(n, np.float32),
            np.zeros(n, bool),
            np.zeros(n, bool),
            [],
            self.agent_ids,
            self._all_live,
        )

    def send(self, actions: Any) -> None:
        self._check_open()
        actions = self._check_actions(actions)
        obs, rewards, terminals, truncations, _ = self._call("step", actions)
        live = ~self._resetting  # a NextStep reset step is no step of any episode
        self._returns[live] += rewards[live]
        self._lengths[live] += 1
        done = terminals | truncations
        infos = [
            {
                "episode_return": float(self._returns[i]),
                "episode_length": int(self._lengths[i]),
                "env": int(i),
            }
            for i in np.flatnonzero(done)
        ]
        self._returns[done], self._lengths[done] = 0.0, 0
        if self.next_step:
            masks = ~done  # the last observation's row: its action is ignored by the reset step
            self._resetting = done
        else:
            masks = self._all_live
        self._result = (obs, rewards, terminals, truncations, infos, self.agent_ids, masks)

    def recv(self) -> tuple[Any, ...]:
        self._check_open()
        if self._result is None:
            raise RuntimeError(f"{self.source.name}: recv() before async_reset() or send()")
        return self._result

    def close(self) -> None:
        """Close the VectorEnv: politely when its last call returned; else (a call hung, a worker
        died, a stop signal mid-call) its workers are ended and a stuck call is left to its thread."""
        if self._closed:
            return
        self._closed = True
        caller, self._caller = self._caller, None
        if self._async:
            state = getattr(getattr(self.env, "_state", None), "value", "default")
            if self._unclean or state != "default":  # a call in flight or failed: no polite close
                _end_workers(self.env)
                self._unclean = True
                with contextlib.suppress(Exception):  # nothing to wait for: its workers are gone
                    self.env._state = type(self.env._state)("default")
            with contextlib.suppress(Exception):
                self.env.close(terminate=self._unclean)
            return
        if caller is not None and caller.busy:  # a call in flight (a stop signal came): let it end first
            with contextlib.suppress(queue.Empty):
                caller.results.get(timeout=self.recv_timeout)
                caller.busy = False
        if caller is not None and caller.busy:  # stuck in the env: closing it would wait on the call
            return
        if caller is not None:
            caller.stop()
        with contextlib.suppress(Exception) if self._unclean else contextlib.nullcontext():
            self.env.close()


def _end_workers(env: Any) -> None:
    """End an AsyncVectorEnv's worker processes (SIGTERM, then SIGKILL a second later)."""
    processes = [p for p in getattr(env, "processes", None) or [] if p.is_alive()]
    for p in processes:
        with contextlib.suppress(Exception):
            p.terminate()
    for p in processes:
        with contextlib.suppress(Exception):
            p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)


class EnvPoolVector(VectorEnv):
    """EnvPool's gymnasium API (``envpool.make(task, env_type="gymnasium", num_envs=N)``) as a
    gymnasium VectorEnv: EnvPool's pool is no VectorEnv subclass (its ``observation_space`` is one
    env's, its arrays are batched) and it resets an env on the step after its episode ended
    (NextStep). Seeds are EnvPool's own ``seed`` argument at make time: ``reset(seed)`` cannot
    reseed a pool."""

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.num_envs = int(pool.config["num_envs"])
        self.single_observation_space = pool.observation_space
        self.single_action_space = pool.action_space
        self.observation_space = batch_space(pool.observation_space, self.num_envs)
        self.action_space = batch_space(pool.action_space, self.num_envs)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        return self.pool.reset()  # type: ignore[no-any-return]

    def step(self, actions: Any) -> tuple[Any, ...]:
        return self.pool.step(actions)  # type: ignore[no-any-return]

    def close(self, **_: Any) -> None:
        close = getattr(self.pool, "close", None)
        if callable(close):
            close()


def envpool(task_id: str = "Pong-v5", num_envs: int = 8, **kwargs: Any) -> Any:
    """``--env appliance.vector.gymvec:envpool --env.task-id Pong-v5``: an EnvPool pool (gymnasium
    API) as a VectorEnv source; ``kwargs`` go to ``envpool.make`` (``seed``, ``num_threads``, ...)."""
    try:
        import envpool as ep
    except ImportError:
        raise ConfigError("appliance.vector.gymvec:envpool needs EnvPool: pip install envpool") from None
    return EnvPoolVector(ep.make(task_id, env_type="gymnasium", num_envs=int(num_envs), **kwargs))
