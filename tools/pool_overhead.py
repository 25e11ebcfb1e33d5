"""The thread pool's cost per vector step, two versions of it measured in turns (A B, B A, ...).

Builds ``envs/pool_bench.c`` (this checkout's) against each variant's ``envs/`` (a git ref, or
``.`` for the working tree), with the extension's own flags, and runs both binaries in alternating
order config by config for ``--rounds`` rounds: drift and the load of other processes hit both
alike. Each run gives the 10th percentile of its step times (the steps that other load did not
interrupt; see the harness) and medians. Per config and figure it reports the median of each side, the ratio of medians B / A with a
95% interval (``appliance.measure.stats.ratio_interval``), and a verdict; the noise guard
(``appliance.measure.noise``) samples others' load and steal during every run, and a figure with a
busy sample on either side is "unreliable (busy)", as ``puffer-bench ab`` says it. A second build
with ``-DPOOL_STATS`` (where the variant's vecenv.c has the counters) adds futex and yield calls
per step, from one extra run per config and side.

The default configs are the no-op env (``benchmark`` with ``work=0 obs_bytes=1``) at 1,024 and
8,192 envs and 1 and 2 threads::

    nice -n 15 .venv/bin/python tools/pool_overhead.py --a main --b . --rounds 15 \\
        --out results/cpu/pool/overhead

Run it under ``nice`` on a shared machine; it prints a table and writes JSON and Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package

ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("appliance") is None:  # the installed package first (it has the extension)
    sys.path.append(str(ROOT))

from appliance.measure import noise  # noqa: E402
from appliance.measure.stats import ratio_interval  # noqa: E402

CFLAGS = ["-O3", "-std=c11", "-fno-strict-aliasing"]  # setup.py's portable flags
NOOP = ["work=0", "obs_bytes=1", "episode_length=1000000"]
DEFAULT_CONFIGS = [f"benchmark:{n}:{t}" for n in (1024, 8192) for t in (1, 2)]
# the harness's p10 of step times (steps nothing else interrupted), medians, and CPU per step
FIGURES = ("overhead_ns", "step_ns", "empty_ns", "work_ns", "overhead_p50_ns", "step_p50_ns", "step_cpu_ns")
COUNTS = ("futex_wait_per_step", "futex_wake_per_step", "yield_per_step", "caller_chunks_per_step",
          "worker_chunks_per_step")  # fmt: skip


def envs_of(ref: str, into: Path) -> Path:
    """The variant's envs/ folder: the working tree's for ``.``, else extracted from git at ``ref``."""
    if ref == ".":
        shutil.copytree(ROOT / "envs", into, ignore=shutil.ignore_patterns("build"))
        return into
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "envs"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "--strip-components=1", "-C", str(into)], input=archive, check=True)
    return into


def build(envs: Path, out: Path, stats: bool) -> Path | None:
    """pool_bench against this envs/ folder (this checkout's harness, the variant's pool and envs)."""
    shutil.copy(ROOT / "envs" / "pool_bench.c", envs / "pool_bench.c")
    cc = shutil.which("cc") or shutil.which("gcc")
    command = [cc, *CFLAGS, *(["-DPOOL_STATS"] if stats else []), f"-I{envs}", str(envs / "pool_bench.c"),
               str(envs / "vecenv.c"), "-o", str(out), "-lm", "-pthread"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"building {out.name} failed:\n{result.stderr[-2000:]}")
    return out


def run(binary: Path, config: str, seconds: float, gap_us: int) -> dict[str, Any]:
    env, num_envs, threads, *params = config.split(":")
    params = params or (NOOP if env == "benchmark" else [])
    command = [str(binary), env, num_envs, threads, str(seconds), str(gap_us), *params]
    with noise.Sampler(interval=0.1) as sampler:
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    row = json.loads(out)
    row["noise"] = noise.summarize(sampler.readings)
    return row


def verdict(a: list[float], b: list[float], busy: bool) -> dict[str, Any]:
    ratio, ci = ratio_interval(a, b)
    if busy:
        what = "unreliable (busy)"
    elif ci is None or ci[0] <= 1 <= ci[1]:
        what = "no clear difference"
    else:
        what = "B lower" if ratio < 1 else "B higher"
    return {"ratio": ratio, "ci": ci, "verdict": what}


def main(argv: list[str] | None = None) -> int:
    parser = tool_cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", default="main", help="git ref for A, or . for the working tree")
    parser.add_argument("--b", default=".", help="git ref for B, or . for the working tree")
    parser.add_argument("--rounds", type=tool_cli.number(2, 1000, integer=True), default=10,
                        help="at least 2, for an interval")  # fmt: skip
    parser.add_argument("--seconds", type=tool_cli.number(0, 1e4, low_open=True), default=0.3,
                        help="timed seconds per run")  # fmt: skip
    parser.add_argument("--gap-us", type=tool_cli.number(0, 10**7, integer=True), default=0,
                        help="caller spin between steps (a policy's turn)")  # fmt: skip
    parser.add_argument("--config", action="append", help="ENV:NUM_ENVS:THREADS[:name=value...]")
    parser.add_argument("--out", type=tool_cli.path, help="write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    return tool_cli.guarded(lambda: run_command(args))


def run_command(args: argparse.Namespace) -> None:
    if args.out:
        tool_cli.check_output(
            args.out.with_suffix(".json"), "--out", ours=tool_cli.written_by("pool_overhead")
        )
        tool_cli.check_output(args.out.with_suffix(".md"), "--out")
    configs = args.config or DEFAULT_CONFIGS
    if args.out:  # before the rounds, not after them
        from appliance.errors import ApplianceError
        from appliance.safe_files import check_output

        out = Path(args.out)
        try:
            check_output(out, "--out", beside=[out.with_suffix(".json"), out.with_suffix(".md")])
        except ApplianceError as e:
            raise SystemExit(f"error: {e}") from None
    tmp = Path(tempfile.mkdtemp(prefix="pool-overhead-"))
    try:
        binaries, counters = {}, {}
        for side, ref in (("A", args.a), ("B", args.b)):
            envs = envs_of(ref, tmp / side)
            binaries[side] = build(envs, tmp / f"bench-{side}", stats=False)
            stats = "pool_stats" in (envs / "vecenv.c").read_text()
            counters[side] = build(envs, tmp / f"stats-{side}", stats=True) if stats else None
        samples: dict[str, dict[str, list[dict[str, Any]]]] = {c: {"A": [], "B": []} for c in configs}
        order = []
        for r in range(args.rounds):
            sides = ("A", "B") if r % 2 == 0 else ("B", "A")
            order.append("".join(sides))
            for config in configs:
                for side in sides:
                    samples[config][side].append(run(binaries[side], config, args.seconds, args.gap_us))
            print(f"round {r + 1}/{args.rounds} ({order[-1]})", file=sys.stderr)
        counts = {
            config: {
                side: {
                    k: v
                    for k, v in run(counters[side], config, args.seconds, args.gap_us).items()
                    if k in COUNTS
                }
                for side in ("A", "B")
                if counters[side]
            }
            for config in configs
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = summarize(args, configs, samples, counts, order)
    print(markdown(result))
    if args.out:
        from appliance.errors import ApplianceError
        from appliance.safe_files import write_or_keep

        out = Path(args.out)
        try:
            write_or_keep(out.with_suffix(".json"), (json.dumps(result, indent=2) + "\n").encode(), "--out")
            write_or_keep(out.with_suffix(".md"), markdown(result).encode(), "--out")
        except ApplianceError as e:
            raise SystemExit(f"error: {e}") from None


def summarize(
    args: argparse.Namespace, configs: list[str], samples: dict, counts: dict, order: list[str]
) -> dict:
    import numpy as np

    from appliance.sysinfo import fingerprint

    out: dict[str, Any] = {
        "schema": "puffer-bench/pool-overhead/1",
        "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python tools/pool_overhead.py " + " ".join(sys.argv[1:]),
        "a": args.a,
        "b": args.b,
        "commits": {},
        "rounds": args.rounds,
        "order": order,
        "seconds": args.seconds,
        "gap_us": args.gap_us,
        "configs": {},
    }
    for side, ref in (("A", args.a), ("B", args.b)):
        with contextlib.suppress(subprocess.CalledProcessError):
            out["commits"][side] = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "HEAD" if ref == "." else ref],
                check=True, capture_output=True, text=True,
            ).stdout.strip() + (" + working tree" if ref == "." else "")  # fmt: skip
    for config in configs:
        a, b = samples[config]["A"], samples[config]["B"]
        busy = any(s["noise"]["busy"] for s in a + b)
        entry: dict[str, Any] = {
            "threads": a[0]["threads"],
            "num_envs": a[0]["num_envs"],
            "busy_samples": sum(s["noise"]["busy"] for s in a + b),
            "others_cores_mean": round(
                float(np.mean([s["noise"].get("others_cores_mean", 0) for s in a + b])), 2
            ),
            "counts": counts.get(config, {}),
            "figures": {},
        }
        for figure in FIGURES:
            va, vb = [s[figure] for s in a], [s[figure] for s in b]
            f = {"a": va, "b": vb, "median_a": float(np.median(va)), "median_b": float(np.median(vb))}
            if min(va) <= 0 or min(vb) <= 0:
                f.update(ratio=None, ci=None, verdict="not a ratio (at or below zero: within the noise)")
            else:
                f.update(verdict(va, vb, busy))
            entry["figures"][figure] = f
        out["configs"][config] = entry
    out["fingerprint"] = {k: v for k, v in fingerprint().items() if k in ("cpu", "git", "load")}
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Pool overhead: A = `{result['a']}`, B = `{result['b']}`",
        "",
        f"`{result['command']}`; {result['rounds']} rounds in the order {' '.join(result['order'])}, "
        f"{result['seconds']} s per run, gap {result['gap_us']} us. ns per vector step: each run's 10th "
        "percentile of its step times (`*_p50_ns`: medians; `step_cpu_ns`: process CPU per step), then the "
        "median over rounds; B / A with a 95% bootstrap interval; a figure with a busy sample on either side "
        "is unreliable.",
        "",
        "| config | figure | A | B | B / A (95% CI) | verdict | busy samples |",
        "|---|---|---|---|---|---|---|",
    ]
    for config, c in result["configs"].items():
        for name, f in c["figures"].items():
            ratio = "-" if f["ratio"] is None else f"{f['ratio']:.3f}"
            if f.get("ci"):
                ratio += f" ({f['ci'][0]:.3f}-{f['ci'][1]:.3f})"
            lines.append(
                f"| `{config}` | {name} | {f['median_a']:,.0f} | {f['median_b']:,.0f} | {ratio} | {f['verdict']} "
                f"| {c['busy_samples']} of {2 * len(f['a'])} |"
            )
    counted = [(config, c["counts"]) for config, c in result["configs"].items() if c["counts"]]
    if counted:
        lines += ["", "Per step (one -DPOOL_STATS run per side):", "",
                  "| config | side | " + " | ".join(COUNTS) + " |", "|---|---|" + "---|" * len(COUNTS)]  # fmt: skip
        for config, sides in counted:
            for side, values in sides.items():
                lines.append(
                    f"| `{config}` | {side} | " + " | ".join(f"{values.get(k, 0):.2f}" for k in COUNTS) + " |"
                )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
