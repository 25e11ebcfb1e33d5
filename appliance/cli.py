"""The ``puffer-bench`` command line.

Every command reports user errors (:class:`~appliance.errors.ApplianceError`) in one line on stderr
and exits with the error's code (2 for configuration errors), never with a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

import appliance
from appliance.errors import ApplianceError

CONTEXT = {"help_option_names": ["-h", "--help"]}
OVERRIDES = {"ignore_unknown_options": True, "allow_extra_args": True, **CONTEXT}


class _Group(click.Group):
    """A click group that turns ApplianceError into a one-line message and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApplianceError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(e.exit_code)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(appliance.__version__, "-V", "--version", prog_name="puffer-bench")
def cli() -> None:
    """puffer-bench: how fast is this machine for reinforcement learning?

    Run a command with --help for its options. Config overrides use the form
    --section.key VALUE (e.g. --train.learning-rate 3e-4).
    """


def _split_env(args: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """``[ENV] [--section.key VALUE ...]``: the env is the first token if it is not an option."""
    if args and not args[0].startswith("-"):
        return args[0], list(args[1:])
    return None, list(args)


# ----------------------------------------------------------------------------- info


def _format_bytes(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the fingerprint as JSON.")
def info(as_json: bool) -> None:
    """Print this machine's fingerprint (CPU, RAM, OS, versions, GPUs)."""
    from appliance.sysinfo import fingerprint

    fp = fingerprint()
    if as_json:
        click.echo(json.dumps(fp, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="machine fingerprint", show_header=False, box=None)
    cpu = fp["cpu"]
    table.add_row("CPU", f"{cpu['model']} ({cpu['arch']})")
    table.add_row(
        "cores",
        f"{cpu['physical_cores']} physical, {cpu['logical_cores']} logical, {cpu['usable_cores']} usable",
    )
    table.add_row("RAM", _format_bytes(fp["ram_bytes"]))
    table.add_row("OS", fp["os"]["platform"])
    table.add_row("Python", fp["python"])
    for name, version in fp["versions"].items():
        table.add_row(name, str(version) if version else "-")
    git = fp["git"]
    table.add_row(
        "git", f"{git['commit'][:12]}{' (dirty)' if git['dirty'] else ''}" if git else "- (not a checkout)"
    )
    table.add_row("host", fp["host_hash"])
    image = fp.get("image")
    if image:  # inside a puffer-bench Docker image: the locked wheels it was built from
        summary = image.get("error") or f"{len(image['wheels'])} locked, sha256 {image['sha256'][:12]}"
        table.add_row("image wheels", f"{summary} ({image['lock']})")
    for gpu in fp["gpus"]:
        link = f"PCIe gen{gpu['pcie_gen']} x{gpu['pcie_width']} (max gen{gpu['pcie_max_gen']} x{gpu['pcie_max_width']})"
        table.add_row(
            f"GPU {gpu['index']}",
            f"{gpu['name']}, {_format_bytes(gpu['memory_total_bytes'])}, {link}, "
            f"SM {gpu['sm_clock_max_mhz']} MHz max, {gpu['power_limit_w']} W limit",
        )
    if not fp["gpus"]:
        table.add_row("GPU", f"none ({fp['gpu_error']})")
    Console().print(table)


# ----------------------------------------------------------------------------- config


@cli.command(context_settings=OVERRIDES)
@click.option(
    "--gpu", "profile", metavar="PROFILE", help="Hardware profile from bench/profiles (e.g. 4090, h100, cpu)."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Your YAML config, applied after the profile.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def config(profile: str | None, config_file: str | None, as_json: bool, args: tuple[str, ...]) -> None:
    """Print the resolved config a run would use.

    \b
    puffer-bench config [ENV] [--gpu PROFILE] [--config FILE] [--section.key VALUE ...]
    e.g. puffer-bench config breakout --gpu 4090 --train.learning-rate 3e-4
    """
    from appliance.config import resolve

    env, overrides = _split_env(args)
    cfg = resolve(env=env, profile=profile, config_file=config_file, overrides=overrides)
    click.echo((cfg.to_json() if as_json else cfg.to_yaml()).rstrip("\n"))


# ----------------------------------------------------------------------------- envs


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"expected positive ints, got {text!r}")
    return values


def _env_params(name: str) -> tuple[int, dict[str, Any]]:
    """The env's default num_envs and parameters from its config YAML."""
    from appliance.config import resolve

    cfg = resolve(env=name)
    return cfg.vec.num_envs, dict(cfg.env)


@cli.group(invoke_without_command=True, context_settings=CONTEXT)
@click.pass_context
def envs(ctx: click.Context) -> None:
    """Ocean C envs: list them, watch one, measure their speed."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.table import Table

    from appliance.envs import available

    table = Table(title="Ocean envs")
    for col in ("env", "agents/env", "observation", "action", "bytes/agent-step"):
        table.add_column(col)
    for d in available():
        nvec = d["action_nvec"]
        action = f"Discrete({nvec[0]})" if len(nvec) == 1 else f"MultiDiscrete({nvec})"
        itemsize = 4 if d["obs_dtype"] == "float32" else 1
        table.add_row(
            d["name"],
            str(d["agents_per_env"]),
            f"{d['obs_dtype']}[{d['obs_size']}]",
            action,
            str(d["obs_size"] * itemsize),
        )
    Console().print(table)


@envs.command("show", context_settings=CONTEXT)
@click.argument("name")
@click.option("--frames", default=4, show_default=True, help="Random-policy steps to draw.")
@click.option("--gif", type=click.Path(dir_okay=False), help="Also write an animated GIF of --frames steps.")
@click.option("--seed", default=0, show_default=True)
def envs_show(name: str, frames: int, gif: str | None, seed: int) -> None:
    """Draw a few random-policy frames of env NAME in the terminal (and optionally a GIF)."""

    from appliance import envs as ocean
    from appliance.bench.envsps import random_actions

    _, params = _env_params(name)
    with ocean.make(name, num_envs=1, num_threads=1, seed=seed, **params) as vec:
        vec.reset(seed)
        actions = random_actions(vec, count=max(frames, 1), seed=seed)
        images = [vec.render(0).copy()]
        for i in range(frames):
            if i < 4 or gif is None:
                click.echo(f"--- {name} step {i} (random actions)")
                click.echo(vec.render_text(0))
            vec.step(actions[i])
            images.append(vec.render(0).copy())
        stats = vec.log()
        if stats:
            click.echo("episodes finished: " + ", ".join(f"{k}={v:.3g}" for k, v in stats.items()))
    if gif:
        _save_gif(images, gif, duration_ms=80)


def _save_gif(frames: list[Any], path: str, duration_ms: int) -> None:
    """Frames (HxWx3 uint8) as an animated GIF, scaled up by whole pixels to about 256 px."""
    import numpy as np
    from PIL import Image

    scale = max(1, 256 // max(frames[0].shape[:2]))
    pil = [Image.fromarray(np.kron(f, np.ones((scale, scale, 1), dtype=np.uint8))) for f in frames]
    pil[0].save(path, save_all=True, append_images=pil[1:], duration=duration_ms, loop=0)
    click.echo(f"wrote {len(pil)} frames to {path}")


@envs.command("sps", context_settings=CONTEXT)
@click.argument("names", required=False)
@click.option("--threads", default="1,2", show_default=True, help="Comma-separated thread counts.")
@click.option("--seconds", default=2.0, show_default=True, help="Timed seconds per measurement.")
@click.option("--num-envs", type=int, help="Envs per vector (default: the env's vec.num_envs).")
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False),
    help="Also write the rows (with fingerprint) to this JSON file.",
)
def envs_sps(
    names: str | None, threads: str, seconds: float, num_envs: int | None, json_out: str | None
) -> None:
    """Env-only agent-steps per second with random actions, per thread count.

    NAMES is a comma-separated list (default: every env). Prints SPS and the scaling efficiency
    SPS_T / (T * SPS_1).
    """
    from rich.console import Console
    from rich.table import Table

    from appliance import envs as ocean
    from appliance.bench.envsps import scaling

    thread_counts = _int_list(threads)
    selected = [n for n in names.split(",") if n] if names else ocean.names()
    known = ocean.names()
    for n in selected:
        if n not in known:
            raise click.BadParameter(f"unknown env {n!r}; known: {', '.join(known)}", param_hint="NAMES")
    console = Console(stderr=True)
    rows = []
    for n in selected:
        default_envs, params = _env_params(n)
        count = num_envs or default_envs
        rows += scaling(
            n,
            thread_counts,
            num_envs=count,
            seconds=seconds,
            progress=lambda r: console.print(
                f"  {r['env']:<10} {r['threads']:>3} threads  {r['sps'] / 1e6:8.3f} M SPS"
            ),
            **params,
        )
    table = Table(title="env-only agent-steps per second (random actions)")
    for col in ("env", "agents", "threads", "M SPS", "efficiency"):
        table.add_column(col, justify="right")
    for r in rows:
        eff = "-" if r["efficiency"] is None else f"{100 * r['efficiency']:.0f}%"
        table.add_row(r["env"], str(r["num_agents"]), str(r["threads"]), f"{r['sps'] / 1e6:.3f}", eff)
    Console().print(table)
    if json_out:
        from appliance.report_io import write_json_atomic
        from appliance.sysinfo import fingerprint

        write_json_atomic(
            json_out, {"kind": "envs-sps", "fingerprint": fingerprint(), "seconds": seconds, "rows": rows}
        )
        click.echo(f"wrote {json_out}")


# ----------------------------------------------------------------------------- vectorization


@cli.command("vector-bench", context_settings=CONTEXT)
@click.option(
    "--env", "env", default="cartpole", show_default=True, help="cartpole, a Gymnasium id, or ocean:NAME."
)
@click.option(
    "--step-us", type=float, help="Use a Python test env that busy-waits this many microseconds per step."
)
@click.option("--cores", type=int, help="Cores for every approach (default: physical cores).")
@click.option("--seconds", default=1.0, show_default=True, help="Timed seconds per measurement.")
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False),
    help="Also write all samples (with fingerprint) here.",
)
def vector_bench(
    env: str, step_us: float | None, cores: int | None, seconds: float, json_out: str | None
) -> None:
    """Our vector backends against gymnasium's SyncVectorEnv and AsyncVectorEnv, side by side.

    Same env, same cores, random actions; each approach at its best num_envs. Prints SPS and the ratio
    to the faster of gymnasium's two.
    """
    from rich.console import Console
    from rich.table import Table

    from appliance.bench import vectorbench
    from appliance.sysinfo import physical_cores

    cores = cores or physical_cores()
    console = Console(stderr=True)
    result = vectorbench.run(
        env,
        step_us,
        cores,
        seconds,
        progress=lambda r: console.print(
            f"  {r['family']:<45} num_envs={r['num_envs']:<6} {r['sps']:>12,.0f} SPS"
        ),
    )
    table = Table(title=f"{result['env']} on {cores} cores: agent-steps/s, best num_envs per approach")
    for col in ("approach", "num_envs", "SPS", "vs best gymnasium"):
        table.add_column(col, justify="right" if col != "approach" else "left")
    for r in sorted(result["rows"], key=lambda r: -r["sps"]):
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        table.add_row(r["family"], str(r["num_envs"]), f"{r['sps']:,.0f}", ratio)
    Console().print(table)
    if json_out:
        from appliance.report_io import write_json_atomic
        from appliance.sysinfo import fingerprint

        write_json_atomic(json_out, {"kind": "vector-bench", "fingerprint": fingerprint(), **result})
        click.echo(f"wrote {json_out}")


@cli.command(context_settings=CONTEXT)
@click.argument("env")
@click.option(
    "--batch-size", type=int, help="Envs the trainer wants per batch; tune everything else around it."
)
@click.option("--seconds", default=0.5, show_default=True, help="Timed seconds per candidate.")
@click.option(
    "--max-ram-gb", default=8.0, show_default=True, help="Skip configurations whose envs need more RAM."
)
@click.option(
    "--forward-ms",
    default=0.0,
    show_default=True,
    help="Simulated policy time per batch (judges async fairly).",
)
@click.option("--cores", type=int, help="Cores to use (default: physical cores).")
@click.option(
    "--save",
    type=click.Path(dir_okay=False),
    help="Write the fastest config as a YAML profile (for --config).",
)
def autotune(
    env: str,
    batch_size: int | None,
    seconds: float,
    max_ram_gb: float,
    forward_ms: float,
    cores: int | None,
    save: str | None,
) -> None:
    """Profile ENV, time candidate vector configurations, and pick the fastest.

    ENV is an Ocean name, a Gymnasium id or ocean:NAME. With --save, the winner is written as a
    profile that train and run accept through --config.
    """
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    from appliance.bench import autotune as tuner
    from appliance.sysinfo import fingerprint, physical_cores

    cores = cores or physical_cores()
    from appliance.envs import ocean_name

    name = ocean_name(env)
    params: dict[str, Any] = _env_params(name)[1] if name else {}
    console = Console()
    rows: list[dict[str, Any]] = []

    def table() -> Table:
        t = Table(title=f"autotune {env} ({cores} cores, {seconds:g} s per candidate)")
        for col in ("backend", "num_envs", "workers/threads", "batch_size", "SPS"):
            t.add_column(col, justify="right")
        best = max((r["sps"] for r in rows if r["sps"]), default=None)
        for r in rows:
            sps = "error" if r["sps"] is None else f"{r['sps']:,.0f}" + (" *" if r["sps"] == best else "")
            t.add_row(
                r["backend"],
                str(r["num_envs"]),
                str(r.get("num_workers", r.get("num_threads", 1))),
                str(r["batch_size"]),
                sps,
            )
        return t

    def show_profile(p: dict[str, Any]) -> None:
        console.print(
            f"[bold]{env}[/]: {p['sps_per_core']:,.0f} agent-steps/s on one core; step {p['step_us_mean']:.1f} us "
            f"(CV {p['step_time_cv']:.2f}); reset {p['reset_ms']:.3f} ms; {p['ram_per_env_bytes'] / 1024:.1f} KiB per env; "
            f"obs {p['obs_bytes_per_env_step']} B per env-step = {p['obs_mb_per_s_per_core']:.1f} MB/s per core"
        )

    with Live(table(), console=console, refresh_per_second=4) as live:

        def on_result(r: dict[str, Any]) -> None:
            rows.append(r)
            live.update(table())

        result = tuner.tune(
            name or env,
            params,
            cores,
            seconds,
            batch_size,
            max_ram_gb,
            forward_ms,
            on_profile=show_profile,
            on_result=on_result,
        )
    best = result["best"]
    console.print(
        f"fastest: {best['backend']} num_envs={best['num_envs']} "
        f"{'threads' if best['backend'] == 'native' else 'workers'}={best.get('num_threads', best.get('num_workers', 1))} "
        f"batch_size={best['batch_size']}: {best['sps']:,.0f} agent-steps/s"
    )
    if save:
        from appliance.report_io import write_bytes_atomic

        text = tuner.profile_yaml(env, best, forward_ms, fingerprint()["cpu"]["model"])
        write_bytes_atomic(save, text.encode())
        console.print(f"wrote {save} (use it with --config {save})")


# ----------------------------------------------------------------------------- training


def _run_dir(cfg: Any, run_id: str | None) -> Path:
    return Path(cfg.train.data_dir) / (
        run_id or f"{cfg.env_name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    )


def _resolve_run(data_dir: str, which: str) -> Path:
    """A run folder from 'latest', a run id, or a path to a folder or model.pt."""
    from appliance.errors import ConfigError

    if which == "latest":
        pointer = Path(data_dir) / "latest"
        if not pointer.is_file():
            raise ConfigError(
                f"no 'latest' run in {data_dir}/ yet: train first, or pass a run folder or model.pt"
            )
        which = str(Path(data_dir) / pointer.read_text().strip())
    path = Path(which)
    if path.is_file():
        path = path.parent
    if not path.is_dir() and (Path(data_dir) / which).is_dir():
        path = Path(data_dir) / which
    if not (path / "model.pt").is_file():
        raise ConfigError(f"no model.pt in {path}")
    return path


@cli.command(context_settings=OVERRIDES)
@click.option("--gpu", "profile", metavar="PROFILE", help="Hardware profile from bench/profiles.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Your YAML config (e.g. from autotune --save).",
)
@click.option("--run-id", help="Name of the run folder under train.data_dir (default: ENV-UTC time).")
@click.option(
    "--resume", "resume", metavar="RUN|latest", help="Continue a run: weights, optimizer and counters."
)
@click.option(
    "--load-model-path", metavar="PATH|latest", help="Start from these weights (a run folder or model.pt)."
)
@click.option(
    "--no-dashboard",
    is_flag=True,
    help="Plain log lines instead of the live dashboard (default when not a TTY).",
)
@click.option(
    "--profile-trace",
    type=click.Path(dir_okay=False),
    help="Run 3 epochs under torch.profiler, write a Chrome/Perfetto trace, stop.",
)
@click.option("--tensorboard", is_flag=True, help="Also write TensorBoard events to the run folder.")
@click.option(
    "--wandb", "use_wandb", is_flag=True, help="Also log to Weights & Biases (needs wandb installed)."
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False),
    help="At the end, write fingerprint, config, SPS and phase breakdown as JSON.",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def train(
    profile: str | None,
    config_file: str | None,
    run_id: str | None,
    resume: str | None,
    load_model_path: str | None,
    no_dashboard: bool,
    profile_trace: str | None,
    tensorboard: bool,
    use_wandb: bool,
    report: str | None,
    args: tuple[str, ...],
) -> None:
    """Train a PPO policy on ENV (an Ocean env or a Gymnasium id).

    \b
    puffer-bench train ENV [--gpu PROFILE] [--config FILE] [--section.key VALUE ...]
    e.g. puffer-bench train squared --train.device cpu --train.total-timesteps 2e6
    """
    import sys

    from appliance import vector
    from appliance.config import resolve
    from appliance.errors import ConfigError
    from appliance.report_io import write_bytes_atomic
    from appliance.train import Trainer
    from appliance.train.dashboard import Reporter

    env, overrides = _split_env(args)
    if env is None:
        raise ConfigError("train needs an ENV: an Ocean env (puffer-bench envs) or a Gymnasium id")
    cfg = resolve(env=env, profile=profile, config_file=config_file, overrides=overrides)
    run_dir = _resolve_run(cfg.train.data_dir, resume) if resume else _run_dir(cfg, run_id)
    writers = _writers(tensorboard, use_wandb, cfg, run_dir)
    vec = vector.make_from_config(cfg)
    trainer = Trainer(cfg, vec, run_dir=run_dir, profile=bool(profile_trace))
    try:
        if resume:
            trainer.load_checkpoint(run_dir, resume=True)
        elif load_model_path:
            trainer.load_checkpoint(_resolve_run(cfg.train.data_dir, load_model_path), resume=False)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(run_dir / "config.yaml", cfg.to_yaml().encode())
        write_bytes_atomic(Path(cfg.train.data_dir) / "latest", run_dir.name.encode())
        if profile_trace:
            _profile(trainer, profile_trace)
            return
        reporter = Reporter(trainer, env, live=not no_dashboard and sys.stdout.isatty())
        last_metrics = 0.0
        try:
            while trainer.global_step < cfg.train.total_timesteps:
                trainer.evaluate()
                trainer.train()
                if trainer.epoch % cfg.train.checkpoint_interval == 0:
                    trainer.save_checkpoint()
                if time.time() - last_metrics > 1.0:
                    last_metrics = time.time()
                    record = trainer.log_metrics()
                    for w in writers:
                        w(record)
                reporter.update()
        except KeyboardInterrupt:
            click.echo("interrupted: saving a checkpoint", err=True)
        finally:
            reporter.update(force=True)
            reporter.close()
        path = trainer.save_checkpoint()
        trainer.log_metrics()
        if report:
            from appliance.report_io import write_json_atomic
            from appliance.sysinfo import fingerprint

            write_json_atomic(
                report,
                {
                    "kind": "train",
                    "env": env,
                    "fingerprint": fingerprint(),
                    "config": cfg.to_dict(),
                    "device": str(trainer.device),
                    "global_step": trainer.global_step,
                    "epochs": trainer.epoch,
                    "seconds": time.time() - trainer.start_time,
                    "sps": trainer.sps,
                    "phases": trainer.timings.breakdown(),
                    "losses": trainer.losses,
                    "env_stats": trainer.env_stats,
                },
            )
            click.echo(f"wrote {report}")
        click.echo(
            f"{trainer.global_step:,} steps in {time.time() - trainer.start_time:.0f} s ({trainer.sps:,.0f} SPS); "
            f"saved {path}"
        )
    finally:
        trainer.close()


def _writers(tensorboard: bool, use_wandb: bool, cfg: Any, run_dir: Path) -> list[Any]:
    from appliance.errors import ConfigError

    writers = []
    if tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(
                "--tensorboard needs the tensorboard package: pip install tensorboard"
            ) from None
        tb = SummaryWriter(str(run_dir))  # beside the run's checkpoints and metrics
        writers.append(
            lambda r: [
                tb.add_scalar(k, v, r["global_step"]) for k, v in r.items() if isinstance(v, int | float)
            ]
        )
    if use_wandb:
        try:
            import wandb
        except ImportError:
            raise ConfigError("--wandb needs wandb: pip install wandb") from None
        wandb.init(project="puffer-bench", config=cfg.to_dict())
        writers.append(lambda r: wandb.log(r, step=r["global_step"]))
    return writers


def _profile(trainer: Any, path: str) -> None:
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(3):
            trainer.evaluate()
            trainer.train()
    prof.export_chrome_trace(path)
    click.echo(f"wrote a trace of 3 epochs to {path} (open in https://ui.perfetto.dev or chrome://tracing)")


@cli.command("eval", context_settings=OVERRIDES)
@click.option(
    "--load-model-path", default="latest", show_default=True, metavar="PATH|latest", help="Weights to run."
)
@click.option("--episodes", default=5, show_default=True, help="Episodes to play.")
@click.option(
    "--gif", type=click.Path(dir_okay=False), help="Write the first episode as an animated GIF (Ocean envs)."
)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Your YAML config.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def evaluate(
    load_model_path: str, episodes: int, gif: str | None, config_file: str | None, args: tuple[str, ...]
) -> None:
    """Run a trained policy on ENV and print episode scores (render frames with --gif)."""
    import numpy as np
    import torch

    from appliance import vector
    from appliance.config import resolve
    from appliance.errors import ConfigError
    from appliance.train import make_policy

    env, overrides = _split_env(args)
    if env is None:
        raise ConfigError("eval needs an ENV")
    cfg = resolve(
        env=env,
        config_file=config_file,
        overrides=[*overrides, "--vec.num-envs", "1", "--vec.num-workers", "1"],
    )
    run = _resolve_run(cfg.train.data_dir, load_model_path)
    saved = run / "config.yaml"
    if saved.is_file():  # the policy shape the run was trained with
        import yaml

        cfg.data["policy"].update(yaml.safe_load(saved.read_text()).get("policy", {}))
    vec = vector.make_from_config(cfg)
    try:
        policy = make_policy(cfg, vec)
        policy.load_state_dict(torch.load(run / "model.pt", map_location="cpu", weights_only=True))
        policy.eval()
        state = policy.initial_state(vec.num_agents)
        obs, _ = vec.reset(cfg.train.seed)
        frames, scores, steps = [], [], 0
        ocean = hasattr(vec, "render")
        while len(scores) < episodes and steps < 1_000_000:
            if gif and ocean and not scores:
                frames.append(vec.render(0).copy())
            with torch.no_grad():
                out, _, state = policy.step(torch.as_tensor(obs), state)
                action, _ = policy.sample(out)
            obs, _, _, _, infos = vec.step(action.numpy())
            steps += 1
            log = vec.log() if ocean else {}
            if log:
                scores.append(log.get("score", log.get("episode_return", float("nan"))))
                click.echo(
                    f"episode {len(scores)}: score {scores[-1]:.4g}"
                    + (f"  perf {log['perf']:.3f}" if "perf" in log else "")
                )
            for info in infos or ():
                scores.append(info["episode_return"])
                click.echo(f"episode {len(scores)}: return {scores[-1]:.4g}  length {info['episode_length']}")
        if scores:
            click.echo(f"mean over {len(scores)} episodes: {np.mean(scores):.4g}")
        if gif:
            if not frames:
                click.echo("--gif renders Ocean envs only", err=True)
            else:
                _save_gif(frames, gif, duration_ms=60)
    finally:
        vec.close()


# ----------------------------------------------------------------------------- profile, run, compare


def _bench_profile(profile: str | None, fp: dict[str, Any]) -> tuple[str, dict[str, Any], list[str]]:
    """Profile name (given, or detected from the GPU), its report entry, and warnings about a mismatch."""
    from appliance.bench.report import gpu_name
    from appliance.bench.suite import _gpu_matches, detect_profile
    from appliance.config import resolve

    name = profile or detect_profile(fp.get("gpus") or [])
    cfg = resolve(profile=name)  # unknown names list the valid ones
    expected = str(cfg.bench.expected_gpu or "")
    detected = gpu_name(fp)
    warnings = []
    if expected and not any(_gpu_matches(expected, str(g.get("name"))) for g in fp.get("gpus") or []):
        warnings.append(
            f"profile '{name}' is written for a {expected} GPU but this machine has {detected}: "
            "its sizes may not suit this machine, and its figures compare with other machines of that profile only"
        )
    entry = {
        "name": name,
        "expected_gpu": expected,
        "detected_gpu": detected,
        "auto_detected": profile is None,
    }
    return name, entry, warnings


def _new_report(suite: dict[str, Any], path: str, profile: str | None, repeats: int | None) -> Any:
    from appliance.bench.report import Report
    from appliance.config import resolve
    from appliance.sysinfo import fingerprint

    fp = fingerprint()
    name, entry, warnings = _bench_profile(profile, fp)
    base = resolve(profile=name)
    report = Report(
        {"name": suite["name"], "path": path, "definition": suite},
        entry,
        fp,
        {},
        seed=int(base.train.seed),
        repeats=int(repeats or base.bench.repeats),
        command="puffer-bench " + " ".join(sys.argv[1:]),
    )
    for w in warnings:
        report.warn(w)
    return name, report


def _run_steps(runner: Any, title: str) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description:<44}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as bar:
        task = bar.add_task(title, total=len(runner.steps))

        def progress(step: Any, i: int) -> None:
            bar.update(task, description=step.label, completed=i)
            if not console.is_terminal:
                console.print(f"[{i + 1}/{len(runner.steps)}] {step.label}")

        runner.run_all(progress)
        bar.update(task, completed=len(runner.steps), description="done")


def _print_analysis(report: dict[str, Any]) -> None:
    analysis = report.get("analysis") or {}
    for r in analysis.get("roofline") or []:
        click.echo(f"roofline: {r['summary']}")
    for t in (analysis.get("training") or {}).values():
        click.echo(f"training: {t['summary']}")
        for s in t["suggestions"]:
            click.echo(f"  - {s}")
    for w in report.get("warnings") or []:
        click.echo(f"warning: {w}", err=True)
    for s in report.get("skipped") or []:
        click.echo(f"skipped {s['what']}: {s['why']}", err=True)


@cli.command("profile", context_settings=CONTEXT)
@click.option(
    "--gpu", "profile", metavar="PROFILE", help="Hardware profile for the sizes (default: detected)."
)
@click.option(
    "--env", default="breakout", show_default=True, help="Ocean env for env speed and the roofline."
)
@click.option("--runs", default=5, show_default=True, help="Timed runs per figure.")
@click.option("--seconds", default=1.0, show_default=True, help="Timed seconds of each env-speed run.")
@click.option("--json", "as_json", is_flag=True, help="Print the probe report as JSON instead of a table.")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the probe report (JSON) here.")
def profile_cmd(
    profile: str | None, env: str, runs: int, seconds: float, as_json: bool, out: str | None
) -> None:
    """Probe this machine: copy bandwidth, matmul, launch latency, CPU memory and env speed.

    Each figure is the median of timed runs after warm-up, beside its ceiling where one is known,
    followed by a roofline in RL terms (which of PCIe, env threads and policy forward limits
    agent-steps/s). Without a GPU only the CPU side is probed.
    """
    from rich.console import Console
    from rich.table import Table

    from appliance.bench import report as rpt
    from appliance.bench.suite import SuiteRunner, validate

    if runs < 1:
        raise click.BadParameter("--runs must be at least 1", param_hint="--runs")
    suite = validate({"name": "probe", "seconds": seconds, "probe": {"envs": [env], "runs": runs}}, "--env")
    name, report = _new_report(suite, "(puffer-bench profile)", profile, runs)
    start = time.time()
    runner = SuiteRunner(suite, name, report, repeats=runs)
    _run_steps(runner, "probe")
    report.data["config"] = runner.resolved_configs()
    report.data["duration_s"] = time.time() - start
    data = rpt.validate(report.data)
    if out:
        from appliance.report_io import write_json_atomic

        write_json_atomic(out, data)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    table = Table(title=f"puffer-bench profile: {rpt.machine_line(data['fingerprint'])}")
    for col in ("figure", "median", "min - max", "unit", "ceiling", "of ceiling"):
        table.add_column(col, justify="left" if col in ("figure", "ceiling") else "right")
    for metric_name, m in data["metrics"].items():
        ceiling = m.get("ceiling") or {}
        share = (
            f"{100 * m['median'] / ceiling['value']:.0f}%" if ceiling.get("value") and m.get("median") else ""
        )
        table.add_row(
            metric_name.removeprefix("probe/"),
            rpt.fmt(m["median"], m["unit"]),
            f"{rpt.fmt(m['min'], m['unit'])} - {rpt.fmt(m['max'], m['unit'])}",
            m["unit"],
            f"{rpt.fmt(ceiling.get('value'), m['unit'])} {ceiling.get('source', '')}" if ceiling else "",
            share,
        )
    Console().print(table)
    _print_analysis(data)
    if out:
        click.echo(f"wrote {out}")


@cli.command("run", context_settings=CONTEXT)
@click.option("--suite", "suite_name", default="quick", show_default=True, help="Suite name or YAML path.")
@click.option(
    "--gpu", "profile", metavar="PROFILE", help="Hardware profile (default: detected from the GPU)."
)
@click.option("--envs", "env_list", help="Only measure these envs (comma-separated).")
@click.option("--repeats", type=int, help="Repeats per measurement (default: bench.repeats, 3).")
@click.option("--seconds", type=float, help="Timed seconds per measurement (default: the suite's).")
@click.option("--out", "out_dir", default="results", show_default=True, help="Reports go to OUT/<profile>/.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--container", metavar="IMAGE", help="Run the suite inside this Docker image (see docker.sh).")
def run_cmd(
    suite_name: str,
    profile: str | None,
    env_list: str | None,
    repeats: int | None,
    seconds: float | None,
    out_dir: str,
    no_plots: bool,
    container: str | None,
) -> None:
    """Run a benchmark suite and write results/<profile>/<date>-<host>.json, .md and PNG plots.

    \b
    puffer-bench run                       # quick suite, profile detected (cpu without a GPU)
    puffer-bench run --suite full --gpu h100
    puffer-bench run --envs breakout --repeats 5
    """
    from appliance.bench import report as rpt
    from appliance.bench.suite import SuiteRunner, load

    if repeats is not None and repeats < 1:
        raise click.BadParameter("--repeats must be at least 1", param_hint="--repeats")
    if seconds is not None and seconds <= 0:
        raise click.BadParameter("--seconds must be positive", param_hint="--seconds")
    if container:
        from appliance.container import run_in_container

        sys.exit(run_in_container(container, sys.argv[1:], results=Path(out_dir)))
    suite, path = load(suite_name)
    envs_filter = [e.strip() for e in env_list.split(",") if e.strip()] if env_list else None
    name, report = _new_report(suite, str(path), profile, repeats)
    runner = SuiteRunner(suite, name, report, report.data["repeats"], envs_filter, seconds)
    for w in report.data["warnings"]:
        click.echo(f"warning: {w}", err=True)
    click.echo(
        f"suite '{suite['name']}' on profile '{name}' ({report.data['profile']['detected_gpu']} GPU): "
        f"{len(runner.steps)} measurements x {report.data['repeats']} repeats",
        err=True,
    )
    start = time.time()
    _run_steps(runner, suite["name"])
    report.data["config"] = runner.resolved_configs()
    report.data["duration_s"] = time.time() - start
    stem = rpt.output_stem(out_dir, name, report.data["fingerprint"], report.data["created_utc"])
    paths = rpt.write(report.data, stem, plots=not no_plots)
    _print_analysis(report.data)
    for p in paths:
        click.echo(f"wrote {p}")


@cli.command("compare", context_settings=CONTEXT)
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--threshold", default=0.05, show_default=True, help="Relative change that counts as a regression."
)
@click.option("--markdown", is_flag=True, help="Print Markdown instead of a table.")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the Markdown comparison here.")
def compare_cmd(reports: tuple[str, ...], threshold: float, markdown: bool, out: str | None) -> None:
    """Compare reports metric by metric (the first is the base); exit 1 on a significant regression.

    Shows each report's median, the ratio to the base with a 95% bootstrap interval, whether the
    change is significant, and what differs between the machines.
    """
    from rich.console import Console
    from rich.table import Table

    from appliance.bench import compare as cmp
    from appliance.bench import report as rpt
    from appliance.errors import ReportError

    if len(reports) < 2:
        raise ReportError("compare needs at least two reports: puffer-bench compare BASE.json NEW.json")
    if not 0 < threshold < 1:
        raise click.BadParameter("--threshold must be between 0 and 1 (0.05 = 5%)", param_hint="--threshold")
    loaded = []
    for path in reports:
        data = rpt.load(path)
        data["_path"] = path
        loaded.append(data)
    result = cmp.compare(loaded, threshold)
    text = cmp.to_markdown(result)
    if out:
        from appliance.report_io import write_bytes_atomic

        write_bytes_atomic(out, text.encode())
    if markdown:
        click.echo(text, nl=False)
    else:
        console = Console()
        if result["differences"]:
            diff = Table(title="what differs")
            diff.add_column("")
            for i in range(len(reports)):
                diff.add_column(f"report {i + 1}")
            for key, values in result["differences"]:
                diff.add_row(key, *[str(v) for v in values])
            console.print(diff)
        table = Table(title=f"base: {reports[0]} (threshold {100 * threshold:.0f}%)")
        table.add_column("metric")
        for i in range(len(reports)):
            table.add_column(f"median {i + 1}", justify="right")
        for i in range(1, len(reports)):
            table.add_column(f"ratio {i + 1}/1 (95% CI)", justify="right")
        for row in result["rows"]:
            cells = [rpt.fmt(m, row["unit"]) for m in row["medians"]]
            for x in row["ratios"]:
                style = {"regression": "red", "improvement": "green"}.get(x["verdict"], "")
                cell = cmp.ratio_text(x)
                cells.append(f"[{style}]{cell}[/{style}]" if style else cell)
            better = "" if row["better"] == "info" else f", {row['better']} better"
            table.add_row(f"{row['metric']} ({row['unit']}{better})", *cells)
        console.print(table)
    if out:
        click.echo(f"wrote {out}", err=True)
    if result["regressions"]:
        click.echo(f"regressed beyond {100 * threshold:.0f}%: {', '.join(result['regressions'])}", err=True)
        sys.exit(1)


@cli.command("report", context_settings=CONTEXT)
@click.argument("reports", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--render", is_flag=True, help="Re-render each report's Markdown and plots next to its JSON.")
@click.option(
    "--markdown", "md_out", type=click.Path(dir_okay=False), help="Write one report's Markdown here."
)
@click.option(
    "--readme", type=click.Path(dir_okay=False, exists=True), help="Rewrite this README's results table."
)
@click.option("--results", "results_dir", default="results", show_default=True, help="Where reports live.")
def report_cmd(
    reports: tuple[str, ...], render: bool, md_out: str | None, readme: str | None, results_dir: str
) -> None:
    """Render reports: their Markdown and plots, or the README's results table and plot.

    Without REPORTS, --readme takes the newest report of each profile folder under --results.
    """
    from appliance.bench import readme as readme_mod
    from appliance.bench import report as rpt
    from appliance.report_io import write_bytes_atomic

    if not (render or md_out or readme):
        raise click.UsageError("give --render, --markdown FILE or --readme README.md")
    loaded = [rpt.load(p) for p in reports] if reports else []
    if render:
        for path, data in zip(reports, loaded, strict=True):
            for p in rpt.render(data, Path(path).with_suffix("")):
                click.echo(f"wrote {p}")
    if md_out:
        if len(loaded) != 1:
            raise click.UsageError("--markdown renders exactly one report")
        write_bytes_atomic(md_out, rpt.to_markdown(loaded[0]).encode())
        click.echo(f"wrote {md_out}")
    if readme:
        paths = [Path(p) for p in reports] or readme_mod.latest_reports(Path(results_dir))
        for p in readme_mod.update_readme(Path(readme), paths, Path(results_dir)):
            click.echo(f"wrote {p}")


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="puffer-bench")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
