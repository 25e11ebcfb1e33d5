"""The standard Atari preprocessing (as SB3's ``make_atari_env`` and CleanRL's ``ppo_atari`` feed the
Nature CNN): gymnasium's ``AtariPreprocessing`` at its defaults, then ``FrameStackObservation(4)``.

:class:`AtariFrames` is ``AtariPreprocessing`` with its defaults (up to 30 no-ops at reset, each
action repeated 4 frames, the last two max-pooled, grayscale, 84x84 by area averaging, rewards
summed, no life-loss terminals) written in numpy: gymnasium's needs OpenCV only for its
``INTER_AREA`` resize, which is two small matrix products here (:func:`area_matrix`), so ale-py is
the only package Atari needs. ``vec.preprocess`` picks it (``auto``: for ALE ids).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from appliance.errors import ConfigError

SCREEN = 84
FRAME_SKIP = 4
NOOP_MAX = 30
STACK = 4


def area_matrix(size: int, out: int) -> np.ndarray:
    """The (out, size) weights of an area resize along one axis: output cell ``i`` averages the input
    over ``[i * size / out, (i + 1) * size / out)``, each input cell weighted by its overlap (OpenCV's
    ``INTER_AREA`` when shrinking)."""
    edges = np.arange(out + 1) * (size / out)
    cells = np.arange(size)
    overlap = np.clip(
        np.minimum(edges[1:, None], cells[None, :] + 1) - np.maximum(edges[:-1, None], cells[None, :]),
        0,
        None,
    )
    return (overlap / (size / out)).astype(np.float32)


class AtariFrames(gymnasium.Wrapper):
    """``AtariPreprocessing``'s defaults on an ALE env made with ``frameskip=1``: see the module docstring."""

    def __init__(self, env: gymnasium.Env, noop_max: int = NOOP_MAX, frame_skip: int = FRAME_SKIP) -> None:
        super().__init__(env)
        inner = env.unwrapped
        if getattr(inner, "_frameskip", 1) != 1:
            raise ConfigError(
                f"vec.preprocess atari repeats each action {frame_skip} frames itself: make the env with "
                f"frameskip 1 (leave env.frameskip out) or use --vec.preprocess none"
            )
        if not hasattr(inner, "ale"):
            raise ConfigError(
                f"vec.preprocess atari needs an Arcade Learning Environment game (ale-py), not "
                f"{type(inner).__name__}; use --vec.preprocess none"
            )
        self.noop_max, self.frame_skip = noop_max, frame_skip
        height, width = inner.ale.getScreenDims()
        self._rows, self._cols = area_matrix(height, SCREEN), area_matrix(width, SCREEN).T.copy()
        self._frames = np.zeros((2, height, width), np.uint8)
        self.observation_space = spaces.Box(0, 255, (SCREEN, SCREEN), np.uint8)

    def _grab(self, slot: int) -> None:
        self.env.unwrapped.ale.getScreenGrayscale(self._frames[slot])

    def _obs(self) -> np.ndarray:
        pooled = np.maximum(self._frames[0], self._frames[1]).astype(np.float32)
        return np.clip(np.rint(self._rows @ pooled @ self._cols), 0, 255).astype(np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        _, info = self.env.reset(seed=seed, options=options)
        noops = int(self.env.unwrapped.np_random.integers(1, self.noop_max + 1)) if self.noop_max > 0 else 0
        for _ in range(noops):
            _, _, terminated, truncated, step_info = self.env.step(0)
            info.update(step_info)
            if terminated or truncated:
                _, info = self.env.reset(seed=seed, options=options)
        self._grab(0)
        self._frames[1].fill(0)
        return self._obs(), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        total, terminated, truncated, info = 0.0, False, False, {}
        for t in range(self.frame_skip):
            _, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
            if t >= self.frame_skip - 2:  # the last two frames, max-pooled
                self._grab(self.frame_skip - 1 - t)
        return self._obs(), total, terminated, truncated, info


def make_atari(env_id: str, kwargs: dict[str, Any]) -> gymnasium.Env:
    """``gymnasium.make(env_id, frameskip=1, obs_type="grayscale", **kwargs)`` wrapped in
    :class:`AtariFrames` and ``FrameStackObservation(4)``: observations (4, 84, 84) uint8."""
    if "frameskip" in kwargs and kwargs["frameskip"] != 1:
        raise ConfigError(
            f"env.frameskip {kwargs['frameskip']!r}: vec.preprocess atari repeats each action {FRAME_SKIP} "
            "frames itself (max-pooling the last two); leave env.frameskip out, or use --vec.preprocess none"
        )
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # not a banner per env on stderr
    env = gymnasium.make(env_id, **{"frameskip": 1, "obs_type": "grayscale", **kwargs})
    return gymnasium.wrappers.FrameStackObservation(AtariFrames(env), STACK)


def vector(game: str = "pong", num_envs: int = 8, **kwargs: Any) -> Any:
    """ale-py's ``AtariVectorEnv`` (its envs stepped by C++ threads, preprocessed in C++ as above:
    (4, 84, 84) uint8 frames), for ``--env appliance.emulation.atari:vector --env.game pong``.

    ``game`` is an ALE ROM name (``pong``, ``space_invaders``) or an id (``ALE/Pong-v5``). Defaults
    follow the ``-v5`` ids and :func:`make_atari`: sticky actions 0.25, rewards not clipped; the
    episodes reset on the same step they end (``autoreset_mode`` SameStep). ``kwargs`` go to
    ``AtariVectorEnv``."""
    import re

    try:
        from ale_py.vector_env import AtariVectorEnv
    except ImportError:
        raise ConfigError(
            "appliance.emulation.atari:vector needs ale-py: pip install 'ale-py>=0.10'"
        ) from None
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    if "/" in game or "-v" in game:  # ALE/Pong-v5 -> pong
        base = game.split("/")[-1].split("-v")[0]
        game = re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()
    options = {"repeat_action_probability": 0.25, "reward_clipping": False, "autoreset_mode": "SameStep"}
    try:
        return AtariVectorEnv(game, int(num_envs), **{**options, **kwargs})
    except (RuntimeError, ValueError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"AtariVectorEnv({game!r}, {num_envs}): {first}") from None
