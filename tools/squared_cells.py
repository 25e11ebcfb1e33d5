#!/usr/bin/env python3
"""Which targets a trained squared policy reaches: success per target cell.

    python tools/squared_cells.py experiments/p4-squared100-s0 --episodes 50000

squared's perf is the share of episodes that reach the target. A run whose perf levels off at
0.9917 = 119/120 may be missing one cell of the 120 a target can take on the 11x11 grid; this plays
the run's newest weights (its own config, sampled actions as in training, ``--num-envs`` games at
once; the first ceil(episodes / num-envs) episodes of every game, so long, missed ones count as
much as short ones) and counts, per cell, the episodes whose target sat there and how many ended with +1. Prints
the grid of success rates and the cells below ``--below``; ``--out`` keeps the counts as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package


class Tally:
    """Episodes and reached targets per cell, counting each game's first ``per_game`` episodes only.

    Stopping at a total count instead keeps the short episodes and cuts off the long ones: a target
    that is missed runs to the time limit (3 x size ticks), one that is reached ends in a few, so a
    cell never reached was under-counted, or (with few episodes per game) not counted at all."""

    def __init__(self, size: int, games: int, per_game: int) -> None:
        import numpy as np

        self.size, self.per_game = size, per_game
        self.tries = np.zeros((size, size), dtype=np.int64)
        self.wins = np.zeros((size, size), dtype=np.int64)
        self.counted = np.zeros(games, dtype=np.int64)

    def add(self, ended: Any, targets: Any, rewards: Any) -> None:
        """Games ``ended`` finished an episode whose target cell was ``targets[i]``, reward ``rewards[i]``."""
        for i in ended:
            if self.counted[i] >= self.per_game:
                continue
            self.counted[i] += 1
            r, c = divmod(int(targets[i]), self.size)
            self.tries[r, c] += 1
            self.wins[r, c] += int(rewards[i] > 0)

    @property
    def done(self) -> bool:
        return bool((self.counted >= self.per_game).all())


ACTIONS = ("stay", "down", "up", "left", "right")  # envs/squared.h's Discrete(5)


class Paths:
    """The steps of episodes whose target sits in one cell: where the agent was, the probability the
    policy gave each action there, and what it drew; an episode is kept once it ends (``wanted`` of them)."""

    def __init__(self, cell: int, games: int, wanted: int) -> None:
        self.cell, self.wanted = cell, wanted
        self.running: list[list[tuple[int, list[float], int]]] = [[] for _ in range(games)]
        self.kept: list[tuple[float, list[tuple[int, list[float], int]]]] = []

    def step(self, targets: Any, positions: Any, probs: Any, actions: Any) -> None:
        """One step of every game: ``targets``/``positions`` its cells before the step, ``probs`` [games, 5]."""
        for i in (k for k, t in enumerate(targets) if int(t) == self.cell):
            self.running[i].append((int(positions[i]), [float(p) for p in probs[i]], int(actions[i])))

    def end(self, ended: Any, rewards: Any) -> None:
        for i in ended:
            if self.running[i] and len(self.kept) < self.wanted:
                self.kept.append((float(rewards[i]), self.running[i]))
            self.running[i] = []

    @property
    def done(self) -> bool:
        return len(self.kept) >= self.wanted


class _Played:
    """A trained run's policy and a vector of squared games under its own config: ``with _Played(...) as p``."""

    def __init__(self, run_dir: Path, num_envs: int, seed: int) -> None:
        self.run_dir, self.num_envs, self.seed = run_dir, num_envs, seed

    def __enter__(self) -> _Played:
        import torch

        from appliance import vector
        from appliance.config import resolve
        from appliance.config.runs import pick_profile
        from appliance.train import checkpoint
        from appliance.train.evaluate import check_env, config_of_run, saved_config
        from appliance.train.make import make_policy

        run_dir = self.run_dir
        saved = saved_config(run_dir)
        if saved.get("env_name") not in (None, "squared"):
            raise tool_cli.ToolError(f"{run_dir} is a run of {saved['env_name']}, not squared")
        cfg = resolve(  # the run's own config.yaml, as train --resume takes it, with this many games at once
            env="squared", profile=pick_profile(None), overrides=["--vec.num-envs", str(self.num_envs)],
            resumed=run_dir / "config.yaml",
        )  # fmt: skip
        path = run_dir / checkpoint.MODEL
        ckpt = checkpoint.read(path)
        check_env(cfg, path, ckpt["meta"], saved)
        self.vec = vector.make_from_config(config_of_run(cfg, run_dir, saved))
        try:
            self.size = round(self.vec.single_observation_space.shape[0] ** 0.5)
            self.policy = make_policy(cfg, self.vec)
            checkpoint.load_weights(self.policy, path, ckpt["model"])
            self.policy.eval()
            torch.manual_seed(self.seed)
        except BaseException:
            self.vec.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.vec.close()

    def play(self, each: Any, done: Any) -> None:
        """Steps every game with sampled actions (as in training) until ``done()``; after each step
        ``each(obs_before, out, action, rewards, ended)``."""
        import numpy as np
        import torch

        vec, policy = self.vec, self.policy
        state = policy.initial_state(vec.num_agents)
        obs, _ = vec.reset(self.seed)
        while not done():
            with torch.no_grad():
                out, _, state = policy.step(torch.as_tensor(obs), state)
                action, _ = policy.sample(out)
            before = obs.reshape(vec.num_agents, -1).copy()
            obs, rew, term, trunc, _ = vec.step(policy.env_actions(action).numpy())
            each(before, out, action, rew, np.flatnonzero(np.asarray(term) | np.asarray(trunc)))


def paths(
    run_dir: Path, row: int, col: int, episodes: int, num_envs: int, seed: int
) -> tuple[int, list[Any]]:
    """The grid's size and ``episodes`` episodes whose target is at (row, col), step by step (:class:`Paths`)."""
    import numpy as np
    import torch

    with _Played(run_dir, num_envs, seed) as played:
        size = played.size
        if not (0 <= row < size and 0 <= col < size):
            raise tool_cli.ToolError(f"--show {row},{col}: off the {size}x{size} grid")
        rec = Paths(row * size + col, played.vec.num_agents, episodes)

        def each(before: Any, out: Any, action: Any, rew: Any, ended: Any) -> None:
            probs = torch.softmax(out.float(), -1).numpy()
            rec.step(np.argmax(before == 2, axis=1), np.argmax(before == 1, axis=1), probs, action.numpy())
            rec.end(ended, rew)

        played.play(each, lambda: rec.done)
        return size, rec.kept


def cells(run_dir: Path, episodes: int, num_envs: int, seed: int) -> dict[str, list[list[int]]]:
    import numpy as np

    with _Played(run_dir, num_envs, seed) as played:
        n = played.vec.num_agents
        tally = Tally(played.size, n, -(-episodes // n))
        target = np.zeros(n, dtype=np.int64)

        def each(before: Any, out: Any, action: Any, rew: Any, ended: Any) -> None:
            target[:] = np.argmax(before == 2, axis=1)  # the target of the episode this step belonged to
            tally.add(ended, target, rew)

        played.play(each, lambda: tally.done)
        return {"tries": tally.tries.tolist(), "wins": tally.wins.tolist()}


def cell_arg(text: str) -> tuple[int, int]:
    try:
        row, col = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not ROW,COL (e.g. 0,7)") from None
    return row, col


def show(a: Any) -> None:
    row, col = a.show
    size, kept = paths(a.run_dir, row, col, a.show_episodes, a.num_envs, a.seed)
    for k, (reward, steps) in enumerate(kept, 1):
        print(f"episode {k}, target at row {row} col {col}: reward {reward:+g} after {len(steps)} steps")
        for pos, probs, action in steps:
            shown = " ".join(f"{name} {p:.2f}" for name, p in zip(ACTIONS, probs, strict=True))
            print(f"  at row {pos // size} col {pos % size}: {shown} -> {ACTIONS[action]}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        record = {"run": str(a.run_dir), "cell": [row, col], "seed": a.seed,
                  "episodes": [{"reward": r, "steps": [{"cell": [p // size, p % size], "probs": pr, "action": ac}
                                                      for p, pr, ac in st]} for r, st in kept]}  # fmt: skip
        a.out.write_text(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=tool_cli.path)
    ap.add_argument("--episodes", type=tool_cli.number(1, 10**8, integer=True), default=50_000,
                    help="at least this many: each game's first ceil(N / num-envs) episodes (default: %(default)s)")  # fmt: skip
    ap.add_argument("--num-envs", type=tool_cli.number(1, 65536, integer=True), default=1024)
    ap.add_argument("--seed", type=tool_cli.number(0, 2**31 - 1, integer=True), default=0)
    ap.add_argument("--below", type=tool_cli.number(0, 1), default=0.9, help="list cells under this rate")
    ap.add_argument("--out", type=tool_cli.path, default=None)
    ap.add_argument("--show", type=cell_arg, default=None, metavar="ROW,COL",
                    help="instead: print episodes whose target is this cell, step by step (where the agent "
                    "was, the policy's probabilities, the action drawn)")  # fmt: skip
    ap.add_argument("--show-episodes", type=tool_cli.number(1, 100, integer=True), default=2)
    a = ap.parse_args(argv)

    def body() -> None:
        if not (a.run_dir / "model.pt").is_file():
            raise tool_cli.ToolError(f"{a.run_dir}: no model.pt (a run folder of puffer-bench train)")
        if a.show is not None:
            show(a)
            return
        got = cells(a.run_dir, a.episodes, a.num_envs, a.seed)
        tries, wins = got["tries"], got["wins"]
        total = sum(map(sum, tries))
        print(f"{sum(map(sum, wins)) / total:.4f} of {total} episodes reached their target; per cell:")
        low = []
        for r, row in enumerate(tries):
            line = []
            for c, n in enumerate(row):
                rate = wins[r][c] / n if n else float("nan")
                line.append("  -  " if not n else f"{rate:5.2f}")
                if n and rate < a.below:
                    low.append(f"row {r} col {c}: {wins[r][c]} of {n}")
            print(" ".join(line))
        print(f"cells below {a.below:g}: {'; '.join(low) or 'none'}")
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(
                json.dumps({"run": str(a.run_dir), "episodes": total, "seed": a.seed, **got}) + "\n"
            )

    return tool_cli.guarded(body)


if __name__ == "__main__":
    sys.exit(main())
