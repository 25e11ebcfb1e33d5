"""Play a trained policy: episode scores, and frames of the first episode for a GIF."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from appliance.config import check_layer, read_yaml
from appliance.errors import ConfigError
from appliance.train import checkpoint

if TYPE_CHECKING:
    from appliance.config import Config

MAX_STEPS = 1_000_000  # a policy that never ends an episode still returns


def saved_config(run_dir: Path) -> dict[str, Any]:
    """A run folder's config.yaml ({} without one), read as any shared config file is: bounded, one
    line naming the file for damage (:func:`appliance.config.read_yaml`)."""
    saved = run_dir / "config.yaml"
    return read_yaml(saved, "run config") if saved.is_file() else {}


def config_of_run(cfg: Config, run_dir: Path, saved: dict[str, Any] | None = None) -> Config:
    """``cfg`` with the policy shape the run was trained with (from its saved config.yaml) and the preprocessing of its frames (vec.preprocess), each
    value checked against the config's types and ranges before a policy is built from it (a
    damaged or crafted ``hidden_size: 1e6`` would otherwise allocate terabytes). Keys this version
    does not know are left out; a saved policy without ``obs_scale`` predates the key and was
    trained on observations divided by their bounds, one without ``encoder_activation`` with GELU
    after its encoder."""
    saved = saved_config(run_dir) if saved is None else saved
    policy = saved.get("policy") or {}
    if not isinstance(policy, dict):
        raise ConfigError(f"run config {run_dir / 'config.yaml'}: 'policy' must be a mapping of keys")
    if policy:
        policy = {"obs_scale": "bounds", "encoder_activation": "gelu", **policy}
    known = {k: v for k, v in policy.items() if k in cfg.data["policy"]}
    cfg.data["policy"].update(check_layer({"policy": known}, str(run_dir / "config.yaml"))["policy"])
    vec = saved.get("vec") or {}
    if isinstance(vec, dict) and "preprocess" in vec:  # the frames the policy was trained on
        cfg.data["vec"].update(
            check_layer({"vec": {"preprocess": vec["preprocess"]}}, str(run_dir / "config.yaml"))["vec"]
        )
    return cfg


def check_env(cfg: Config, path: Path, meta: dict[str, Any] | None, saved: dict[str, Any]) -> None:
    """Refuse a checkpoint trained on another env than ``cfg``'s, naming both (its weights would not
    fit, and the error would be a list of tensor names)."""
    trained_on = (meta or {}).get("env") or saved.get("env_name")
    if isinstance(trained_on, str) and cfg.env_name is not None and trained_on != cfg.env_name:
        raise ConfigError(
            f"checkpoint {path} was trained on env {trained_on}, not {cfg.env_name}: pass a run of "
            f"{cfg.env_name} with --load-model-path RUN (a run folder, run id or model.pt), or eval {trained_on}"
        )


def play(
    cfg: Config,
    path: Path,
    episodes: int,
    record: bool = False,
    on_episode: Callable[[int, dict[str, float]], None] | None = None,
    greedy: bool = False,
) -> tuple[list[float], list[np.ndarray]]:
    """Run the weights of the checkpoint ``path`` (a file, or a run folder's newest) for ``episodes``
    episodes on one env: actions sampled as in training, or with ``greedy`` the most likely one
    (:meth:`~appliance.train.policy.Policy.mode`).

    Returns the scores and, with ``record``, the first episode's frames (Ocean envs render).
    ``on_episode(i, stats)`` is called as each episode ends.
    """
    from appliance import vector
    from appliance.train.make import make_policy

    if episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {episodes}")
    path = path / checkpoint.MODEL if path.is_dir() else path
    ckpt = checkpoint.read(path)  # a damaged file fails here, before any env starts
    saved = saved_config(path.parent)
    check_env(cfg, path, ckpt["meta"], saved)
    weights = ckpt["model"]
    vec = vector.make_from_config(config_of_run(cfg, path.parent, saved))
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
                action = policy.mode(out) if greedy else policy.sample(out)[0]
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
