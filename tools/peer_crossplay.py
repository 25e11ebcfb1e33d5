#!/usr/bin/env python3
"""Both trained policies on both envs: PufferLib's and ours, each scored on PufferLib's env and on
ours by the reward it collects per agent-step.

    python tools/peer_crossplay.py target --pufferlib-model PATH.pt --ours experiments/RUN \\
        --games 128 --steps 4096 --out results/cpu/parity/crossplay-target.json

Each side's logged score is read from its own env's log, and two envs may log alike-named stats
differently (PufferLib's target logs per star eaten and never ends an episode; ours logs per
episode). Reward per agent-step, counted here from the rewards each env hands back, is one yardstick
for both: a policy that scores less on one env than on the other shows the envs differ; one policy
behind the other on both shows the training differs.

Each policy acts as it did in training: actions sampled from its logits, the recurrent state zeroed
every ``bptt_horizon`` steps where its trainer zeroed it at each rollout (PufferLib always; ours
with ``train.reset_state``), carried otherwise. The first ``--warmup`` steps (default 512) are left
out, so a field dealt at reset does not count. The figure per cell is the mean over games and its
standard error (games are independent; agents within a game are not).

Runs in the peer environment of ``tools/pufferlib_peer.py build`` (PufferLib's own interpreter, with
this checkout on its path), since that is where both PufferLib's env and policy load. docs/lab/peers.md.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pufferlib_peer as peer
import tool_cli

WARMUP = 512


def rate(per_game: list[float]) -> dict[str, float]:
    n = len(per_game)
    mean = sum(per_game) / n
    var = sum((x - mean) ** 2 for x in per_game) / (n - 1) if n > 1 else float("nan")
    return {"mean": mean, "stderr": math.sqrt(var / n) if n > 1 else float("nan"), "games": n}


def play(
    step_env: Any, reset_env: Any, act: Any, zero_state: Any, agents_per_game: int, steps: int, warmup: int,
    reset_every: int | None,
) -> dict[str, float]:  # fmt: skip
    """Reward per agent-step of one policy on one env, per game, after ``warmup`` steps."""
    import numpy as np

    obs = reset_env()
    totals = None
    for t in range(warmup + steps):
        if reset_every and t % reset_every == 0:
            zero_state()
        obs, rewards = step_env(act(obs))
        if t >= warmup:
            r = np.asarray(rewards, dtype=np.float64).reshape(-1, agents_per_game).sum(1)
            totals = r if totals is None else totals + r
    assert totals is not None
    return rate([float(x) / (steps * agents_per_game) for x in totals])


def worker(a: argparse.Namespace) -> dict[str, Any]:
    """Inside PufferLib's interpreter: the four cells."""
    import numpy as np
    import torch

    peer.use_our_package()
    import pufferlib.pufferl as pl
    import pufferlib.pytorch

    from appliance import ocean
    from appliance import vector as our_vector
    from appliance.config import resolve
    from appliance.train import checkpoint
    from appliance.train.evaluate import check_env, config_of_run, saved_config
    from appliance.train.make import make_policy

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    argv, sys.argv = sys.argv, sys.argv[:1]  # PufferLib's load_config reads the command line
    try:
        args = pl.load_config(peer.ENVS[a.env][0])
    finally:
        sys.argv = argv
    args["train"]["device"] = "cpu"
    args["vec"] = {"backend": "Serial", "num_envs": 1}
    args["env"]["num_envs"] = a.games
    horizon = int(args["train"]["bptt_horizon"])

    # the two envs, behind one interface: reset() -> obs, step(actions) -> (obs, rewards)
    pl_vec = pl.load_env(peer.ENVS[a.env][0], args)
    per_game_pl = pl_vec.num_agents // a.games

    run_dir = a.ours.resolve()
    model = run_dir / checkpoint.MODEL if run_dir.is_dir() else run_dir
    run_dir = model.parent
    saved = saved_config(run_dir)
    cfg = resolve(env=a.env, profile="cpu", config_file=None, overrides=[])
    cfg = config_of_run(cfg, run_dir, saved)
    ckpt = checkpoint.read(model)
    check_env(cfg, model, ckpt["meta"], saved)
    known = ocean.describe(a.env)["params"]
    env_params = {k: v for k, v in (saved.get("env") or {}).items() if k in known}
    dropped = sorted(set(saved.get("env") or {}) - set(known))
    if dropped:  # e.g. target's max_ticks, from before it stopped ending
        peer.log(f"our run's env keys {', '.join(dropped)} are no longer {a.env}'s; played with its defaults")
    our_vec = our_vector.make(a.env, num_envs=a.games, num_threads=1, seed=a.seed, **env_params)
    per_game_ours = our_vec.num_agents // a.games
    ours_reset_state = bool((saved.get("train") or {}).get("reset_state", False))
    our_horizon = int((saved.get("train") or {}).get("bptt_horizon", horizon))

    our_actions = (our_vec.num_agents, *(our_vec.single_action_space.shape or ()))
    envs = {
        "pufferlib": (
            lambda: pl_vec.reset(seed=a.seed)[0],
            # each env's own joint action shape: PufferLib's go refuses (agents, 1) for (agents,)
            lambda act: pl_vec.step(np.asarray(act).reshape(pl_vec.action_space.shape))[:2],
            per_game_pl,
            pl_vec.num_agents,
        ),
        "ours": (
            lambda: our_vec.reset(a.seed)[0],
            lambda act: our_vec.step(np.asarray(act, dtype=np.int32).reshape(our_actions))[:2],
            per_game_ours,
            our_vec.num_agents,
        ),
    }

    # PufferLib's policy, as its eval builds it
    args["load_model_path"] = str(a.pufferlib_model)
    try:
        pl_policy = pl.load_policy(args, pl_vec).eval()
    except RuntimeError as e:  # a state dict of another env's policy: torch lists every tensor
        raise peer.PeerError(
            f"--pufferlib-model {a.pufferlib_model} does not fit PufferLib's {a.env} policy "
            f"({str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else e})"
        ) from None

    # ours, as our eval builds it
    our_policy = make_policy(cfg, our_vec)
    checkpoint.load_weights(our_policy, model, ckpt["model"])
    our_policy.eval()

    def pufferlib_agent(n: int) -> tuple[Any, Any]:
        state: dict[str, Any] = {}

        def zero() -> None:
            state.update(
                lstm_h=torch.zeros(n, pl_policy.hidden_size), lstm_c=torch.zeros(n, pl_policy.hidden_size)
            )

        def act(obs: Any) -> Any:
            with torch.no_grad():
                logits, _ = pl_policy.forward_eval(torch.as_tensor(np.asarray(obs)), state)
                action, _, _ = pufferlib.pytorch.sample_logits(logits)
            return action.cpu().numpy().reshape(n, -1)

        zero()
        return act, zero

    def our_agent(n: int) -> tuple[Any, Any]:
        holder: dict[str, Any] = {}

        def zero() -> None:
            holder["state"] = our_policy.initial_state(n)

        def act(obs: Any) -> Any:
            with torch.no_grad():
                out, _, holder["state"] = our_policy.step(torch.as_tensor(np.asarray(obs)), holder["state"])
                action, _ = our_policy.sample(out)
            return our_policy.env_actions(action).numpy().reshape(n, -1)

        zero()
        return act, zero

    cells: dict[str, dict[str, Any]] = {}
    try:
        for policy_name, make_agent, every in (
            ("pufferlib", pufferlib_agent, horizon),
            ("ours", our_agent, our_horizon if ours_reset_state else None),
        ):
            for env_name, (reset_env, step_env, per_game, n) in envs.items():
                torch.manual_seed(a.seed)
                act, zero = make_agent(n)
                cell = play(step_env, reset_env, act, zero, per_game, a.steps, a.warmup, every)
                cells[f"{policy_name} policy on {env_name} env"] = cell
                peer.log(
                    f"{policy_name} policy on {env_name} env: {cell['mean']:.5f} +- {cell['stderr']:.5f}"
                )
    finally:
        our_vec.close()
        pl_vec.close()
    return {
        "env": a.env,
        "metric": "reward per agent-step",
        "games": a.games,
        "steps": a.steps,
        "warmup": a.warmup,
        "seed": a.seed,
        "pufferlib_model": str(a.pufferlib_model),
        "ours": str(model),
        "our_env_params": env_params,
        "pufferlib_env_params": {k: v for k, v in args["env"].items()},
        "state_zeroed_every": {"pufferlib": horizon, "ours": our_horizon if ours_reset_state else None},
        "cells": cells,
    }


def main(argv: list[str] | None = None) -> int:
    count = tool_cli.number(1, 10**7, integer=True)
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("env", choices=sorted(peer.ENVS))
    ap.add_argument(
        "--pufferlib-model", type=tool_cli.path, required=True, help="a model_*.pt of PufferLib's trainer"
    )
    ap.add_argument(
        "--ours", type=tool_cli.path, required=True, help="our run folder (its model.pt) or a checkpoint"
    )
    ap.add_argument("--games", type=count, default=128)
    ap.add_argument("--steps", type=count, default=4096, help="steps counted per game, after the warm-up")
    ap.add_argument("--warmup", type=tool_cli.number(0, 10**7, integer=True), default=WARMUP)
    ap.add_argument("--seed", type=peer.SEED, default=0)
    ap.add_argument("--cache", type=tool_cli.path, default=peer.default_cache())
    ap.add_argument("--out", type=tool_cli.path, required=True, help="the cells as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    return tool_cli.guarded(lambda: run_command(a, argv))


def run_command(a: argparse.Namespace, argv: list[str] | None) -> int:
    """Check the arguments, then play the games here (``--worker``) or in PufferLib's interpreter."""
    tool_cli.check_output(a.out, ours=tool_cli.written_by("peer_crossplay"))
    for path, what in ((a.pufferlib_model, "--pufferlib-model"), (a.ours, "--ours")):
        if not path.exists():
            raise peer.PeerError(f"{what} {path}: no such file or folder")
    if a.worker:
        data = worker(a)
        data["command"] = " ".join(["python tools/peer_crossplay.py", *(argv or sys.argv[1:])]).replace(
            " --worker", ""
        )
        peer.write_report(data, a.out)
        return 0
    src = a.cache / f"pufferlib-{peer.VERSION}"
    py = a.cache / "venv" / "bin" / "python"
    if not py.exists() or not (src / "pufferlib").exists():
        raise peer.PeerError(
            f"PufferLib is not built in {a.cache}: run `python tools/pufferlib_peer.py build --envs {a.env}` first"
        )
    env_vars = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(peer.REPO)])}
    given, rest = [], list(argv if argv is not None else sys.argv[1:])
    while rest:  # the user's --out is passed on resolved, once
        x = rest.pop(0)
        if x == "--out":
            rest = rest[1:]
        elif not x.startswith("--out="):
            given.append(x)
    # paths resolved here: the worker runs in PufferLib's folder, where it finds its resources
    given = [str(Path(x).resolve()) if not x.startswith("-") and Path(x).exists() else x for x in given]
    cmd = [str(py), "-W", "ignore::DeprecationWarning", str(Path(__file__).resolve()), *given,
           "--out", str(a.out.resolve()), "--worker"]  # fmt: skip
    return subprocess.call(
        cmd, cwd=a.cache / f"pufferlib-{peer.VERSION}", env=env_vars, preexec_fn=peer.dies_with_us()
    )


if __name__ == "__main__":
    sys.exit(main())
