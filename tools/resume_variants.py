"""Continue a run from a checkpoint in one of three ways, to measure what a resume changes.

A resume (``puffer-bench train --resume RUN``) restores everything an update reads
(tests/test_train.py checks a resumed trainer's update is bit-identical to the saved one's) but
restarts every game at once. This tool continues a run folder that holds a ``model.pt`` and the
run's ``config.yaml`` (copy a snapshot there first) until ``--stop-steps``, after one of:

* ``plain``: nothing, as ``train --resume`` does;
* ``warm``: ``--rollouts`` rollouts with the restored policy and no update, so the games run on
  before training does (their steps are not counted: the run's counters, learning-rate schedule and
  action keys go on from the checkpoint's);
* ``stagger``: ``2 x --episode-length`` steps with no update, agent ``i`` playing random actions for
  its first ``r_i ~ U(0, episode-length)`` of them and the restored policy after, so the restarted
  games' episodes start at spread times, not all at once.

Metrics go to the run folder's ``metrics.jsonl`` as a train run's do; ``python tools/pufferlib_peer.py
ours RUN --env ENV --out REPORT.json`` makes a report of them. docs/lab/learning.md ("What a resume
changes") has the runs this measured::

    python tools/resume_variants.py experiments/rs-d --mode stagger --episode-length 1250 --stop-steps 62e6
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tool_cli  # a sibling script, not a package

MODES = ("plain", "warm", "stagger")


def stagger(trainer: Any, episode_length: int, seed: int = 0) -> None:
    """Play ``2 x episode_length`` steps with no update: random actions for each agent's first
    ``U(0, episode_length)`` steps, the restored policy after (its recurrent state zeroed every
    horizon, as a rollout does)."""
    import numpy as np

    from appliance.train.rollout import recv_to_device

    vec, n = trainer.vec, trainer.vec.num_agents
    rng = np.random.default_rng(seed)
    lead = rng.integers(0, episode_length, n)
    space = vec.single_action_space
    if not hasattr(space, "n"):
        raise tool_cli.ToolError(
            f"--mode stagger draws random discrete actions; this env's actions are {space}"
        )
    for t in range(2 * episode_length):
        if t % trainer.horizon == 0:
            for s in trainer.state:
                s.zero_()
        obs, rewards, terms, truncs, infos, ids, masks = vec.recv()
        trainer.episodes.collect(infos)
        ids = np.asarray(ids)
        step = recv_to_device(
            obs, rewards, terms, truncs, ids, masks, trainer.device, None, trainer.hp.reward_clamp
        )
        state = tuple(s[step.ids] for s in trainer.state)
        action, _, _ = trainer.act(step.obs, state, step.ids, step=t)
        actions = trainer.policy.env_actions(action).cpu().numpy()
        random = t < lead[ids]
        actions[random] = rng.integers(0, int(space.n), int(random.sum()))
        vec.send(actions)


def body(a: Any) -> int:
    from appliance import vector
    from appliance.config import resolve
    from appliance.config.files import read_yaml
    from appliance.train import loop
    from appliance.train.trainer import Trainer

    run = a.run
    saved = run / "config.yaml"
    if not (run / "model.pt").is_file() or not saved.is_file():
        raise tool_cli.ToolError(f"{run} needs a model.pt and the run's config.yaml")
    env = read_yaml(saved, "the run's config").get("env_name")
    cfg = resolve(env=env, profile=read_yaml(saved).get("profile"), resumed=saved)
    trainer = Trainer(cfg, vector.make_from_config(cfg), run_dir=run)
    try:
        trainer.load_checkpoint(run / "model.pt", resume=True)
        start = trainer.global_step
        if a.mode == "warm":
            for i in range(a.rollouts):
                trainer.evaluate()
                print(f"warm rollout {i + 1}/{a.rollouts}: {trainer.env_stats}", flush=True)
        elif a.mode == "stagger":
            stagger(trainer, a.episode_length)
        trainer.global_step = trainer._start_step = start
        trainer.start_time = time.time()
        result = loop.run(trainer, loop.Stop(total_timesteps=int(a.stop_steps)), checkpoint_interval=10**6)
        print(f"{a.mode}: {result.reason} at {trainer.global_step:,} agent-steps", flush=True)
    finally:
        trainer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = tool_cli.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=tool_cli.path, help="a run folder with model.pt and config.yaml")
    ap.add_argument("--mode", choices=MODES, default="plain")
    ap.add_argument("--rollouts", type=tool_cli.number(1, 10**5, integer=True), default=40,
                    help="warm: rollouts played before training (default 40)")  # fmt: skip
    ap.add_argument("--episode-length", type=tool_cli.number(1, 10**6, integer=True), default=1250,
                    help="stagger: the run's mean episode length at the checkpoint (default 1250)")  # fmt: skip
    ap.add_argument("--stop-steps", type=tool_cli.number(1, 1e12), required=True,
                    help="agent-steps to stop at (the run's count, checkpoint included)")  # fmt: skip
    return tool_cli.guarded(lambda: body(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
