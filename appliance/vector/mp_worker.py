"""A multiprocessing worker: the flag protocol it shares with the main process (commands and states,
one byte each on its own cache line), its step loop over its envs' rows of the shared block, and how
it dies with the main process. Also :func:`children_ignore_sigint`, for every process the main one
starts (workers, sweep trials)."""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing import connection, resource_tracker
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from appliance import lifeline
from appliance.errors import EnvContractError
from appliance.vector.groups import EnvStepError, make_group
from appliance.vector.shm import FLAG_STRIDE, STOP_SIGNALS, _array, _attach, _views
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource

sched_yield = getattr(os, "sched_yield", lambda: None)

# commands (main -> worker) and states (worker -> main); a state >= DONE means "ready"
BOOT, RESET, STEP, CLOSE = 0, 1, 2, 3
DONE, INFO, ERROR = 10, 11, 12
WORKER_SPIN = 20_000  # flag checks before a worker starts sleeping
MAX_SLEEP = 1e-3  # longest idle sleep: bounds the wake-up latency after a long pause


def _orphaned(shm_name: str) -> None:
    """The main process is gone: unlink the block's name if it still has one (the main process unlinks
    it once every worker has mapped it; before that, nobody else may be left to), then exit at once."""
    import _posixshmem

    with contextlib.suppress(OSError):
        _posixshmem.shm_unlink("/" + shm_name)
    os._exit(1)


def _watch_parent(parent_alive: Any, shm_name: str) -> None:
    """Watchdog thread: the parent's sentinel (a pipe that reads EOF once the main process has exited)
    wakes it at once; the periodic check covers start methods without one. It runs while the main
    thread is inside an env step that releases the GIL (Python code, sleeps, most C); a step that holds
    the GIL forever is covered by the parent-death signal."""
    parent = multiprocessing.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    while parent_alive():
        if sentinel is None:
            time.sleep(lifeline.PARENT_WATCH)
            continue
        try:
            if connection.wait([sentinel], timeout=lifeline.PARENT_WATCH):
                sentinel = None  # readable: the parent exited (confirmed above), or dropped its handle
        except OSError:
            sentinel = None
    _orphaned(shm_name)


def _die_with_parent(parent_pid: int, shm_name: str, pdeathsig: bool, direct: bool) -> None:
    """Make this worker die within a second of the main process, whatever state it is in. ``direct``:
    the main process is this worker's parent (spawn, fork; not forkserver)."""
    if pdeathsig and direct:
        # The kernel SIGKILLs this process when the thread that started it exits, even mid-step in C.
        # (Only set when that thread is the main thread: a helper thread may end before the vector.)
        lifeline.parent_death_signal()

    def parent_alive() -> bool:
        if direct:
            return os.getppid() == parent_pid  # an orphan is re-parented to init or a subreaper
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    if not parent_alive():  # gone before the signal was armed
        _orphaned(shm_name)
    threading.Thread(
        target=_watch_parent, args=(parent_alive, shm_name), name="puffer-parent-watch", daemon=True
    ).start()


@contextlib.contextmanager
def children_ignore_sigint(start_method: str | None = None) -> Iterator[None]:
    """Processes started inside the block start with SIGINT blocked, then ignored; the block's own
    stop signals (SIGINT, SIGTERM, SIGHUP) wait until it ends, then come as usual.

    A Ctrl-C reaches every process of the terminal's process group: a spawned child still importing
    would print a KeyboardInterrupt traceback, and a main process cut short between starting one
    worker and the next (or a start and its arguments) would leave a worker an EOFError. So:

    * a new process keeps the signal mask of the thread that made it: SIGINT is blocked in this
      thread for the block, so a Ctrl-C that meets a child booting stays pending;
    * a spawned child's first line, before ``spawn_main``, sets SIGINT to ignored (which discards a
      pending one); the vector's workers do the same first thing (also under fork and forkserver);
    * this process notes a stop signal in a handler (SIGINT never set to ignored here: another
      thread, numpy's BLAS pool say, may be the one the kernel hands it to, and an ignored signal
      would be lost) and raises it again once the block ends.

    Wrap every start of a group of processes (all the vector's workers at once). Outside the main
    thread the mask and the first line still apply; the handlers stay (they belong to the main
    thread). ``start_method``: with ``"fork"`` no resource tracker is needed; any other (or None)
    starts it first, as it unblocks SIGINT after starting itself.
    """
    from multiprocessing import spawn

    if start_method != "fork":
        resource_tracker.ensure_running()
    noted: list[int] = []
    previous: dict[int, Any] = {}
    command_line = spawn.get_command_line
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                previous[s] = signal.signal(s, lambda signum, frame: noted.append(signum))
        spawn.get_command_line = functools.partial(_ignoring_sigint, command_line)
        yield
    finally:
        spawn.get_command_line = command_line
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C blocked meanwhile arrives now
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)


_IGNORE_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "


def _ignoring_sigint(command_line: Callable[..., list[str]], **kwds: Any) -> list[str]:
    """multiprocessing's spawn command line, its ``-c`` program led by ignoring SIGINT."""
    line = list(command_line(**kwds))
    if "-c" in line[:-1]:  # not a frozen executable's line
        at = line.index("-c") + 1
        line[at] = _IGNORE_SIGINT + line[at]
    return line


def _send(conn: connection.Connection, payload: Any) -> bool:
    """Send pickled bytes; False if the main process has closed its end (it is closing the vector)."""
    try:
        conn.send_bytes(payload)
    except OSError:  # BrokenPipeError, ConnectionResetError
        return False
    return True


def _worker(
    index: int,
    shm_name: str,
    size: int,
    plan: tuple[Any, ...],
    source: EnvSource,
    sizes: Sizes,
    conn: connection.Connection,
    parent_pid: int,
    pdeathsig: bool = True,
    direct: bool = True,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    _die_with_parent(parent_pid, shm_name, pdeathsig, direct)
    arrays, flag_off, seed_off, _ = plan
    mm = _attach(shm_name, size)
    flags = memoryview(mm)[flag_off : flag_off + sizes.num_workers * FLAG_STRIDE]
    seeds = _array(mm, (sizes.num_workers,), np.int64, seed_off)
    me = index * FLAG_STRIDE
    k = source.agents_per_env
    first_env = index * sizes.envs_per_worker
    rows = _views(mm, arrays).rows(first_env * k, (first_env + sizes.envs_per_worker) * k)

    def report(error: BaseException, where: str) -> bool:
        """Flag the error, then send the traceback (with the env that raised, when known). The flag goes
        first: the main process reads the pipe once it sees the flag, so a long traceback cannot block."""
        if isinstance(error, EnvContractError):  # one line, raised as it is in the main process
            message = ("contract", first_env, where, str(error))
        elif isinstance(error, EnvStepError):
            message = ("error", error.env_index, error.where, error.tb)
        else:
            message = ("error", first_env, where, traceback.format_exc())
        payload = ForkingPickler.dumps(message)
        flags[me] = ERROR
        return _send(conn, payload)

    try:
        group = make_group(source, first_env, sizes.envs_per_worker, rows, infos=True)
    except BaseException as e:
        report(e, "creation")
        return
    flags[me] = DONE
    idle, sleep = 0, 0.0
    try:
        while True:
            cmd = flags[me]
            if cmd >= DONE:  # nothing to do: spin (yielding the core), then sleep a little longer each time
                idle += 1
                if idle <= WORKER_SPIN:
                    sched_yield()
                else:
                    sleep = min(MAX_SLEEP, sleep * 2 or 2e-5)
                    time.sleep(sleep)
                continue
            idle, sleep = 0, 0.0
            if cmd == CLOSE:
                return
            try:
                if cmd == RESET:
                    seed = int(seeds[index])
                    infos = group.reset(None if seed < 0 else seed)
                else:
                    infos = group.step()
                # pickled here, so an unpicklable info is reported as the env's error
                payload = ForkingPickler.dumps(infos) if infos else None
            except Exception as e:
                if not report(e, "step"):
                    return
                continue
            if payload is None:
                flags[me] = DONE
                continue
            # Flag first, then send: the main process drains the pipe as soon as it sees INFO, so however
            # large the infos (10,000 episodes ending on one step), this worker never waits on a pipe that
            # nobody reads while the main process waits on this flag.
            flags[me] = INFO
            if not _send(conn, payload):
                return
    finally:
        group.close()
        del rows, seeds
        flags.release()
        with contextlib.suppress(BufferError):
            mm.close()
