"""Serial: every env stepped in this process, one after another. For debugging; same shapes as the rest.

Every reset and step is bounded by ``recv_timeout`` as the other backends' are: on the main thread by
a real-time alarm (SIGALRM, armed around each call where nobody else holds that signal), elsewhere by
running the first reset and the first step in a helper thread joined with the timeout. An env that
does not return is reported in one line naming it, and the vector is closed."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from appliance.vector.base import Vector, WorkerError
from appliance.vector.buffers import allocate
from appliance.vector.groups import EnvStepError, make_group
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource


class Serial(Vector):
    backend = "serial"

    def __init__(
        self,
        source: EnvSource,
        sizes: Sizes,
        seed: int | None = 0,
        recv_timeout: float = 30.0,
        **_: Any,
    ) -> None:
        super().__init__(source, sizes)
        self.recv_timeout = float(recv_timeout)
        self._first = {"reset", "step"}  # calls not yet bounded by a helper thread (off the main thread)
        self.buffers = allocate(source, self.num_agents)
        try:
            self.group = make_group(source, 0, self.num_envs, self.buffers)
        except EnvStepError as e:
            raise WorkerError(f"{source.name}: {e}") from None
        self.agent_ids = np.arange(self.num_agents)
        self._infos: list[dict[str, Any]] = []
        self._closed = False

    def _run(self, what: str, fn: Any, *args: Any) -> list[dict[str, Any]]:
        if self._closed:
            raise RuntimeError(f"{self.source.name}: this vector is closed")
        try:
            if _can_alarm():
                with self._alarm(what):
                    return fn(*args)
            if what in self._first:
                self._first.discard(what)
                return self._in_thread(what, fn, *args)
            return fn(*args)
        except EnvStepError as e:
            raise WorkerError(f"{self.source.name}: {e}") from None
        except _Hung:
            raise self._hung(what) from None

    def _hung(self, what: str) -> WorkerError:
        self._closed = True  # the env is stuck mid-call: nothing more may run on it
        return WorkerError(
            f"{self.source.name}: {what} did not return within {self.recv_timeout:g} s under the serial "
            "backend (vec.recv_timeout); fix the env, or raise --vec.recv-timeout if it is only slow"
        )

    @contextlib.contextmanager
    def _alarm(self, what: str) -> Iterator[None]:
        def expired(signum: int, frame: Any) -> None:
            raise _Hung  # not an Exception: the env's and the group's handlers let it through

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, self.recv_timeout)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def _in_thread(self, what: str, fn: Any, *args: Any) -> list[dict[str, Any]]:
        done: dict[str, Any] = {}

        def call() -> None:
            try:
                done["result"] = fn(*args)
            except BaseException as e:
                done["error"] = e

        thread = threading.Thread(target=call, name=f"puffer-serial-{what}", daemon=True)
        thread.start()
        thread.join(self.recv_timeout)
        if thread.is_alive():
            raise self._hung(what)  # the thread is left behind, as the env probe's is
        if "error" in done:
            raise done["error"]
        return done["result"]  # type: ignore[no-any-return]

    def async_reset(self, seed: int | None = 0) -> None:
        self._infos = self._run("reset", self.group.reset, seed)

    def send(self, actions: Any) -> None:
        actions = self._check_actions(actions)
        np.copyto(self.buffers.actions, actions, casting="unsafe")
        self._infos = self._run("step", self.group.step)

    def recv(self) -> tuple[Any, ...]:
        b = self.buffers
        return b.observations, b.rewards, b.terminals, b.truncations, self._infos, self.agent_ids, b.masks

    def log(self) -> dict[str, float]:
        return self.group.log()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.group.close()


class _Hung(BaseException):
    """Raised by the alarm inside the env's call; turned into a WorkerError outside it."""


def _can_alarm() -> bool:
    """On the main thread, with SIGALRM not held by anyone else (its default or ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN)
