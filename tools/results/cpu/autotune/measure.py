"""Tuned settings against the profile's, on this machine: what results/cpu/autotune/ holds.

1. ``train``'s own tuner (appliance.tune.selftune.tune, its default budget) on ENV's config as
   ``puffer-bench train ENV`` resolves it with no flags; its lines are printed and kept.
2. Then the profile's settings (A) against the tuner's candidate (B, the fastest of its screen, the
   one it confirmed or refused), whole training epochs (rollout and update), in interleaved pairs
   A B, B A, ... with the noise guard's sampler around each sample: B/A of the medians, its 95 %
   interval (appliance.measure.stats.ratio_test) and the verdict as ``puffer-bench ab`` gives it
   (``unreliable (busy)`` where a sample was taken busy).

    .venv/bin/python tools/results/cpu/autotune/measure.py breakout --pairs 4 --epochs 1

Writes results/cpu/autotune/<date>-<host>-<env>.json and <...>-summary.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from appliance.config import autotune
from appliance.config.runs import run_config
from appliance.measure.noise.readings import Sampler, summarize
from appliance.measure.stats import ratio_test
from appliance.sysinfo import fingerprint
from appliance.tune import selftune

HERE = Path(__file__).resolve().parents[4] / "results" / "cpu" / "autotune"


def epochs_sps(trainer: Any, epochs: int) -> float:
    start, steps = time.perf_counter(), trainer.global_step
    for _ in range(epochs):
        trainer.evaluate()
        trainer.train()
    return (trainer.global_step - steps) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1, help="training epochs per sample")
    args = parser.parse_args()

    cfg = run_config(args.env, None, None, [])
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    with tempfile.TemporaryDirectory() as data:  # the user's own store is left alone
        environ = {"PUFFER_BENCH_DATA": data, "PUFFER_AUTOTUNE": "redo"}
        tune_cfg = run_config(args.env, None, None, [])
        t0 = time.monotonic()
        selftune.autotune_run(tune_cfg, "redo", say, environ=environ)
        tune_s = time.monotonic() - t0
        stores = list(Path(data).glob("autotune/*.json"))
        entry = next(iter(json.loads(stores[0].read_text())["entries"].values())) if stores else None
    if entry is None:
        say(f"nothing to tune for {args.env} (its backend is {cfg.data['vec']['backend']})")
        candidate: dict[str, Any] = {}
    else:
        screen = entry["measured"]["screen"]
        candidate = max(screen[1:], key=lambda r: r["sps"])["choice"]
    chosen = entry["chosen"] if entry else {}

    a: list[float] = []
    b: list[float] = []
    noise: list[dict[str, Any]] = []
    order: list[str] = []
    HERE.mkdir(parents=True, exist_ok=True)
    if candidate:
        with (
            selftune.build_trainer(cfg, {}) as ta,
            selftune.build_trainer(cfg, candidate) as tb,
        ):
            epochs_sps(ta, 1), epochs_sps(tb, 1)  # a whole epoch each first: the update warms up too
            for i in range(args.pairs):
                turn = [("A", ta, a), ("B", tb, b)]
                for side, trainer, out in turn if i % 2 == 0 else turn[::-1]:
                    with Sampler() as sampler:
                        out.append(epochs_sps(trainer, args.epochs))
                    noise.append({"sample": f"{side}{i + 1}", **summarize(sampler.readings)})
                    order.append(f"{side}{i + 1}")
                    print(
                        f"{side}{i + 1}: {out[-1]:,.0f} agent-steps/s, busy {noise[-1]['busy']}", flush=True
                    )
    busy = [n["sample"] for n in noise if n["busy"]]
    if a and b:
        ratio, ci, p = ratio_test(a, b)
        significant = ci is not None and (ci[0] > 1 or ci[1] < 1)
        verdict = (
            "unreliable (busy)"
            if busy
            else ("no clear difference" if not significant else ("B better" if ratio > 1 else "B worse"))
        )
    else:
        ratio, ci, p, verdict = 1.0, None, None, "nothing to compare (the tuner has nothing to tune)"
    fp = fingerprint(calibration=False)
    day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    out = {
        "schema": "puffer-bench/autotune-ab/1",
        "created_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([".venv/bin/python", "tools/results/cpu/autotune/measure.py", *sys.argv[1:]]),
        "env": args.env,
        "profile": cfg.profile,
        "tuner": {"lines": lines, "seconds": round(tune_s, 1), "chosen": chosen, "candidate": candidate},
        "A": "the profile's settings",
        "B": autotune.describe(candidate),
        "epochs_per_sample": args.epochs,
        "order": order,
        "a_sps": a,
        "b_sps": b,
        "ratio_b_over_a": ratio,
        "ci95": ci,
        "p": p,
        "verdict": verdict,
        "busy_samples": busy,
        "noise": noise,
        "tuned_is": "the candidate" if chosen else "the profile's settings (ratio 1 by construction)",
        "fingerprint": fp,
    }
    stem = HERE / f"{day}-{fp['host_hash']}-{args.env}"
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    md = [
        f"# {args.env}: tuned settings against the profile's (`{cfg.profile}`)",
        "",
        f"Written by `{out['command']}`; host {fp['host_hash']}, {fp['cpu']['model']} "
        f"(family {fp['cpu']['family']} model {fp['cpu']['model_number']}), "
        f"{fp['cpu']['usable_cores']} usable cores; {out['created_utc']}.",
        "",
        "The tuner (`train`'s own, default budget):",
        "",
        *[f"    {line}" for line in lines],
        "",
        f"Then A = the profile's settings, B = {out['B']}, whole training epochs ({args.epochs} a sample), "
        f"in turns {' '.join(order)}:",
        "",
        "| side | agent-steps/s (each sample) | median |",
        "|---|---|---|",
        f"| A | {', '.join(f'{x:,.0f}' for x in a)} | {statistics.median(a):,.0f} |"
        if a
        else "| A | - | - |",
        f"| B | {', '.join(f'{x:,.0f}' for x in b)} | {statistics.median(b):,.0f} |"
        if b
        else "| B | - | - |",
        "",
        f"B/A {ratio:.3f}"
        + (f", 95 % interval {ci[0]:.3f}-{ci[1]:.3f}" if ci else "")
        + f"; verdict: **{verdict}**"
        + (f" (busy samples: {', '.join(busy)})" if busy else "")
        + f". The tuner chose: {autotune.describe(chosen)}.",
        "",
    ]
    Path(f"{stem}-summary.md").write_text("\n".join(md))
    print(f"wrote {stem}.json and {stem}-summary.md")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
