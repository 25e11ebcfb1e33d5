"""The ``puffer-bench`` command line: parse options, call one function, print what it returns.

Every command reports user errors (:class:`~appliance.errors.ApplianceError`) in one line on stderr
and exits with the error's code (2 for configuration errors), never with a traceback. The work
itself lives in the layers below (``bench``, ``train``, ``vector``); see docs/architecture.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

import appliance
from appliance.errors import ApplianceError, ConfigError

CONTEXT = {"help_option_names": ["-h", "--help"]}
OVERRIDES = {"ignore_unknown_options": True, "allow_extra_args": True, **CONTEXT}
PROFILE_HELP = "Hardware profile from bench/profiles (e.g. cpu, 4090, h100; default: detected)."


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


def _print_table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]], left: int = 1) -> None:
    """A rich table: the first ``left`` columns left-aligned, the rest right-aligned."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < left else "right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def _write_json(path: str | None, kind: str, data: dict[str, Any]) -> None:
    """Optionally save a command's rows with this machine's fingerprint, atomically."""
    if path:
        from appliance.report_io import write_json_atomic
        from appliance.sysinfo import fingerprint

        write_json_atomic(path, {"kind": kind, "fingerprint": fingerprint(), **data})
        click.echo(f"wrote {path}")


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


# ----------------------------------------------------------------------------- info, config


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the fingerprint as JSON.")
def info(as_json: bool) -> None:
    """Print this machine's fingerprint (CPU, RAM, OS, versions, GPUs)."""
    from appliance.sysinfo import fingerprint, summary

    fp = fingerprint()
    if as_json:
        click.echo(json.dumps(fp, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="machine fingerprint", show_header=False, box=None)
    for field, value in summary(fp):
        table.add_row(field, value)
    Console().print(table)


@cli.command(context_settings=OVERRIDES)
@click.option("--gpu", "profile", metavar="PROFILE", help=PROFILE_HELP)
@click.option(
    "--config", "config_file", type=click.Path(dir_okay=False), help="Your YAML config, after the profile."
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


@cli.group(invoke_without_command=True, context_settings=CONTEXT)
@click.pass_context
def envs(ctx: click.Context) -> None:
    """Ocean C envs: list them, watch one, measure their speed."""
    if ctx.invoked_subcommand is not None:
        return
    from appliance.ocean import available

    rows = []
    for d in available():
        nvec = d["action_nvec"]
        action = f"Discrete({nvec[0]})" if len(nvec) == 1 else f"MultiDiscrete({nvec})"
        itemsize = 4 if d["obs_dtype"] == "float32" else 1
        obs = f"{d['obs_dtype']}[{d['obs_size']}]"
        rows.append([d["name"], str(d["agents_per_env"]), obs, action, str(d["obs_size"] * itemsize)])
    _print_table(
        "Ocean envs", ("env", "agents/env", "observation", "action", "bytes/agent-step"), rows, left=5
    )


@envs.command("show", context_settings=CONTEXT)
@click.argument("name")
@click.option("--frames", default=4, show_default=True, help="Random-policy steps to draw.")
@click.option("--gif", type=click.Path(dir_okay=False), help="Also write an animated GIF of --frames steps.")
@click.option("--seed", default=0, show_default=True)
def envs_show(name: str, frames: int, gif: str | None, seed: int) -> None:
    """Draw a few random-policy frames of env NAME in the terminal (and optionally a GIF)."""
    from appliance.bench.envsps import random_actions
    from appliance.vector import native

    _, params = _env_params(name)
    with native.make(name, num_envs=1, num_threads=1, seed=seed, **params) as vec:
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
    "--json", "json_out", type=click.Path(dir_okay=False), help="Also write the rows (with fingerprint) here."
)
def envs_sps(
    names: str | None, threads: str, seconds: float, num_envs: int | None, json_out: str | None
) -> None:
    """Env-only agent-steps per second with random actions, per thread count.

    NAMES is a comma-separated list (default: every env). Prints SPS and the scaling efficiency
    SPS_T / (T * SPS_1).
    """
    from appliance import ocean
    from appliance.bench.envsps import scaling, table_rows

    thread_counts = _int_list(threads)
    known = ocean.names()
    selected = [n for n in names.split(",") if n] if names else known
    for n in selected:
        if n not in known:
            raise click.BadParameter(f"unknown env {n!r}; known: {', '.join(known)}", param_hint="NAMES")
    rows = []
    for n in selected:
        default_envs, params = _env_params(n)
        rows += scaling(
            n,
            thread_counts,
            num_envs=num_envs or default_envs,
            seconds=seconds,
            progress=lambda r: click.echo(
                f"  {r['env']:<10} {r['threads']:>3} threads  {r['sps'] / 1e6:8.3f} M SPS", err=True
            ),
            **params,
        )
    columns = ("env", "agents", "threads", "M SPS", "efficiency")
    _print_table("env-only agent-steps per second (random actions)", columns, table_rows(rows), left=0)
    _write_json(json_out, "envs-sps", {"seconds": seconds, "rows": rows})


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
    from appliance.bench import vectorbench
    from appliance.sysinfo import physical_cores

    cores = cores or physical_cores()
    result = vectorbench.run(
        env,
        step_us,
        cores,
        seconds,
        progress=lambda r: click.echo(
            f"  {r['family']:<45} num_envs={r['num_envs']:<6} {r['sps']:>12,.0f} SPS", err=True
        ),
    )
    title = f"{result['env']} on {cores} cores: agent-steps/s, best num_envs per approach"
    _print_table(title, ("approach", "num_envs", "SPS", "vs best gymnasium"), vectorbench.table_rows(result))
    _write_json(json_out, "vector-bench", result)


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
    from appliance.ocean import ocean_name
    from appliance.sysinfo import fingerprint, physical_cores

    cores = cores or physical_cores()
    name = ocean_name(env)
    params: dict[str, Any] = _env_params(name)[1] if name else {}
    console, rows = Console(), []

    def table() -> Table:
        t = Table(title=f"autotune {env} ({cores} cores, {seconds:g} s per candidate)")
        for col in ("backend", "num_envs", "workers/threads", "batch_size", "SPS"):
            t.add_column(col, justify="right")
        for cells in tuner.candidate_rows(rows):
            t.add_row(*cells)
        return t

    with Live(table(), console=console, refresh_per_second=4) as live:
        result = tuner.tune(
            name or env, params, cores, seconds, batch_size, max_ram_gb, forward_ms,
            on_profile=lambda p: console.print(tuner.profile_line(env, p)),
            on_result=lambda r: (rows.append(r), live.update(table())),
        )  # fmt: skip
    console.print(tuner.best_line(result["best"]))
    if save:
        from appliance.report_io import write_bytes_atomic

        text = tuner.profile_yaml(env, result["best"], forward_ms, fingerprint()["cpu"]["model"])
        write_bytes_atomic(save, text.encode())
        console.print(f"wrote {save} (use it with --config {save})")


# ----------------------------------------------------------------------------- training


@cli.command(context_settings=OVERRIDES)
@click.option("--gpu", "profile", metavar="PROFILE", help=PROFILE_HELP)
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
    from appliance.config import resolve
    from appliance.train import session

    env, overrides = _split_env(args)
    if env is None:
        raise ConfigError("train needs an ENV: an Ocean env (puffer-bench envs) or a Gymnasium id")
    cfg = resolve(env=env, profile=profile, config_file=config_file, overrides=overrides)
    options = session.Options(
        run_id=run_id,
        resume=resume,
        load_model_path=load_model_path,
        dashboard=not no_dashboard and sys.stdout.isatty(),
        profile_trace=profile_trace,
        tensorboard=tensorboard,
        wandb=use_wandb,
        report=report,
    )
    for line, err in session.train(cfg, options):
        click.echo(line, err=err)


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

    from appliance.config import resolve
    from appliance.train.checkpoint import find_run
    from appliance.train.evaluate import play

    env, overrides = _split_env(args)
    if env is None:
        raise ConfigError("eval needs an ENV")
    cfg = resolve(
        env=env,
        config_file=config_file,
        overrides=[*overrides, "--vec.num-envs", "1", "--vec.num-workers", "1"],
    )

    def show(i: int, stats: dict[str, float]) -> None:
        if "score" in stats or "perf" in stats:
            perf = f"  perf {stats['perf']:.3f}" if "perf" in stats else ""
            click.echo(
                f"episode {i}: score {stats.get('score', stats.get('episode_return', float('nan'))):.4g}{perf}"
            )
        else:
            click.echo(f"episode {i}: return {stats['episode_return']:.4g}  length {stats['episode_length']}")

    scores, frames = play(
        cfg, find_run(cfg.train.data_dir, load_model_path), episodes, record=bool(gif), on_episode=show
    )
    if scores:
        click.echo(f"mean over {len(scores)} episodes: {np.mean(scores):.4g}")
    if gif:
        if frames:
            _save_gif(frames, gif, duration_ms=60)
        else:
            click.echo("--gif renders Ocean envs only", err=True)


# ----------------------------------------------------------------------------- profile, run, compare, report


def _print_analysis(report: dict[str, Any]) -> None:
    from appliance.bench.run import analysis_lines

    for line, err in analysis_lines(report):
        click.echo(line, err=err)


@cli.command("profile", context_settings=CONTEXT)
@click.option("--gpu", "profile", metavar="PROFILE", help=PROFILE_HELP)
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
    from appliance.bench import probe
    from appliance.bench import report as rpt
    from appliance.bench.run import probe as run_probe

    if runs < 1:
        raise click.BadParameter("--runs must be at least 1", param_hint="--runs")
    data = run_probe(profile, env, runs, seconds)
    if out:
        from appliance.report_io import write_json_atomic

        write_json_atomic(out, data)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    columns = ("figure", "median", "min - max", "unit", "ceiling", "of ceiling")
    _print_table(
        f"puffer-bench profile: {rpt.machine_line(data['fingerprint'])}", columns, probe.table_rows(data)
    )
    _print_analysis(data)
    if out:
        click.echo(f"wrote {out}")


@cli.command("run", context_settings=CONTEXT)
@click.option("--suite", "suite_name", default="quick", show_default=True, help="Suite name or YAML path.")
@click.option("--gpu", "profile", metavar="PROFILE", help=PROFILE_HELP)
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
    from appliance.bench.run import run_suite

    if repeats is not None and repeats < 1:
        raise click.BadParameter("--repeats must be at least 1", param_hint="--repeats")
    if seconds is not None and seconds <= 0:
        raise click.BadParameter("--seconds must be positive", param_hint="--seconds")
    if container:
        from appliance.container import run_in_container

        sys.exit(run_in_container(container, sys.argv[1:], results=Path(out_dir)))
    envs_filter = [e.strip() for e in env_list.split(",") if e.strip()] if env_list else None
    data, paths = run_suite(
        suite_name,
        profile,
        envs_filter,
        repeats,
        seconds,
        out_dir,
        plots=not no_plots,
        announce=lambda s: click.echo(s, err=True),
    )
    _print_analysis(data)
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
    from appliance.bench import compare as cmp
    from appliance.bench import report as rpt
    from appliance.errors import ReportError

    if len(reports) < 2:
        raise ReportError("compare needs at least two reports: puffer-bench compare BASE.json NEW.json")
    if not 0 < threshold < 1:
        raise click.BadParameter("--threshold must be between 0 and 1 (0.05 = 5%)", param_hint="--threshold")
    result = cmp.compare([{**rpt.load(path), "_path": path} for path in reports], threshold)
    text = cmp.to_markdown(result)
    if out:
        from appliance.report_io import write_bytes_atomic

        write_bytes_atomic(out, text.encode())
    if markdown:
        click.echo(text, nl=False)
    else:
        numbers = range(1, len(reports) + 1)
        if result["differences"]:
            diff_rows = [[key, *map(str, values)] for key, values in result["differences"]]
            _print_table("what differs", ["", *(f"report {i}" for i in numbers)], diff_rows)
        columns = [
            "metric",
            *(f"median {i}" for i in numbers),
            *(f"ratio {i}/1 (95% CI)" for i in numbers if i > 1),
        ]
        _print_table(
            f"base: {reports[0]} (threshold {100 * threshold:.0f}%)", columns, cmp.table_rows(result)
        )
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
    loaded = [rpt.load(p) for p in reports]
    written: list[Path] = []
    if render:
        for path, data in zip(reports, loaded, strict=True):
            written += rpt.render(data, Path(path).with_suffix(""))
    if md_out:
        if len(loaded) != 1:
            raise click.UsageError("--markdown renders exactly one report")
        write_bytes_atomic(md_out, rpt.to_markdown(loaded[0]).encode())
        written.append(Path(md_out))
    if readme:
        paths = [Path(p) for p in reports] or readme_mod.latest_reports(Path(results_dir))
        written += readme_mod.update_readme(Path(readme), paths, Path(results_dir))
    for p in written:
        click.echo(f"wrote {p}")


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="puffer-bench")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
