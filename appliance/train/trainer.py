"""PPO: rollout into a ``[segments, horizon]`` buffer, prioritized-segment minibatch updates.

Read top to bottom: :meth:`Trainer.evaluate` fills the buffer (each agent writes its own row, a new
row whenever one fills), :meth:`Trainer.train` runs the minibatches, :meth:`Trainer.close` ends it.
Every tensor is preallocated; rollout and update are plain functions of those tensors, so a GPU fast
path (fused kernels, graphs) can replace pieces behind the same calls.

Per minibatch: advantages are recomputed over the whole buffer with the values and ratios the
previous minibatches wrote back (V-trace), distinct segments are drawn with probability
proportional to (sum_t |A| + floor)^alpha and weighted by (N P)^-beta (beta annealed to 1;
``kernels.prio_sample``), then the clipped policy loss, clipped value loss and entropy bonus
(:func:`appliance.train.losses.ppo_loss`; on a GPU the fused ``kernels.ppo_loss`` gives the same
loss and its gradient with respect to the logits and value in one kernel) are minimized, with
gradient accumulation when the minibatch is larger than ``max_minibatch_size``.

The pieces named ``kernels.<op>`` are :mod:`appliance.gpu.kernels`: fused CUDA kernels on a GPU,
their torch references (the same math) elsewhere. Random draws (actions, segments) come from
Philox keyed on (seed, step, agent or segment), so a run is reproducible by its seed and an agent's
draws do not depend on how agents are batched.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from appliance import sysinfo
from appliance.config import Config
from appliance.errors import ConfigError, DeviceError, TrainingError
from appliance.gpu import kernels
from appliance.train import advantage, checkpoint, engine, losses
from appliance.train.graphs import GRAD_NORM, IMPORTANCE, LOSS_TERMS, NONFINITE, EpochScalars, MinibatchGraph
from appliance.train.optim import make_optimizer, set_lr
from appliance.train.policy import Policy, State, copy_weights, inference_copy
from appliance.train.rewards import ReturnScale, scale_and_clamp
from appliance.train.rollout import Rollout
from appliance.train.timings import Timings


def resolve_device(name: str) -> torch.device:
    if name == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                "--train.device cuda was asked for, but torch sees no CUDA device "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); use --train.device cpu"
            )
        return torch.device("cuda")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device("cpu")


def make_policy(cfg: Config, vec: Any) -> Policy:
    p = cfg.policy
    return Policy(
        vec.single_observation_space,
        vec.single_action_space,
        core=p.core,
        hidden_size=p.hidden_size,
        encoder=p.encoder,
        obs_codec=getattr(vec, "obs_codec", None),
        init=p.init,
        obs_norm={"on": True, "off": False}.get(p.obs_norm, "auto"),
    )


def episode_means(episodes: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each stat over episodes, an entry with ``n`` counting as n episodes; ``n`` = the total."""
    weights = np.array([e.get("n", 1.0) for e in episodes])
    keys = [k for k in episodes[0] if k != "n"]
    out = {
        k: float(
            np.average(
                [e[k] for e in episodes if k in e],
                weights=[w for e, w in zip(episodes, weights, strict=True) if k in e],
            )
        )
        for k in keys
    }
    out["n"] = float(weights.sum())
    return out


@dataclass
class _Step:
    """One batch from ``recv``, on the trainer's device."""

    obs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    masks: torch.Tensor
    ids: torch.Tensor


class Trainer:
    def __init__(
        self,
        config: Config,
        vec: Any,
        policy: Policy | None = None,
        run_dir: str | Path | None = None,
        profile: bool = False,
    ) -> None:
        hp = config.train
        self.config, self.vec, self.hp = config, vec, hp
        self.device = resolve_device(hp.device)
        torch.manual_seed(hp.seed)
        self.generator = torch.Generator(device="cpu").manual_seed(hp.seed)
        self.policy = (policy or make_policy(config, vec)).to(self.device)
        self.amp = hp.precision == "bfloat16"
        if self.amp and self.device.type == "cpu" and not sysinfo.cpu_details()["isa"]["bf16"]:
            warnings.warn(
                "train.precision bfloat16 on a CPU without bfloat16 instructions (AVX512-BF16 or AMX): "
                "each bf16 op is converted to float32 and back, so this trains slower than float32",
                stacklevel=2,
            )
        # bfloat16: the rollout steps a bfloat16 copy of the weights (refreshed before each rollout);
        # the update trains the float32 master weights under bf16 autocast
        self.rollout_policy = inference_copy(self.policy, torch.bfloat16) if self.amp else self.policy
        step = self.rollout_policy.step
        self.forward_step = torch.compile(step) if hp.compile else step
        self.forward_sequence = torch.compile(self.policy.sequence) if hp.compile else self.policy.sequence

        n, horizon = vec.num_agents, hp.bptt_horizon
        batch = n * horizon if hp.batch_size == "auto" else int(hp.batch_size)
        if batch % horizon or batch < n * horizon:
            raise ConfigError(
                f"train.batch_size ({batch}) must be a multiple of train.bptt_horizon ({horizon}) and at least "
                f"num_agents * bptt_horizon ({n * horizon}) so every agent has a row; use 'auto' for {n * horizon}"
            )
        if hp.minibatch_size % horizon or batch % hp.minibatch_size:
            raise ConfigError(
                f"train.minibatch_size ({hp.minibatch_size}) must be a multiple of bptt_horizon ({horizon}) "
                f"that divides batch_size ({batch}); e.g. {max(horizon, min(batch, hp.minibatch_size) // horizon * horizon)}"
            )
        if hp.max_minibatch_size % horizon:
            raise ConfigError(
                f"train.max_minibatch_size ({hp.max_minibatch_size}) must be a multiple of bptt_horizon ({horizon})"
            )
        self.batch_size, self.horizon = batch, horizon
        self.segments = batch // horizon
        self.mb_segments = hp.minibatch_size // horizon
        self.chunk_segments = min(self.mb_segments, hp.max_minibatch_size // horizon)

        # ---- preallocated experience: one row per segment
        obs_device = torch.device("cpu") if hp.cpu_offload else self.device
        self.rollout = Rollout(
            self.segments,
            horizon,
            n,
            vec.single_observation_space,
            vec.single_action_space,
            self.policy.initial_state(self.segments, self.device),
            self.device,
            obs_device,
            pin_obs=hp.cpu_offload and self.device.type == "cuda",
        )
        self.state = self.policy.initial_state(n, self.device)
        self._noise: torch.Tensor | None = None  # Box actions' AR(1) exploration noise (_box_noise)

        # the update: device work only, captured as a CUDA graph where that is possible
        self.loss_coefs = losses.Coefs(hp.clip_coef, hp.vf_clip_coef, hp.vf_coef, hp.ent_coef)
        self._check_fused_loss()
        capture = self._can_capture(profile)
        self.optimizer = make_optimizer(self.policy, hp, graph_safe=capture)
        self.epoch_scalars = EpochScalars(self.device)
        self.update_step = MinibatchGraph(self._update_minibatch, capture)
        self.return_scale = ReturnScale(n, hp.gamma) if hp.reward_norm else None
        self.timings = Timings(sync=profile)
        self.global_step, self.epoch = 0, 0
        self.start_time, self._start_step = time.time(), 0
        self.losses: dict[str, float] = {}
        self.env_stats: dict[str, float] = {}
        self._episodes: list[dict[str, float]] = []
        self.run_dir = Path(run_dir) if run_dir else None
        self.last_checkpoint: Path | None = None
        self.latest_pointer: Path | None = None
        # the rollout engine (train.engine, train.buffers) for native Ocean envs; None: the plain loop below
        self.engine = engine.Engine(self) if engine.wanted(hp, vec) else None
        self.vec.async_reset(hp.seed)

    def _can_capture(self, profile: bool) -> bool:
        """``train.graphs`` on a CUDA device, except where a graph cannot hold the update: Box actions
        (no fused loss), observations kept on the host (``cpu_offload``), ``torch.compile`` (its own
        graphs), per-phase profiling (it synchronizes) and data-parallel ranks (the all-reduces)."""
        hp = self.hp
        return bool(
            hp.graphs
            and self.device.type == "cuda"
            and self.policy.nvec is not None
            and not hp.cpu_offload
            and not hp.compile
            and not profile
            and type(self)._reduce_gradients is Trainer._reduce_gradients
        )

    # ------------------------------------------------------------------ rollout

    def evaluate(self) -> None:
        """Step the envs until every segment row holds ``horizon`` steps: recv -> forward -> write -> send
        (or the same in the rollout engine's buffers, :mod:`appliance.train.engine`)."""
        if self.rollout_policy is not self.policy:
            copy_weights(self.rollout_policy, self.policy)
        if self.hp.reset_state:  # in place: the engine's buffers and captured graphs hold views of it
            for s, init in zip(self.state, self.policy.initial_state(1, self.device), strict=True):
                s.copy_(init.expand_as(s))
        if self.engine is not None:
            with self.timings.phase("evaluate"):
                self.engine.evaluate()
            return
        rollout = self.rollout
        rollout.reset()
        with self.timings.phase("evaluate"):
            while not rollout.full:
                with self.timings("env"):
                    obs, rewards, terminals, truncations, infos, ids, masks = self.vec.recv()
                self._collect_infos(infos)
                ids = np.asarray(ids)
                with self.timings("copy"):
                    step = self._to_device(obs, rewards, terminals, truncations, ids, masks)
                with self.timings("forward"):
                    state = tuple(s[step.ids] for s in self.state)
                    action, logprob, value = self.act(step.obs, state, step.ids)
                rollout.write(
                    ids, state, step.obs, action, logprob, value, step.rewards, step.dones, step.masks
                )
                with self.timings("copy"):
                    actions = self.policy.env_actions(action).cpu().numpy()
                with self.timings("env"):
                    self.vec.send(actions)
                self.global_step += len(ids) if masks is None else int(step.masks.sum().item())
        self.update_env_stats()

    def _to_device(
        self, obs: Any, rewards: Any, terminals: Any, truncations: Any, ids: np.ndarray, masks: Any
    ) -> _Step:
        """One ``recv`` on the trainer's device: rewards scaled (:class:`ReturnScale`) and clamped,
        dones = terminal or truncated."""
        dev = self.device
        dones = np.logical_or(terminals, truncations)
        rewards = scale_and_clamp(self.return_scale, ids, rewards, dones, self.hp.reward_clamp)
        return _Step(
            obs=torch.as_tensor(obs).to(dev, non_blocking=True),
            rewards=rewards.to(dev, non_blocking=True),
            dones=torch.as_tensor(dones).to(dev, non_blocking=True).float(),
            masks=torch.as_tensor(np.ones(len(ids), bool) if masks is None else masks).to(dev).float(),
            ids=torch.as_tensor(ids, device=dev),
        )

    @torch.no_grad()
    def policy_step(
        self,
        obs: torch.Tensor,
        state: State,
        ids: torch.Tensor,
        step: int | torch.Tensor,
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State]:
        """The rollout's one policy step, for the plain loop, the rollout engine and its CUDA graphs:
        the rollout policy's forward on ``state`` and the agents ``ids``' actions drawn from it (keyed
        on (seed, ``step``, agent id); ``step`` may be a device tensor, as in a graph). Returns
        (action, log-prob, value, new state), written into ``out``'s (action, log-prob, value) when
        given; the caller stores the new state."""
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.amp):
            logits, value, new_state = self.forward_step(obs, state)
        if self.policy.nvec is None:  # Box actions: a Gaussian from torch's generator
            action, logprob = self.policy.sample(logits.float(), self._box_noise(ids, logits))
            return action, logprob, value.float(), new_state
        decoded = torch.cat([logits.float(), value.float()[:, None]], 1)  # one fused sampling kernel on a GPU
        into = {} if out is None else dict(zip(("action", "logprob", "value"), out, strict=True))
        action, logprob, value = kernels.sample_logits(
            decoded, self.policy.nvec, self.hp.seed, step, ids=ids, **into
        )
        return action, logprob, value, new_state

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, state: State, ids: torch.Tensor, step: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """:meth:`policy_step` for the agents ``ids`` at ``step`` (default ``global_step``), their
        recurrent state moved on in ``self.state``; NaN observations or log-probs end training with
        a :class:`TrainingError` that says where they came from."""
        try:
            action, logprob, value, new_state = self.policy_step(
                obs, state, ids, self.global_step if step is None else step
            )
            if not torch.isfinite(logprob).all():
                raise ValueError("non-finite log-probabilities")
        except (ValueError, RuntimeError) as e:  # NaN logits: say where they came from
            if obs.is_floating_point() and not torch.isfinite(obs).all():
                bad = ids[~torch.isfinite(obs.reshape(len(obs), -1)).all(1)][:5].tolist()
                raise TrainingError(
                    f"the env returned NaN or Inf observations in epoch {self.epoch} (step {self.global_step}, "
                    f"agents {bad}); stopping; {self.kept()}"
                ) from e
            raise
        for s, new in zip(self.state, new_state, strict=True):
            s[ids] = new.to(s.dtype)
        return action, logprob, value

    def _box_noise(self, ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor | None:
        """Box actions' exploration noise for the agents ``ids``: with ``train.noise_corr`` rho > 0 an
        AR(1) process per agent (rho times its last noise plus sqrt(1 - rho^2) fresh N(0, 1): still
        N(0, 1) at each step, so the log-prob is the Gaussian head's, but pushes that last several
        steps, as MountainCarContinuous needs); None with rho 0 (white noise)."""
        rho = self.hp.noise_corr
        if rho == 0:
            return None
        if self._noise is None:
            self._noise = torch.zeros(self.vec.num_agents, out.shape[-1], device=out.device)
        noise = rho * self._noise[ids] + math.sqrt(1 - rho * rho) * torch.randn(out.shape, device=out.device)
        self._noise[ids] = noise
        return noise

    def _collect_infos(self, infos: list[dict[str, Any]]) -> None:
        """Episode stats from infos: one episode each (emulated envs), or the means of ``n`` episodes
        (Ocean envs on a process backend report their C log this way)."""
        for info in infos or ():
            if "episode_return" in info:
                self._episodes.append({k: float(v) for k, v in info.items() if k != "env"})

    def update_env_stats(self) -> None:
        log = self.vec.log() if hasattr(self.vec, "log") else {}
        if log:
            self.env_stats = dict(log)
        elif self._episodes:
            self.env_stats = episode_means(self._episodes)
            self._episodes = []

    # ------------------------------------------------------------------ update

    def train(self) -> dict[str, float]:
        """PPO over the buffer; returns the epoch's mean losses. The minibatches are device work only
        (:meth:`_update_minibatch`), replayed as one CUDA graph each on a GPU; the statistics and
        the NaN checks are read back once, at the end."""
        hp, b, acc = self.hp, self.rollout, self.epoch_scalars
        progress = min(1.0, self.global_step / max(1, hp.total_timesteps))
        lr_scale = 0.5 * (1 + math.cos(math.pi * progress)) if hp.anneal_lr else 1.0
        lr = set_lr(self.optimizer, lr_scale)
        minibatches = hp.update_epochs * self.segments // self.mb_segments
        with self.timings.phase("train"):
            b.ratios.fill_(1.0)
            acc.begin(self.epoch * minibatches, hp.prio_beta0 + (1 - hp.prio_beta0) * progress)
            for _ in range(minibatches):
                self.update_step()
            sums = acc.finish(minibatches)
            if sums.pop("nonfinite_advantages"):
                raise TrainingError(
                    f"advantages became NaN/Inf in epoch {self.epoch} (step {self.global_step}): "
                    "check the env's rewards and observations for NaN/Inf; " + self.kept()
                )
            self._check_loss(sums.pop("loss"))
            assert acc.last_advantages is not None
            returns = acc.last_advantages + b.values
            var = returns.var()
            sums["explained_variance"] = (
                float(1 - (returns - b.values).var() / var) if var > 0 else float("nan")
            )
            sums["learning_rate"] = lr
            self.policy.update_obs_norm(b.obs.to(self.device), b.masks)  # the next epoch's statistics
        self.epoch += 1
        self.losses = sums
        return sums

    def _update_minibatch(self) -> None:
        """One minibatch, all on the device: V-trace advantages with the ratios and values the
        previous minibatches wrote back, distinct segments by priority, the loss and its gradient,
        clipping and the optimizer step; statistics summed into ``epoch_scalars``."""
        hp, b, acc = self.hp, self.rollout, self.epoch_scalars
        adv = advantage.compute(  # fused on CUDA; the torch definition elsewhere
            b.values,
            b.rewards,
            b.dones,
            b.ratios,
            hp.gamma,
            hp.gae_lambda,
            hp.vtrace_rho_clip,
            hp.vtrace_c_clip,
        )
        acc.sums[NONFINITE] += (~torch.isfinite(adv)).any()
        # distinct segments by priority, drawn on the device (exponential keys and a top-k). The
        # uniforms come from torch's generator, not the kernel's Philox stream: with Philox-keyed
        # draws g2048's defaults learned to about half the score (1.6-1.8 K vs 3.1-4.1 K at 1 M
        # steps, seeds 0 and 1, every other piece the same), a difference not yet explained.
        u = torch.rand(
            adv.shape[0], generator=self.generator if adv.device.type == "cpu" else None,
            dtype=torch.float64, device=adv.device,
        )  # fmt: skip
        idx, importance = kernels.prio_sample(
            adv, hp.prio_alpha, acc.beta, self.mb_segments, hp.seed, acc.step, uniform=u
        )
        mb_adv = adv[idx]
        mb_returns = mb_adv + b.values[idx]
        mean, std = self._advantage_stats(mb_adv)
        norm_adv = importance[:, None] * (mb_adv - mean) / (std + 1e-8)
        self.optimizer.zero_grad(set_to_none=not self.update_step.capture)  # graphs: grads stay put
        self._minibatch(idx, norm_adv, mb_returns)
        with self.timings("learn"):
            self._reduce_gradients()
            acc.sums[GRAD_NORM] += torch.nn.utils.clip_grad_norm_(self.policy.parameters(), hp.max_grad_norm)
            self.optimizer.step()
        acc.sums[IMPORTANCE] += importance.mean()
        acc.step += 1
        acc.last_advantages = adv

    # Data-parallel hooks (appliance.train.distributed.RankTrainer): one process needs neither.

    def _advantage_stats(self, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std that normalize a minibatch's advantages (across ranks when data-parallel)."""
        return adv.mean(), adv.std()

    def _reduce_gradients(self) -> None:
        """Called after a minibatch's backward, before clipping: ranks average gradients here."""

    def _minibatch(self, idx: torch.Tensor, norm_adv: torch.Tensor, returns: torch.Tensor) -> None:
        """Forward and backward over the sampled segments ``idx``, in chunks of at most
        ``max_minibatch_size`` whose gradients add up (each scaled by its share of the minibatch)."""
        b = self.rollout
        for start in range(0, len(idx), self.chunk_segments):
            sl = slice(start, start + self.chunk_segments)
            rows = idx[sl]
            weight = len(rows) / len(idx)
            with self.timings("copy"):
                obs = b.obs[rows.to(b.obs.device)].to(self.device, non_blocking=True)
            with self.timings("forward"), torch.autocast(self.device.type, torch.bfloat16, enabled=self.amp):
                state = tuple(s[rows] for s in b.initial_state)
                out, new_value = self.forward_sequence(obs, state)
            out, new_value = out.float(), new_value.float()
            terms, ratio = self._loss(out, new_value, rows, norm_adv[sl], returns[sl], weight)
            with torch.no_grad():  # fresh ratios and values for the next minibatch's V-trace advantages
                b.ratios[rows] = ratio.reshape(len(rows), -1)
                b.values[rows] = new_value.detach()
                self.epoch_scalars.sums[LOSS_TERMS] += terms * weight

    def _loss(
        self,
        out: torch.Tensor,
        value: torch.Tensor,
        rows: torch.Tensor,
        adv: torch.Tensor,
        returns: torch.Tensor,
        weight: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`losses.ppo_loss` over the rows ``rows`` and its backward pass (``weight``: the chunk's
        share of the minibatch); returns the loss terms and the new ratios, on the device. Where the
        fused CUDA loss runs (discrete actions, ``kernels.use_cuda``) it gives the same terms and the
        gradients with respect to the logits and values in one kernel, checked against the torch loss
        when the trainer starts (:meth:`_check_fused_loss`)."""
        b = self.rollout
        if self.policy.nvec is not None and kernels.use_cuda(out):
            n = value.numel()
            res = kernels.ppo_loss(
                out.reshape(n, -1), value.reshape(n), b.actions[rows].reshape(n, -1).squeeze(1),
                b.logprobs[rows].reshape(n), adv.reshape(n), returns.reshape(n), b.values[rows].reshape(n),
                b.masks[rows].reshape(n), self.policy.nvec, *self.loss_coefs, grad_scale=weight,
            )  # fmt: skip
            with self.timings("learn"):
                torch.autograd.backward(
                    [out, value], [res.grad_logits.view_as(out), res.grad_value.view_as(value)]
                )
            return res.stats, res.ratio
        if self.policy.nvec is None:
            new_logprob, entropy = self.policy.evaluate_actions(out, b.actions[rows])
        else:  # unvalidated heads: NaN logits give a NaN loss, which train() reports
            n = value.numel()
            new_logprob, entropy = losses.categorical(out.reshape(n, -1), b.actions[rows], self.policy.nvec)
            new_logprob, entropy = new_logprob.view_as(value), entropy.view_as(value)
        res = losses.ppo_loss(
            new_logprob, entropy, value, b.logprobs[rows], adv, returns, b.values[rows], b.masks[rows],
            self.loss_coefs,
        )  # fmt: skip
        with self.timings("learn"):
            (res.loss * weight).backward()
        return res.stats, res.ratio

    def _check_fused_loss(self) -> None:
        """On a GPU where the fused loss will run, compare it with the torch loss on one minibatch."""
        probe = torch.zeros(1, device=self.device)
        if self.policy.nvec is not None and kernels.use_cuda(probe):
            losses.check_fused(kernels.ppo_loss, self.policy.nvec, self.loss_coefs, self.device)

    def _check_loss(self, loss: float) -> None:
        if not math.isfinite(loss):
            raise TrainingError(
                f"loss became {loss} in epoch {self.epoch} (step {self.global_step}); stopping; {self.kept()}"
            )

    # ------------------------------------------------------------------ checkpoints

    def kept(self) -> str:
        if self.last_checkpoint:
            return f"the last good checkpoint {self.last_checkpoint} is kept"
        return "no checkpoint was written yet"

    def train_state(self) -> checkpoint.TrainState:
        """What a checkpoint saves of this trainer and restores into it."""
        return checkpoint.TrainState(
            policy=self.policy,
            optimizer=self.optimizer,
            generator=self.generator,
            config=self.config,
            device=self.device,
            epoch=self.epoch,
            global_step=self.global_step,
        )

    def save_checkpoint(self) -> Path | None:
        """Weights and trainer state into the run folder (see :mod:`appliance.train.checkpoint`);
        ``latest_pointer`` (set by the train command) then names this run."""
        if self.run_dir is None:
            return None
        self.last_checkpoint = checkpoint.save(
            self.train_state(), self.run_dir, latest=self.latest_pointer, previous=self.last_checkpoint
        )
        return self.last_checkpoint

    def load_checkpoint(self, path: Path, resume: bool = True) -> None:
        """From a checkpoint file or a run folder's newest; ``resume`` also restores optimizer and counters."""
        loaded = checkpoint.load(self.train_state(), path, resume)
        if resume:
            self.global_step, self.epoch = loaded.global_step, loaded.epoch
            self._start_step = self.global_step
            self.last_checkpoint = loaded.path

    def log_metrics(self) -> dict[str, Any]:
        """One metrics record (also appended to metrics.jsonl in the run folder)."""
        record = {
            "epoch": self.epoch,
            "global_step": self.global_step,
            "sps": self.sps,
            "uptime": time.time() - self.start_time,
            **{f"loss/{k}": v for k, v in self.losses.items()},
            **{f"env/{k}": v for k, v in self.env_stats.items()},
            **{f"time/{k}": v["seconds"] for k, v in self.timings.breakdown().items()},
            **{  # the rollout engine's buffers: seconds in the policy step, waiting for the GIL, stepping envs
                f"time/buffer{b}/{part}": seconds
                for b, parts in enumerate(self.timings.buffers)
                for part, seconds in parts.items()
            },
        }
        if self.run_dir is not None:
            checkpoint.append_metrics(self.run_dir, json.dumps(record) + "\n")
        return record

    @property
    def sps(self) -> float:
        """Agent-steps that reached the trainer per wall-clock second, end to end."""
        return (self.global_step - self._start_step) / max(1e-9, time.time() - self.start_time)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """The rollout engine's threads and the vector (its workers, shared memory); idempotent."""
        if getattr(self, "engine", None) is not None:
            self.engine.close()
            self.engine = None
        self.vec.close()
