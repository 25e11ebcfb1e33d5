"""Every process the appliance starts dies with the process that started it, however that one dies
(SIGKILL from the OOM killer included): vector workers, sweep trials, the ranks of ``train --nproc``,
``ab``'s rounds and the trainers the peer harnesses run.

One mechanism, in two forms:

* a Python child calls :func:`die_with_parent` first thing: the kernel's parent-death signal
  (``PR_SET_PDEATHSIG``, Linux) kills it, even inside C code that never returns, the moment its
  parent is gone; a child whose parent died before the signal was armed (while it was still
  importing) sees that it was re-parented and exits at once; where there is no such signal, a
  watchdog thread polls the parent instead;
* a command started with ``subprocess`` gets the same signal armed between fork and exec:
  ``preexec_fn=`` :func:`dies_with_parent` (the signal survives exec);
* a process multiprocessing spawns inside :func:`spawned_children_die_with_us` arms it as the first
  line of its program, before it imports anything: a child still importing torch (seconds) when
  its parent dies goes at once, not when it reaches its own :func:`die_with_parent`.

A child's own children are its own to take with it (the vector's workers do so with this module).
The shared-memory names a child registered with multiprocessing's resource tracker go with it: the
tracker unlinks them once the last process holding its pipe has exited.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): a signal the kernel sends when the parent dies
PARENT_WATCH = 0.2  # seconds between a watchdog's checks that the parent lives


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when the thread that started it exits (Linux);
    True when that is armed. Only sound where that thread lives as long as the process that made
    this one (its main thread, or a thread that waits for its children)."""
    prctl = _prctl()
    if prctl is None:
        return False
    return prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def _orphaned() -> None:
    os._exit(1)


def die_with_parent(parent_pid: int, on_orphan: Callable[[], None] = _orphaned) -> None:
    """In a child of ``parent_pid``: die the moment it does. ``on_orphan`` runs when the parent is
    found gone (it must not return; by default the child exits with code 1); under the parent-death
    signal the kernel kills the child without it."""
    armed = parent_death_signal()
    if os.getppid() != parent_pid:  # gone before the signal was armed: re-parented to init or a reaper
        on_orphan()
    if not armed:
        threading.Thread(
            target=_watch, args=(parent_pid, on_orphan), name="puffer-parent-watch", daemon=True
        ).start()


def _watch(parent_pid: int, on_orphan: Callable[[], None]) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_WATCH)
    on_orphan()


def dies_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the command is killed when this process (the
    thread that starts it: call from the main thread, or one that waits for the command) exits.

    The libc call is looked up here, before the fork, so the child only calls it."""
    parent = os.getpid()
    prctl = _prctl()

    def arm() -> None:
        if prctl is not None:
            with contextlib.suppress(Exception):
                prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def _first_line(parent_pid: int) -> str:
    """Python source, imports ctypes alone: arm the signal, and exit if the parent is already gone."""
    return (
        f"import ctypes, os; ctypes.CDLL(None).prctl({PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0); "
        f"os.getppid() == {parent_pid} or os._exit(1); "
    )


@contextlib.contextmanager
def spawned_children_die_with_us() -> Iterator[None]:
    """Processes spawned inside the block (multiprocessing's spawn start method, torch's included)
    arm the parent-death signal on their program's first line. Use it only in a thread that outlives
    them (see :func:`parent_death_signal`); their own :func:`die_with_parent` covers the rest."""
    from multiprocessing import spawn

    if _prctl() is None:
        yield
        return
    command_line = spawn.get_command_line

    def led(**kwds: Any) -> list[str]:
        line = list(command_line(**kwds))
        if "-c" in line[:-1]:  # not a frozen executable's line
            at = line.index("-c") + 1
            line[at] = _first_line(os.getpid()) + line[at]
        return line

    spawn.get_command_line = led
    try:
        yield
    finally:
        spawn.get_command_line = command_line
