"""Every config key, declared once: one dataclass per section (:class:`VecConfig`,
:class:`TrainConfig`, :class:`PolicyConfig`, :class:`BenchConfig`; the ``env`` section is each env's
own, :data:`EnvParams`), each field with its type, default, range or choices and a one-line meaning
(:func:`key`). The rest is made from these: the default layer (:func:`default_values`, rendered as
appliance/defaults/default.yaml), the checks of :mod:`~appliance.config.schema` (``CHOICES``,
``RANGES``, ``MEANINGS``, ``NON_EMPTY``), ``puffer-bench config --explain`` and docs/configuration.md.

A key's default fixes how a layer's value is typed (:func:`~appliance.config.schema.coerce`); a field
typed with a ``Literal`` takes one of its values (the choices); ``Auto`` beside a number means "derive
it at run time". A field with ``variants`` is a recipe variant: a switch that exists to run the
trainer as a peer does (PufferLib 3.0, PufferLib 4.0, CleanRL), the value each peer's recipe gives it
named beside the default, ours. A resolved config hands each component its section typed
(``cfg.train`` is a :class:`TrainConfig`)."""

# ruff: noqa: RUF009  (a field's default is key(...): dataclasses.field with the declaration's metadata)

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

# ----------------------------------------------------------------------------- ranges


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
            whole = isinstance(x, int) or x.is_integer()
            return f"{int(x):,}" if whole and abs(x) >= 10_000 else f"{x:g}"

        low = None if self.low is None else f"{'>' if self.low_open else '>='} {bound(self.low)}"
        high = None if self.high is None else f"{'<' if self.high_open else '<='} {bound(self.high)}"
        return " and ".join(b for b in (low, high) if b) or "finite"


POSITIVE = Range(0, None, low_open=True)
NON_NEGATIVE = Range(0, None)
AT_LEAST_1 = Range(1, None)
UNIT = Range(0, 1)
INT32 = 2**31 - 1

# ----------------------------------------------------------------------------- declaring a key

AUTO = "auto"
Auto = Literal["auto"]
RECIPES = ("pufferlib3", "pufferlib4", "cleanrl")  # the peers a recipe variant names


@dataclass(frozen=True)
class FromRecipe:
    """A recipe variant's value that the peer's own recipe file gives (PufferLib 4.0's ini), not one
    fixed value: ``text`` says where it comes from."""

    text: str

    def __str__(self) -> str:
        return self.text


def key(
    default: Any,
    meaning: str,
    *,
    valid: Range | None = None,
    non_empty: bool = False,
    variants: Mapping[str, Any] | None = None,
) -> Any:
    """One key's declaration: its ``default`` (which also fixes how a layer's value is typed), a
    one-line ``meaning``, the ``valid`` range of a number (each element's, for a list), whether a
    string or list must not be empty, and, for a recipe variant, the value each peer's recipe
    (:data:`RECIPES`) gives it. Its choices are its ``Literal`` type's values."""
    unknown = sorted(set(variants or {}) - set(RECIPES))
    if unknown:
        raise ValueError(f"unknown recipe {unknown}; recipes: {RECIPES}")
    meta = {"meaning": meaning, "valid": valid, "non_empty": non_empty, "variants": dict(variants or {})}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


class Keys(Mapping[str, Any]):
    """A section's typed values, read like the resolved config always was: ``cfg.train.gamma``,
    ``cfg.policy["encoder"]``, ``{**cfg.train}``. Built from the resolved values
    (:meth:`from_mapping`): a copy, read-only."""

    SECTION: ClassVar[str] = ""

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> typing.Self:
        """The section from resolved (already typed and checked) values; a key ``values`` lacks (a
        config saved by an older version) takes its declared default, one it has that is no longer
        declared is left out."""
        names = cls._names()
        return cls(**{k: v for k, v in values.items() if k in names})

    def __getitem__(self, name: str) -> Any:
        if name not in self._names():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return _field_names(cls)

    def __getattr__(self, name: str) -> Any:  # only for a name that is no field: a typo
        if name.startswith("_"):
            raise AttributeError(name)
        matches = difflib.get_close_matches(name, self._names(), n=1, cutoff=0.6)
        hint = f"; did you mean {matches[0]}?" if matches else ""
        raise AttributeError(f"config section '{self.SECTION}' has no key '{name}'{hint}")


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


# ----------------------------------------------------------------------------- the sections

Backend = Literal["native", "serial", "multiprocessing", "ray"]
Preprocess = Literal["auto", "ale_vector", "atari", "none"]


@dataclass(frozen=True)
class VecConfig(Keys):
    """How the envs are made and stepped (appliance/vector)."""

    SECTION: ClassVar[str] = "vec"
    backend: Backend = key(
        "native",
        "how the envs are stepped: native (Ocean's C threads), serial (one process), "
        "multiprocessing (worker processes) or ray (a Ray cluster's actors)",
    )
    num_envs: int = key(
        1024,
        "env instances stepped together (a multi-agent env has several agents in each)",
        valid=Range(1, INT32),
    )
    num_threads: int | Auto = key(
        AUTO,
        "native backend: C worker threads that step the envs (auto: the physical cores, at most num_envs)",
        valid=Range(1, 4096),
    )
    num_workers: int | Auto = key(
        AUTO,
        "multiprocessing and ray backends: worker processes (auto: the largest divisor of num_envs "
        "within the physical cores)",
        valid=Range(1, 4096),
    )
    batch_size: int | Auto = key(
        AUTO,
        "process backends: envs returned by each recv (auto: num_envs, every env each step); fewer is "
        "asynchronous stepping",
        valid=Range(1, INT32),
    )
    zero_copy: bool = key(
        True, "multiprocessing backend: recv returns views into shared memory instead of copies"
    )
    overwork: bool = key(False, "allow more worker processes than physical cores (refused otherwise)")
    recv_timeout: float = key(
        30.0,
        "seconds a recv (and a worker's first reset) may wait for a worker before it is reported as stuck",
        valid=Range(0, 1e6, low_open=True),
    )
    ray_address: str = key("", 'ray backend: the cluster to join ("": start a local Ray runtime)')
    preprocess: Preprocess = key(
        AUTO,
        "Python envs' wrappers: atari (AtariPreprocessing and 4 stacked frames in Python workers), "
        "ale_vector (the same frames from ale-py's AtariVectorEnv, its C++ threads), none, or auto "
        "(ALE ids: ale_vector where ale-py has it, else atari)",
    )


Device = Literal["auto", "cpu", "cuda"]
Optimizer = Literal["adam", "muon"]
MuonNS = Literal["heavyball", "pufferlib4"]
RhoOn = Literal["td_error", "reward"]
Precision = Literal["auto", "float32", "bfloat16"]
EngineMode = Literal["auto", "on", "off"]
MinibatchUnit = Literal["auto", "segments", "transitions"]


@dataclass(frozen=True)
class TrainConfig(Keys):
    """The PPO trainer (appliance/train): the update, the optimizer, the rollout."""

    SECTION: ClassVar[str] = "train"
    seed: int = key(0, "seeds torch, the minibatch sampler and the envs", valid=Range(0, 2**63 - 1))
    device: Device = key(AUTO, "where the policy trains: cpu, cuda, or auto (cuda when torch sees one)")
    total_timesteps: int = key(
        10_000_000,
        "agent-steps to train for; the learning rate and prio_beta0 (to prio_beta1) anneal over them",
        valid=AT_LEAST_1,
    )
    learning_rate: float = key(
        0.015,
        "the optimizer's step size at the start (annealed when anneal_lr)",
        valid=Range(0, 10, low_open=True),
    )
    anneal_lr: bool = key(
        True, "cosine-anneal the learning rate over total_timesteps, down to learning_rate * min_lr_ratio"
    )
    min_lr_ratio: float = key(
        0.0,
        "the cosine anneal ends at learning_rate * this (PufferLib 4.0's min_lr_ratio)",
        valid=UNIT,
        variants={"pufferlib4": FromRecipe("its ini's min_lr_ratio")},
    )
    optimizer: Optimizer = key(
        "muon", "adam, or muon (PufferLib 3.0's optimizer, momentum adam_beta1) over every parameter"
    )
    muon_ns: MuonNS = key(
        "heavyball",
        "Muon's 5 Newton-Schulz steps: heavyball (one coefficient triple for all, PufferLib 3.0's), or "
        "pufferlib4 (PufferLib 4.0's muon.py: a triple per step, in float32)",
        variants={"pufferlib3": "heavyball", "pufferlib4": "pufferlib4"},
    )
    adam_beta1: float = key(
        0.95, "Adam's first-moment decay; Muon's momentum", valid=Range(0, 1, high_open=True)
    )
    adam_beta2: float = key(
        0.999, "Adam's second-moment decay (Muon does not read it)", valid=Range(0, 1, high_open=True)
    )
    adam_eps: float = key(
        1.0e-12,
        "Adam's epsilon in the denominator (Muon does not read it)",
        valid=Range(0, 1, low_open=True),
    )
    fused_optimizer: bool = key(
        False,
        "the policy's weights and gradients as views of one flat buffer each, and the optimizer's "
        "elementwise work over it in one kernel pass a step (kernels/optim_step.cu on CUDA, its host "
        "build on the CPU) instead of torch's per-parameter ops; the same math (off: torch's)",
    )
    gamma: float = key(
        0.995, "discount factor of future rewards (also the horizon of reward_norm's return)", valid=UNIT
    )
    gae_lambda: float = key(
        0.90,
        "the advantage's lambda: how far back each TD error is carried (V-trace, as GAE when no ratio "
        "is clipped)",
        valid=UNIT,
    )
    vtrace_rho_clip: float = key(
        1.0, "V-trace: the largest importance ratio that weights a TD error", valid=POSITIVE
    )
    vtrace_c_clip: float = key(
        1.0,
        "V-trace: the largest ratio that carries a TD error back a step (0: one-step TD errors only)",
        valid=NON_NEGATIVE,  # 0: one-step TD errors only (PufferLib's go.ini)
    )
    vtrace_rho_on: RhoOn = key(
        "td_error",
        "what the clipped ratio weights: td_error, the whole TD error (V-trace's, PufferLib 3.0's), or "
        "reward, the reward alone (PufferLib 4.0's CPU advantage loop)",
        variants={"pufferlib3": "td_error", "pufferlib4": "reward"},
    )
    prio_alpha: float = key(
        0.8,
        "minibatch segments drawn with probability proportional to (sum of |advantage| over the "
        "segment) ** prio_alpha (0: uniformly)",
        valid=NON_NEGATIVE,
    )
    prio_beta0: float = key(
        0.2,
        "the exponent of the importance weights (segments * P) ** -beta that correct the prioritized "
        "draw, annealed from this to prio_beta1 over total_timesteps",
        valid=UNIT,
    )
    prio_beta1: float = key(
        1.0,
        "the importance weights' exponent at the end of training (1: fully corrected; PufferLib's own "
        "anneal ends at prio_beta0 + (1 - prio_beta0) * prio_alpha)",
        valid=UNIT,
        variants={"pufferlib4": FromRecipe("prio_beta0 + (1 - prio_beta0) * prio_alpha, from its ini")},
    )
    recompute_advantages: bool = key(
        True,
        "recompute the V-trace advantages before each minibatch from the values and ratios the previous "
        "minibatches wrote back (PufferLib); false: GAE once an epoch from the rollout's values, which "
        "stay the value loss's old values (CleanRL, SB3)",
        variants={"cleanrl": False},
    )
    minibatch_unit: MinibatchUnit = key(
        AUTO,
        "what minibatches are drawn in: segments (bptt_horizon steps of one agent, as PufferLib), "
        "transitions (single steps, shuffled, as CleanRL and SB3; mlp core only), or auto (transitions "
        "for an mlp core with prio_alpha 0, else segments)",
    )
    prio_replacement: bool = key(
        False,
        "draw a minibatch's segments with replacement (PufferLib 4.0: a segment may come twice); "
        "false: distinct segments, without replacement (PufferLib 3.0)",
        variants={"pufferlib3": False, "pufferlib4": True},
    )
    clip_coef: float = key(
        0.2,
        "PPO's clip: the policy loss counts the probability ratio only within [1 - clip_coef, 1 + clip_coef]",
        valid=POSITIVE,
    )
    vf_coef: float = key(2.0, "weight of the value loss in the total loss", valid=NON_NEGATIVE)
    vf_clip_coef: float = key(
        0.2,
        "the clipped value loss: the value may move at most this far from the rollout's value before "
        "its loss stops pulling",
        valid=POSITIVE,
    )
    ent_coef: float = key(0.001, "weight of the entropy bonus in the total loss", valid=NON_NEGATIVE)
    max_grad_norm: float = key(
        1.5, "gradients clipped to this global norm before each optimizer step", valid=POSITIVE
    )
    update_epochs: int = key(
        1, "passes over the batch per update (when replay_ratio is auto)", valid=Range(1, 10_000)
    )
    replay_ratio: float | Auto = key(
        AUTO,
        "passes over the batch per update, may be fractional: int(ratio * batch / minibatch) "
        "minibatches; auto: update_epochs",
        valid=Range(0, 10_000, low_open=True),
        variants={"pufferlib4": FromRecipe("its ini's replay_ratio")},
    )
    bptt_horizon: int = key(
        64,
        "steps in each segment of an agent's experience (the recurrent core's backpropagation through time)",
        valid=Range(1, 65_536),
    )
    batch_size: int | Auto = key(
        AUTO, "agent-steps collected per update (auto: the agents * bptt_horizon)", valid=AT_LEAST_1
    )
    minibatch_size: int = key(
        8192, "agent-steps in each minibatch; a multiple of bptt_horizon", valid=AT_LEAST_1
    )
    max_minibatch_size: int = key(
        32768,
        "the largest chunk of a minibatch computed at once (a larger minibatch accumulates its chunks' "
        "gradients)",
        valid=AT_LEAST_1,
    )
    reward_clamp: float = key(
        1.0, "rewards clamped to [-reward_clamp, reward_clamp] after any scaling", valid=POSITIVE
    )
    reward_norm: bool = key(True, "scale rewards by 1 / the discounted return's std when that std exceeds 1")
    reset_state: bool = key(
        False,
        "zero every agent's recurrent state at the start of each rollout (PufferLib 3.0); false: carry it on",
        variants={"pufferlib3": True, "pufferlib4": True},
    )
    noise_corr: float = key(
        0.0,
        "Box actions: the exploration noise is AR(1) from step to step with this rho (0: white noise)",
        valid=Range(0, 1, high_open=True),
    )
    precision: Precision = key(
        "float32",
        "float32, or bfloat16 (bf16 rollout weights, bf16 autocast over float32 masters); auto: bf16 "
        "where the hardware has it (CUDA sm80+, AVX512-BF16 or AMX)",
    )
    rollout_int16: bool = key(
        False,
        "float32 on a CPU: the lstm core's rollout step takes its two matrix products in 16-bit integers "
        "(a scale per row and per weight row, sums in int32: about 1e-4 of the float32 product); the "
        "update stays float32",
    )
    compile: bool = key(False, "torch.compile the policy's step and sequence")
    engine: EngineMode = key(
        AUTO,
        "the rollout engine for native Ocean envs: auto (use it there), on (insist), off (the plain "
        "Python loop)",
    )
    buffers: int = key(
        1,
        "rollout engine: agent groups stepped on their own threads (and CUDA streams); divides num_envs",
        valid=Range(1, 256),
    )
    graphs: bool = key(True, "on a GPU: capture each training minibatch once as a CUDA graph and replay it")
    cpu_offload: bool = key(
        False,
        "keep the rollout's observations in host memory (pinned on a GPU) instead of on the device",
    )
    checkpoint_interval: int = key(
        200, "epochs between the checkpoints a run folder keeps (and one at the end)", valid=AT_LEAST_1
    )
    data_dir: str = key(
        "experiments", "the folder that holds the run folders (checkpoints, metrics)", non_empty=True
    )
    wandb_project: str = key(
        "puffer-bench",
        "--wandb: the Weights & Biases project (the run is named by its run id; W&B's files go in the "
        "run folder)",
        non_empty=True,
    )


Core = Literal["mlp", "lstm", "mingru"]
Encoder = Literal["auto", "linear", "onehot", "cnn", "nature"]
Activation = Literal["gelu", "none", "tanh", "relu"]
Init = Literal["pufferlib", "cleanrl", "torch"]
Switch = Literal["auto", "on", "off"]
ObsScale = Literal["bounds", "none"]


@dataclass(frozen=True)
class PolicyConfig(Keys):
    """The network (appliance/train/policy.py): encoder, core, heads."""

    SECTION: ClassVar[str] = "policy"
    core: Core = key(
        "lstm",
        "the network between encoder and heads: mlp, lstm, or mingru (PufferNet: minimal GRU layers "
        "with highway connections)",
    )
    hidden_size: int = key(128, "width of the encoder's output and of the core", valid=Range(1, 65_536))
    num_layers: int = key(1, "mingru and mlp: layers of the core (lstm: always 1)", valid=Range(1, 64))
    expansion_factor: int = key(
        1, "mingru: each layer's state is expansion_factor * hidden_size wide", valid=Range(1, 64)
    )
    encoder: Encoder = key(
        AUTO,
        "how observations become features: linear, onehot, cnn, nature (the Nature CNN), or auto "
        "(nature for images of 36x36 or more, cnn for smaller, onehot for small-range ints)",
    )
    encoder_activation: Activation = key(
        "gelu",
        "the activation after the linear and onehot encoders' Linear: gelu, none (PufferLib 4.0's "
        "encoder; refused for the cnn and nature encoders), or tanh or relu (also in place of the mlp "
        "core's GELU)",
        variants={"pufferlib3": "gelu", "pufferlib4": "none"},
    )
    separate_value: bool = key(
        False,
        "the value head gets an encoder and mlp core of its own (a separate critic, as the PPO paper's "
        "MuJoCo networks); false: it shares the action head's",
    )
    log_std_init: float = key(
        0.0,
        "Box actions: the state-independent log-std starts here (rl-zoo's MuJoCo log_std_init -2: a "
        "std of 0.14); 0 is a std of 1",
        valid=Range(-20, 20),
    )
    init: Init = key(
        "pufferlib",
        "weight init: pufferlib (orthogonal gain 1, zero biases), cleanrl (encoder sqrt 2, logits "
        "0.01), or torch (every layer as torch makes it, as PufferLib 4.0)",
        variants={"pufferlib3": "pufferlib", "pufferlib4": "torch", "cleanrl": "cleanrl"},
    )
    obs_norm: Switch = key(
        AUTO, "normalize observations by a running mean and std: on, off, or auto (on for Box actions)"
    )
    obs_scale: ObsScale = key(
        "bounds",
        "bounds: divide each feature by its declared bound where that exceeds 1; none: raw, as PufferLib",
        variants={"pufferlib3": "none", "pufferlib4": "none"},
    )


Suite = Literal["quick", "full"]


@dataclass(frozen=True)
class BenchConfig(Keys):
    """Benchmark suites (appliance/bench) and the hardware profile a config was made for."""

    SECTION: ClassVar[str] = "bench"
    suite: Suite = key(
        "quick", "not read by any command today (bench run --suite has its own default, quick)"
    )
    repeats: int = key(
        3, "repeats of each measurement in a suite when bench run gives no --repeats", valid=Range(1, 1000)
    )
    seconds: float = key(
        2.0,
        "not read by any command today (each suite step gives its own duration)",
        valid=Range(0, 1e6, low_open=True),
    )
    threads: list[int] = key(
        [1, 2],
        "thread counts a suite's env speed checks run at where a step asks for the profile's (threads: "
        "profile)",
        valid=Range(1, 4096),
        non_empty=True,
    )
    out: str = key(
        "results",
        "not read by any command today (bench run --out has its own default, results)",
        non_empty=True,
    )
    profile: str = key("cpu", "the hardware profile this config was resolved for (set by the profile layer)")
    expected_gpu: str = key(
        "",
        'the GPU that profile was written for ("": none); train names it, a benchmark report warns when '
        "this machine's GPU differs",
    )


# The env section: an env's own parameters, no keys of its own here. An Ocean env's come from its C
# ParamSpec (envs/<env>.h: keys, types, defaults, ranges); for a Gymnasium id or import path they are
# keyword arguments for gymnasium.make or its factory. ``cfg.env`` reads them as a mapping.
EnvParams = Mapping[str, Any]
ENV_NOTE = (
    "An env's own parameters: an Ocean env's come from its C ParamSpec (`puffer-bench envs show ENV` "
    "lists them); for a Gymnasium id or import path they are keyword arguments for gymnasium.make or "
    "the factory. default.yaml has none."
)

# The sections, in order; None: the env section, each env's own.
SECTION_TYPES: dict[str, type[Keys] | None] = {
    "vec": VecConfig,
    "train": TrainConfig,
    "policy": PolicyConfig,
    "env": None,
    "bench": BenchConfig,
}
SECTIONS = tuple(SECTION_TYPES)

# ----------------------------------------------------------------------------- reading the declarations


@dataclass(frozen=True)
class Declared:
    """One key as declared: what the checks, ``config --explain`` and the docs read."""

    section: str
    key: str
    type: Any  # the field's type (resolved)
    default: Any
    meaning: str
    valid: Range | None
    choices: tuple[str, ...] | None
    non_empty: bool
    variants: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def counts(self) -> bool:
        """Whether a number-or-auto key counts things (an int, not any number)."""
        return int in typing.get_args(self.type)


def declared() -> list[Declared]:
    """Every key, section by section, in declaration order."""
    out = []
    for section, cls in SECTION_TYPES.items():
        if cls is None:
            continue
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            typ = hints[f.name]
            choices = tuple(typing.get_args(typ)) if typing.get_origin(typ) is Literal else None
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
            out.append(
                Declared(
                    section,
                    f.name,
                    typ,
                    default,
                    f.metadata["meaning"],
                    f.metadata["valid"],
                    choices,
                    f.metadata["non_empty"],
                    dict(f.metadata["variants"]),
                )
            )
    return out


def default_values() -> dict[str, dict[str, Any]]:
    """The default layer: every section's keys and their defaults (a fresh copy; env: none)."""
    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for d in declared():
        out[d.section][d.key] = list(d.default) if isinstance(d.default, list) else d.default
    return out
