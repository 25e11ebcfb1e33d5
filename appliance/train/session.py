"""A ``puffer-bench train`` session: run folder, resume, dashboard, loggers, the loop, the summary.

:func:`train` is everything the command does after the config is resolved; the CLI prints the lines
it yields. The epochs themselves run in :func:`appliance.train.loop.run`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.errors import ApplianceError, ConfigError
from appliance.redact import redact_tree
from appliance.safe_files import check_output
from appliance.train import loop, runs

if TYPE_CHECKING:
    from appliance.config import Config


@dataclass
class Options:
    run_id: str | None = None
    resume: str | None = None  # a run folder, a run id or "latest"
    load_model_path: str | None = None  # start from these weights (not the optimizer or counters)
    dashboard: bool = False  # the rich live dashboard instead of plain lines
    profile_trace: str | None = None  # run 3 epochs under torch.profiler, write the trace, stop
    tensorboard: bool = False
    wandb: bool = False
    report: str | None = None  # write a JSON summary here at the end
    stop_steps: int | None = None  # end after this many agent-steps (schedules still span total_timesteps)
    notes: tuple[str, ...] = ()  # lines said once the run has started (a resume's config and changes)


def stop_rule(cfg: Config, options: Options) -> loop.Stop:
    """``train.total_timesteps``, or ``--stop-steps`` when that comes first."""
    total = int(cfg.train.total_timesteps)
    return loop.Stop(total_timesteps=total if options.stop_steps is None else min(total, options.stop_steps))


def train(cfg: Config, options: Options) -> Iterator[tuple[str, bool]]:
    """Train with ``cfg``; yields (line, to stderr) for the caller to print.

    The run folder is claimed and locked for the whole session (:func:`runs.claim`). An
    unwritable ``--report`` or ``--profile-trace`` is refused before the claim, and a run folder
    that is unwritable or nearly full by the claim before it locks it, so a refusal leaves nothing
    behind and no env has started. A stop signal before the first epoch has ended (while envs
    start, say) ends the session as cleanly as one during training: the envs are closed, a new
    run's folder goes, and :class:`loop.Stopped` says in one line what was kept.
    """
    t = cfg.train
    check_outputs(options)
    run = None
    with loop.stop_signals():
        try:
            with runs.claim(t.data_dir, cfg.env_name, options.run_id, options.resume) as run:
                yield from ((f"warning: {note}", True) for note in run.notes)
                yield from _train(cfg, options, run.run_dir, run.resume_from)
        except KeyboardInterrupt as e:
            signum = getattr(e, "signum", signal.SIGINT)
            message = nothing_trained(signal.Signals(signum).name, run.resume_from if run else None)
            raise loop.Stopped(message, signum) from None


def check_outputs(options: Options) -> None:
    """Refuse an unwritable ``--report`` or ``--profile-trace`` before any work (before the run
    folder is claimed: a refusal leaves nothing behind): :func:`safe_files.check_output`."""
    if options.report:
        check_output(options.report, "--report")
    if options.profile_trace:
        check_output(options.profile_trace, "--profile-trace", beside=[options.profile_trace + ".ops.txt"])


def nothing_trained(signal_name: str, resumed: Path | None) -> str:
    """What a run stopped before its first epoch ended has kept: the checkpoint it resumed, or nothing."""
    kept = f"{resumed} is kept as it was" if resumed is not None else "nothing was kept"
    return f"interrupted ({signal_name}) before the first epoch ended: nothing was trained; {kept}"


def _train(
    cfg: Config, options: Options, run_dir: Path, resume_from: Path | None
) -> Iterator[tuple[str, bool]]:
    sinks = Sinks(options, cfg, run_dir)
    try:
        yield from _train_with(cfg, options, run_dir, resume_from, sinks.writers)
    finally:
        sinks.close()


def _train_with(
    cfg: Config,
    options: Options,
    run_dir: Path,
    resume_from: Path | None,
    writers: list[Callable[[dict[str, Any]], None]],
) -> Iterator[tuple[str, bool]]:
    from appliance import vector
    from appliance.train.dashboard import Reporter
    from appliance.train.trainer import Trainer

    t = cfg.train
    ahead = runs.MachineAhead()  # the run's machine record, read while the envs start
    cores, busy, chosen_env_threads = _choose_env_threads(cfg)  # before the vector: its threads or workers
    vec = vector.make_from_config(cfg)
    try:
        machine = ahead.result()  # before the trainer, whose clock the run's seconds are
        trainer = Trainer(cfg, vec, run_dir=run_dir, profile=bool(options.profile_trace))
    except BaseException:
        vec.close()
        raise
    finally:
        if chosen_env_threads is not None:  # the saved config keeps auto: a resume chooses afresh
            cfg.data["vec"][chosen_env_threads[0]] = "auto"
    threads_line, watch = _choose_torch_threads(cfg, trainer, cores, busy, chosen_env_threads)
    try:
        superseded = None
        if resume_from:
            trainer.load_checkpoint(resume_from, resume=True)
            superseded = runs.supersede_later_records(run_dir, trainer.epoch)  # one record an epoch
        elif options.load_model_path:
            trainer.load_checkpoint(runs.find_checkpoint(t.data_dir, options.load_model_path), resume=False)
        runs.require_checkpoint_room(run_dir, trainer.policy)
        set_aside = runs.start_run(cfg, run_dir, trainer.global_step, machine)
        trainer.latest_pointer = Path(t.data_dir) / runs.LATEST  # moves at the first checkpoint
        if superseded:
            yield f"warning: {superseded}", True
        if set_aside:
            yield f"warning: {set_aside}", True
        for line in options.notes:
            yield line, False
        yield header(cfg, trainer), False
        for line in defaults_chosen(cfg, trainer):
            yield line, False
        yield threads_line, False
        if options.profile_trace:
            yield _profile(trainer, options.profile_trace), False
            return
        reporter = Reporter(trainer, cfg.env_name, live=options.dashboard)
        try:
            result = loop.run(
                trainer,
                stop_rule(cfg, options),
                checkpoint_interval=t.checkpoint_interval,
                on_epoch=[lambda _: reporter.update(), lambda _: reporter.say(*watch.said())],
                on_metrics=writers,
                interruptible=True,
            )
        finally:
            reporter.update(force=True)
            reporter.close()
        load = trainer.load.whole()  # others' load and the hypervisor's steal over the run
        if result.reason == "interrupted":
            if not result.epochs:
                raise loop.Interrupted(signal.Signals[result.signal or "SIGINT"])
            yield f"interrupted ({result.signal}): saved a checkpoint", True
        if options.report:
            try:  # a report that does not fit goes to the temp folder, named in the error
                _write_report(options.report, cfg, trainer, result, load)
            except ApplianceError as e:  # the checkpoint is saved; say so in the same line
                raise runs.CheckpointWriteError(f"{e}; saved {result.checkpoint}") from None
            yield f"wrote {options.report}", False
        total = f", {trainer.global_step:,} in all" if trainer.global_step != result.steps else ""
        yield (
            f"{result.steps:,} steps in {result.seconds:.0f} s ({result.sps:,.0f} SPS){total}"
            f"{busy_words(load)}; saved {result.checkpoint}",
            False,
        )
    finally:
        watch.close()
        trainer.close()


def header(cfg: Config, trainer: Any) -> str:
    """The run's first line: env, the hardware profile (detected or --gpu) and why, what it gave."""
    from appliance.config import hardware

    precision = trainer.precision
    if getattr(trainer, "rollout_int16", False):
        precision += "; the rollout's LSTM products in int16"
    return (
        f"train {cfg.env_name}: {hardware.why(cfg.profile)} (--gpu NAME to change); "
        f"device {trainer.device} ({precision}), {trainer.vec.num_agents} agents, batch {trainer.batch_size}, "
        f"{cfg.policy.core} core, {cfg.train.optimizer}"
    )


def defaults_chosen(cfg: Config, trainer: Any) -> list[str]:
    """The lines after the header that say what was picked for the env and why: a non-Ocean env's
    family (:mod:`appliance.config.families`) and the policy's encoder with its parameter count."""
    family = getattr(cfg, "family", None)
    lines = [family.describe()] if family is not None else []
    note = getattr(getattr(trainer.vec, "source", None), "note", "")  # a mixed team's padding
    return [*lines, *([note] if note else []), trainer.policy.describe_encoder()]


def busy_words(load: dict[str, float], cores: int | None = None) -> str:
    """What the machine's others took from the run, where it passed the noise guard's limits
    (``thresholds``): the run's speed is then the busy machine's, not the run's alone. "" else."""
    from appliance.sysinfo.load import thresholds

    others_limit, steal_limit = thresholds(cores)
    others, steal = load.get("others_cores", 0.0), load.get("steal_cores", 0.0)
    if others < others_limit and steal < steal_limit:
        return ""
    return (
        f" on a busy machine (on average the hypervisor took {steal:.2f} cores' worth and other "
        f"processes {others:.2f}; the noise guard's limits {steal_limit:.2f} and {others_limit:.2f})"
    )


def _write_report(path: str, cfg: Config, trainer: Any, result: loop.Result, load: dict[str, float]) -> None:
    import json

    from appliance.safe_files import write_or_keep
    from appliance.sysinfo import fingerprint

    report = {
        "kind": "train",
        "env": cfg.env_name,
        "fingerprint": fingerprint(),
        "config": redact_tree(cfg.to_dict()),  # no secret in a report
        "device": str(trainer.device),
        "precision": trainer.precision,
        "global_step": trainer.global_step,
        "epochs": trainer.epoch,
        "steps": result.steps,  # this session's (a resumed run's global_step counts earlier ones)
        "seconds": result.seconds,
        "sps": result.sps,
        "stopped": result.reason,
        "phases": trainer.timings.breakdown(),
        "host_load": load,  # cores' worth others and the hypervisor's steal took, mean over the run
        "losses": trainer.losses,
        "env_stats": trainer.last_env_stats,  # the last epoch's that ended episodes
        "env_stats_step": trainer.last_env_step,  # the global_step they were reported at
    }
    write_or_keep(path, (json.dumps(report, indent=2) + "\n").encode(), "--report")


class Sinks:
    """Metric sinks besides metrics.jsonl: TensorBoard events in the run folder, Weights & Biases
    (project ``train.wandb_project``, the run named by its run id, its files in the run folder).
    :meth:`close` flushes and closes them; the session calls it on every exit (the end, an error, a
    stop signal)."""

    def __init__(self, options: Options, cfg: Config, run_dir: Path) -> None:
        self.writers: list[Callable[[dict[str, Any]], None]] = []
        self._closers: list[Callable[[], None]] = []
        try:
            if options.tensorboard:
                self._tensorboard(run_dir)
            if options.wandb:
                self._wandb(cfg, run_dir)
        except BaseException:
            self.close()
            raise

    def _tensorboard(self, run_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(
                "--tensorboard needs the tensorboard package: pip install 'puffer-bench[logging]'"
            ) from None
        tb = SummaryWriter(str(run_dir))  # beside the run's checkpoints and metrics
        self._closers.append(tb.close)

        def to_tensorboard(record: dict[str, Any]) -> None:
            for k, v in record.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    tb.add_scalar(k, v, record["global_step"])

        self.writers.append(to_tensorboard)

    def _wandb(self, cfg: Config, run_dir: Path) -> None:
        try:
            import wandb
        except ImportError:
            raise ConfigError("--wandb needs wandb: pip install 'puffer-bench[logging]'") from None
        try:
            run = wandb.init(
                project=cfg.train.wandb_project,
                name=run_dir.name,  # the run id
                id=_wandb_id(run_dir.name),
                dir=str(run_dir),  # wandb/ under the run folder
                config=redact_tree(cfg.to_dict()),
                resume="allow",  # a resumed run continues its W&B run
            )
        except Exception as e:  # W&B's own errors (no API key, no network, a bad project): one line
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(
                f"--wandb: Weights & Biases did not start ({type(e).__name__}: {reason}); run `wandb login` "
                "or set WANDB_API_KEY (WANDB_MODE=offline logs into the run folder only), or drop --wandb"
            ) from None
        self._closers.append(run.finish)
        self.writers.append(lambda r: run.log(r, step=r["global_step"]))

    def close(self) -> None:
        """Close every sink once, the last opened first; one that fails is warned about and does not
        keep the rest open (nor hide the run's own error, when there is one)."""
        import warnings

        closers, self._closers = self._closers[::-1], []
        for close in closers:
            try:
                close()
            except Exception as e:
                warnings.warn(f"closing a metrics sink failed: {type(e).__name__}: {e}", stacklevel=2)


def _wandb_id(run_id: str) -> str:
    """A W&B run id from ours: W&B ids may not hold ``/\\#?%:``."""
    import re

    return re.sub(r"[/\\#?%:]", "-", run_id)[:128]


def _profile(trainer: Any, path: str) -> str:
    """Three epochs under torch.profiler, written as a Chrome/Perfetto trace, and the ops' self times
    (torch's table, slowest first) beside it as ``<path>.ops.txt``."""
    import torch

    from appliance.safe_files import write_or_keep

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    try:  # the rollout engine's buffer threads too (torch's profiler follows only its own threads otherwise)
        extra = {"experimental_config": torch._C._profiler._ExperimentalConfig(profile_all_threads=True)}
    except (AttributeError, TypeError):
        extra = {}
    with torch.profiler.profile(activities=activities, **extra) as prof:
        loop.run(trainer, loop.Stop(epochs=3))
    prof.export_chrome_trace(path)
    if not Path(path).is_file():  # torch's writer reports a failure in its log, not by raising
        raise ConfigError(f"--profile-trace {path}: the profiler could not write the trace there")
    ops = Path(path + ".ops.txt")
    device = torch.profiler.ProfilerActivity.CUDA in activities
    write_or_keep(ops, ops_tables(prof.key_averages(), device).encode(), "--profile-trace")
    return (
        f"wrote a trace of 3 epochs to {path} (open in https://ui.perfetto.dev or chrome://tracing) "
        f"and the ops' self times to {ops}"
    )


def ops_tables(averages: Any, device: bool) -> str:
    """torch.profiler's ops table (its averages by op name), slowest first by their own time on
    the CPU; where the GPU was profiled too, a second table slowest first by their own time on the
    device, where a GPU run's kernels (its graphed ones among them) show what the steps cost there."""
    text = "ops by self CPU time\n" + averages.table(sort_by="self_cpu_time_total", row_limit=40) + "\n"
    if device:
        text += "\nops and kernels by self device time\n"
        text += averages.table(sort_by="self_device_time_total", row_limit=40) + "\n"
    return text


def _choose_env_threads(cfg: Config) -> tuple[int, float | None, tuple[str, int] | None]:
    """Look at the cores and the load others put on them (:mod:`appliance.config.threads`); with
    ``vec.num_threads`` or ``vec.num_workers`` ``auto``, size the envs' threads or workers to the free
    cores. Returns (usable cores, cores' worth others use, (the key set, its value) or None)."""
    from appliance.config import threads
    from appliance.sysinfo import physical_cores
    from appliance.vector.sizes import usable_cores

    # physical cores (what auto meant before, and torch's default), within the affinity and quota
    cores, busy = min(usable_cores(), physical_cores()), threads.others_busy()
    key = threads.apply_env_threads(cfg.data, cores, busy)
    return cores, busy, (key, int(cfg.data["vec"][key])) if key else None


def _choose_torch_threads(
    cfg: Config, trainer: Any, cores: int, busy: float | None, env_threads: tuple[str, int] | None
) -> tuple[str, Any]:
    """Size torch's pools from the policy, the cores and the load seen: the line that says so, and
    the :class:`~appliance.config.threads.Watch` that looks again while the run goes (the trainer's
    threads take what it calls for)."""
    from appliance.config import threads

    params = sum(p.numel() for p in trainer.policy.parameters())
    rows = int(cfg.train.minibatch_size)
    chosen = threads.choose(cores, busy, params, rows, env_threads)
    line = threads.apply_torch(chosen)
    watch = threads.Watch(cores, params, rows, chosen.intra)
    if watch.active:
        trainer.threads_sync = watch.sync
    return line, watch
