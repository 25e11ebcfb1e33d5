"""Play a trained policy: episode scores, and frames of the first episode for a GIF."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from appliance.errors import ConfigError
from appliance.train import checkpoint

MAX_STEPS = 1_000_000  # a policy that never ends an episode still returns


def config_of_run(cfg: Any, run_dir: Path) -> Any:
    """``cfg`` with the policy shape the run was trained with (from its saved config.yaml)."""
    saved = run_dir / "config.yaml"
    if saved.is_file():
        import yaml

        cfg.data["policy"].update(yaml.safe_load(saved.read_text()).get("policy", {}))
    return cfg


def play(
    cfg: Any,
    path: Path,
    episodes: int,
    record: bool = False,
    on_episode: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[list[float], list[np.ndarray]]:
    """Run the weights of the checkpoint ``path`` (a file, or a run folder's newest) for ``episodes`` episodes on one env (greedy sampling as trained).

    Returns the scores and, with ``record``, the first episode's frames (Ocean envs render).
    ``on_episode(i, stats)`` is called as each episode ends.
    """
    from appliance import vector
    from appliance.train.trainer import make_policy

    if episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {episodes}")
    path = path / checkpoint.MODEL if path.is_dir() else path
    weights = checkpoint.read(path)["model"]  # a damaged file fails here, before any env starts
    vec = vector.make_from_config(config_of_run(cfg, path.parent))
    try:
        policy = make_policy(cfg, vec)
        checkpoint.load_weights(policy, path, weights)
        policy.eval()
        state = policy.initial_state(vec.num_agents)
        obs, _ = vec.reset(cfg.train.seed)
        frames: list[np.ndarray] = []
        scores: list[float] = []
        ocean = hasattr(vec, "render")
        for _ in range(MAX_STEPS):
            if len(scores) >= episodes:
                break
            if record and ocean and not scores:
                frames.append(vec.render(0).copy())
            with torch.no_grad():
                out, _, state = policy.step(torch.as_tensor(obs), state)
                action, _ = policy.sample(out)
            obs, _, _, _, infos = vec.step(policy.env_actions(action).numpy())  # Box: clipped as in training
            finished = [vec.log()] if ocean else list(infos or ())
            for stats in finished:
                if not stats:
                    continue
                score = stats.get("score", stats.get("episode_return", float("nan")))
                scores.append(float(score))
                if on_episode:
                    on_episode(len(scores), stats)
        return scores, frames
    finally:
        vec.close()
