"""Data-parallel training: N ranks, each with its own envs and rollout buffer, one set of weights.

``puffer-bench train ENV --nproc N`` calls :func:`launcher.launch`, which starts N worker processes
through torch's elastic launcher (the engine under ``torchrun``: ``torch.distributed.launcher.api``),
with a static rendezvous at ``--master-addr:--master-port`` so ``--nnodes/--node-rank`` work across
machines exactly as with ``torchrun``. Every rank runs :func:`_train_rank`:

* its own envs, seeded ``train.seed + rank`` (so its env streams and action samples differ), and its
  own ``[segments, horizon]`` buffer; the config sizes one rank (``vec.num_envs`` envs per rank),
  while ``train.total_timesteps`` counts the steps of all ranks together;
* the same weights: rank 0's are broadcast after the start or resume, and because every rank then
  applies the same averaged gradient with the same optimizer state, they stay equal;
* :class:`rank.RankTrainer` hooks the two places where one minibatch needs the others: the advantage
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
  it ends one process's: the ranks agree at the next exchange (:class:`launcher.RankStop`), drop a
  rollout cut short, and rank 0 writes a checkpoint; a second signal kills the ranks at once.

NCCL on CUDA (one GPU per local rank), gloo on CPU. A rank that fails ends the job: the launcher
stops the others and :func:`launcher.launch` raises :class:`launcher.DistributedError` naming the
rank and its error. Starting the ranks and stopping them together is :mod:`appliance.train.launcher`;
the rank's trainer is :mod:`appliance.train.rank`; this module is the ``train --nproc`` command.
"""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from appliance.errors import ConfigError
from appliance.train import loop, runs, session
from appliance.train.launcher import Launch, RankStop, cores_per_rank, init, launch
from appliance.train.rank import RankTrainer

if TYPE_CHECKING:
    from appliance.config import Config


def rank_config(cfg: Config, rank: int, local_world: int) -> Config:
    """This rank's config: its own seed, and its share of this machine's cores for the env threads."""
    cfg = copy.deepcopy(cfg)
    cfg.data["train"]["seed"] = int(cfg.train.seed) + rank
    if cfg.vec.num_threads == "auto" and local_world > 1:
        cfg.data["vec"]["num_threads"] = cores_per_rank(local_world)
    return cfg


def train(cfg: Config, options: session.Options, where: Launch) -> Iterator[tuple[str, bool]]:
    """``puffer-bench train --nproc N``: the run folder is claimed here, the ranks train, rank 0
    reports; node 0 holds the run folder's lock for the whole launch, as one process does."""
    if options.profile_trace:
        raise ConfigError("--profile-trace profiles one process; leave out --nproc")
    session.check_outputs(options)
    where.check()
    check_ranks_fit(cfg, where.nproc)
    run = None
    try:
        if where.node_rank == 0:
            with runs.claim(cfg.train.data_dir, cfg.env_name, options.run_id, options.resume) as run:
                yield from ((f"warning: {note}", True) for note in run.notes)
                yield from ((note, False) for note in options.notes)
                yield from _launch(cfg, options, where, run.run_dir, run.resume_from)
        else:  # the other machines need the folder only to resume, from their own copy
            resume_from = runs.find_checkpoint(cfg.train.data_dir, options.resume) if options.resume else None
            yield from _launch(cfg, options, where, None, resume_from)
    except _NothingTrained as e:
        message = session.nothing_trained(signal.Signals(e.signum).name, run.resume_from if run else None)
        raise loop.Stopped(message, e.signum) from None


def check_ranks_fit(cfg: Config, nproc: int) -> None:
    """Before any rank starts: this machine's ``nproc`` ranks, each with the config's envs and
    buffers, fit in its memory (refused in one line with the figures, as one process's run is); an
    env that is not Ocean is made once here for it, under ``vec.recv_timeout``."""
    from appliance import ocean, vector
    from appliance.config import check_memory
    from appliance.vector.sources import resolve_source

    if cfg.env_name in ocean.names():
        check_memory(cfg.env_name, cfg.data, ranks=nproc)
    elif cfg.vec.backend != "ray":
        source = resolve_source(
            cfg.env_name, preprocess=cfg.vec.preprocess, timeout=cfg.vec.recv_timeout, **dict(cfg.env)
        )
        if source.vector_env is not None:  # a factory's VectorEnv (vector.gymvec): only its spaces count
            source.vector_env.close()
        vector.check_fits(source, cfg.vec.num_envs, cfg.data, ranks=nproc)


class _NothingTrained(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def _launch(
    cfg: Config, options: session.Options, where: Launch, run_dir: Path | None, resume_from: Path | None
) -> Iterator[tuple[str, bool]]:
    yield f"{where.world_size} ranks ({where.nproc} here); run folder {run_dir}", True
    results = launch(_train_rank, (cfg, options, run_dir, resume_from, where.timeout_s), where)
    lead = results.get(0) or {}
    if lead.get("nothing_trained"):  # the claim then removes a new run's folder
        raise _NothingTrained(lead["nothing_trained"])
    yield from lead.get("lines", [])


def _train_rank(
    cfg: Config, options: session.Options, run_dir: Path | None, resume_from: Path | None, timeout_s: float
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
        ahead = runs.MachineAhead() if lead and run_dir is not None else None  # read while the envs start
        vec = vector.make_from_config(cfg)
        try:
            # before the trainer, whose clock the run's seconds are
            machine = ahead.result() if ahead else None
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
            # the metric sinks (TensorBoard, W&B) are the lead's, closed on every exit as one process's
            sinks = session.Sinks(options, cfg, run_dir) if lead and run_dir else None
            set_aside = None
            try:
                if lead and run_dir is not None:
                    # the config as given: train.seed is rank 0's
                    set_aside = runs.start_run(base, run_dir, trainer.global_step, machine)
                    trainer.latest_pointer = Path(base.train.data_dir) / runs.LATEST  # as one process
                reporter = Reporter(trainer, cfg.env_name, live=options.dashboard) if lead else None
                try:
                    result = loop.run(
                        trainer,
                        session.stop_rule(cfg, options),
                        checkpoint_interval=cfg.train.checkpoint_interval,
                        on_epoch=[lambda _: reporter.update()] if reporter else [],
                        on_metrics=sinks.writers if sinks else [],
                        interruptible=True,
                        guard=stop,
                    )
                finally:
                    if reporter:
                        reporter.update(force=True)
                        reporter.close()
            finally:
                if sinks:
                    sinks.close()
            if not lead:
                return {}
            if result.reason == "interrupted" and not result.epochs:
                return {"nothing_trained": int(signal.Signals[result.signal or "SIGINT"])}
            warning = [(f"warning: {set_aside}", True)] if set_aside else []
            return {"lines": warning + _summary(options, cfg, trainer, result, world)}
        finally:
            trainer.close()
    finally:
        dist.destroy_process_group()


def _summary(
    options: session.Options, cfg: Config, trainer: RankTrainer, result: loop.Result, world: int
) -> list[tuple[str, bool]]:
    """Rank 0's closing lines, as one process's: the stop, the report, steps and speed."""
    lines = []
    # the hypervisor's steal only: rank 0 would count the other ranks on its machine as others' load
    load = {k: v for k, v in trainer.load.whole().items() if k == "steal_cores"}
    if result.reason == "interrupted":
        lines.append((f"interrupted ({result.signal}): saved a checkpoint", True))
    if options.report:
        try:
            session._write_report(options.report, cfg, trainer, result, load)
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
            f"({result.sps:,.0f} SPS; per rank {per_rank}){total}{session.busy_words(load)}; "
            f"saved {result.checkpoint}",
            False,
        )
    )
    return lines
