#!/usr/bin/env python3
"""PufferLib 3.0.0's own hyperparameter sweep (Protein) as a peer of ``puffer-bench sweep``.

    python tools/protein_peer.py sweep squared --budget-seconds 1800 --out results/cpu/sweep-race/protein-squared
    python tools/protein_peer.py ours squared --budget-seconds 1800 --out results/cpu/sweep-race/ours-squared
    python tools/protein_peer.py race --protein results/cpu/sweep-race/protein-squared \\
        --ours results/cpu/sweep-race/ours-squared --out results/cpu/sweep-race/squared.md

``sweep`` runs, in the PufferLib environment ``tools/pufferlib_peer.py build`` made, the loop of
PufferLib's ``puffer sweep`` (``pufferlib.pufferl.sweep``): Protein suggests, PufferLib's own trainer
trains with its config for the env, and every run's curve (score and seconds at ten points, as its
``downsample``) is observed. Two things differ from its command and both are said in the output:
its loop refuses to start without wandb or neptune (it only logs to them), so this driver runs the
same loop with a logger that writes JSON lines; and it stops at a wall-clock budget the way ours
does (no trial starts after it, a running one stops at it). ``--timesteps MIN,MEAN,MAX`` resets the
range of ``train.total_timesteps`` Protein searches (its default.ini's 5e7-1e10, centred on 1e8, is
sized for GPUs). Written: ``trials.jsonl`` (a trial a line: its settings, start and end in sweep
seconds, steps, score), ``curve.jsonl`` (every log of every trial), ``sweep.log`` (its console) and
``sweep.json`` (the command, its sweep config, the machine's fingerprint and the trials).

``ours`` runs ``puffer-bench sweep ENV --budget-seconds S --trials 100000 --out DIR`` (more options
after ``--``) and writes ``race.json`` beside its study: the command, the budget and the machine's
fingerprint, as ``sweep.json`` holds them for Protein.

``race`` puts one Protein sweep and one of our sweep folders side by side: the best score found so
far against wall minutes since each side's first trial started, a trial counting at its end (a trial
the budget stopped counts with its score there). A trial's score is the mean of its last 5 logged
values of the metric on both sides (our sweep's objective window). Writes Markdown, the same as
JSON beside it, and a figure. docs/lab/peers.md.

puffer-bench never imports PufferLib; the sweep runs in PufferLib's own interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pufferlib_peer as peer  # a sibling script, not a package
import tool_cli

WINDOW = peer.WINDOW
MINUTES = (1, 2, 5, 10, 15, 20, 30, 45, 60)

# Runs inside the peer environment: PufferLib's config loading, Protein and trainer, and the loop of
# its `sweep` function with a JSON-lines logger in place of wandb, stopped by a wall-clock budget.
SWEEP_DRIVER = r"""
import json, os, random, sys, time, traceback
env_name = sys.argv.pop(1)
budget, out_dir = float(os.environ["PEER_BUDGET_SECONDS"]), os.environ["PEER_OUT_DIR"]
metric, base_seed, window = os.environ["PEER_METRIC"], int(os.environ["PEER_SEED"]), int(os.environ["PEER_WINDOW"])
space_set = json.loads(os.environ.get("PEER_SWEEP_SPACE") or "{}")
import numpy as np
import torch
import pufferlib.pufferl as pl
import pufferlib.sweep
args = pl.load_config(env_name)
sweep_config = args["sweep"]
method = sweep_config.pop("method")
sweep_config["metric"] = metric
for dotted, value in space_set.items():
    node = sweep_config
    for part in dotted.split("."):
        node = node[part]
    node.update(value)
sweeper = getattr(pufferlib.sweep, method)(sweep_config)
key, points = "environment/" + metric, sweep_config["downsample"]
print(json.dumps({"method": method, "sweep": sweep_config,
                  "config": {k: v for k, v in args.items() if isinstance(v, dict) and k != "sweep"}}), flush=True)
trials_f = open(os.path.join(out_dir, "trials.jsonl"), "w")
curve_f = open(os.path.join(out_dir, "curve.jsonl"), "w")
t0 = time.time()

class Stop(Exception):
    pass

class Logger:
    def __init__(self, trial):
        self.run_id, self.trial, self.logs = "protein-%d-%d" % (os.getpid(), trial), trial, []
    def log(self, logs, step):
        now = time.time() - t0
        row = {"trial": self.trial, "sweep_seconds": now, "agent_steps": int(logs["agent_steps"]),
               "uptime": float(logs["uptime"])}
        row.update({k: float(v) for k, v in logs.items() if k.startswith("environment/")})
        curve_f.write(json.dumps(row) + "\n")
        curve_f.flush()
        self.logs.append(logs)
        if now >= budget:
            raise Stop()
    def close(self, path):
        pass

_evaluate = pl.PuffeRL.evaluate
def _evaluate_in_budget(self, *a, **k):
    if time.time() - t0 >= budget:
        raise Stop()
    return _evaluate(self, *a, **k)
pl.PuffeRL.evaluate = _evaluate_in_budget

trainers = []
_init = pl.PuffeRL.__init__
def _keep(self, *a, **k):
    _init(self, *a, **k)
    trainers.append(self)
pl.PuffeRL.__init__ = _keep

def swept(space, conf, prefix=""):
    out = {}
    for name, sub in space.items():
        if isinstance(sub, dict) and "distribution" in sub:
            out[prefix + name] = conf[name]
        elif isinstance(sub, dict):
            out.update(swept(sub, conf[name], prefix + name + "."))
    return out

def stop_trainer():
    for t in trainers:
        try:
            t.vecenv.close()
        except Exception:
            pass
        t.utilization.stop()

i = 0
while i < args["max_runs"] and time.time() - t0 < budget:
    seed = (base_seed * 1000003 + i) & 0xFFFFFFFF
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    sweeper.suggest(args)
    total = args["train"]["total_timesteps"]
    row = {"trial": i, "seed": seed, "settings": swept(sweep_config, args), "started_s": time.time() - t0}
    logger, state = Logger(i), "complete"
    trainers.clear()
    try:
        all_logs = pl.train(env_name, args=args, logger=logger)
    except Stop:
        state, all_logs = "cut", None
        stop_trainer()
    except Exception as e:
        state, all_logs = "fail", None
        row["error"] = "%s: %s" % (type(e).__name__, e)
        traceback.print_exc()
        stop_trainer()
        # its loop has no try: a trial that raises ends its sweep; so it ends here
    row["ended_s"] = time.time() - t0
    values = [float(l[key]) for l in logger.logs if key in l]
    row.update(state=state, steps=int(logger.logs[-1]["agent_steps"]) if logger.logs else 0,
               score=sum(values[-window:]) / len(values[-window:]) if values else None)
    if all_logs is not None:
        logs = [e for e in all_logs if key in e]
        scores = pl.downsample([l[key] for l in logs], points)
        costs = pl.downsample([l["uptime"] for l in logs], points)
        steps = pl.downsample([l["agent_steps"] for l in logs], points)
        for score, cost, step in zip(scores, costs, steps):
            args["train"]["total_timesteps"] = step
            sweeper.observe(args, score, cost)
        args["train"]["total_timesteps"] = total
        row["observed"] = len(scores)
    trials_f.write(json.dumps(row) + "\n")
    trials_f.flush()
    print("[trial] %d %s: score %s in %.0f s, %d steps" % (i, state, row["score"], row["ended_s"] - row["started_s"],
                                                          row["steps"]), flush=True)
    i += 1
    if state == "fail":
        break
trials_f.close()
curve_f.close()
sys.stdout.flush()
os._exit(0)  # PufferLib's utilization monitor is a non-daemon thread
"""


class RaceError(tool_cli.ToolError):
    """A one-line reason the harness cannot go on."""


def timesteps_range(text: str) -> dict[str, float]:
    try:
        lo, mean, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: MIN,MEAN,MAX, e.g. 5e6,2e7,1e8") from None
    if not 0 < lo <= mean <= hi < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: needs 0 < MIN <= MEAN <= MAX")
    return {"min": lo, "mean": mean, "max": hi}


def sweep(cache: Path, env: str, budget: float, metric: str, seed: int, timesteps: dict[str, float] | None,
          extra: list[str], out: Path) -> dict[str, Any]:  # fmt: skip
    """PufferLib's Protein sweep of ``env`` for ``budget`` wall seconds; returns sweep.json's data."""
    if env not in peer.ENVS:
        raise RaceError(f"no PufferLib counterpart known for {env}; known: {', '.join(peer.ENVS)}")
    if not peer.built(cache, env):
        peer.log(f"PufferLib's {env} is not built in {cache}: building it first")
        peer.build(cache, [env])
    out.mkdir(parents=True, exist_ok=True)
    driver = cache / "sweep_driver.py"
    driver.write_text(SWEEP_DRIVER)
    space = {"train.total_timesteps": timesteps} if timesteps else {}
    env_vars = {
        **os.environ,
        "PYTHONPATH": str(cache / f"pufferlib-{peer.VERSION}"),
        "PEER_BUDGET_SECONDS": str(budget),
        "PEER_OUT_DIR": str(out.resolve()),
        "PEER_METRIC": metric,
        "PEER_SEED": str(seed),
        "PEER_WINDOW": str(WINDOW),
        "PEER_SWEEP_SPACE": json.dumps(space),
    }
    args = ["--train.device", "cpu", "--vec.backend", "Serial", *extra]
    cmd = [str(cache / "venv" / "bin" / "python"), "-W", "ignore::DeprecationWarning", str(driver),
           peer.ENVS[env][0], *args]  # fmt: skip
    peer.log("$ " + shlex.join(cmd))
    start = time.time()
    with open(out / "sweep.log", "w") as console:
        proc = subprocess.Popen(
            peer.guarded(cmd), cwd=cache, env=env_vars, stdout=subprocess.PIPE, stderr=console, text=True,
            preexec_fn=peer.dies_with_us(),
        )  # fmt: skip
        assert proc.stdout is not None
        first = proc.stdout.readline()
        for line in proc.stdout:
            console.write(line)
            console.flush()
            if line.startswith("[trial]"):
                peer.log(f"{line[8:].strip()} ({time.time() - start:.0f} s of {budget:g})")
        rc = proc.wait()
    if rc:
        raise RaceError(f"PufferLib's sweep exited with code {rc}; see {out / 'sweep.log'}")
    info = json.loads(first) if first.startswith("{") else {}
    trials = peer.json_lines(out / "trials.jsonl", "Protein's trials")
    peer.use_our_package()
    from appliance.sysinfo import fingerprint

    changed = [
        "its loop run by this driver with a JSON-lines logger (its `puffer sweep` refuses to start without wandb or neptune)",
        f"a wall-clock budget of {budget:g} s (no trial starts after it, a running one stops at it)",
        f"the sweep's metric {metric}",
    ]
    if timesteps:
        changed.append(
            f"train.total_timesteps searched over {timesteps} (its default.ini: min 5e7, mean 1e8, max 1e10)"
        )
    return {
        "schema": "puffer-bench/protein-sweep/1",
        "system": f"pufferlib-{peer.VERSION} {info.get('method', 'Protein')}",
        "env": env,
        "metric": metric,
        "budget_s": budget,
        "seed": seed,
        "command": shlex.join(cmd),
        "changed": changed,
        "wall_s": time.time() - start,
        "sweep_config": info.get("sweep"),
        "config": info.get("config"),
        "machine": fingerprint(),
        "trials": trials,
    }


# ---------------------------------------------------------------------- race


def protein_side(folder: Path) -> dict[str, Any]:
    data_path = folder / "sweep.json"
    if not data_path.is_file():
        raise RaceError(f"--protein {folder}: no sweep.json (a folder `protein_peer.py sweep` wrote)")
    data = json.loads(data_path.read_text())
    trials = [t for t in data["trials"] if t.get("score") is not None]
    t0 = min((t["started_s"] for t in data["trials"]), default=0.0)
    return {
        "name": data["system"],
        "budget_s": data["budget_s"],
        "machine": data["machine"],
        "command": data["command"],
        "trials": [
            {
                "trial": t["trial"],
                "state": t["state"],
                "end_s": t["ended_s"] - t0,
                "run_s": t["ended_s"] - t["started_s"],
                "steps": t["steps"],
                "score": t["score"],
                "settings": t["settings"],
            }
            for t in trials
        ],
        "all_trials": len(data["trials"]),
    }


def ours(env: str, budget: float, extra: list[str], out: Path) -> dict[str, Any]:
    """``puffer-bench sweep`` for ``budget`` wall seconds into ``out``; returns race.json's data."""
    peer.use_our_package()
    from appliance.sysinfo import fingerprint

    exe = Path(sys.executable).with_name("puffer-bench")
    cmd = [str(exe) if exe.exists() else "puffer-bench", "sweep", env, "--budget-seconds", f"{budget:g}",
           "--trials", "100000", "--out", str(out), *extra]  # fmt: skip
    peer.log("$ " + shlex.join(cmd))
    start = time.time()
    rc = subprocess.call(cmd)
    if rc:
        raise RaceError(f"puffer-bench sweep exited with code {rc}")
    return {"schema": "puffer-bench/sweep-race-side/1", "command": shlex.join(["puffer-bench", *cmd[1:]]),
            "budget_s": budget, "wall_s": time.time() - start, "machine": fingerprint()}  # fmt: skip


def ours_side(folder: Path) -> dict[str, Any]:
    peer.use_our_package()
    import optuna

    from appliance.sweep.study import DB, STUDY

    db = folder / DB
    if not db.is_file():
        raise RaceError(f"--ours {folder}: no {DB} (a folder `puffer-bench sweep ... --out` wrote)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{db}")
    every = [t for t in study.get_trials(deepcopy=False) if t.datetime_start is not None]
    if not every:
        raise RaceError(f"--ours {folder}: the study has no trial that started")
    t0 = min(t.datetime_start for t in every)
    trials = []
    for t in every:
        score = t.user_attrs.get("score")
        if score is None or t.datetime_complete is None:
            continue
        trials.append({
            "trial": t.number, "state": t.state.name.lower(), "end_s": (t.datetime_complete - t0).total_seconds(),
            "run_s": (t.datetime_complete - t.datetime_start).total_seconds(), "steps": t.user_attrs.get("steps"),
            "score": score, "settings": dict(t.params), "baseline": bool(t.user_attrs.get("baseline")),
        })  # fmt: skip
    side = json.loads((folder / "race.json").read_text()) if (folder / "race.json").is_file() else {}
    return {
        "name": "puffer-bench sweep (Optuna TPE)",
        "budget_s": side.get("budget_s"),
        "machine": side.get("machine") or {},
        "command": side.get("command", f"the sweep folder {folder}"),
        "trials": trials,
        "all_trials": len(every),
    }


def machine_words(m: dict[str, Any]) -> str:
    """The fingerprint in a line: CPU, its family/model, cores, host hash and the calibration loops."""
    if not m:
        return "not recorded"
    cpu, cal = m.get("cpu") or {}, m.get("calibration") or {}
    loops = ", ".join(
        f"{k} {cal[k]:.2f}"
        for k in ("int_mops", "float_gflops", "copy_gbs")
        if isinstance(cal.get(k), int | float)
    )
    return (
        f"{cpu.get('model', '?')} (family {cpu.get('family', '?')} model {cpu.get('model_number', '?')}"
        f"{', ' + cpu['codename'] if cpu.get('codename') else ''}), {cpu.get('usable_cores', '?')} usable cores, "
        f"host {m.get('host_hash', '?')}; calibration at its start: {loops or 'none'}"
    )


def best_by(trials: list[dict[str, Any]], seconds: float) -> tuple[float, int] | None:
    done = [t for t in trials if t["end_s"] <= seconds]
    if not done:
        return None
    best = max(done, key=lambda t: t["score"])
    return best["score"], best["trial"]


def race(protein: Path, ours: Path, out: Path, minutes: tuple[float, ...]) -> str:
    sides = [("Protein", protein_side(protein)), ("ours", ours_side(ours))]
    horizon = max(
        [t["end_s"] for _, s in sides for t in s["trials"]] + [s["budget_s"] or 0.0 for _, s in sides]
    )
    cols = [m for m in minutes if m * 60 <= horizon + 60] or [minutes[0]]
    lines = [
        f"Best score found so far against wall minutes since the side's first trial started (a trial counts "
        f"at its end; its score is the mean of its last {WINDOW} logged values).",
        "",
        "| sweep | trials scored | " + " | ".join(f"best by {m:g} min" for m in cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for label, s in sides:
        cells = []
        for m in cols:
            b = best_by(s["trials"], m * 60)
            cells.append("-" if b is None else f"{b[0]:.3f} (trial {b[1]})")
        lines.append(
            f"| {label}: {s['name']} | {len(s['trials'])} of {s['all_trials']} | " + " | ".join(cells) + " |"
        )
    for label, s in sides:
        lines += ["", f"{label}'s trials ({s['command']}):", "",
                  "| trial | state | ended at min | ran s | agent-steps | score | settings |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        for t in sorted(s["trials"], key=lambda t: t["end_s"]):
            settings = ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in t["settings"].items()
            )
            lines.append(
                f"| {t['trial']} | {t['state']} | {t['end_s'] / 60:.1f} | {t['run_s']:.0f} | {t['steps']:,} | "
                f"{t['score']:.3f} | {settings or 'its base config'} |"
            )
    for label, s in sides:
        lines += ["", f"{label}'s machine: {machine_words(s['machine'] or {})}"]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(
        json.dumps({"schema": "puffer-bench/sweep-race/1", "sides": dict(sides)}, indent=1)
    )
    figure(sides, out.with_suffix(".png"))
    return text


def figure(sides: list[tuple[str, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, s in sides:
        xs, ys, best = [], [], None
        for t in sorted(s["trials"], key=lambda t: t["end_s"]):
            ax.plot(t["end_s"] / 60, t["score"], ".", alpha=0.4, color="C0" if label == "ours" else "C1")
            if best is None or t["score"] > best:
                best = t["score"]
            xs.append(t["end_s"] / 60)
            ys.append(best)
        ax.step(xs, ys, where="post", label=f"{label}: {s['name']}", color="C0" if label == "ours" else "C1")
    ax.set_xlabel("wall minutes since the first trial started")
    ax.set_ylabel("score (dots: trials; line: best so far)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cache", type=tool_cli.path, default=peer.default_cache(),
                    help="PufferLib 3.0's build folder (default: %(default)s)")  # fmt: skip
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep", help="PufferLib's Protein sweep of ENV for a wall-clock budget")
    s.add_argument("env")
    s.add_argument("--budget-seconds", type=tool_cli.number(1, 1e7), required=True)
    s.add_argument("--metric", default="perf", help="the env stat the sweep maximizes (default: %(default)s)")
    s.add_argument("--seed", type=tool_cli.number(0, 2**31 - 1, integer=True), default=0,
                   help="seeds each trial's random, numpy and torch (its loop: the clock)")  # fmt: skip
    s.add_argument("--timesteps", type=timesteps_range, default=None, metavar="MIN,MEAN,MAX",
                   help="the range of train.total_timesteps Protein searches (default: its default.ini's)")  # fmt: skip
    s.add_argument("--set", action="append", default=[], metavar="--KEY=VALUE",
                   help="a PufferLib option, e.g. --set=--max-runs=20")  # fmt: skip
    s.add_argument("--out", type=tool_cli.path, required=True, help="a new folder for its files")
    o = sub.add_parser(
        "ours", help="puffer-bench sweep ENV for a wall-clock budget, its command and machine recorded"
    )
    o.add_argument("env")
    o.add_argument("--budget-seconds", type=tool_cli.number(1, 1e7), required=True)
    o.add_argument("--out", type=tool_cli.path, required=True, help="a new sweep folder")
    r = sub.add_parser("race", help="a Protein sweep beside one of ours: best score against wall minutes")
    r.add_argument("--protein", type=tool_cli.path, required=True, help="a folder `sweep` wrote")
    r.add_argument("--ours", type=tool_cli.path, required=True, help="a `puffer-bench sweep` folder")
    r.add_argument("--minutes", default=",".join(f"{m:g}" for m in MINUTES),
                   help="columns: minutes at which to show each side's best (default: %(default)s)")  # fmt: skip
    r.add_argument(
        "--out", type=tool_cli.path, required=True, help="the table (.md); .json and .png beside it"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1 :] if "--" in argv else []  # ours: more puffer-bench sweep options
    a = ap.parse_args(argv[: len(argv) - len(rest) - (1 if "--" in argv else 0)])
    a.rest = rest
    if rest and a.cmd != "ours":
        ap.error(f"options after -- are for `ours` only: {' '.join(rest)}")
    return tool_cli.guarded(lambda: run_command(a))


def run_command(a: argparse.Namespace) -> None:
    if a.cmd == "sweep":
        if a.out.exists() and any(a.out.iterdir()):
            raise RaceError(f"--out {a.out}: not empty; name a new folder")
        extra = [x for item in a.set for x in item.split("=", 1)]
        data = sweep(a.cache, a.env, a.budget_seconds, a.metric, a.seed, a.timesteps, extra, a.out)
        peer.write_report(data, a.out / "sweep.json")
        scored = [t for t in data["trials"] if t.get("score") is not None]
        best = max(scored, key=lambda t: t["score"], default=None)
        peer.log(f"{len(data['trials'])} trials; best score "
                 + (f"{best['score']:.3f} (trial {best['trial']})" if best else "none") + f"; {a.out / 'sweep.json'}")  # fmt: skip
    elif a.cmd == "ours":
        if a.out.exists() and any(a.out.iterdir()):
            raise RaceError(f"--out {a.out}: not empty; name a new folder")
        peer.write_report(ours(a.env, a.budget_seconds, a.rest, a.out), a.out / "race.json")
    else:
        if a.out.suffix != ".md":
            raise RaceError(f"--out {a.out}: a .md path (the .json and .png go beside it)")
        try:
            minutes = tuple(sorted(float(m) for m in a.minutes.split(",")))
        except ValueError:
            raise RaceError(f"--minutes {a.minutes!r}: comma-separated numbers") from None
        if not minutes or minutes[0] <= 0:
            raise RaceError(f"--minutes {a.minutes!r}: positive numbers")
        print(race(a.protein, a.ours, a.out, minutes), end="")


if __name__ == "__main__":
    sys.exit(main())
