"""Policies: encoder -> core -> action head + value head, shared by every agent row.

* Encoder: observations to floats (restoring emulated structure, scaling by the space's bounds
  unless ``policy.obs_scale`` is ``none``), then Linear + GELU (``linear``, ``onehot``; the Linear
  alone with ``policy.encoder_activation none``, as PufferLib 4.0's encoder), or for
  image observations either way round ((H, W, C), (C, H, W), stacked frames:
  :func:`appliance.config.images.image_layout`) the Nature CNN (``nature``, the default for frames of
  36x36 or more) or a small CNN (``cnn``). :attr:`Policy.encoder_choice` says which and why.
* Core: ``mlp``, ``lstm`` or ``mingru`` (PufferNet: ``num_layers`` minimal GRUs with highway
  connections, ``expansion_factor``), each a small module of :mod:`appliance.train.cores` with the
  same three methods (``initial_state``, ``step``, ``sequence``), which the policy composes.
* Activations (``policy.encoder_activation``): ``gelu`` after the encoder's Linear (the mlp core's
  layers always GELU), ``none``, or ``tanh`` / ``relu`` after the encoder's Linear *and* each mlp core
  layer (CleanRL's MuJoCo networks are tanh, rl-zoo's tuned ones ReLU).
* Value network (``policy.separate_value``): by default the value head reads the same encoder and
  core as the action head; ``true`` gives the value head an encoder and mlp core of its own (the PPO
  paper's and CleanRL's separate actor and critic), sharing only the observation scaling and
  normalization.
* Heads: Discrete and MultiDiscrete logits, or a Gaussian for Box actions with a learned
  state-independent log-std; Box samples are clipped to the bounds only when sent to the env
  (:meth:`Policy.env_actions`), and Box-action policies normalize observations by running
  statistics (``policy.obs_norm``, :mod:`appliance.train.normalize`).
* Action masks: an env whose observations end with one entry per action (1 allowed, 0 not; a
  PufferLib env's MY_ACTION_MASK, the vector's ``action_mask``) gets a policy that leaves the mask
  out of the encoder and sets each forbidden action's logit to ``MASKED`` in rollout and training
  alike, as PufferLib 4.0's trainer does.
* Initialization (``policy.init``): ``pufferlib`` (the default) as PufferLib 3.0 leaves its
  policies: with a recurrent core, what its LSTM wrapper does (every encoder and head weight
  orthogonal with gain 1, every bias zero, the core as torch makes it); with ``mlp``, its Default
  policy (torch's encoder init, logits 0.01, value 1). ``cleanrl``: encoder gain sqrt(2), logits
  0.01, value 1 (CleanRL's PPO). docs/lab/learning.md has the breakout curves of each. ``torch``: every
  layer of encoder, core and heads as torch initializes it, no override (PufferLib 4.0's models).

The recurrent state carries across episode boundaries in rollout and training alike, and each
training segment starts from the state its rollout started with, so the training forward pass
reproduces the rollout's exactly (ratios start at 1).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from appliance.config.images import NATURE_MIN_SIDE, ImageLayout, image_layout
from appliance.errors import ConfigError
from appliance.train.cores import CORES, LSTM, Core, State, layer_init
from appliance.train.normalize import RunningNorm

_TORCH_DTYPES = {
    np.dtype(k): v
    for k, v in {
        np.float32: torch.float32,
        np.float64: torch.float64,
        np.uint8: torch.uint8,
        np.int8: torch.int8,
        np.int16: torch.int16,
        np.int32: torch.int32,
        np.int64: torch.int64,
        np.bool_: torch.bool,
    }.items()
}


# policy.encoder_activation: the module after the linear and onehot encoders' Linear (None: nothing);
# tanh and relu also replace the mlp core's GELU
ACTIVATIONS: dict[str, type[nn.Module] | None] = {
    "gelu": nn.GELU,
    "none": None,
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
}

MAX_CATEGORIES = 32  # integer observations with at most this many values can be one-hot encoded


def categories(obs_space: spaces.Box, codec: Any = None) -> tuple[int, int] | None:
    """(low, count) when every observation element is an integer in one small shared range, else None.

    Such observations are categorical (0 empty, 1 agent, 2 target; a board's -1/0/1), so a linear layer
    over their scaled values would have to tell cell contents apart by magnitude; one-hot codes let it
    see each value as its own feature."""
    if codec is not None and not codec.same_dtype:
        return None
    if not np.issubdtype(obs_space.dtype, np.integer) or obs_space.dtype == np.bool_:
        return None
    low, high = (
        np.broadcast_to(obs_space.low, obs_space.shape),
        np.broadcast_to(obs_space.high, obs_space.shape),
    )
    if low.size == 0 or low.min() != low.max() or high.min() != high.max():
        return None
    count = int(high.flat[0]) - int(low.flat[0]) + 1
    return (int(low.flat[0]), count) if 2 <= count <= MAX_CATEGORIES else None


class ObsToFloat(nn.Module):
    """Flat observations (any dtype, or emulated bytes) to float features scaled to about [-1, 1]
    by the space's bounds (``obs_scale="none"``: as they are), or, with ``onehot``, small-range integer
    observations to one-hot codes (``size * count`` features)."""

    def __init__(
        self, obs_space: spaces.Box, codec: Any = None, onehot: bool = False, obs_scale: str = "bounds"
    ) -> None:
        super().__init__()
        self.obs_ndim = max(1, len(obs_space.shape))
        self.slices: list[tuple[int, int, torch.dtype, int]] = []
        self.onehot = categories(obs_space, codec) if onehot else None
        if onehot and self.onehot is None:
            raise ValueError(
                f"the onehot encoder needs integer observations sharing one range of at most {MAX_CATEGORIES} "
                f"values; got {obs_space.dtype} in [{np.min(obs_space.low)}, {np.max(obs_space.high)}]"
            )
        if codec is not None and not codec.same_dtype:  # mixed dtypes travel as bytes: reinterpret per leaf
            for leaf, offset in zip(codec.leaves, codec.offsets, strict=True):
                self.slices.append(
                    (offset, offset + leaf.size * leaf.dtype.itemsize, _TORCH_DTYPES[leaf.dtype], leaf.size)
                )
            self.size = sum(s[3] for s in self.slices)
            scale = torch.ones(self.size)
        else:
            self.size = int(np.prod(obs_space.shape))
            high = np.maximum(
                np.abs(np.broadcast_to(obs_space.low, obs_space.shape)),
                np.abs(np.broadcast_to(obs_space.high, obs_space.shape)),
            )
            scaled = np.isfinite(high) & (high > 1) & (obs_scale == "bounds")
            high = np.where(scaled, high, 1.0).reshape(-1)
            scale = torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("inv_scale", 1.0 / scale, persistent=False)
        if self.onehot is not None:
            self.size *= self.onehot[1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [..., *obs_shape] -> [..., size]: the observation's own dims flattened."""
        if self.slices:
            # clone: a fresh, aligned copy (a contiguous slice may start mid-word, which view(dtype) refuses)
            parts = [
                obs[..., a:b].clone(memory_format=torch.contiguous_format).view(dtype).float()
                for a, b, dtype, _ in self.slices
            ]
            return torch.cat(parts, dim=-1)
        if self.onehot is not None:
            low, count = self.onehot
            codes = (obs.flatten(-self.obs_ndim).long() - low).clamp_(0, count - 1)
            return F.one_hot(codes, count).flatten(-2).float()
        return obs.flatten(-self.obs_ndim).float() * self.inv_scale


def observation_shape(obs_space: spaces.Box, codec: Any = None) -> tuple[int, ...]:
    """The shape an observation has before emulation flattened it: a Python env's single Box (its
    codec's one leaf), else the space's own."""
    leaves = getattr(codec, "leaves", None)
    if leaves is not None and len(leaves) == 1 and not leaves[0].path:
        return tuple(leaves[0].shape)
    return tuple(obs_space.shape)


def choose_encoder(
    encoder: str, obs_space: spaces.Box, codec: Any = None
) -> tuple[str, ImageLayout | None, str]:
    """(encoder, image layout, why): ``policy.encoder`` as given, or for ``auto`` ``nature`` for
    frames of 36x36 or more, ``cnn`` for smaller images, ``onehot`` for integers of a small range,
    ``linear`` for the rest. An image encoder asked for observations that are no image, or the Nature
    CNN for frames under 36x36, is a :class:`ConfigError`."""
    shape = observation_shape(obs_space, codec)
    layout = image_layout(shape)
    if encoder in ("cnn", "nature"):
        if layout is None:
            raise ConfigError(
                f"policy.encoder {encoder} needs image observations ((H, W, C), (C, H, W) or stacked frames "
                f"of sides >= 8), got shape {shape}; use --policy.encoder linear"
            )
        if encoder == "nature" and min(layout.height, layout.width) < NATURE_MIN_SIDE:
            raise ConfigError(
                f"policy.encoder nature needs frames of at least {NATURE_MIN_SIDE}x{NATURE_MIN_SIDE}, got "
                f"{layout.height}x{layout.width}; use --policy.encoder cnn"
            )
        return encoder, layout, f"policy.encoder {encoder}: {layout.describe()}"
    if encoder != "auto":
        return encoder, None, f"policy.encoder {encoder}: observations of shape {shape}"
    if layout is not None:
        big = min(layout.height, layout.width) >= NATURE_MIN_SIDE
        side = f"sides >= {NATURE_MIN_SIDE}" if big else f"sides under {NATURE_MIN_SIDE}"
        return ("nature" if big else "cnn"), layout, f"{layout.describe()}, {side}"
    ints = categories(obs_space, codec)
    if ints is not None:
        return "onehot", None, f"integer observations of shape {shape} in {ints[1]} values from {ints[0]}"
    return "linear", None, f"flat observations of shape {shape}"


def nature_cnn(channels: int, height: int, width: int, out: int) -> nn.Sequential:
    """The DQN Nature paper's encoder (Mnih et al. 2015), as CleanRL's and SB3's Atari PPO use it:
    32 8x8/4, 64 4x4/2 and 64 3x3/1 convolutions with ReLU, then Linear to ``out`` and ReLU."""
    conv = nn.Sequential(
        layer_init(nn.Conv2d(channels, 32, 8, stride=4)),
        nn.ReLU(),
        layer_init(nn.Conv2d(32, 64, 4, stride=2)),
        nn.ReLU(),
        layer_init(nn.Conv2d(64, 64, 3, stride=1)),
        nn.ReLU(),
        nn.Flatten(),
    )
    return _with_head(conv, channels, height, width, out, nn.ReLU())


def small_cnn(channels: int, height: int, width: int, out: int) -> nn.Sequential:
    """Two 3x3 convolutions (32 /2, 64 /1) with GELU, then Linear to ``out``: for small images."""
    conv = nn.Sequential(
        layer_init(nn.Conv2d(channels, 32, 3, stride=2)),
        nn.GELU(),
        layer_init(nn.Conv2d(32, 64, 3, stride=1)),
        nn.GELU(),
        nn.Flatten(),
    )
    return _with_head(conv, channels, height, width, out, nn.GELU())


def _with_head(
    conv: nn.Sequential, channels: int, height: int, width: int, out: int, act: nn.Module
) -> nn.Sequential:
    """``conv``, then a Linear from its flattened output (sized by one pass over a blank frame) to
    ``out``, then ``act``."""
    with torch.no_grad():
        flat = conv(torch.zeros(1, channels, height, width)).shape[-1]
    return nn.Sequential(conv, layer_init(nn.Linear(flat, out)), act)


MASKED = -1e4  # a forbidden action's logit, as PufferLib 4.0's trainer sets it (finite in bf16 and fp16)


def _without_mask(obs_space: spaces.Box, action_space: spaces.Space, size: int, codec: Any) -> spaces.Box:
    """The observations an action-masked env's policy encodes: ``obs_space`` less its last ``size``
    elements, which are the mask (one per action of every head, 1 allowed, 0 not: a PufferLib env's
    MY_ACTION_MASK). A mask that is not one entry per action is a :class:`ConfigError`."""
    if isinstance(action_space, spaces.Discrete):
        actions = int(action_space.n)
    elif isinstance(action_space, spaces.MultiDiscrete):
        actions = int(np.sum(action_space.nvec))
    else:
        raise ConfigError(f"an action mask needs Discrete or MultiDiscrete actions, got {action_space}")
    if size != actions:
        raise ConfigError(
            f"an action mask of {size} entries for {actions} actions ({action_space}): it needs one per action"
        )
    if codec is not None or len(obs_space.shape) != 1 or obs_space.shape[0] <= size:
        raise ConfigError(
            f"an action mask of {size} entries needs flat observations longer than it, got {obs_space}"
        )
    n = obs_space.shape[0] - size
    return spaces.Box(obs_space.low[:n], obs_space.high[:n], (n,), obs_space.dtype)


class Policy(nn.Module):
    def __init__(
        self,
        obs_space: spaces.Box,
        action_space: spaces.Space,
        core: str = "lstm",
        hidden_size: int = 128,
        encoder: str = "auto",
        obs_codec: Any = None,
        init: str = "pufferlib",
        obs_norm: bool | str = "auto",
        obs_scale: str = "bounds",
        num_layers: int = 1,
        expansion_factor: int = 1,
        encoder_activation: str = "gelu",
        separate_value: bool = False,
        log_std_init: float = 0.0,
        action_mask: int = 0,
    ) -> None:
        super().__init__()
        self.mask_size = int(action_mask)
        if self.mask_size:
            obs_space = _without_mask(obs_space, action_space, self.mask_size, obs_codec)
        if core not in CORES:
            raise ValueError(f"unknown policy core {core!r}; choose mlp, lstm or mingru")
        if expansion_factor != 1 and core != "mingru":
            raise ValueError(f"policy.expansion_factor {expansion_factor}: only the mingru core has one")
        if init not in ("pufferlib", "cleanrl", "torch"):
            raise ValueError(f"unknown policy init {init!r}; choose pufferlib, cleanrl or torch")
        if encoder_activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown policy encoder_activation {encoder_activation!r}; choose {', '.join(ACTIVATIONS)}"
            )
        if obs_scale not in ("bounds", "none"):
            raise ValueError(f"unknown policy obs_scale {obs_scale!r}; choose bounds or none")
        self.hidden_size = hidden_size
        kind, layout, why = choose_encoder(encoder, obs_space, obs_codec)
        image = layout is not None and kind in ("cnn", "nature")
        if image and encoder_activation != "gelu":
            raise ConfigError(
                f"policy.encoder_activation {encoder_activation} applies to the linear and onehot encoders, not "
                f"{kind} (its layers have their own activations); use --policy.encoder-activation gelu"
            )
        onehot = kind == "onehot"
        self.to_float = ObsToFloat(obs_space, obs_codec, onehot=onehot, obs_scale=obs_scale)
        box = isinstance(action_space, spaces.Box)
        if obs_norm == "auto":  # the continuous-control default: Box actions and plain numeric observations
            obs_norm = box and not onehot and not image and encoder in ("auto", "linear")
        self.obs_norm = RunningNorm(self.to_float.size) if obs_norm else None
        self.image = layout if image else None
        self.image_shape = layout.shape if self.image is not None else None
        if separate_value and (core != "mlp" or self.image is not None):
            raise ConfigError(
                f"policy.separate_value needs the mlp core and a linear or onehot encoder (got core {core}, "
                f"encoder {kind}); use --policy.separate-value false"
            )
        activation = ACTIVATIONS[encoder_activation]

        def linear_encoder() -> nn.Sequential:
            act = [activation()] if activation is not None else []
            return nn.Sequential(layer_init(nn.Linear(self.to_float.size, hidden_size)), *act)

        if self.image is not None:
            build = nature_cnn if kind == "nature" else small_cnn
            self.encoder = build(layout.channels, layout.height, layout.width, hidden_size)
        else:
            self.encoder = linear_encoder()
        self.encoder_choice = (kind, why)  # what the run's header prints
        factor: dict[str, Any] = {"expansion_factor": expansion_factor} if core == "mingru" else {}
        if core == "mlp" and encoder_activation in ("tanh", "relu"):  # the core's layers take it too
            factor["activation"] = activation
        self.core: Core = CORES[core](hidden_size, num_layers=num_layers, **factor)
        # the critic's own trunk (policy.separate_value), or none: the value head reads the actor's
        self.value_encoder = linear_encoder() if separate_value else None
        self.value_core = (
            CORES[core](hidden_size, num_layers=num_layers, **factor) if separate_value else None
        )
        if isinstance(self.core, LSTM):  # its step cell, whose weights checkpoints name cell.* too
            self.cell = self.core.cell
        self.action_space = action_space
        if isinstance(action_space, spaces.Discrete):
            self.nvec: list[int] | None = [int(action_space.n)]
        elif isinstance(action_space, spaces.MultiDiscrete):
            self.nvec = [int(n) for n in np.asarray(action_space.nvec).reshape(-1)]
        elif isinstance(action_space, spaces.Box):
            self.nvec = None
        else:
            raise ValueError(f"no action head for {action_space}")
        out = sum(self.nvec) if self.nvec else int(np.prod(action_space.shape))
        self.decoder = layer_init(nn.Linear(hidden_size, out), std=0.01)
        self.value = layer_init(nn.Linear(hidden_size, 1), std=1.0)
        if self.nvec is None:  # Box: a state-independent log-std, and the bounds actions are clipped to
            self.log_std = nn.Parameter(torch.full((out,), float(log_std_init)))
            low, high = (torch.tensor(np.broadcast_to(b, action_space.shape), dtype=torch.float32).reshape(-1)
                         for b in (action_space.low, action_space.high))  # fmt: skip
            self.register_buffer("action_low", low, persistent=False)
            self.register_buffer("action_high", high, persistent=False)
        trunks = [m for m in (self.value_encoder, self.value_core) if m is not None]
        if init == "torch":  # every layer as torch constructs it: undo layer_init's overrides
            for module in (self.encoder, self.core, self.decoder, self.value, *trunks):
                for layer in module.modules():
                    if hasattr(layer, "reset_parameters"):  # Linear, Conv2d, LSTM
                        layer.reset_parameters()
        elif init == "pufferlib" and not self.core.recurrent:  # PufferLib's Default: torch's encoder init
            for layer in (*self.encoder.modules(), *(trunks[0].modules() if trunks else ())):
                if isinstance(layer, (nn.Linear, nn.Conv2d)):
                    layer.reset_parameters()
        elif init == "pufferlib":  # what its LSTM wrapper does to the policy it wraps
            for module in (self.encoder, self.decoder, self.value):
                for name, param in module.named_parameters():
                    if name.endswith("bias"):
                        nn.init.zeros_(param)
                    elif param.ndim >= 2:
                        nn.init.orthogonal_(param, 1.0)

    # ------------------------------------------------------------------ state

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return self.core.initial_state(batch, device)

    # ------------------------------------------------------------------ forward

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the encoders read them: floats, normalized where ``policy.obs_norm`` is on
        (an action mask's tail left out)."""
        x = self.to_float(self._observed(obs))
        return self.obs_norm(x) if self.obs_norm is not None else x

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        return self.encode_features(self.features(obs))

    def encode_features(self, x: torch.Tensor) -> torch.Tensor:
        if self.image is not None:
            im = self.image
            lead = x.shape[:-1]  # (batch[, time])
            x = x.reshape(-1, *im.shape).permute(0, *(a + 1 for a in im.axes))
            x = x.reshape(-1, im.channels, im.height, im.width)
            return self.encoder(x).reshape(*lead, -1)
        return self.encoder(x)

    def describe_encoder(self) -> str:
        """One line for the run's header: the encoder, why, and its parameter count beside the policy's."""
        kind, why = self.encoder_choice
        count = sum(p.numel() for p in self.encoder.parameters())
        total = sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())
        return (
            f"encoder: {kind} ({why}; --policy.encoder to change): {count:,} parameters "
            f"of the policy's {total:,}"
        )

    def step(self, obs: torch.Tensor, state: State) -> tuple[torch.Tensor, torch.Tensor, State]:
        """Inference for one step: obs [B, ...] -> (logits or mean [B, A], value [B], state)."""
        f = self.features(obs)
        x, state = self.core.step(self.encode_features(f), state)
        return self._masked(self.decoder(x), obs), self._value(f, x), state

    def sequence(self, obs: torch.Tensor, state: State) -> tuple[torch.Tensor, torch.Tensor]:
        """Training over segments: obs [B, T, ...] from initial state [B, H] -> ([B, T, A], [B, T])."""
        f = self.features(obs)
        x = self.core.sequence(self.encode_features(f), state)
        return self._masked(self.decoder(x), obs), self._value(f, x)

    def _observed(self, obs: torch.Tensor) -> torch.Tensor:
        """The observations the encoders read: ``obs`` less an action mask's tail."""
        return obs[..., : -self.mask_size] if self.mask_size else obs

    def _masked(self, logits: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """``logits`` with every action the observation's mask tail forbids (0) set to ``MASKED``:
        sampling, log-probabilities, entropies and the mode then see only the allowed actions, and
        no gradient reaches a forbidden one. Unchanged where the env has no mask."""
        if not self.mask_size:
            return logits
        allowed = obs[..., -self.mask_size :] != 0
        return logits.masked_fill(~allowed, MASKED)

    def _value(self, features: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The value head over the actor's ``x``, or over the critic's own trunk (separate_value)."""
        if self.value_encoder is not None and self.value_core is not None:
            x = self.value_core(self.value_encoder(features))
        return self.value(x).squeeze(-1)

    # ------------------------------------------------------------------ distributions

    def distribution(self, out: torch.Tensor) -> Any:
        if self.nvec is None:
            return torch.distributions.Normal(out, self.log_std.exp().expand_as(out))
        return [torch.distributions.Categorical(logits=part) for part in torch.split(out, self.nvec, dim=-1)]

    def sample(
        self, out: torch.Tensor, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions and their log-probabilities; Box actions are ``mean + std * noise`` when ``noise``
        (standard normal, e.g. correlated across steps) is given."""
        dist = self.distribution(out)
        if self.nvec is None:
            action = dist.sample() if noise is None else out + dist.stddev * noise
            return action, dist.log_prob(action).sum(-1)
        actions = [d.sample() for d in dist]
        logprob = sum(d.log_prob(a) for d, a in zip(dist, actions, strict=True))
        action = (
            actions[0] if isinstance(self.action_space, spaces.Discrete) else torch.stack(actions, dim=-1)
        )
        return action, logprob

    def mode(self, out: torch.Tensor) -> torch.Tensor:
        """The most likely action of each head (the mean for Box actions), shaped as :meth:`sample`'s."""
        if self.nvec is None:
            return out
        heads = [part.argmax(-1) for part in torch.split(out, self.nvec, dim=-1)]
        return heads[0] if isinstance(self.action_space, spaces.Discrete) else torch.stack(heads, dim=-1)

    def env_actions(self, action: torch.Tensor) -> torch.Tensor:
        """What the envs are sent: Box samples clipped to the action space's bounds (PPO keeps the
        unclipped sample, whose log-probability its ratio needs); discrete actions as they are."""
        if self.nvec is None:
            return torch.clamp(action, self.action_low.to(action.dtype), self.action_high.to(action.dtype))
        return action

    @torch.no_grad()
    def update_obs_norm(self, obs: torch.Tensor, mask: torch.Tensor) -> None:
        """Merge the observations ``obs [..., *obs_shape]`` where ``mask`` is set into the running
        statistics (between epochs: see :mod:`appliance.train.normalize`)."""
        if self.obs_norm is not None:
            self.obs_norm.update(self.to_float(self._observed(obs))[mask.bool()])

    def evaluate_actions(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities and entropies of given actions."""
        dist = self.distribution(out)
        if self.nvec is None:
            return dist.log_prob(action).sum(-1), dist.entropy().sum(-1)
        if isinstance(self.action_space, spaces.Discrete):
            return dist[0].log_prob(action), dist[0].entropy()
        logprob = sum(d.log_prob(action[..., i]) for i, d in enumerate(dist))
        entropy = sum(d.entropy() for d in dist)
        return logprob, entropy


def inference_copy(policy: Policy, dtype: torch.dtype) -> Policy:
    """A copy of ``policy`` in ``dtype`` (bfloat16 rollout weights beside float32 master weights),
    weights shared within it as in the original (the LSTM cell's are the LSTM's), no gradients."""
    twin = copy.deepcopy(policy).to(dtype)
    twin.requires_grad_(False)
    return twin


@torch.no_grad()
def copy_weights(dst: Policy, src: Policy) -> None:
    """``dst``'s parameters and buffers from ``src`` (cast to ``dst``'s dtypes), in place: a captured
    graph or a compiled function that reads ``dst`` sees the new values."""
    pairs = [
        *zip(dst.parameters(), src.parameters(), strict=True),
        *zip(dst.buffers(), src.buffers(), strict=True),
    ]
    torch._foreach_copy_([d for d, _ in pairs], [s for _, s in pairs])
