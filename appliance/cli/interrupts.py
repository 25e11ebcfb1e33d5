"""Ctrl-C while a module is being imported is held until the import is over.

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

import os
import signal
import threading
from types import FrameType

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
    """Install the handler, from the main thread, where SIGINT has Python's usual handler (a process
    started with SIGINT ignored, e.g. in the background by a shell, keeps ignoring it)."""
    if threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _handler)
