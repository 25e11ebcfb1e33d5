"""Multiprocessing backend: workers in shared memory, signalled by flags, EnvPool-style async batches.

Fast paths, each one on purpose:

* **One shared block.** Observations, actions, rewards, terminals, truncations and masks of all
  workers are contiguous arrays in one POSIX shared-memory segment; worker ``w`` owns rows
  ``w*k .. (w+1)*k``. Ocean envs in a worker write straight into those rows from C.
* **Flags, not pipes.** Each worker has a one-byte command/state flag on its own cache line. The
  main process writes the command, the worker busy-waits on it (backing off to short sleeps when
  idle), steps, and writes its state back. Pipes carry only infos (when non-empty) and errors.
* **Zero copy.** With ``zero_copy`` a batch is a fixed contiguous block of workers and ``recv``
  returns views into shared memory; otherwise ready workers are gathered into a batch buffer.
* **Async.** With ``batch_size < num_envs``, ``recv`` returns the first ready batch of workers
  (or the next block, with zero_copy) while the others keep stepping.

Workers are started with ``spawn`` (no reliance on fork); env creators travel cloudpickled. Every
exit path (``close``, garbage collection, interpreter exit, Ctrl-C, a failing or dying worker)
stops the workers and unlinks the shared memory.

Faults, each one handled on purpose:

* **Views never dangle.** Every array over the block holds a reference to its mapping, and nothing
  unmaps it explicitly: ``close`` (or garbage collection, or a ``WorkerError``) only drops the
  vector's own references, and the kernel unmaps the block when the last view the caller kept dies.
* **No name outlives the run.** The block's name in ``/dev/shm`` is unlinked as soon as every worker
  has mapped it; until then the resource tracker (and a worker that finds its parent gone) unlinks it.
* **Workers die with the main process**, in every state (idle, inside a hung env step): the kernel's
  parent-death signal (``PR_SET_PDEATHSIG``), and a watchdog thread for the cases it does not cover.
* **No pipe deadlock.** A worker raises its flag before it sends infos or an error, and the main
  process drains the pipe as soon as it sees the flag, so a worker never blocks on a pipe nobody reads.
* **A full /dev/shm is an error up front** (the block's pages are reserved when it is created), and a
  worker killed by SIGBUS is reported with the state of /dev/shm.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import mmap
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import uuid
import weakref
from collections.abc import Callable, Iterator
from multiprocessing import connection, resource_tracker
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from appliance.errors import ConfigError, EnvContractError
from appliance.vector.base import Vector, WorkerError
from appliance.vector.buffers import Buffers, buffer_layout
from appliance.vector.groups import EnvStepError, make_group
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource

sched_yield = getattr(os, "sched_yield", lambda: None)

# commands (main -> worker) and states (worker -> main); a state >= DONE means "ready"
BOOT, RESET, STEP, CLOSE = 0, 1, 2, 3
DONE, INFO, ERROR = 10, 11, 12
FLAG_STRIDE = 64  # one cache line per worker flag: no false sharing between spinning workers
WORKER_SPIN = 20_000  # flag checks before a worker starts sleeping
MAIN_SPIN = 2_000  # flag sweeps before the main process starts sleeping
SPIN_S = 2e-3  # ...or this long, whichever ends first (yields can be slow on a busy machine)
MAX_SLEEP = 1e-3  # longest idle sleep: bounds the wake-up latency after a long pause
ERROR_GRACE = 0.5  # seconds the other workers get to finish (or fail) once one has raised
PARENT_WATCH = 0.2  # seconds between a worker's checks that its parent lives (see _watch_parent)
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): a signal the kernel sends when the parent dies
SHM_DIR = "/dev/shm"


def _align(n: int, a: int = 64) -> int:
    return (n + a - 1) // a * a


def _plan(
    source: EnvSource, num_agents: int, num_workers: int
) -> tuple[list[tuple[str, tuple[int, ...], str, int]], int, int, int]:
    """Offsets of every array in the shared block: (name, shape, dtype, offset), flags, seeds, total."""
    arrays, offset = [], 0
    for name, shape, dtype in buffer_layout(source, num_agents):
        arrays.append((name, shape, dtype.str, offset))
        offset = _align(offset + int(np.prod(shape)) * dtype.itemsize)
    flags = offset
    offset = _align(offset + num_workers * FLAG_STRIDE)
    seeds = offset
    offset = _align(offset + num_workers * 8)
    return arrays, flags, seeds, offset


def _array(mm: mmap.mmap, shape: tuple[int, ...], dtype: Any, offset: int) -> np.ndarray:
    """An array over the mapping that keeps it alive: its base holds an exported buffer of ``mm``, so the
    mapping cannot be closed under it and is unmapped only once the last such array is gone."""
    dtype = np.dtype(dtype)
    return np.frombuffer(mm, dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)


def _views(mm: mmap.mmap, arrays: list[tuple[str, tuple[int, ...], str, int]]) -> Buffers:
    return Buffers(*(_array(mm, shape, dtype, off) for _, shape, dtype, off in arrays))


# ----------------------------------------------------------------------------- the shared block


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def shm_state() -> tuple[int, int] | None:
    """(free, total) bytes of /dev/shm, or None where there is none."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _shm_full(size: int, free: int | None = None) -> ConfigError:
    state = shm_state()
    free = state[0] if free is None and state else free
    total = f" of {_mib(state[1])}" if state else ""
    return ConfigError(
        f"not enough shared memory: the vector's block needs {_mib(size)} but {SHM_DIR} has "
        f"{_mib(free or 0)} free{total}; use fewer envs, close other vectors, or give the container more "
        f"(docker run --shm-size=...)"
    )


def _create_block(name: str, size: int) -> mmap.mmap:
    """Create, size and map the segment. Its pages are reserved now (posix_fallocate), so a full
    /dev/shm is a clear error here rather than a SIGBUS in whichever process first touches a page."""
    import _posixshmem

    state = shm_state()
    if state is not None and size > state[0]:
        raise _shm_full(size, state[0])
    fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    # until every worker has mapped it, the resource tracker unlinks it should this process be killed
    resource_tracker.register("/" + name, "shared_memory")
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise _shm_full(size) from None
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            os.ftruncate(fd, size)  # a file system without fallocate: sparse, as before
        return mmap.mmap(fd, size)
    except BaseException:
        _unlink_block(name)
        raise
    finally:
        os.close(fd)


def _unlink_block(name: str) -> None:
    import _posixshmem

    with contextlib.suppress(FileNotFoundError):
        _posixshmem.shm_unlink("/" + name)
    resource_tracker.unregister("/" + name, "shared_memory")


# ----------------------------------------------------------------------------- worker


def _attach(name: str, size: int) -> mmap.mmap:
    """Map the segment without multiprocessing's resource tracker (the main process owns it)."""
    import _posixshmem

    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


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
            time.sleep(PARENT_WATCH)
            continue
        try:
            if connection.wait([sentinel], timeout=PARENT_WATCH):
                sentinel = None  # readable: the parent exited (confirmed above), or dropped its handle
        except OSError:
            sentinel = None
    _orphaned(shm_name)


def _die_with_parent(parent_pid: int, shm_name: str, pdeathsig: bool, direct: bool) -> None:
    """Make this worker die within a second of the main process, whatever state it is in. ``direct``:
    the main process is this worker's parent (spawn, fork; not forkserver)."""
    if pdeathsig and direct and sys.platform.startswith("linux"):
        # The kernel SIGKILLs this process when the thread that started it exits, even mid-step in C.
        # (Only set when that thread is the main thread: a helper thread may end before the vector.)
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)

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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


# ----------------------------------------------------------------------------- main side


class _Resources:
    """Everything that must be released; also run by weakref.finalize (GC, interpreter exit)."""

    def __init__(self) -> None:
        self.procs: list[Any] = []
        self.conns: list[connection.Connection] = []
        self.mm: mmap.mmap | None = None  # the main process's mapping of the block
        self.name: str | None = None  # the block's name while it is still linked in /dev/shm
        self.size = 0
        self.flags: memoryview | None = None

    def unlink(self) -> None:
        """Remove the block's name; mappings (workers', views the caller keeps) stay valid."""
        name, self.name = self.name, None
        if name is not None:
            _unlink_block(name)

    def close(self, grace: float = 2.0) -> None:
        """Ask workers to stop, wait up to ``grace`` seconds, then terminate and kill what is left."""
        flags, self.flags = self.flags, None
        if flags is not None:
            for w, proc in enumerate(self.procs):
                if proc.is_alive():
                    flags[w * FLAG_STRIDE] = CLOSE
        for conn in self.conns:  # a worker still sending infos gets EPIPE and exits instead of waiting
            conn.close()
        self.conns = []
        deadline = time.monotonic() + grace
        for proc in self.procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=1.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=1.0)
        for proc in self.procs:
            if not proc.is_alive():
                proc.close()
        self.procs = []
        if flags is not None:
            flags.release()
        # Never mm.close(): arrays the caller still holds (zero-copy views) reference the mapping, and the
        # kernel unmaps it when the last of them is gone. Dropping ours is all that is safe, and enough.
        self.mm = None
        self.unlink()


class Multiprocessing(Vector):
    backend = "multiprocessing"

    def __init__(
        self,
        source: EnvSource,
        sizes: Sizes,
        zero_copy: bool = True,
        recv_timeout: float = 30.0,
        start_method: str = "spawn",
    ) -> None:
        super().__init__(source, sizes)
        self.zero_copy = zero_copy
        self.recv_timeout = float(recv_timeout)
        self._res = _Resources()
        self._finalizer = weakref.finalize(self, self._res.close)
        try:
            self._start(start_method)
        except BaseException:
            self._finalizer()
            raise

    # ------------------------------------------------------------------ setup

    def _start(self, start_method: str) -> None:
        sizes, source, res = self.sizes, self.source, self._res
        plan = _plan(source, self.num_agents, sizes.num_workers)
        arrays, flag_off, seed_off, total = plan
        name = f"puffer_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        res.mm, res.name, res.size = _create_block(name, total), name, total
        self.buffers = _views(res.mm, arrays)
        self.buffers.masks[:] = True
        res.flags = memoryview(res.mm)[flag_off : flag_off + sizes.num_workers * FLAG_STRIDE]
        self._flags = res.flags
        self._seeds = _array(res.mm, (sizes.num_workers,), np.int64, seed_off)
        ctx = multiprocessing.get_context(start_method)
        # the parent-death signal fires when the starting *thread* exits: arm it only from the main thread
        pdeathsig = threading.current_thread() is threading.main_thread()
        direct = start_method != "forkserver"  # the workers' parent is this process
        with children_ignore_sigint(start_method):  # no traceback from a worker a Ctrl-C meets
            for w in range(sizes.num_workers):
                parent, child = ctx.Pipe(duplex=True)
                proc = ctx.Process(
                    target=_worker,
                    args=(w, name, total, plan, source, sizes, child, os.getpid(), pdeathsig, direct),
                    name=f"puffer-worker-{w}",
                    daemon=True,
                )
                res.flags[w * FLAG_STRIDE] = BOOT
                proc.start()
                child.close()
                res.procs.append(proc)
                res.conns.append(parent)
        self._sentinels = {proc.sentinel: w for w, proc in enumerate(res.procs)}
        k, epw = self.agents_per_env, sizes.envs_per_worker
        self._rows = [np.arange(w * epw * k, (w + 1) * epw * k) for w in range(sizes.num_workers)]
        self._in_flight: set[int] = set()
        self._batch: list[int] | None = None
        self._next_block = 0
        self._num_blocks = sizes.num_workers // sizes.workers_per_batch
        self._synchronous = sizes.workers_per_batch == sizes.num_workers
        if not self.zero_copy:
            from appliance.vector.buffers import allocate

            self._gathered = allocate(source, self.agents_per_batch)
        self._infos: list[dict[str, Any]] = []
        if self.zero_copy:  # each block's views and agent ids, made once (recv returns them as they are)
            rows_per_block = sizes.workers_per_batch * epw * k
            self._block_views = []
            for block in range(self._num_blocks):
                r = slice(block * rows_per_block, (block + 1) * rows_per_block)
                b = self.buffers
                self._block_views.append(
                    (
                        b.observations[r],
                        b.rewards[r],
                        b.terminals[r],
                        b.truncations[r],
                        np.arange(r.start, r.stop),
                        b.masks[r],
                    )
                )
        self._wait_ema = 0.0  # recent recv wait (s), for the sleep-before-spin fast path
        from appliance.sysinfo import physical_cores

        self._oversubscribed = sizes.num_workers >= physical_cores()  # no core left for this process
        # workers report DONE once their envs exist; startup may import heavy modules, so allow extra time
        self._collect(
            list(range(sizes.num_workers)),
            need=sizes.num_workers,
            timeout=self.recv_timeout + 60,
            startup=True,
        )
        res.unlink()  # every worker has mapped the block: its name is no longer needed, so it cannot leak

    # ------------------------------------------------------------------ waiting

    def _worker_envs(self, w: int) -> str:
        epw = self.sizes.envs_per_worker
        return f"worker {w} (envs {w * epw}..{(w + 1) * epw - 1})"

    def _fail(self, message: str, contract: bool = False) -> None:
        """Close the vector and raise: a ``WorkerError`` naming the vector, or with ``contract`` the env's
        own one-line :class:`EnvContractError`, exactly as the serial backend raises it."""
        self.buffers = self._seeds = self._block_views = None
        self._res.close(grace=0.2)  # a failed or hung worker will not answer: do not wait long for it
        self._finalizer.detach()
        if contract:
            raise EnvContractError(message)
        raise WorkerError(f"{self.source.name}: {message}")

    def _recv(self, w: int) -> Any:
        """What worker ``w`` sends after raising its flag; it is sending now, so this does not wait long."""
        try:
            return self._res.conns[w].recv()
        except (EOFError, OSError):  # it died while sending
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                self._check_alive()
                time.sleep(0.01)
            self._fail(f"{self._worker_envs(w)} closed its pipe while sending")

    def _read_state(self, w: int, state: int) -> list[dict[str, Any]]:
        if state == DONE:
            return []
        if state == ERROR:
            self._raise_errors(w)
        return self._recv(w)

    def _raise_errors(self, first: int) -> None:
        """A worker raised: give the others in flight a moment, then report every error in worker order
        (workers that fail on the same step would otherwise be reported by whichever was swept first)."""
        errors = {first: self._recv(first)}
        flags, others = self._flags, [w for w in range(self.sizes.num_workers) if w != first]
        deadline = time.monotonic() + ERROR_GRACE
        while others and time.monotonic() < deadline:
            for w in [w for w in others if flags[w * FLAG_STRIDE] == ERROR]:
                errors[w] = self._recv(w)
            others = [w for w in others if flags[w * FLAG_STRIDE] < DONE]  # still stepping
            if others:
                time.sleep(1e-3)
        contracts = [text for _, (kind, _, _, text) in sorted(errors.items()) if kind == "contract"]
        if contracts:  # a broken env contract: the first worker's line, as the serial backend gives it
            self._fail(contracts[0], contract=True)
        self._fail(
            "\n".join(
                f"{self._worker_envs(w)}: env {env_index} raised in {where}:\n{tb.rstrip()}"
                for w, (_, env_index, where, tb) in sorted(errors.items())
            )
        )

    def _check_alive(self) -> None:
        dead = connection.wait(list(self._sentinels), timeout=0)
        if dead:
            w = self._sentinels[dead[0]]
            # the sentinel closes while the kernel is still tearing the process down: until it is a
            # zombie, waitpid(WNOHANG) finds nothing and exitcode is None, so wait a moment for it
            self._res.procs[w].join(timeout=2.0)
            code = self._res.procs[w].exitcode
            how = (
                f"was killed by signal {signal.Signals(-code).name}"
                if code is not None and code < 0
                else f"exited with code {code}"
            )
            if code == -signal.SIGBUS:  # a page of the block could not be backed: /dev/shm is the usual cause
                state = shm_state()
                how += (
                    f" (a bus error in a worker usually means {SHM_DIR} is full: the vector's block is "
                    f"{_mib(self._res.size)}"
                    + (f", {SHM_DIR} has {_mib(state[0])} free of {_mib(state[1])}" if state else "")
                    + "; give the container more with docker run --shm-size=...)"
                )
            self._fail(f"{self._worker_envs(w)} {how}")

    def _collect(
        self, workers: list[int], need: int, timeout: float | None = None, startup: bool = False
    ) -> list[int]:
        """Wait until ``need`` of ``workers`` are ready; return them in the order they became ready."""
        flags, stride = self._flags, FLAG_STRIDE
        pending, ready = list(workers), []
        sweeps, sleep = 0, 0.0
        began = time.perf_counter()
        # the clock starts now, not after the spin: on a loaded machine each sched_yield can give the
        # core away for a whole time slice, so MAIN_SPIN yields alone may take seconds
        deadline = time.monotonic() + (self.recv_timeout if timeout is None else timeout)
        spin_until = time.monotonic() + SPIN_S
        # Fast path for slow steps: when recent waits were long, sleep through most of the expected wait
        # instead of spinning, so the main process leaves the cores to the workers.
        if self._oversubscribed and self._wait_ema > 3e-4 and not startup:
            time.sleep(0.6 * self._wait_ema)
        while True:
            still = []
            for w in pending:
                state = flags[w * stride]
                if state >= DONE and len(ready) < need:
                    self._infos.extend(self._read_state(w, state))
                    ready.append(w)
                else:
                    still.append(w)
            pending = still
            if len(ready) >= need:
                if not startup:
                    self._wait_ema = 0.8 * self._wait_ema + 0.2 * (time.perf_counter() - began)
                return ready
            sweeps += 1
            if sweeps % 64 == 0 and time.monotonic() >= spin_until:
                sweeps = MAIN_SPIN  # spun long enough: from now on check, then sleep
            if sweeps < MAIN_SPIN:
                sched_yield()  # a worker waiting for this core gets it at once
            else:
                now = time.monotonic()
                self._check_alive()
                if now > deadline:
                    names = ", ".join(self._worker_envs(w) for w in pending)
                    what = "start" if startup else "answer"
                    self._fail(
                        f"recv timed out after {self.recv_timeout if timeout is None else timeout:g} s: "
                        f"{names} did not {what} (raise vec.recv_timeout for slow envs)"
                    )
                sleep = min(MAX_SLEEP / 4, sleep * 2 or 1e-5)
                time.sleep(sleep)

    # ------------------------------------------------------------------ Vector API

    def _check_open(self) -> None:
        if self._res.mm is None:
            raise RuntimeError(f"{self.source.name}: this vector is closed")

    def async_reset(self, seed: int | None = 0) -> None:
        self._check_open()
        if self._in_flight:  # finish what is running so no worker is mid-step while reseeded
            self._infos = []
            self._collect(sorted(self._in_flight), need=len(self._in_flight))
        self._seeds[:] = -1 if seed is None else int(seed)
        for w in range(self.num_workers):
            self._flags[w * FLAG_STRIDE] = RESET
        self._in_flight = set(range(self.num_workers))
        self._batch, self._next_block, self._infos = None, 0, []

    def recv(self) -> tuple[Any, ...]:
        self._check_open()
        if self._batch is not None:
            raise RuntimeError(
                f"{self.source.name}: recv() called twice; send() actions for the last batch first"
            )
        k = self.sizes.workers_per_batch
        if self._synchronous:
            self._collect(sorted(self._in_flight), need=len(self._in_flight))
            batch = list(range(self.num_workers))
        elif self.zero_copy:
            block = list(range(self._next_block * k, (self._next_block + 1) * k))
            if not set(block) <= self._in_flight:
                raise RuntimeError(
                    f"{self.source.name}: recv() without send(): workers {block} have no pending step"
                )
            self._collect(block, need=k)
            self._next_block = (self._next_block + 1) % self._num_blocks
            batch = block
        else:
            batch = self._collect(sorted(self._in_flight), need=k)
        self._in_flight -= set(batch)
        self._batch = batch
        infos, self._infos = self._infos, []
        b = self.buffers
        if self.zero_copy:
            lo, hi = self._rows[batch[0]][0], self._rows[batch[-1]][-1] + 1
            rows = slice(lo, hi)
            return (
                b.observations[rows],
                b.rewards[rows],
                b.terminals[rows],
                b.truncations[rows],
                infos,
                np.arange(lo, hi),
                b.masks[rows],
            )
        idx = np.concatenate([self._rows[w] for w in batch])
        g = self._gathered
        for src, dst in (
            (b.observations, g.observations),
            (b.rewards, g.rewards),
            (b.terminals, g.terminals),
            (b.truncations, g.truncations),
            (b.masks, g.masks),
        ):
            np.take(src, idx, axis=0, out=dst)
        self._batch_idx = idx
        return g.observations, g.rewards, g.terminals, g.truncations, infos, idx, g.masks

    def send(self, actions: Any) -> None:
        self._check_open()
        actions = self._check_actions(actions)
        batch = self._batch
        if batch is None:
            raise RuntimeError(f"{self.source.name}: send() before recv(); call reset() or recv() first")
        if self.zero_copy:
            lo = self._rows[batch[0]][0]
            np.copyto(self.buffers.actions[lo : lo + len(actions)], actions, casting="unsafe")
        else:
            self.buffers.actions[self._batch_idx] = actions
        for w in batch:
            self._flags[w * FLAG_STRIDE] = STEP
        self._in_flight.update(batch)
        self._batch = None

    def close(self) -> None:
        """Stop the workers and unlink the shared memory. Idempotent. Views returned earlier stay valid
        (they keep the mapping alive) and keep the values of the last step."""
        self.buffers = self._seeds = self._block_views = None  # our own views; the caller's keep theirs
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._res.procs]
