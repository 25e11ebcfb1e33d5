"""Process signals, in one place: how a stop signal becomes an exception, and the errors that end a
command because of one.

* :data:`STOP_SIGNALS` (SIGINT, SIGTERM, SIGHUP): Ctrl-C, ``docker stop`` or a scheduler, a closed
  terminal.
* :class:`Interrupted`: a stop signal raised in the main thread as a KeyboardInterrupt, by the
  handler of :func:`stop_signals`; :class:`SignalGuard` lets a block (an update, a checkpoint write)
  finish first with :meth:`SignalGuard.deferred`.
* :class:`Stopped`: the one-line error a command ends with after a stop signal (a training run
  that trained nothing, a sweep), exit status 128 + the signal's number, as a process killed by it.
* :func:`hold_during_imports`: the command line's SIGINT handler, which holds a Ctrl-C that comes
  while a module is being imported until the import is over.

torch's and numpy's start-up code is C++ that calls back into Python; a KeyboardInterrupt raised in
such a callback is either swallowed by the C++ side (numpy stays half-imported, and the command fails
much later with ``module 'numpy' has no attribute 'matrix'``) or thrown through a ``noexcept`` frame
(``terminate called after throwing an instance of 'pybind11::error_already_set'``, SIGABRT). So the
command line's SIGINT handler looks at where the main thread is: outside any import it raises
KeyboardInterrupt at once, as Python's own handler does; inside one it notes the signal and sends it
again a moment later, until the import has finished. Commands that take the stop signals themselves
(``train``'s loop, the ``--nproc`` launcher) put their own handlers over this one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from appliance.errors import ApplianceError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(ApplianceError):
    """A stop signal ended a command (a run before it trained anything, a sweep): one line saying what
    was kept; exit 128 + the signal's number, as a process killed by it would."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) raised in the main thread as a KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


class SignalGuard:
    """Turns stop signals into :class:`Interrupted`; inside :meth:`deferred` the first one waits."""

    def __init__(self) -> None:
        self._deferring = False
        self._pending: int | None = None

    def handler(self, signum: int, frame: Any) -> None:
        if self._deferring and self._pending is None:
            self._pending = signum  # a second signal does not wait
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Let the block finish (an update, a checkpoint write) before a signal interrupts."""
        outer, self._deferring = self._deferring, True
        try:
            yield
        finally:
            self._deferring = outer
        if not outer and self._pending is not None:
            signum, self._pending = self._pending, None
            raise Interrupted(signum)


@contextlib.contextmanager
def stop_signals(
    signals: Sequence[int] = STOP_SIGNALS, guard: SignalGuard | None = None
) -> Iterator[SignalGuard]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (main thread only;
    elsewhere the guard does nothing), or do what ``guard.handler`` does. The previous handlers
    come back after."""
    guard = guard or SignalGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {s: signal.signal(s, guard.handler) for s in signals}
    try:
        yield guard
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)


RETRY_S = 0.05  # how soon a held Ctrl-C is sent again
_IMPORT_FRAMES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
_retry: list[threading.Timer] = []


def in_import(frame: FrameType | None) -> bool:
    """Whether ``frame`` or any frame below it runs the import machinery."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_FRAMES:
            return True
        frame = frame.f_back
    return False


def _handler(signum: int, frame: FrameType | None) -> None:
    if not in_import(frame):
        raise KeyboardInterrupt
    if not any(t.is_alive() for t in _retry):  # one retry at a time, however many signals came
        timer = threading.Timer(RETRY_S, os.kill, (os.getpid(), signum))
        timer.daemon = True
        _retry[:] = [timer]
        timer.start()


def hold_during_imports() -> None:
    """Install the command line's SIGINT handler, from the main thread, where SIGINT has Python's usual
    handler (a process started with SIGINT ignored, e.g. in the background by a shell, keeps ignoring
    it)."""
    if threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _handler)
