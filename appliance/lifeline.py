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
For programs that are not ours, :func:`guarded` runs the command under a guard process that takes the
command and everything below it along; for what is no child at all (a Docker container: the daemon's),
:class:`OnParentDeath` runs a clean-up when the parent is gone.
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


_leash = {"depth": 0, "parent": 0, "on_main": False}  # forks inside forked_children_die_with_us


def _before_fork() -> None:
    _leash["parent"], _leash["on_main"] = os.getpid(), threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    if _leash["depth"] <= 0:
        return
    _leash["depth"] = 0  # this child's own forks are its own to lead
    parent = int(_leash["parent"])
    if _leash["on_main"]:  # forked by the parent's main thread: the parent-death signal is sound
        die_with_parent(parent)
        return
    if os.getppid() != parent:  # forked by a helper thread, whose end would send the signal: watch
        _orphaned()
    threading.Thread(target=_watch, args=(parent, _orphaned), name="puffer-parent-watch", daemon=True).start()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def forked_children_die_with_us() -> Iterator[None]:
    """Processes ``os.fork()`` makes inside the block (multiprocessing's fork start method: gymnasium's
    ``AsyncVectorEnv`` workers a VectorEnv factory starts) die with this process: the parent-death
    signal where the main thread forked them, else a watchdog thread in each that polls its parent
    (a helper thread's end would fire the signal while the process lives). Spawned children inside
    the block arm the signal on their first line (:func:`spawned_children_die_with_us`) where the
    main thread starts them."""
    on_main = threading.current_thread() is threading.main_thread()
    _leash["depth"] += 1
    try:
        with spawned_children_die_with_us() if on_main else contextlib.nullcontext():
            yield
    finally:
        _leash["depth"] -= 1


# A stdlib-only program (it runs under whatever Python starts it, with the environment the command
# gets): the parent of COMMAND and of everything COMMAND starts. It is a child subreaper, so the
# processes COMMAND's own children leave behind come to it, not to init; when its parent dies
# (the parent-death signal, SIGTERM here) or COMMAND ends, it kills every process below it.
_GUARD = r"""
import ctypes, os, signal, subprocess, sys, time
parent, cmd = int(sys.argv[1]), sys.argv[2:]
libc = ctypes.CDLL(None)
libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
me = os.getpid()
def below():
    kids = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            kids.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    found, todo = [], [me]
    while todo:
        for pid, state in kids.get(todo.pop(), []):
            found.append((pid, state))
            todo.append(pid)
    return found
def reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
def kill_all():
    for _ in range(200):
        alive = [pid for pid, state in below() if state != "Z"]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        if not alive:
            return
        time.sleep(0.02)
def gone(signum, frame):
    kill_all()
    os._exit(128 + signum)
signal.signal(signal.SIGTERM, gone)
signal.signal(signal.SIGHUP, gone)
signal.signal(signal.SIGINT, lambda s, f: None)  # Ctrl-C reaches COMMAND itself (same process group)
if os.getppid() != parent:
    sys.exit(1)
child = subprocess.Popen(cmd)
rc = child.wait()
kill_all()
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def guarded(cmd: list[str]) -> list[str]:
    """``cmd`` run under a guard that takes it and every process below it along when this process
    dies, however (SIGKILL included): for programs that are not ours, whose own children (a peer
    trainer's vector workers) arm no parent-death signal. The guard is a child subreaper, so even a
    grandchild that outlived its parent is found; when ``cmd`` ends, what it left running is killed
    too. The guard's exit code is ``cmd``'s (128 + N for a signal N). Linux only (``/proc``, prctl);
    elsewhere ``cmd`` is returned as it is."""
    if _prctl() is None or not os.path.isdir("/proc"):
        return list(cmd)
    return [sys.executable, "-c", _GUARD, str(os.getpid()), *cmd]


_WATCH = r"""
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; its death is ours
signal.signal(signal.SIGHUP, signal.SIG_IGN)
if sys.stdin.buffer.read(1) == b"":  # end of file: the parent is gone without saying it was done
    exec(sys.argv[1])
"""


class OnParentDeath:
    """A watcher process that runs ``code`` (Python source, with ``sys.argv[2:]`` = ``args``) when this
    process dies without calling :meth:`done` first, however it dies: the watcher holds the read end
    of a pipe only this process writes to, and the kernel closes the write end with the process.
    For what the parent-death signal cannot reach: a Docker container, which is the daemon's child.
    Start it from a process that forks no children meanwhile (a forked child would hold the pipe)."""

    def __init__(self, code: str, *args: str, env: dict[str, str] | None = None) -> None:
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WATCH, code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a signal to our process group (Ctrl-C, a kill -PGID) spares it
        )

    def done(self) -> None:
        """The parent cleaned up itself: the watcher exits without running ``code``."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.write(b"x")
                self.proc.stdin.close()
        self.proc.wait()
