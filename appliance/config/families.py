"""Defaults by family for the envs a user brings: a Gymnasium id or an import path that has no YAML
of its own gets the settings of its family, each a YAML under ``defaults/families/`` whose comment
names the measured run that chose it (as rl-zoo keeps per-env settings and CleanRL one script per
family). The family is read from the env's registration and spaces:

* ``atari``: an Arcade Learning Environment game, or any image observation (the Nature CNN);
* ``multiagent``: a PettingZoo parallel env;
* ``continuous``: Box actions;
* ``classic``: anything else (discrete actions, flat observations).

An Ocean env, or a Gymnasium id with its own YAML under ``defaults/gymnasium/``, has no family: its
own values were measured for it. ``--family NAME`` picks one (``none``: the plain defaults).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.config import gymids
from appliance.config.images import image_layout
from appliance.config.layers import COMMAND_LINE, CONFIG_FILE
from appliance.errors import ConfigError
from appliance.paths import defaults_dir, repo_path

FAMILIES = ("classic", "continuous", "atari", "multiagent")
CHOICES = ("auto", *FAMILIES, "none")


@dataclass(frozen=True)
class Family:
    """The family a run's config takes its defaults from: ``name`` (None: no family layer), why, and
    its YAML."""

    name: str | None
    reason: str

    @property
    def path(self) -> Path | None:
        return family_path(self.name) if self.name else None

    def describe(self) -> str:
        """One line for the run's header: the family, why, and how to change it."""
        if self.name is None:
            return f"family: none ({self.reason})"
        return f"family: {self.name} ({self.reason}; {repo_path(self.path) if self.path else ''}; --family NAME to change)"


def family_path(name: str) -> Path:
    return defaults_dir() / "families" / f"{name}.yaml"


def own_yaml(env: str) -> Path | None:
    """A Gymnasium id's own YAML of tuned values (``defaults/gymnasium/<id>.yaml``), or None."""
    path = defaults_dir() / "gymnasium" / f"{env}.yaml"
    return path if path.is_file() else None


def choose(env: str, given: str | None = None, timeout: float = 30.0) -> Family:
    """The family of the non-Ocean env ``env``: ``given`` (``--family``) unless it is None or ``auto``,
    else :func:`detect`'s (making the env under ``timeout`` s, ``vec.recv_timeout``)."""
    if given not in (None, "auto"):
        if given not in CHOICES:
            import difflib

            close = difflib.get_close_matches(str(given), CHOICES, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(f"unknown family '{given}'; {hint}choose one of: {', '.join(CHOICES)}")
        if given == "none":
            return Family(None, "--family none: the plain defaults")
        return Family(given, "--family")
    return detect(env, timeout)


def detect(env: str, timeout: float = 30.0) -> Family:
    """The family ``env``'s registration and spaces call for (see the module docstring). The env is
    made in a helper thread: a constructor that never returns is named after ``timeout`` s, as the
    vector names it."""
    from appliance.config import gymids

    own = own_yaml(env)
    if own is not None:
        return Family(None, f"its own YAML {repo_path(own)}")
    if gymids.is_ale(env):
        return Family("atari", "an Arcade Learning Environment game")
    probed = _spaces_within(env, timeout)
    if isinstance(probed, str):
        return Family(None, f"its spaces could not be read: {probed}")
    return Family(*classify(*probed))


def classify(observation: Any, action: Any, agents: int | None) -> tuple[str, str]:
    """(family, why) for an env with these (per-agent) spaces; ``agents``: a PettingZoo parallel
    env's agent count, None for a Gymnasium env."""
    from gymnasium import spaces

    if agents is not None:
        return "multiagent", f"a PettingZoo parallel env of {agents} agents"
    shape = getattr(observation, "shape", None)
    layout = image_layout(shape) if isinstance(observation, spaces.Box) and shape else None
    if layout is not None:
        return "atari", f"image observations: {layout.describe()}"
    if isinstance(action, spaces.Box):
        return "continuous", f"Box actions {describe_space(action)}"
    return "classic", f"{describe_space(action)} actions, observations {describe_space(observation)}"


def describe_space(space: Any) -> str:
    """``Box(4,) float32``, ``Discrete(2)``: a space in a few characters."""
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if type(space).__name__ == "Box":
        return f"Box{tuple(shape)} {dtype}"
    return repr(space)


def _spaces_within(env: str, timeout: float) -> tuple[Any, Any, int | None] | str:
    """:func:`_spaces` in a daemon thread; a :class:`ConfigError` naming the env when it has not
    returned after ``timeout`` s (the thread is left behind, as the vector's probe leaves its own)."""
    import threading

    result: list[Any] = []
    thread = threading.Thread(
        target=lambda: result.append(_spaces(env)), name="puffer-env-probe", daemon=True
    )
    thread.start()
    thread.join(timeout)
    if not result:
        raise ConfigError(
            f"creating env '{env}' did not return within {timeout:g} s (vec.recv_timeout); "
            "fix its constructor, or raise --vec.recv-timeout if it is only slow"
        )
    return result[0]


@functools.lru_cache(maxsize=64)
def _spaces(env: str) -> tuple[Any, Any, int | None] | str:
    """(observation space, action space, agents or None) of ``env`` as made without parameters (a
    Gymnasium id, ``module:factory`` or ``module:Env-v0``), or the error that making it raised, in
    one line (the vector reports it in full when it makes the env)."""
    import importlib

    import gymnasium

    try:
        if ":" in env:
            module, _, attr = env.partition(":")
            target: Any = importlib.import_module(module)
            if attr in gymnasium.registry:
                gymids.quiet_physics(attr)
                made = gymnasium.make(attr)
            else:
                for part in attr.split("."):
                    target = getattr(target, part)
                # a VectorEnv factory (appliance.vector.gymvec) is read with one env
                made = target(num_envs=1) if _takes_num_envs(target) else target()
        else:
            gymids.quiet_physics(env)
            made = gymnasium.make(env)
        try:
            return _read_spaces(made)
        finally:
            made.close()
    except Exception as e:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def _takes_num_envs(factory: Any) -> bool:
    import inspect

    try:
        return "num_envs" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def _read_spaces(env: Any) -> tuple[Any, Any, int | None]:
    from gymnasium.vector import VectorEnv
    from pettingzoo import ParallelEnv

    if isinstance(env, VectorEnv):  # a VectorEnv source: its spaces per env
        return env.single_observation_space, env.single_action_space, None

    if isinstance(env, ParallelEnv):
        agents = list(env.possible_agents)
        return env.observation_space(agents[0]), env.action_space(agents[0]), len(agents)
    return env.observation_space, env.action_space, None


def fit_minibatch(config: Any, num_agents: int) -> tuple[int, str | None]:
    """The minibatch a trainer with ``num_agents`` agents uses, and a line saying so when it is not
    ``train.minibatch_size``. A family's (or a profile's) minibatch is sized for the envs it sets; a
    source that brings its own count (a VectorEnv factory without ``num_envs``, a multi-agent env)
    may make a smaller batch (``batch_size auto``: one ``bptt_horizon`` segment per agent). Then the
    minibatch becomes the most whole segments, at most the configured ones, that divide the batch.
    A minibatch the user set (command line, ``--config``) is kept, and a misfit is refused as before."""
    train = config.train
    horizon, minibatch = int(train.bptt_horizon), int(train.minibatch_size)
    segments = int(num_agents)
    if train.batch_size != "auto" or minibatch % horizon or (segments * horizon) % minibatch == 0:
        return minibatch, None
    origin = config.origin("train", "minibatch_size") if hasattr(config, "origin") else ""
    if origin.startswith((COMMAND_LINE, CONFIG_FILE)):
        return minibatch, None
    most = min(max(1, minibatch // horizon), segments)
    fit = max(d for d in range(1, most + 1) if segments % d == 0) * horizon
    return fit, (
        f"train.minibatch_size {minibatch} (from the {origin}) does not divide this source's batch of "
        f"{segments * horizon} ({num_agents} agents x {horizon} steps): minibatches of {fit} instead "
        "(--train.minibatch-size to choose)"
    )
