"""A sweep's trials: one trial's training (:func:`run_trial`), and :class:`TrialRunner`, which runs
trials in this process (``--parallel 1``), one spawned process per trial, or as Ray tasks.

A trial whose process dies (a segfault, the OOM killer) fails with its signal and the sweep goes
on. Trial processes ignore Ctrl-C (the driver stops them) and die with the driver (the kernel's
parent-death signal). A trial prunes itself: Optuna's pruners are single-objective only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from multiprocessing import connection, get_context
from typing import TYPE_CHECKING, Any

from appliance import lifeline
from appliance.errors import ConfigError

if TYPE_CHECKING:
    from appliance.config import Config
    from appliance.sweep.driver import Options


# A trial process's own memory before its buffers: Python, torch and the appliance imported hold about
# 230 MB, a process training squared on the CPU about 350 MB (a rank of train --nproc likewise)
TRIAL_PROCESS_BYTES = 350 * 2**20
GROWING = (
    "vec.num_envs",
    "train.bptt_horizon",
    "train.batch_size",
    "policy.hidden_size",
)  # memory grows with these


def check_parallel(cfg: Config, params: dict[str, dict[str, Any]], parallel: int) -> None:
    """Refuse ``--parallel`` trials on this machine that cannot run at once: more than its usable
    cores (as ``train --nproc`` is capped), or more than its memory holds, each trial counted as a
    process (:data:`TRIAL_PROCESS_BYTES`) and its env's and training buffers at the space's largest
    values: an Ocean env's from its layout, any other's (Gymnasium, PettingZoo, ``module:factory``)
    from the first env made, as a single run's memory check measures it."""
    from appliance.config.memory import available_memory, estimate_memory, gib, training_on_host
    from appliance.ocean import names
    from appliance.vector.sizes import usable_cores

    cores = usable_cores()
    if parallel > cores:
        raise ConfigError(
            f"--parallel {parallel}: at most {cores} trials at once on this machine, one per usable core "
            f"(affinity and cgroup quota); pass --parallel {cores} or fewer (or --ray-address for a cluster)"
        )
    data = {section: dict(values) for section, values in cfg.data.items()}
    for name in GROWING:
        spec = params.get(name)
        if spec is None:
            continue
        section, _, key = name.partition(".")
        values = [v for v in spec.get("choices", [spec.get("high")]) if isinstance(v, int | float)]
        if values and not isinstance(data[section][key], str):
            data[section][key] = max([*values, data[section][key]])
        elif values:  # "auto": the space's values are the sizes a trial may take
            data[section][key] = max(values)
    need = estimate_memory(cfg.env_name, data, None if cfg.env_name in names() else _layout(cfg))
    buffers = need["vector"] + (need["training"] if training_on_host(data) else 0)
    each = TRIAL_PROCESS_BYTES + buffers
    available = available_memory()
    if parallel * each > available:
        parts = f"{gib(TRIAL_PROCESS_BYTES)} for its process" + (
            f" + {gib(buffers)} for its env's and training buffers" if buffers else ""
        )
        fits = available // each
        fix = (
            f"pass --parallel {fits}" + (" or fewer" if fits > 1 else "")
            if fits
            else "not even one fits at the space's largest sizes: narrow the space"
        )
        raise ConfigError(
            f"--parallel {parallel}: {parallel} trials need about {gib(parallel * each)} of memory (each about "
            f"{gib(each)}: {parts}) but {gib(available)} is available; {fix}"
        )


def _layout(cfg: Config) -> dict[str, Any]:
    """A Python env's layout and one env's bytes, from its first env (made under vec.recv_timeout)."""
    from appliance.config.memory import source_layout
    from appliance.vector.sources import resolve_source

    source = resolve_source(
        cfg.env_name, preprocess=cfg.vec.preprocess, timeout=cfg.vec.recv_timeout, **dict(cfg.env)
    )
    return source_layout(source)


def gpu_slots(value: str) -> list[str]:
    """``--gpus N`` or ``auto``: the CUDA_VISIBLE_DEVICES value of each trial slot, one GPU each (the
    devices this process sees: its own CUDA_VISIBLE_DEVICES if set, else 0 .. count - 1)."""
    import torch

    count = torch.cuda.device_count()
    if value == "auto":
        if count == 0:
            raise ConfigError(
                "--gpus auto: torch sees no CUDA device here; drop --gpus to run trials on the CPU"
            )
        n = count
    else:
        try:
            n = int(value)
        except ValueError:
            raise ConfigError(f"--gpus {value}: give a number of GPUs or 'auto'") from None
        if n < 1:
            raise ConfigError(f"--gpus {value}: must be at least 1")
        if n > count:
            raise ConfigError(
                f"--gpus {n}: torch sees {count} CUDA device{'s' if count != 1 else ''} here; "
                f"pass --gpus {count} or fewer"
                if count
                else f"--gpus {n}: torch sees no CUDA device here"
            )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = (
        [v.strip() for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(count)]
    )
    return names[:n]


def check_gpus(options: Options) -> None:
    """``--gpus`` with ``--parallel`` and ``--ray-address``: refuse what contradicts itself."""
    if not options.gpus:
        return
    if options.ray_address:
        raise ConfigError(
            "--gpus places trials on this machine's GPUs; with --ray-address Ray places them: drop one"
        )
    if options.parallel > len(options.gpus):
        raise ConfigError(
            f"--parallel {options.parallel} with --gpus {len(options.gpus)}: one trial per GPU at once; "
            f"pass --parallel {len(options.gpus)} or fewer (or leave it out)"
        )


@contextlib.contextmanager
def _visible(gpu: str | None) -> Any:
    """CUDA_VISIBLE_DEVICES = ``gpu`` while a trial process is spawned (it takes this environment)."""
    if gpu is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    try:
        yield
    finally:
        if before is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


class Pruned(Exception):
    """Raised inside a trial's loop when its curve is hopeless."""


def median_at(curves: list[list[list[float]]], step: float) -> float | None:
    """Median over curves of each one's score at ``step`` (its last point at or before it)."""
    values = []
    for curve in curves:
        before = [score for s, score in curve if s <= step]
        if before:
            values.append(before[-1])
    if not values:
        return None
    values.sort()
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def run_trial(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one trial; a plain function of plain data so a process or Ray can run it.

    Returns state (complete | pruned | fail), score, seconds, steps, curve [[step, score], ...] and
    error. ``spec``: cfg (Config), metric, target, window, seconds (and min_epochs, the epochs before
    they count: the window by default), threads, reference curves, warmup, margin, min_trials.
    """
    import torch

    from appliance import vector
    from appliance.train import loop
    from appliance.train.trainer import Trainer

    cfg, metric, window = spec["cfg"], spec["metric"], spec["window"]
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    total = int(cfg.train.total_timesteps)
    curve: list[list[float]] = []
    history: list[dict[str, float]] = []
    start = time.perf_counter()

    def check(trainer: Any) -> None:
        history.append(dict(trainer.env_stats))
        score = loop.recent(history, metric, window)
        if score is None:
            return
        curve.append([float(trainer.global_step), float(score)])
        refs = spec.get("reference") or []
        if len(refs) >= spec["min_trials"] and trainer.global_step >= spec["warmup"] * total:
            median = median_at(refs, trainer.global_step)
            if median is not None and score < median - spec["margin"]:
                raise Pruned(f"score {score:.3g} < median {median:.3g} at step {trainer.global_step}")

    out: dict[str, Any] = {"curve": curve, "error": None}
    trainer = None
    try:
        trainer = Trainer(cfg, vector.make_from_config(cfg))
        stop = loop.Stop(
            total_timesteps=total,
            seconds=spec.get("seconds"),
            target=(metric, spec["target"]) if spec.get("target") is not None else None,
            window=window,
            min_epochs=spec.get("min_epochs", window),
        )
        result = loop.run(trainer, stop, on_epoch=[check])
        score = result.recent(metric, window)
        out.update(
            state="complete" if score is not None else "fail",
            score=score,
            seconds=result.seconds,
            steps=result.steps,
            reason=result.reason,
        )
        if score is None:
            out["error"] = (
                f"no epoch reported {metric!r}; the env reports {sorted(history[-1]) if history else []}"
            )
    except Pruned as e:
        out.update(state="pruned", score=curve[-1][1], seconds=time.perf_counter() - start, error=str(e))
        out["steps"] = int(curve[-1][0])
    except Exception as e:  # a trial's settings can be invalid (e.g. a minibatch); the sweep goes on
        out.update(state="fail", score=None, seconds=time.perf_counter() - start, steps=0)
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        if trainer is not None:
            trainer.close()
    return out


def failed_result(error: str, seconds: float = 0.0) -> dict[str, Any]:
    return {"state": "fail", "score": None, "seconds": seconds, "steps": 0, "curve": [], "error": error}


def _trial_process(
    conn: Any, trial: Callable[[dict[str, Any]], dict[str, Any]], spec: dict[str, Any], driver: int
) -> None:
    """A trial process: run ``trial(spec)`` and send the result back. SIGINT is ignored from the
    start (see :func:`appliance.vector.mp.children_ignore_sigint`): Ctrl-C is the driver's."""
    lifeline.die_with_parent(driver)
    start = time.perf_counter()
    try:
        result = trial(spec)
    except BaseException as e:  # run_trial catches its own; a test's trial function may not
        result = failed_result(f"{type(e).__name__}: {e}", time.perf_counter() - start)
    conn.send(result)
    conn.close()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"its process was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"its process was killed by signal {-code}"
    return f"its process exited with code {code} before sending a result"


class TrialRunner:
    """Runs trial specs: in this process (--parallel 1), one spawned process per trial, or Ray tasks.

    ``start(number, spec)`` begins a trial; ``wait()`` returns (number, result) of those that have
    ended (at least one); ``close()`` stops whatever still runs.
    """

    def __init__(self, options: Options, trial: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        import psutil

        self.trial = trial
        self.parallel = options.parallel
        self.free_gpus = list(options.gpus or [])  # the GPUs no trial holds now
        self.gpu_of: dict[int, str] = {}  # trial number -> its GPU
        self.processes = self.parallel > 1 or bool(self.free_gpus)  # a GPU's trial: in its own process
        cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
        self.threads = max(1, cores // self.parallel) if self.parallel > 1 else None
        self.done: list[tuple[int, dict[str, Any]]] = []  # in-process results
        self.procs: dict[int, tuple[Any, Any]] = {}  # number -> (process, connection)
        self.futures: dict[Future[Any], int] = {}
        self.ray: Any = None
        if options.ray_address:
            try:
                import ray
            except ImportError:
                raise ConfigError("--ray-address needs ray: pip install 'puffer-bench[ray]'") from None
            from appliance.vector.ray_backend import connect_ray

            connect_ray(ray, options.ray_address, "--ray-address", log_to_driver=False)
            self.ray = ray
            self.remote = ray.remote(num_cpus=1)(trial)
            self.threads = 1

    def running(self) -> int:
        return len(self.procs) + len(self.futures)

    def start(self, number: int, spec: dict[str, Any]) -> None:
        if self.ray is not None:
            self.futures[self.remote.remote(spec).future()] = number
        elif self.processes:
            from appliance.vector.mp import children_ignore_sigint

            ctx = get_context("spawn")
            ours, theirs = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_trial_process,
                args=(theirs, self.trial, spec, os.getpid()),
                name=f"puffer-trial-{number}",
                daemon=True,
            )
            gpu = self.free_gpus.pop(0) if self.free_gpus else None
            with children_ignore_sigint(), lifeline.spawned_children_die_with_us(), _visible(gpu):
                proc.start()
            theirs.close()
            self.procs[number] = (proc, ours)
            if gpu is not None:
                self.gpu_of[number] = gpu
        else:
            self.done.append((number, self.trial(spec)))

    def wait(self) -> list[tuple[int, dict[str, Any]]]:
        if self.done:
            out, self.done = self.done, []
            return out
        if self.futures:
            finished, _ = wait(list(self.futures), return_when=FIRST_COMPLETED)
            out = []
            for fut in finished:
                number = self.futures.pop(fut)
                error = fut.exception()
                out.append(
                    (number, failed_result(f"{type(error).__name__}: {error}") if error else fut.result())
                )
            return out
        handles = {}
        for number, (proc, conn) in self.procs.items():
            handles[conn] = handles[proc.sentinel] = number
        ready = connection.wait(list(handles))
        out = []
        for number in sorted({handles[h] for h in ready}):
            proc, conn = self.procs.pop(number)
            result = None
            try:
                if conn.poll():
                    result = conn.recv()
            except (EOFError, OSError):
                result = None  # died while sending
            conn.close()
            proc.join(timeout=None if result is None else 30)
            self._free(number)
            out.append((number, result if result is not None else failed_result(_exit_text(proc.exitcode))))
        return out

    def _free(self, number: int) -> None:
        gpu = self.gpu_of.pop(number, None)
        if gpu is not None:
            self.free_gpus.append(gpu)

    def close(self) -> None:
        """Stop what still runs: SIGTERM to each trial process, SIGKILL after 5 s."""
        for proc, _ in self.procs.values():
            with contextlib.suppress(Exception):
                proc.terminate()
        deadline = time.monotonic() + 5
        for proc, conn in self.procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()
        for number in list(self.gpu_of):
            self._free(number)
        self.procs.clear()
        for fut in self.futures:
            fut.cancel()
        self.futures.clear()
        if self.ray is not None:
            self.ray.shutdown()
            self.ray = None
