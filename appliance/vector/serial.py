"""Serial: every env stepped in this process, one after another. For debugging; same shapes as the rest.

Every reset and step is bounded by ``recv_timeout`` as the other backends' are. On the main thread a
watchdog thread looks at the call in progress (a time stamp the call sets: no system call a step) and,
once it has run past the timeout, interrupts the main thread with SIGALRM (taken only where nobody
else holds that signal); elsewhere the first reset and the first step run in a helper thread joined
with the timeout. An env that does not return is reported in one line naming it, and the vector is
closed. An env stuck in C code that never returns to Python is beyond both."""

from __future__ import annotations

import signal
import threading
import time
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
        self._since: float | None = None  # when the call in progress began (main thread, watched)
        self._watchdog: threading.Thread | None = None
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
            if self._watched():
                self._since = time.monotonic()
                try:
                    return fn(*args)
                finally:
                    self._since = None
            if what in self._first:
                self._first.discard(what)
                return self._in_thread(what, fn, *args)
            return fn(*args)
        except EnvStepError as e:
            raise WorkerError(f"{self.source.name}: {e}") from None
        except _Hung:
            raise self._hung(what) from None

    def _watched(self) -> bool:
        """On the main thread with SIGALRM ours (taken here if free): a watchdog bounds the call."""
        if threading.current_thread() is not threading.main_thread() or not _take_alarm():
            return False
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="puffer-serial-watchdog", daemon=True)
            self._watchdog.start()
        return True

    def _watch(self) -> None:
        main = threading.main_thread().ident
        poll = min(1.0, self.recv_timeout / 4)
        while not self._closed:
            time.sleep(poll)
            since = self._since
            if since is not None and time.monotonic() - since > self.recv_timeout:
                _watched_out[0] = self
                signal.pthread_kill(main, signal.SIGALRM)  # type: ignore[arg-type]
                return

    def _hung(self, what: str) -> WorkerError:
        self._closed = True  # the env is stuck mid-call: nothing more may run on it
        return WorkerError(
            f"{self.source.name}: {what} did not return within {self.recv_timeout:g} s under the serial "
            "backend (vec.recv_timeout); fix the env, or raise --vec.recv-timeout if it is only slow"
        )

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
        _put_back_alarm()


class _Hung(BaseException):
    """Raised by the alarm inside the env's call; turned into a WorkerError outside it."""


def _expired(signum: int, frame: Any) -> None:
    """Raise inside the call the watchdog saw run past its timeout, if it is still running."""
    vector = _watched_out[0]
    if vector is not None and vector._since is not None:
        _watched_out[0] = None
        raise _Hung  # not an Exception: the env's and the group's handlers let it through


_watched_out: list[Any] = [None]  # the vector whose call ran past its timeout
_previous: list[Any] = [signal.SIG_DFL]


def _take_alarm() -> bool:
    """SIGALRM is ours, or free (its default or ignored): then made ours."""
    held = signal.getsignal(signal.SIGALRM)
    if held is _expired:
        return True
    if held in (signal.SIG_DFL, signal.SIG_IGN):
        _previous[0] = held
        signal.signal(signal.SIGALRM, _expired)
        return True
    return False  # someone else's alarm: left alone


def _put_back_alarm() -> None:
    """SIGALRM as it was before a serial vector took it (another open one takes it again)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGALRM) is _expired:
        signal.signal(signal.SIGALRM, _previous[0])
