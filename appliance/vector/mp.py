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
stops the workers and unlinks the shared memory. The block itself is :mod:`appliance.vector.shm`, a
worker's side :mod:`appliance.vector.mp_worker`.

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

import mmap
import multiprocessing
import os
import signal
import threading
import time
import uuid
import weakref
from multiprocessing import connection
from typing import Any

import numpy as np

from appliance.errors import EnvContractError
from appliance.vector.base import Vector, WorkerError
from appliance.vector.mp_worker import (
    BOOT,
    CLOSE,
    DONE,
    ERROR,
    MAX_SLEEP,
    RESET,
    STEP,
    _worker,
    children_ignore_sigint,
    sched_yield,
)
from appliance.vector.shm import (
    FLAG_STRIDE,
    SHM_DIR,
    _array,
    _create_block,
    _mib,
    _plan,
    _unlink_block,
    _views,
    shm_state,
)
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource

MAIN_SPIN = 2_000  # flag sweeps before the main process starts sleeping
SPIN_S = 2e-3  # ...or this long, whichever ends first (yields can be slow on a busy machine)
ERROR_GRACE = 0.5  # seconds the other workers get to finish (or fail) once one has raised


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
