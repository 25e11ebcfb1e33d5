"""Data-parallel training: N ranks, each with its own envs and rollout buffer, one set of weights.

``puffer-bench train ENV --nproc N`` calls :func:`launch`, which starts N worker processes through
torch's elastic launcher (the engine under ``torchrun``: ``torch.distributed.launcher.api``), with
a static rendezvous at ``--master-addr:--master-port`` so ``--nnodes/--node-rank`` work across
machines exactly as with ``torchrun``. Every rank runs :func:`_train_rank`:

* its own envs, seeded ``train.seed + rank`` (so its env streams and action samples differ), and its
  own ``[segments, horizon]`` buffer; the config sizes one rank (``vec.num_envs`` envs per rank),
  while ``train.total_timesteps`` counts the steps of all ranks together;
* the same weights: rank 0's are broadcast after the start or resume, and because every rank then
  applies the same averaged gradient with the same optimizer state, they stay equal;
* :class:`RankTrainer` hooks the two places where one minibatch needs the others: the advantage
  normalization uses the mean and std of the minibatch across all ranks, and the gradients are
  averaged (one all-reduce of the flattened gradients) before clipping. Each rank draws its own
  prioritized segments from its own buffer (stratified sampling: the importance weights computed
  against the rank's buffer are the right ones for that scheme). With equal minibatches and no
  masked steps, an update equals the update of one process holding every rank's agents and
  drawing the union of their segments (``tests/test_distributed.py`` checks this);
* after every rollout the ranks exchange their step counts and episode stats, so ``global_step``,
  the learning-rate schedule and the stop rule agree on every rank;
* rank 0 alone writes the run folder (checkpoints, ``metrics.jsonl``, config, ``latest``) and draws
  the dashboard; its SPS is the aggregate, and ``sps/rank<i>`` gives each rank's. Node 0's launcher
  holds the run folder (:func:`runs.claim`: the lock, a named folder never overwritten);
* a stop signal (Ctrl-C to the process group, SIGTERM or SIGHUP to the launcher) ends the run as
  it ends one process's: the ranks agree at the next exchange (:class:`RankStop`), drop a rollout
  cut short, and rank 0 writes a checkpoint; a second signal kills the ranks at once.

NCCL on CUDA (one GPU per local rank), gloo on CPU. A rank that fails ends the job: the launcher
stops the others and :func:`launch` raises :class:`DistributedError` naming the rank and its error.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from appliance.errors import ApplianceError, ConfigError
from appliance.train import loop, runs, session
from appliance.train.trainer import Trainer


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
            raise ConfigError(f"--node-rank must be in 0..{self.nnodes - 1} (got {self.node_rank})")
        if self.nnodes > 1 and not self.master_port:
            raise ConfigError("several machines need the same --master-port on each (e.g. 29500)")
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
        outcome["results"] = elastic_launch(config, _entry)(fn, *args)
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


def _entry(fn: Callable[..., Any], *args: Any) -> Any:
    """Every worker starts here: with :class:`RankStop` taking the stop signals (blocked until now),
    ``fn`` under torch elastic's ``record``, so a worker's exception goes to the error file the agent
    reads and the launcher can name it."""
    from torch.distributed.elastic.multiprocessing.errors import record

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


# ----------------------------------------------------------------------------- the rank's trainer


class RankTrainer(Trainer):
    """A :class:`Trainer` that keeps step in step with the other ranks (see the module docstring)."""

    def __init__(self, *args: Any, stop: RankStop | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop = stop or RankStop(None)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self._params = list({id(p): p for p in self.policy.parameters()}.values())
        self.local_steps = 0
        self.rank_sps: list[float] = []
        self.allreduce_seconds = 0.0
        self.broadcast_weights()

    def broadcast_weights(self) -> None:
        """Every rank takes rank 0's weights (after a start, a resume or --load-model-path)."""
        with torch.no_grad():
            for t in self.policy.state_dict().values():
                dist.broadcast(t, 0)

    def reseed(self) -> None:
        """Give each rank its own action and sampling streams (a resumed checkpoint holds rank 0's)."""
        seed = self.hp.seed + 7919 * self.epoch
        torch.manual_seed(seed)
        self.generator.manual_seed(seed)

    # hooks called by Trainer.train

    def _advantage_stats(self, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and (unbiased) std of the minibatch advantages of all ranks together."""
        moments = torch.stack(
            [adv.sum(), (adv * adv).sum(), torch.tensor(float(adv.numel()), device=adv.device)]
        )
        dist.all_reduce(moments)
        total, squares, n = moments.double().unbind()
        mean = total / n
        var = (squares - total * mean) / (n - 1).clamp_min(1.0)
        return mean.float(), var.clamp_min(0.0).sqrt().float()

    def _reduce_gradients(self) -> None:
        """Average the gradients over the ranks: one all-reduce of all of them, flattened."""
        start = time.perf_counter()
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in self._params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        self.allreduce_seconds += time.perf_counter() - start

    # the rollout, then one exchange of counts and stats

    def evaluate(self) -> None:
        """The rollout, then the exchange, where the ranks also agree on a stop (see :class:`RankStop`)."""
        before = self.global_step
        stop = self.stop.requested()
        if stop is None:
            try:
                with self.stop.rollout():
                    super().evaluate()
            except loop.Interrupted as e:
                stop = e.signum
        steps = self.global_step - before
        mine = {
            "steps": steps,
            "sps": (self.local_steps + steps) / max(1e-9, time.time() - self.start_time),
            "stats": self.env_stats,
            "stop": stop,
        }
        every: list[Any] = [None] * self.world
        dist.all_gather_object(every, mine)
        stops = [r["stop"] for r in every if r["stop"]]
        if stops:  # every rank drops its rollout here and the loop saves and ends the run
            self.global_step = before
            raise loop.Interrupted(stops[0])
        self.local_steps += steps
        self.global_step = before + sum(r["steps"] for r in every)
        self.rank_sps = [r["sps"] for r in every]
        self.env_stats = merge_stats([r["stats"] for r in every])

    def log_metrics(self) -> dict[str, Any]:
        """The trainer's record plus each rank's SPS and this rank's all-reduce seconds."""
        run_dir, self.run_dir = self.run_dir, None  # the record is written below, with the extra keys
        try:
            record = super().log_metrics()
        finally:
            self.run_dir = run_dir
        record.update({f"sps/rank{i}": s for i, s in enumerate(self.rank_sps)})
        record["time/allreduce"] = self.allreduce_seconds
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            with open(run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
        return record

    def save_checkpoint(self) -> Path | None:
        return super().save_checkpoint() if self.rank == 0 else None


def merge_stats(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """Episode stats of all ranks as one: means weighted by each rank's episode count ``n``."""
    reported = [s for s in per_rank if s]
    if not reported:
        return {}
    keys = [k for k in reported[0] if all(k in s for s in reported)]
    weights = [float(s.get("n", 1.0)) or 1.0 for s in reported]
    total = sum(weights)
    merged = {k: sum(w * s[k] for w, s in zip(weights, reported, strict=True)) / total for k in keys}
    if all("n" in s for s in reported):
        merged["n"] = total
    return merged


# ----------------------------------------------------------------------------- the train command


def rank_config(cfg: Any, rank: int, local_world: int) -> Any:
    """This rank's config: its own seed, and its share of this machine's cores for the env threads."""
    cfg = copy.deepcopy(cfg)
    cfg.data["train"]["seed"] = int(cfg.train.seed) + rank
    if cfg.vec.num_threads == "auto" and local_world > 1:
        cfg.data["vec"]["num_threads"] = cores_per_rank(local_world)
    return cfg


def train(cfg: Any, options: session.Options, where: Launch) -> Iterator[tuple[str, bool]]:
    """``puffer-bench train --nproc N``: the run folder is claimed here, the ranks train, rank 0
    reports; node 0 holds the run folder's lock for the whole launch, as one process does."""
    if options.profile_trace:
        raise ConfigError("--profile-trace profiles one process; leave out --nproc")
    session.check_outputs(options)
    where.check()
    run = None
    try:
        if where.node_rank == 0:
            with runs.claim(cfg.train.data_dir, cfg.env_name, options.run_id, options.resume) as run:
                yield from _launch(cfg, options, where, run.run_dir, run.resume_from)
        else:  # the other machines need the folder only to resume, from their own copy
            resume_from = runs.find_checkpoint(cfg.train.data_dir, options.resume) if options.resume else None
            yield from _launch(cfg, options, where, None, resume_from)
    except _NothingTrained as e:
        message = session.nothing_trained(signal.Signals(e.signum).name, run.resume_from if run else None)
        raise loop.Stopped(message, e.signum) from None


class _NothingTrained(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def _launch(
    cfg: Any, options: session.Options, where: Launch, run_dir: Path | None, resume_from: Path | None
) -> Iterator[tuple[str, bool]]:
    yield f"{where.world_size} ranks ({where.nproc} here); run folder {run_dir}", True
    results = launch(_train_rank, (cfg, options, run_dir, resume_from, where.timeout_s), where)
    lead = results.get(0) or {}
    if lead.get("nothing_trained"):  # the claim then removes a new run's folder
        raise _NothingTrained(lead["nothing_trained"])
    yield from lead.get("lines", [])


def _train_rank(
    cfg: Any, options: session.Options, run_dir: Path | None, resume_from: Path | None, timeout_s: float
) -> dict[str, Any]:
    """One rank of ``train --nproc``; rank 0 returns {"lines": [(line, to stderr)]}, or
    {"nothing_trained": signal} when a stop signal came before the first epoch ended."""
    from appliance import vector
    from appliance.train.dashboard import Reporter

    stop = RankStop.current or RankStop.install()
    rank, world, device = init(timeout_s)
    try:
        early = stop.agree()  # a Ctrl-C while the ranks started: stop before making any envs
        if early:
            return {"nothing_trained": early} if rank == 0 else {}
        base, cfg = cfg, rank_config(cfg, rank, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        if device.type == "cuda":
            cfg.data["train"]["device"] = "cuda"  # the current device is this rank's GPU
        lead = rank == 0
        vec = vector.make_from_config(cfg)
        try:
            trainer = RankTrainer(cfg, vec, run_dir=run_dir if lead else None, stop=stop)
        except BaseException:
            vec.close()
            raise
        try:
            if resume_from is not None:
                trainer.load_checkpoint(resume_from, resume=True)
                trainer.reseed()
            elif options.load_model_path:
                trainer.load_checkpoint(
                    runs.find_checkpoint(cfg.train.data_dir, options.load_model_path), resume=False
                )
            trainer.broadcast_weights()
            writers = session._writers(options, cfg, run_dir) if lead and run_dir else []
            if lead and run_dir is not None:
                runs.start_run(base, run_dir)  # the config as given: train.seed is rank 0's
                trainer.latest_pointer = Path(base.train.data_dir) / runs.LATEST  # as one process
            reporter = Reporter(trainer, cfg.env_name, live=options.dashboard) if lead else None
            try:
                result = loop.run(
                    trainer,
                    session.stop_rule(cfg, options),
                    checkpoint_interval=cfg.train.checkpoint_interval,
                    on_epoch=[lambda _: reporter.update()] if reporter else [],
                    on_metrics=writers,
                    interruptible=True,
                    guard=stop,
                )
            finally:
                if reporter:
                    reporter.update(force=True)
                    reporter.close()
            if not lead:
                return {}
            if result.reason == "interrupted" and not result.epochs:
                return {"nothing_trained": int(signal.Signals[result.signal or "SIGINT"])}
            return {"lines": _summary(options, cfg, trainer, result, world)}
        finally:
            trainer.close()
    finally:
        dist.destroy_process_group()


def _summary(
    options: session.Options, cfg: Any, trainer: RankTrainer, result: loop.Result, world: int
) -> list[tuple[str, bool]]:
    """Rank 0's closing lines, as one process's: the stop, the report, steps and speed."""
    lines = []
    if result.reason == "interrupted":
        lines.append((f"interrupted ({result.signal}): saved a checkpoint", True))
    if options.report:
        try:
            session._write_report(options.report, cfg, trainer, result)
        except OSError as e:  # the checkpoint is saved; say so in one line
            raise runs.CheckpointWriteError(
                f"cannot write --report {options.report}: {e.strerror or e}; saved {result.checkpoint}"
            ) from None
        lines.append((f"wrote {options.report}", False))
    per_rank = ", ".join(f"{s:,.0f}" for s in trainer.rank_sps)
    total = f", {trainer.global_step:,} in all" if trainer.global_step != result.steps else ""
    lines.append(
        (
            f"{result.steps:,} steps in {result.seconds:.0f} s on {world} ranks "
            f"({result.sps:,.0f} SPS; per rank {per_rank}){total}; saved {result.checkpoint}",
            False,
        )
    )
    return lines
