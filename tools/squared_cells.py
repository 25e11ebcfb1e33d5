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


def cells(run_dir: Path, episodes: int, num_envs: int, seed: int) -> dict[str, list[list[int]]]:
    import numpy as np
    import torch

    from appliance import vector
    from appliance.cli.common import pick_profile
    from appliance.config import resolve
    from appliance.train import checkpoint
    from appliance.train.evaluate import check_env, config_of_run, saved_config
    from appliance.train.make import make_policy

    saved = saved_config(run_dir)
    if saved.get("env_name") not in (None, "squared"):
        raise tool_cli.ToolError(f"{run_dir} is a run of {saved['env_name']}, not squared")
    cfg = resolve(  # the run's own config.yaml, as train --resume takes it, with this many games at once
        env="squared", profile=pick_profile(None), overrides=["--vec.num-envs", str(num_envs)],
        resumed=run_dir / "config.yaml",
    )  # fmt: skip
    path = run_dir / checkpoint.MODEL
    ckpt = checkpoint.read(path)
    check_env(cfg, path, ckpt["meta"], saved)
    vec = vector.make_from_config(config_of_run(cfg, run_dir, saved))
    try:
        size = round(vec.single_observation_space.shape[0] ** 0.5)
        tally = Tally(size, vec.num_agents, -(-episodes // vec.num_agents))
        policy = make_policy(cfg, vec)
        checkpoint.load_weights(policy, path, ckpt["model"])
        policy.eval()
        torch.manual_seed(seed)
        state = policy.initial_state(vec.num_agents)
        obs, _ = vec.reset(seed)
        target = np.argmax(obs.reshape(vec.num_agents, -1) == 2, axis=1)
        while not tally.done:
            with torch.no_grad():
                out, _, state = policy.step(torch.as_tensor(obs), state)
                action, _ = policy.sample(out)
            obs, rew, term, trunc, _ = vec.step(policy.env_actions(action).numpy())
            ended = np.flatnonzero(np.asarray(term) | np.asarray(trunc))
            tally.add(ended, target, rew)
            if len(ended):
                target[ended] = np.argmax(obs.reshape(vec.num_agents, -1)[ended] == 2, axis=1)
        return {"tries": tally.tries.tolist(), "wins": tally.wins.tolist()}
    finally:
        vec.close()


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=tool_cli.path)
    ap.add_argument("--episodes", type=tool_cli.number(1, 10**8, integer=True), default=50_000,
                    help="at least this many: each game's first ceil(N / num-envs) episodes (default: %(default)s)")  # fmt: skip
    ap.add_argument("--num-envs", type=tool_cli.number(1, 65536, integer=True), default=1024)
    ap.add_argument("--seed", type=tool_cli.number(0, 2**31 - 1, integer=True), default=0)
    ap.add_argument("--below", type=tool_cli.number(0, 1), default=0.9, help="list cells under this rate")
    ap.add_argument("--out", type=tool_cli.path, default=None)
    a = ap.parse_args(argv)

    def body() -> None:
        if not (a.run_dir / "model.pt").is_file():
            raise tool_cli.ToolError(f"{a.run_dir}: no model.pt (a run folder of puffer-bench train)")
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
