"""Starting the ranks of a data-parallel run, and stopping them together.

:func:`launch` starts N worker processes on this machine through torch's elastic launcher (the
engine under ``torchrun``: ``torch.distributed.launcher.api``), with a static rendezvous at
``--master-addr:--master-port`` so ``--nnodes/--node-rank`` work across machines exactly as with
``torchrun``; each worker joins the process group with :func:`init`. A stop signal to the launcher
is handed on to the ranks, which agree on it and stop at the same epoch (:class:`RankStop`). A rank
that fails ends the job: the launcher stops the others and :func:`launch` raises
:class:`DistributedError` naming the rank and its error. What the ranks run for ``train --nproc``
is :mod:`appliance.train.distributed`.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from appliance import lifeline
from appliance.errors import ApplianceError, ConfigError
from appliance.train import loop


class DistributedError(ApplianceError, RuntimeError):
    """A rank failed; the message names it and its error."""


@dataclass(frozen=True)
class Launch:
    """Where the ranks run: ``nproc`` per machine, ``nnodes`` machines, this one being ``node_rank``."""

    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: a free port (one machine only)
    timeout_s: float = 300.0  # how long a collective waits for the other ranks

    def check(self) -> None:
        """Refuse what would fail after the ranks started: counts, this machine's cap, the port."""
        if self.nproc < 1 or self.nnodes < 1:
            raise ConfigError(f"--nproc and --nnodes must be at least 1 (got {self.nproc}, {self.nnodes})")
        if not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(
                f"--node-rank {self.node_rank}: --nnodes {self.nnodes} numbers the machines 0..{self.nnodes - 1}; "
                "pass this machine's number among them"
            )
        if self.nnodes > 1 and not self.master_port:
            raise ConfigError("several machines need the same --master-port on each (e.g. 29500)")
        if self.nnodes > 1 and not self.master_addr.strip():
            raise ConfigError("--master-addr is empty: several machines need node 0's address on each")
        cap, per = local_rank_cap()
        if self.nproc > cap:
            raise ConfigError(
                f"--nproc {self.nproc}: at most {cap} ranks on this machine, one per {per}; pass --nproc {cap} or fewer"
            )
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise ConfigError(
                f"--master-port {self.master_port} is not a port: use 1..65535, or 0 for a free one"
            )
        if self.node_rank == 0 and self.master_port:
            check_port(self.master_port, several=self.nnodes > 1)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_rank_cap() -> tuple[int, str]:
    """How many ranks this machine can run, and what each needs: a GPU each with CUDA, else a core."""
    if torch.cuda.is_available():
        return torch.cuda.device_count(), "GPU"
    from appliance.vector.sizes import usable_cores

    return usable_cores(), "usable core (affinity and cgroup quota)"


def check_port(port: int, several: bool = False) -> None:
    """Node 0 listens on ``port`` (torch's TCP store, on every interface): refuse one that is taken
    before any rank starts, instead of a rendezvous error after."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store does: TIME_WAIT is fine
        try:
            s.bind(("", port))
        except OSError as e:
            other = (
                "another port, the same on every machine" if several else "another port, or 0 for a free one"
            )
            raise ConfigError(
                f"--master-port {port} cannot be used here ({e.strerror or e}); pass {other}"
            ) from None


# ----------------------------------------------------------------------------- launching


RANKS_DIR = "PUFFER_BENCH_RANKS_DIR"  # the launch's scratch folder, for the ranks (environment variable)
STOP_FILE = "stop"  # written there by the launcher on a stop signal: the signal's number


def launch(fn: Callable[..., Any], args: tuple[Any, ...], where: Launch) -> dict[int, Any]:
    """Run ``fn(*args)`` on every local rank of this machine; returns {global rank: return value}.

    The elastic agent sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for each
    worker (``fn`` calls :func:`init` to join the group). No restarts: a failed rank is an error.

    Stop signals are this process's to handle, not the agent's (which would kill the ranks after 30
    s): the agent runs in a thread of its own with them blocked, so the ranks start with them blocked
    too, until :class:`RankStop` is in place (a Ctrl-C while a rank imports prints no traceback).
    The first SIGINT, SIGTERM or SIGHUP is handed on to the ranks and written to the scratch folder
    (:data:`STOP_FILE`), and they stop together after their update with a checkpoint; a second one
    kills them at once.
    """
    where.check()
    port = where.master_port or free_port()
    # the agent keeps each rank's error file under a log folder, and torch.multiprocessing puts a
    # failed rank's pickled error in the temp dir; neither removes them, so both go into a folder of
    # our own that goes with the launch
    with tempfile.TemporaryDirectory(prefix="puffer-bench-ranks-") as scratch:
        import logging

        # the agent logs starts, stops and failures (with tracebacks); the user gets one error line below
        logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
        logging.getLogger("torch.multiprocessing").setLevel(logging.ERROR)
        default_tempdir, tempfile.tempdir = tempfile.tempdir, scratch
        default_env, os.environ[RANKS_DIR] = os.environ.get(RANKS_DIR), scratch
        stop = _LauncherStop(Path(scratch))
        outcome: dict[str, Any] = {}
        agent = threading.Thread(
            target=_run_agent,
            args=(where, port, scratch, fn, args, outcome),
            name="puffer-ranks",
            daemon=True,
        )
        try:
            with loop.stop_signals(guard=stop):
                agent.start()
                while agent.is_alive():
                    agent.join(0.1)
        finally:
            tempfile.tempdir = default_tempdir
            if default_env is None:
                os.environ.pop(RANKS_DIR, None)
            else:
                os.environ[RANKS_DIR] = default_env
        if stop.forced:
            raise DistributedError(
                f"stopped at once by a second {signal.Signals(stop.forced).name}: the ranks were killed "
                "without saving; the run folder keeps its last checkpoint"
            )
        if "error" in outcome:
            raise outcome["error"]
        return outcome["results"]


def _run_agent(
    where: Launch,
    port: int,
    scratch: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    outcome: dict[str, Any],
) -> None:
    """The elastic agent, in its own thread with the stop signals blocked (see :func:`launch`)."""
    from multiprocessing import resource_tracker

    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    resource_tracker.ensure_running()  # it unblocks SIGINT and SIGTERM after starting itself: first
    signal.pthread_sigmask(signal.SIG_BLOCK, loop.STOP_SIGNALS)  # this thread's, and its children's
    config = LaunchConfig(
        min_nodes=where.nnodes,
        max_nodes=where.nnodes,
        nproc_per_node=where.nproc,
        run_id=f"puffer-bench-{uuid.uuid4().hex[:8]}" if where.nnodes == 1 else "puffer-bench",
        rdzv_backend="static",
        rdzv_endpoint=f"{where.master_addr}:{port}",
        rdzv_configs={"rank": where.node_rank, "timeout": int(where.timeout_s)},
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=scratch),
    )
    try:
        with lifeline.spawned_children_die_with_us():  # this thread waits for the ranks
            outcome["results"] = elastic_launch(config, _entry)(os.getpid(), fn, *args)
    except ChildFailedError as e:
        outcome["error"] = DistributedError(_failure_message(e))
    except BaseException as e:  # e.g. the rendezvous failed: raised again in the main thread
        outcome["error"] = e


class _LauncherStop(loop.SignalGuard):
    """The launcher's stop signals: the first is handed on to the ranks (and written where a rank
    still starting finds it), a second kills them."""

    def __init__(self, scratch: Path) -> None:
        super().__init__()
        self.scratch = scratch
        self.signum: int | None = None
        self.forced: int | None = None

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            with contextlib.suppress(OSError):
                (self.scratch / STOP_FILE).write_text(str(int(signum)))
            self._send(signum)
        else:
            self.forced = signum
            self._send(signal.SIGKILL)

    def _send(self, signum: int) -> None:
        for pid_file in self.scratch.glob("rank-*.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signum)


def _failure_message(e: Any) -> str:
    lines = []
    for rank, failure in sorted(e.failures.items()):
        if failure.signal_name() != "<N/A>" and failure.exitcode < 0:
            why = f"killed by {failure.signal_name()}"
        else:
            why = _first_line(failure.message) or f"exit code {failure.exitcode}"
        lines.append(f"rank {rank} failed: {why}")
    return "; ".join(lines) + "; the other ranks were stopped"


def _first_line(message: Any) -> str:
    if isinstance(message, dict):  # an error file: {"message": "...", "extraInfo": {...}}
        message = message.get("message", "")
    text = str(message or "").strip()
    return text.splitlines()[0] if text else ""


def _entry(launcher_pid: int, fn: Callable[..., Any], *args: Any) -> Any:
    """Every worker starts here: tied to the launcher's life first (a launcher killed outright, by
    the OOM killer say, takes its ranks with it: :func:`lifeline.die_with_parent`; the agent's
    thread that started them waits for them), then with :class:`RankStop` taking the stop signals
    (blocked until now), ``fn`` under torch elastic's ``record``, so a worker's exception goes to
    the error file the agent reads and the launcher can name it."""
    from torch.distributed.elastic.multiprocessing.errors import record

    lifeline.die_with_parent(launcher_pid)
    RankStop.install()
    return record(fn)(*args)


class RankStop(loop.SignalGuard):
    """Stop signals in a rank. The ranks must stop together, at the same epoch, or the ones still
    training wait in a collective for the others: so a signal is only noted (``signum``), except
    during a rollout, which it cuts short (:meth:`rollout`). After each rollout the ranks exchange
    their counts anyway; if one of them was signalled (or the launcher wrote :data:`STOP_FILE`),
    every rank drops its rollout there and the run ends as one process's does (rank 0 saves).
    """

    current: RankStop | None = None

    def __init__(self, scratch: str | None) -> None:
        super().__init__()
        self.scratch = Path(scratch) if scratch else None
        self.signum: int | None = None
        self._in_rollout = False

    @classmethod
    def install(cls) -> RankStop:
        stop = cls(os.environ.get(RANKS_DIR))
        for s in loop.STOP_SIGNALS:
            signal.signal(s, stop.handler)
        if stop.scratch is not None:
            with contextlib.suppress(OSError):
                (stop.scratch / f"rank-{os.environ.get('RANK', os.getpid())}.pid").write_text(
                    str(os.getpid())
                )
        signal.pthread_sigmask(signal.SIG_UNBLOCK, loop.STOP_SIGNALS)  # one that came meanwhile arrives now
        cls.current = stop
        return stop

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if self._in_rollout:
            self._in_rollout = False
            raise loop.Interrupted(signum)

    def requested(self) -> int | None:
        """The stop signal this rank got, or the launcher's; None to go on."""
        if self.signum is None and self.scratch is not None:
            with contextlib.suppress(OSError, ValueError):
                self.signum = int((self.scratch / STOP_FILE).read_text())
        return self.signum

    @contextlib.contextmanager
    def rollout(self) -> Iterator[None]:
        """A stop signal inside the block raises :class:`loop.Interrupted` (the rollout is dropped)."""
        self._in_rollout = True
        try:
            yield
        finally:
            self._in_rollout = False

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        yield  # nothing is raised after an update: the ranks agree on stopping after the next rollout

    def agree(self) -> int | None:
        """The stop signal of the lowest rank that has one (every rank gets the same answer)."""
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, self.requested())
        return next((s for s in every if s), None)


def init(timeout_s: float = 300.0) -> tuple[int, int, torch.device]:
    """Join the process group the launcher set up; returns (rank, world size, device).

    NCCL with one GPU per local rank when CUDA is there, else gloo on the CPU. A worker must hand
    its cores to the other local ranks: torch and the env threads get ``cores / local ranks``.
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"rank {rank} wants GPU {local_rank} but this machine has {torch.cuda.device_count()}; "
                "use --nproc at most the GPU count"
            )
        torch.cuda.set_device(local_rank)
        backend, device = "nccl", torch.device("cuda", local_rank)
    else:
        backend, device = "gloo", torch.device("cpu")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    if not dist.is_initialized():
        dist.init_process_group(
            backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s)
        )
    return rank, world, device


def cores_per_rank(local_world: int) -> int:
    import psutil

    return max(1, (psutil.cpu_count(logical=False) or os.cpu_count() or 1) // local_world)
