#!/usr/bin/env python3
"""Env parity beyond random play: one scripted ball-tracking policy on our breakout and PufferLib's.

    python tools/breakout_scripted.py compare --envs 1024 --steps 10000 --out results/cpu/parity/scripted
    python tools/breakout_scripted.py play --side ours --envs 1024 --steps 10000 --json out.json

``play`` steps one side's breakout (``ours``: appliance.vector's native backend; ``pufferlib``:
PufferLib 3.0.0's ``Breakout`` from the peer build of tools/pufferlib_peer.py, run in the peer's
interpreter) with the same policy: move the paddle's centre towards the ball's centre (a dead zone of
``--deadzone`` pixels), and with probability ``--eps`` take a uniformly random action instead, so
that episodes end. Both envs share the observation layout (paddle x, ball x, paddle width in the
first ten floats, then 108 bricks, 1 = broken), so the policy reads the same numbers on both sides.

Per finished episode it keeps the score, the length in agent-steps, and the bricks broken per row
(a brick's observation going 0 -> 1; the wall rebuilt at 432 counts again). ``compare`` runs both
sides and writes ``<out>.json`` and ``<out>.md``: score distribution, the share of episodes reaching
432 and 864, bricks per row, episode lengths, and a two-sample Kolmogorov-Smirnov statistic on the
scores. puffer-bench never imports PufferLib: its side runs in the peer environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np
import tool_cli  # a sibling script, not a package

W, PADDLE_W, BALL = 576.0, 62.0, 32.0
ROWS, COLS = 6, 18


def make_env(side: str, n: int, seed: int) -> Any:
    """(reset(), step(actions) -> obs, rewards, terminals, truncations) for one side."""
    if side == "ours":
        from pufferlib_peer import use_our_package  # this script's folder is first on sys.path

        use_our_package()
        from appliance import vector

        vec = vector.make("breakout", num_envs=n, num_threads=1, seed=seed, frameskip=4)
        return vec, lambda: vec.reset(seed=seed)[0], lambda a: vec.step(a)[:4]
    from pufferlib.ocean.breakout.breakout import Breakout

    env = Breakout(num_envs=n, frameskip=4, seed=seed)
    return env, lambda: env.reset(seed)[0], lambda a: env.step(a)[:4]


def policy(obs: np.ndarray, rng: np.random.Generator, eps: float, deadzone: float) -> np.ndarray:
    paddle = obs[:, 0] * W + obs[:, 9] * PADDLE_W / 2
    ball = obs[:, 2] * W + BALL / 2
    diff = ball - paddle
    action = np.where(diff > deadzone, 2, np.where(diff < -deadzone, 1, 0))
    explore = rng.random(len(obs)) < eps
    return np.where(explore, rng.integers(0, 3, len(obs)), action).astype(np.int32)


def play(side: str, n: int, steps: int, eps: float, deadzone: float, seed: int) -> dict[str, Any]:
    owner, reset, step = make_env(side, n, seed)
    rng = np.random.default_rng(seed)
    obs = np.array(reset(), dtype=np.float32)
    score, length = np.zeros(n), np.zeros(n, np.int64)
    rows = np.zeros((n, ROWS), np.int64)
    episodes: list[dict[str, Any]] = []
    for _ in range(steps):
        new, rewards, terminals, truncations = step(policy(obs, rng, eps, deadzone))
        new = np.array(new, dtype=np.float32)
        done = np.logical_or(terminals, truncations)
        score += rewards
        length += 1
        broke = (new[:, 10:] > 0.5) & (obs[:, 10:] < 0.5) & ~done[:, None]
        rows += broke.reshape(n, ROWS, COLS).sum(2)
        for i in np.flatnonzero(done):
            episodes.append({"score": float(score[i]), "length": int(length[i]), "rows": rows[i].tolist(),
                             "truncated": bool(truncations[i])})  # fmt: skip
        score[done], length[done], rows[done] = 0, 0, 0
        obs = new
    owner.close()
    return {"side": side, "envs": n, "steps": steps, "eps": eps, "deadzone": deadzone, "seed": seed,
            "episodes": episodes}  # fmt: skip


def summary(result: dict[str, Any]) -> dict[str, Any]:
    eps = result["episodes"]
    scores = np.array([e["score"] for e in eps])
    lengths = np.array([e["length"] for e in eps])
    rows = np.array([e["rows"] for e in eps]).reshape(-1, ROWS)
    q = [0.1, 0.25, 0.5, 0.75, 0.9]
    return {
        "episodes": len(eps),
        "truncated": int(sum(e["truncated"] for e in eps)),
        "score_mean": float(scores.mean()),
        "score_std": float(scores.std()),
        "score_quantiles": dict(zip(map(str, q), np.quantile(scores, q).tolist(), strict=True)),
        "share_432": float((scores >= 432).mean()),
        "share_864": float((scores >= 864).mean()),
        "length_mean": float(lengths.mean()),
        "length_quantiles": dict(zip(map(str, q), np.quantile(lengths, q).tolist(), strict=True)),
        "bricks_per_row_mean": rows.mean(0).tolist(),
    }


def ks(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (largest gap between the empirical CDFs)."""
    grid = np.sort(np.concatenate([a, b]))
    return float(np.abs(np.searchsorted(np.sort(a), grid, "right") / len(a)
                        - np.searchsorted(np.sort(b), grid, "right") / len(b)).max())  # fmt: skip


def peer_python() -> tuple[str, dict[str, str], Path]:
    """The peer's interpreter, its environment and the folder to run it in (importing PufferLib
    links a ``resources`` folder into the working directory, so it runs in the cache)."""
    from pufferlib_peer import VERSION, default_cache

    cache = default_cache()
    py, src = cache / "venv" / "bin" / "python", cache / f"pufferlib-{VERSION}"
    if not py.exists() or not (src / "pufferlib").exists():
        raise tool_cli.ToolError(
            f"PufferLib is not built in {cache}: run `python tools/pufferlib_peer.py build` first"
        )
    return str(py), {**os.environ, "PYTHONPATH": str(src)}, cache


def compare(a: argparse.Namespace) -> None:
    from pufferlib_peer import dies_with_us  # this script's folder is first on sys.path

    results = {}
    for side in ("ours", "pufferlib"):
        tmp = a.out.resolve().with_name(a.out.name + f"-{side}.json")
        py, env, cwd = (sys.executable, dict(os.environ), None) if side == "ours" else peer_python()
        cmd = [py, "-W", "ignore", str(Path(__file__).resolve()), "play", "--side", side, "--envs", str(a.envs), "--steps",
               str(a.steps), "--eps", str(a.eps), "--deadzone", str(a.deadzone), "--seed", str(a.seed),
               "--json", str(tmp)]  # fmt: skip
        print(f"[scripted] {side}: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
        subprocess.run(cmd, env=env, cwd=cwd, check=True, preexec_fn=dies_with_us())
        results[side] = json.loads(tmp.read_text())
        tmp.unlink()
    for side, r in results.items():
        if not r["episodes"]:
            raise tool_cli.ToolError(
                f"no {side} episode ended in {a.steps} steps of {a.envs} envs: raise --steps or --eps"
            )
    sums = {s: summary(r) for s, r in results.items()}
    scores = {s: np.array([e["score"] for e in r["episodes"]]) for s, r in results.items()}
    lengths = {s: np.array([e["length"] for e in r["episodes"]], float) for s, r in results.items()}
    out = {
        "command": "python tools/breakout_scripted.py " + " ".join(sys.argv[1:]),
        "policy": f"track the ball's centre (dead zone {a.deadzone} px), a random action with probability {a.eps}",
        "envs": a.envs, "steps": a.steps, "seed": a.seed,
        "ours": sums["ours"], "pufferlib": sums["pufferlib"],
        "ks_score": ks(scores["ours"], scores["pufferlib"]),
        "ks_length": ks(lengths["ours"], lengths["pufferlib"]),
    }  # fmt: skip
    print(markdown(out))
    from appliance.errors import ApplianceError
    from appliance.safe_files import write_or_keep  # compare runs where ours does: use_our_package

    try:
        write_or_keep(a.out.with_suffix(".json"), (json.dumps(out, indent=2) + "\n").encode(), "--out")
        write_or_keep(a.out.with_suffix(".md"), markdown(out).encode(), "--out")
    except ApplianceError as e:
        sys.exit(f"error: {e}")


def markdown(out: dict[str, Any]) -> str:
    o, p = out["ours"], out["pufferlib"]
    f = "{:.4g}".format

    def row(name: str, x: Any, y: Any) -> str:
        return f"| {name} | {x} | {y} |"

    lines = [
        "# breakout under one scripted policy: ours vs PufferLib 3.0.0",
        "",
        f"`{out['command']}`",
        "",
        f"Policy: {out['policy']}. {out['envs']} envs x {out['steps']} steps a side, seed {out['seed']}.",
        "",
        "| | ours | PufferLib 3.0.0 |",
        "|---|---|---|",
        row("episodes finished", o["episodes"], p["episodes"]),
        row("score mean (std)", f"{f(o['score_mean'])} ({f(o['score_std'])})", f"{f(p['score_mean'])} ({f(p['score_std'])})"),
        *[row(f"score, quantile {q}", f(o["score_quantiles"][q]), f(p["score_quantiles"][q])) for q in o["score_quantiles"]],
        row("share reaching 432", f(o["share_432"]), f(p["share_432"])),
        row("share reaching 864", f(o["share_864"]), f(p["share_864"])),
        row("episode length mean (steps)", f(o["length_mean"]), f(p["length_mean"])),
        row("episode length median", f(o["length_quantiles"]["0.5"]), f(p["length_quantiles"]["0.5"])),
        *[row(f"bricks broken, row {r + 1} (top first)", f(o["bricks_per_row_mean"][r]), f(p["bricks_per_row_mean"][r])) for r in range(ROWS)],
        "",
        f"Kolmogorov-Smirnov statistic, scores: {out['ks_score']:.4f}; lengths: {out['ks_length']:.4f} "
        f"(0 = the same distribution).",
        "",
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("play", "compare"):
        p = sub.add_parser(name)
        p.add_argument("--envs", type=tool_cli.number(1, 2**20, integer=True), default=1024)
        p.add_argument("--steps", type=tool_cli.number(1, 10**9, integer=True), default=10000)
        p.add_argument("--eps", type=tool_cli.number(0, 1), default=0.1)
        p.add_argument("--deadzone", type=tool_cli.number(0, 1e4), default=4.0)
        p.add_argument("--seed", type=tool_cli.number(0, 2**32 - 1, integer=True), default=0)
        if name == "play":
            p.add_argument("--side", choices=("ours", "pufferlib"), required=True)
            p.add_argument("--json", type=tool_cli.path, required=True)
        else:
            p.add_argument(
                "--out", type=tool_cli.path, required=True, help="stem: writes <out>.json and <out>.md"
            )
    a = ap.parse_args(argv)
    return tool_cli.guarded(lambda: run_command(a))


def run_command(a: argparse.Namespace) -> None:
    if a.cmd == "play":
        tool_cli.check_output(a.json, "--json")
        a.json.write_text(json.dumps(play(a.side, a.envs, a.steps, a.eps, a.deadzone, a.seed)))
    else:
        tool_cli.check_output(
            a.out.with_suffix(".json"), "--out", ours=tool_cli.written_by("breakout_scripted")
        )
        tool_cli.check_output(a.out.with_suffix(".md"), "--out")
        compare(a)


if __name__ == "__main__":
    sys.exit(main())
