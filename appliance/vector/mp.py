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
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing
import os
import signal
import time
import traceback
import uuid
import weakref
from multiprocessing import connection, shared_memory
from typing import Any

import numpy as np

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
MAX_SLEEP = 1e-3  # longest idle sleep: bounds the wake-up latency after a long pause
ERROR_GRACE = 0.5  # seconds the other workers get to finish (or fail) once one has raised


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


def _views(buf: Any, arrays: list[tuple[str, tuple[int, ...], str, int]]) -> Buffers:
    return Buffers(
        *(np.ndarray(shape, np.dtype(dtype), buffer=buf, offset=off) for _, shape, dtype, off in arrays)
    )


# ----------------------------------------------------------------------------- worker


def _attach(name: str, size: int) -> mmap.mmap:
    """Map the segment without multiprocessing's resource tracker (the main process owns it)."""
    import _posixshmem

    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _worker(
    index: int,
    shm_name: str,
    size: int,
    plan: tuple[Any, ...],
    source: EnvSource,
    sizes: Sizes,
    conn: connection.Connection,
    parent_pid: int,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    arrays, flag_off, seed_off, _ = plan
    mm = _attach(shm_name, size)
    flags = memoryview(mm)[flag_off : flag_off + sizes.num_workers * FLAG_STRIDE]
    seeds = np.ndarray((sizes.num_workers,), np.int64, buffer=mm, offset=seed_off)
    me = index * FLAG_STRIDE
    k = source.agents_per_env
    first_env = index * sizes.envs_per_worker
    rows = _views(mm, arrays).rows(first_env * k, (first_env + sizes.envs_per_worker) * k)

    def report(error: BaseException, where: str) -> None:
        """Send the traceback (with the env that raised, when known) and flag the error."""
        if isinstance(error, EnvStepError):
            conn.send(("error", error.env_index, error.where, error.tb))
        else:
            conn.send(("error", first_env, where, traceback.format_exc()))
        flags[me] = ERROR

    try:
        group = make_group(source, first_env, sizes.envs_per_worker, rows, infos=True)
    except BaseException as e:
        report(e, "creation")
        return
    flags[me] = DONE
    idle, sleep, last_parent_check = 0, 0.0, time.monotonic()
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
                    now = time.monotonic()
                    if now - last_parent_check > 0.2:
                        last_parent_check = now
                        if os.getppid() != parent_pid:  # the main process is gone
                            return
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
            except Exception as e:
                report(e, "step")
                continue
            if infos:
                conn.send(infos)
                flags[me] = INFO
            else:
                flags[me] = DONE
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
        self.shm: shared_memory.SharedMemory | None = None
        self.flags: memoryview | None = None

    def close(self, grace: float = 2.0) -> None:
        """Ask workers to stop, wait up to ``grace`` seconds, then terminate and kill what is left."""
        flags, self.flags = self.flags, None
        if flags is not None:
            for w, proc in enumerate(self.procs):
                if proc.is_alive():
                    flags[w * FLAG_STRIDE] = CLOSE
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
        for conn in self.conns:
            conn.close()
        self.conns = []
        if flags is not None:
            flags.release()
        shm, self.shm = self.shm, None
        if shm is not None:
            # BufferError: the caller still holds zero-copy views; the mapping lives until they go
            with contextlib.suppress(BufferError):
                shm.close()
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()


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
        res.shm = shared_memory.SharedMemory(
            name=f"puffer_{os.getpid()}_{uuid.uuid4().hex[:8]}", create=True, size=total
        )
        self.buffers = _views(res.shm.buf, arrays)
        self.buffers.masks[:] = True
        res.flags = res.shm.buf[flag_off : flag_off + sizes.num_workers * FLAG_STRIDE]
        self._flags = res.flags
        self._seeds = np.ndarray((sizes.num_workers,), np.int64, buffer=res.shm.buf, offset=seed_off)
        ctx = multiprocessing.get_context(start_method)
        for w in range(sizes.num_workers):
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=_worker,
                args=(w, res.shm.name, total, plan, source, sizes, child, os.getpid()),
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

    # ------------------------------------------------------------------ waiting

    def _worker_envs(self, w: int) -> str:
        epw = self.sizes.envs_per_worker
        return f"worker {w} (envs {w * epw}..{(w + 1) * epw - 1})"

    def _fail(self, message: str) -> None:
        self.buffers = self._seeds = self._block_views = None
        self._res.close(grace=0.2)  # a failed or hung worker will not answer: do not wait long for it
        self._finalizer.detach()
        raise WorkerError(f"{self.source.name}: {message}")

    def _read_state(self, w: int, state: int) -> list[dict[str, Any]]:
        if state == DONE:
            return []
        if state == ERROR:
            self._raise_errors(w)
        return self._res.conns[w].recv()

    def _raise_errors(self, first: int) -> None:
        """A worker raised: give the others in flight a moment, then report every error in worker order
        (workers that fail on the same step would otherwise be reported by whichever was swept first)."""
        errors = {first: self._res.conns[first].recv()}
        flags, others = self._flags, [w for w in range(self.sizes.num_workers) if w != first]
        deadline = time.monotonic() + ERROR_GRACE
        while others and time.monotonic() < deadline:
            for w in [w for w in others if flags[w * FLAG_STRIDE] == ERROR]:
                errors[w] = self._res.conns[w].recv()
            others = [w for w in others if flags[w * FLAG_STRIDE] < DONE]  # still stepping
            if others:
                time.sleep(1e-3)
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
            code = self._res.procs[w].exitcode
            how = (
                f"was killed by signal {signal.Signals(-code).name}"
                if code is not None and code < 0
                else f"exited with code {code}"
            )
            self._fail(f"{self._worker_envs(w)} {how}")

    def _collect(
        self, workers: list[int], need: int, timeout: float | None = None, startup: bool = False
    ) -> list[int]:
        """Wait until ``need`` of ``workers`` are ready; return them in the order they became ready."""
        flags, stride = self._flags, FLAG_STRIDE
        pending, ready = list(workers), []
        sweeps, sleep = 0, 0.0
        deadline = None
        began = time.perf_counter()
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
            if sweeps <= MAIN_SPIN:
                sched_yield()  # a worker waiting for this core gets it at once
            else:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + (self.recv_timeout if timeout is None else timeout)
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
        if self._res.shm is None:
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
        """Stop the workers and unlink the shared memory. Idempotent."""
        self.buffers = self._seeds = (
            None  # our own views; views the caller still holds keep the mapping alive
        )
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._res.procs]
