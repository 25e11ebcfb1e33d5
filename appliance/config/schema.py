"""What a config value may be: the sections, the keys with a fixed set of choices, the range of
every number (:data:`RANGES`), and the typing of values from YAML and the command line (the default
of a key fixes its type)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from appliance.config.files import strict_load
from appliance.errors import ConfigError

SECTIONS = ("vec", "train", "policy", "env", "bench")
AUTO = "auto"
# String keys that take one of a fixed set of values (checked with a "did you mean").
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("vec", "backend"): ("native", "serial", "multiprocessing", "ray"),
    ("vec", "preprocess"): ("auto", "ale_vector", "atari", "none"),
    ("train", "device"): ("auto", "cpu", "cuda"),
    ("train", "optimizer"): ("adam", "muon"),
    ("train", "muon_ns"): ("heavyball", "pufferlib4"),
    ("train", "vtrace_rho_on"): ("td_error", "reward"),
    ("train", "precision"): ("auto", "float32", "bfloat16"),
    ("train", "engine"): ("auto", "on", "off"),
    ("policy", "core"): ("mlp", "lstm", "mingru"),
    ("policy", "encoder"): ("auto", "linear", "onehot", "cnn", "nature"),
    ("policy", "encoder_activation"): ("gelu", "none"),
    ("policy", "init"): ("pufferlib", "cleanrl", "torch"),
    ("policy", "obs_norm"): ("auto", "on", "off"),
    ("policy", "obs_scale"): ("bounds", "none"),
    ("bench", "suite"): ("quick", "full"),
}


@dataclass(frozen=True)
class Range:
    """The valid values of a number: ``low``/``high`` (None: unbounded), each bound included unless
    ``*_open``. Every value must also be finite (no NaN or infinity)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        def bound(x: float) -> str:
            return f"{int(x):,}" if _whole(x) and abs(x) >= 10_000 else f"{x:g}"

        low = None if self.low is None else f"{'>' if self.low_open else '>='} {bound(self.low)}"
        high = None if self.high is None else f"{'<' if self.high_open else '<='} {bound(self.high)}"
        return " and ".join(b for b in (low, high) if b) or "finite"


POSITIVE = Range(0, None, low_open=True)
NON_NEGATIVE = Range(0, None)
AT_LEAST_1 = Range(1, None)
UNIT = Range(0, 1)
INT32 = 2**31 - 1
# The range of every number in default.yaml (a list's range applies to each element); a new numeric
# key needs an entry here (tests/test_config.py checks). Checked for every layer as it is applied.
RANGES: dict[tuple[str, str], Range] = {
    ("vec", "num_envs"): Range(1, INT32),
    ("vec", "num_threads"): Range(1, 4096),
    ("vec", "num_workers"): Range(1, 4096),
    ("vec", "batch_size"): Range(1, INT32),
    ("vec", "recv_timeout"): Range(0, 1e6, low_open=True),
    ("train", "seed"): Range(0, 2**63 - 1),
    ("train", "total_timesteps"): AT_LEAST_1,
    ("train", "learning_rate"): Range(0, 10, low_open=True),
    ("train", "adam_beta1"): Range(0, 1, high_open=True),
    ("train", "adam_beta2"): Range(0, 1, high_open=True),
    ("train", "adam_eps"): Range(0, 1, low_open=True),
    ("train", "gamma"): UNIT,
    ("train", "gae_lambda"): UNIT,
    ("train", "vtrace_rho_clip"): POSITIVE,
    ("train", "vtrace_c_clip"): NON_NEGATIVE,  # 0: one-step TD errors only (PufferLib's go.ini)
    ("train", "prio_alpha"): NON_NEGATIVE,
    ("train", "prio_beta0"): UNIT,
    ("train", "prio_beta1"): UNIT,
    ("train", "clip_coef"): POSITIVE,
    ("train", "vf_coef"): NON_NEGATIVE,
    ("train", "vf_clip_coef"): POSITIVE,
    ("train", "ent_coef"): NON_NEGATIVE,
    ("train", "max_grad_norm"): POSITIVE,
    ("train", "update_epochs"): Range(1, 10_000),
    ("train", "replay_ratio"): Range(0, 10_000, low_open=True),
    ("train", "min_lr_ratio"): UNIT,
    ("train", "bptt_horizon"): Range(1, 65_536),
    ("train", "buffers"): Range(1, 256),
    ("train", "batch_size"): AT_LEAST_1,
    ("train", "minibatch_size"): AT_LEAST_1,
    ("train", "max_minibatch_size"): AT_LEAST_1,
    ("train", "reward_clamp"): POSITIVE,
    ("train", "noise_corr"): Range(0, 1, high_open=True),
    ("train", "checkpoint_interval"): AT_LEAST_1,
    ("policy", "hidden_size"): Range(1, 65_536),
    ("policy", "num_layers"): Range(1, 64),
    ("policy", "expansion_factor"): Range(1, 64),
    ("bench", "repeats"): Range(1, 1000),
    ("bench", "seconds"): Range(0, 1e6, low_open=True),
    ("bench", "threads"): Range(1, 4096),
}
# What each key of default.yaml means, section by section, one line each (its type is its default's,
# its range is in RANGES or CHOICES above): `puffer-bench config --explain` and docs/configuration.md
# are made from this. Every key of default.yaml needs an entry and every entry a key
# (tests/test_config_explain.py checks); the env section's keys are an env's own (its ParamSpec, or
# keyword arguments for gymnasium.make), described by `puffer-bench envs show ENV`.
MEANINGS: dict[str, dict[str, str]] = {
    "vec": {
        "backend": "how the envs are stepped: native (Ocean's C threads), serial (one process), "
        "multiprocessing (worker processes) or ray (a Ray cluster's actors)",
        "num_envs": "env instances stepped together (a multi-agent env has several agents in each)",
        "num_threads": "native backend: C worker threads that step the envs (auto: the physical cores, "
        "at most num_envs)",
        "num_workers": "multiprocessing and ray backends: worker processes (auto: the largest divisor of "
        "num_envs within the physical cores)",
        "batch_size": "process backends: envs returned by each recv (auto: num_envs, every env each "
        "step); fewer is asynchronous stepping",
        "zero_copy": "multiprocessing backend: recv returns views into shared memory instead of copies",
        "overwork": "allow more worker processes than physical cores (refused otherwise)",
        "recv_timeout": "seconds a recv (and a worker's first reset) may wait for a worker before it is "
        "reported as stuck",
        "ray_address": 'ray backend: the cluster to join ("": start a local Ray runtime)',
        "preprocess": "Python envs' wrappers: atari (AtariPreprocessing and 4 stacked frames in Python "
        "workers), ale_vector (the same frames from ale-py's AtariVectorEnv, its C++ threads), none, or "
        "auto (ALE ids: ale_vector where ale-py has it, else atari)",
    },
    "train": {
        "seed": "seeds torch, the minibatch sampler and the envs",
        "device": "where the policy trains: cpu, cuda, or auto (cuda when torch sees one)",
        "total_timesteps": "agent-steps to train for; the learning rate and prio_beta0 (to prio_beta1) anneal over them",
        "learning_rate": "the optimizer's step size at the start (annealed when anneal_lr)",
        "anneal_lr": "cosine-anneal the learning rate over total_timesteps, down to learning_rate * "
        "min_lr_ratio",
        "min_lr_ratio": "the cosine anneal ends at learning_rate * this (PufferLib 4.0's min_lr_ratio)",
        "optimizer": "adam, or muon (PufferLib 3.0's optimizer, momentum adam_beta1) over every parameter",
        "muon_ns": "Muon's 5 Newton-Schulz steps: heavyball (one coefficient triple for all, PufferLib "
        "3.0's), or pufferlib4 (PufferLib 4.0's muon.py: a triple per step, in float32)",
        "adam_beta1": "Adam's first-moment decay; Muon's momentum",
        "adam_beta2": "Adam's second-moment decay (Muon does not read it)",
        "adam_eps": "Adam's epsilon in the denominator (Muon does not read it)",
        "fused_optimizer": "the policy's weights and gradients as views of one flat buffer each, and the "
        "optimizer's elementwise work over it in one kernel pass a step (kernels/optim_step.cu on CUDA, "
        "its host build on the CPU) instead of torch's per-parameter ops; the same math (off: torch's)",
        "gamma": "discount factor of future rewards (also the horizon of reward_norm's return)",
        "gae_lambda": "the advantage's lambda: how far back each TD error is carried (V-trace, as GAE "
        "when no ratio is clipped)",
        "vtrace_rho_clip": "V-trace: the largest importance ratio that weights a TD error",
        "vtrace_c_clip": "V-trace: the largest ratio that carries a TD error back a step (0: one-step "
        "TD errors only)",
        "vtrace_rho_on": "what the clipped ratio weights: td_error, the whole TD error (V-trace's, "
        "PufferLib 3.0's), or reward, the reward alone (PufferLib 4.0's CPU advantage loop)",
        "prio_alpha": "minibatch segments drawn with probability proportional to (sum of |advantage| "
        "over the segment) ** prio_alpha (0: uniformly)",
        "prio_beta0": "the exponent of the importance weights (segments * P) ** -beta that correct the "
        "prioritized draw, annealed from this to prio_beta1 over total_timesteps",
        "prio_beta1": "the importance weights' exponent at the end of training (1: fully corrected; "
        "PufferLib's own anneal ends at prio_beta0 + (1 - prio_beta0) * prio_alpha)",
        "prio_replacement": "draw a minibatch's segments with replacement (PufferLib 4.0: a segment may "
        "come twice); false: distinct segments, without replacement (PufferLib 3.0)",
        "clip_coef": "PPO's clip: the policy loss counts the probability ratio only within "
        "[1 - clip_coef, 1 + clip_coef]",
        "vf_coef": "weight of the value loss in the total loss",
        "vf_clip_coef": "the clipped value loss: the value may move at most this far from the "
        "rollout's value before its loss stops pulling",
        "ent_coef": "weight of the entropy bonus in the total loss",
        "max_grad_norm": "gradients clipped to this global norm before each optimizer step",
        "update_epochs": "passes over the batch per update (when replay_ratio is auto)",
        "replay_ratio": "passes over the batch per update, may be fractional: int(ratio * batch / "
        "minibatch) minibatches; auto: update_epochs",
        "bptt_horizon": "steps in each segment of an agent's experience (the recurrent core's "
        "backpropagation through time)",
        "batch_size": "agent-steps collected per update (auto: the agents * bptt_horizon)",
        "minibatch_size": "agent-steps in each minibatch; a multiple of bptt_horizon",
        "max_minibatch_size": "the largest chunk of a minibatch computed at once (a larger minibatch "
        "accumulates its chunks' gradients)",
        "reward_clamp": "rewards clamped to [-reward_clamp, reward_clamp] after any scaling",
        "reward_norm": "scale rewards by 1 / the discounted return's std when that std exceeds 1",
        "reset_state": "zero every agent's recurrent state at the start of each rollout (PufferLib "
        "3.0); false: carry it on",
        "noise_corr": "Box actions: the exploration noise is AR(1) from step to step with this rho "
        "(0: white noise)",
        "precision": "float32, or bfloat16 (bf16 rollout weights, bf16 autocast over float32 "
        "masters); auto: bf16 where the hardware has it (CUDA sm80+, AVX512-BF16 or AMX)",
        "compile": "torch.compile the policy's step and sequence",
        "engine": "the rollout engine for native Ocean envs: auto (use it there), on (insist), off "
        "(the plain Python loop)",
        "buffers": "rollout engine: agent groups stepped on their own threads (and CUDA streams); "
        "divides num_envs",
        "graphs": "on a GPU: capture each training minibatch once as a CUDA graph and replay it",
        "cpu_offload": "keep the rollout's observations in host memory (pinned on a GPU) instead of "
        "on the device",
        "checkpoint_interval": "epochs between the checkpoints a run folder keeps (and one at the end)",
        "data_dir": "the folder that holds the run folders (checkpoints, metrics)",
        "wandb_project": "--wandb: the Weights & Biases project (the run is named by its run id; W&B's files go in the run folder)",
    },
    "policy": {
        "core": "the network between encoder and heads: mlp, lstm, or mingru (PufferNet: minimal GRU "
        "layers with highway connections)",
        "hidden_size": "width of the encoder's output and of the core",
        "num_layers": "mingru and mlp: layers of the core (lstm: always 1)",
        "expansion_factor": "mingru: each layer's state is expansion_factor * hidden_size wide",
        "encoder": "how observations become features: linear, onehot, cnn, nature (the Nature CNN), "
        "or auto (nature for images of 36x36 or more, cnn for smaller, onehot for small-range ints)",
        "encoder_activation": "the activation after the linear and onehot encoders' Linear: gelu, or "
        "none (PufferLib 4.0's encoder; refused for the cnn and nature encoders)",
        "init": "weight init: pufferlib (orthogonal gain 1, zero biases), cleanrl (encoder sqrt 2, "
        "logits 0.01), or torch (every layer as torch makes it, as PufferLib 4.0)",
        "obs_norm": "normalize observations by a running mean and std: on, off, or auto (on for Box actions)",
        "obs_scale": "bounds: divide each feature by its declared bound where that exceeds 1; none: "
        "raw, as PufferLib",
    },
    "env": {},
    "bench": {
        "suite": "not read by any command today (bench run --suite has its own default, quick)",
        "repeats": "repeats of each measurement in a suite when bench run gives no --repeats",
        "seconds": "not read by any command today (each suite step gives its own duration)",
        "threads": "thread counts a suite's env speed checks run at where a step asks for the "
        "profile's (threads: profile)",
        "out": "not read by any command today (bench run --out has its own default, results)",
        "profile": "the hardware profile this config was resolved for (set by the profile layer)",
        "expected_gpu": 'the GPU that profile was written for ("": none); train names it, a '
        "benchmark report warns when this machine's GPU differs",
    },
}
# String keys that must not be empty (paths).
NON_EMPTY = {
    ("train", "data_dir"),
    ("train", "wandb_project"),
    ("bench", "out"),
    ("bench", "threads"),
}  # a path, a list
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


# ----------------------------------------------------------------------------- typing


def _type_name(default: Any) -> str:
    if default == AUTO:
        return "'auto' or a number"
    return {bool: "a bool", int: "an int", float: "a float", str: "a string", list: "a list"}.get(
        type(default), type(default).__name__
    )


def _number(value: Any) -> int | float | None:
    """Parse ints and floats, including strings like '3e-4' that YAML 1.1 leaves as text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _whole(number: int | float) -> bool:
    """An int, or a float with no fraction (float() of a 400-digit int would overflow)."""
    return isinstance(number, int) or number.is_integer()


def coerce(value: Any, default: Any) -> Any:
    """Convert ``value`` to the type of ``default``; raise ValueError if it cannot be."""
    if default == AUTO:
        if isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
        number = _number(value)
        if number is None:
            raise ValueError
        return int(number) if _whole(number) else number
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError
    if isinstance(default, int):
        number = _number(value)
        if number is None or not _whole(number):
            raise ValueError
        return int(number)
    if isinstance(default, float):
        number = _number(value)
        if number is None:
            raise ValueError
        return float(number)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError
        return value
    if isinstance(default, list):
        if isinstance(value, str):
            text = value.strip()
            try:
                value = strict_load(text) if text.startswith("[") else [v for v in text.split(",") if v]
            except (yaml.YAMLError, RecursionError):  # '[1' is not a list: the caller names the key
                raise ValueError from None
        if not isinstance(value, list):
            raise ValueError
        if default:
            return [coerce(v, default[0]) for v in value]
        return value
    raise ValueError


def check_value(
    section: str,
    key: str,
    value: Any,
    name: str | None = None,
    ranges: Mapping[tuple[str, str], Range] = RANGES,
) -> None:
    """Raise a ConfigError if a typed value is outside its range in ``ranges`` (:data:`RANGES`, and an
    Ocean env's parameter ranges while its config is resolved), or is an empty path or list."""
    name = name or f"{section}.{key}"
    if (section, key) in NON_EMPTY and (value == [] or (isinstance(value, str) and not value.strip())):
        raise ConfigError(f"{name}: must not be empty")
    valid = ranges.get((section, key))
    if valid is None:
        return
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue  # 'auto', or a type error reported by coerce
        if not valid.contains(v):
            what = (
                "is not a finite number"
                if isinstance(v, float) and not math.isfinite(v)
                else "is out of range"
            )
            kind = "an int" if isinstance(v, int) else "a number"
            shown = repr(v) if len(repr(v)) <= 30 else f"{str(v)[:12]}... ({len(str(v))} digits)"
            raise ConfigError(f"{name}: {shown} {what}; expected {kind} {valid}")
