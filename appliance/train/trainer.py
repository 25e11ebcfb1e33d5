"""PPO: rollout into a ``[segments, horizon]`` buffer, prioritized-segment minibatch updates.

Read top to bottom: :meth:`Trainer.evaluate` fills the buffer (each agent writes its own row, a new
row whenever one fills), :meth:`Trainer.train` runs the minibatches, :meth:`Trainer.close` ends it.
Every tensor is preallocated; rollout and update are plain functions of those tensors, so a GPU fast
path (fused kernels, graphs) can replace pieces behind the same calls.

Per minibatch: advantages are recomputed over the whole buffer with the values and ratios the
previous minibatches wrote back (V-trace), segments are drawn with probability proportional to
(sum_t |A|)^alpha and weighted by (N P)^-beta (beta annealed to 1), then the clipped policy loss,
clipped value loss and entropy bonus are minimized, with gradient accumulation when the minibatch is
larger than ``max_minibatch_size``.
"""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from appliance.config import Config
from appliance.errors import ApplianceError, ConfigError, DeviceError
from appliance.report_io import write_bytes_atomic
from appliance.train.advantage import compute_advantages
from appliance.train.policy import Policy, State
from appliance.train.timings import Timings


class TrainingError(ApplianceError, RuntimeError):
    """Training cannot go on (a NaN/Inf loss); the message names the last good checkpoint."""


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
    )


class MultiOptimizer:
    """Several optimizers stepped as one (Muon for hidden 2-D weights, Adam for the rest)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers
        self.param_groups = [g for o in optimizers for g in o.param_groups]
        for g in self.param_groups:
            g.setdefault("initial_lr", g["lr"])

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> list[dict[str, Any]]:
        return [o.state_dict() for o in self.optimizers]

    def load_state_dict(self, states: list[dict[str, Any]]) -> None:
        for o, s in zip(self.optimizers, states, strict=True):
            o.load_state_dict(s)


def make_optimizer(policy: Policy, t: Any) -> MultiOptimizer:
    adam_kwargs = {"lr": t.learning_rate, "betas": (t.adam_beta1, t.adam_beta2), "eps": t.adam_eps}
    if t.optimizer == "adam":
        return MultiOptimizer([torch.optim.Adam(policy.parameters(), **adam_kwargs)])
    if not hasattr(torch.optim, "Muon"):
        raise ConfigError(
            f"train.optimizer muon needs torch >= 2.9 (torch.optim.Muon); this torch is {torch.__version__}. "
            "Use --train.optimizer adam"
        )
    heads = {id(p) for p in (*policy.decoder.parameters(), *policy.value.parameters())}
    seen: set[int] = set()
    matrices, others = [], []
    for p in policy.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        (matrices if p.ndim == 2 and id(p) not in heads else others).append(p)
    opts: list[torch.optim.Optimizer] = [torch.optim.Adam(others, **adam_kwargs)]
    if matrices:
        opts.append(
            torch.optim.Muon(matrices, lr=t.learning_rate, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
        )
    return MultiOptimizer(opts)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


class Trainer:
    def __init__(
        self,
        config: Config,
        vec: Any,
        policy: Policy | None = None,
        run_dir: str | Path | None = None,
        profile: bool = False,
    ) -> None:
        t = config.train
        self.config, self.vec, self.t = config, vec, t
        self.device = resolve_device(t.device)
        torch.manual_seed(t.seed)
        self.generator = torch.Generator(device="cpu").manual_seed(t.seed)
        self.policy = (policy or make_policy(config, vec)).to(self.device)
        self.amp = self.device.type == "cuda" and t.precision == "bfloat16"
        self.forward_step = torch.compile(self.policy.step) if t.compile else self.policy.step
        self.forward_sequence = torch.compile(self.policy.sequence) if t.compile else self.policy.sequence

        n, horizon = vec.num_agents, t.bptt_horizon
        batch = n * horizon if t.batch_size == "auto" else int(t.batch_size)
        if batch % horizon or batch < n * horizon:
            raise ConfigError(
                f"train.batch_size ({batch}) must be a multiple of train.bptt_horizon ({horizon}) and at least "
                f"num_agents * bptt_horizon ({n * horizon}) so every agent has a row; use 'auto' for {n * horizon}"
            )
        if t.minibatch_size % horizon or batch % t.minibatch_size:
            raise ConfigError(
                f"train.minibatch_size ({t.minibatch_size}) must be a multiple of bptt_horizon ({horizon}) "
                f"that divides batch_size ({batch}); e.g. {max(horizon, min(batch, t.minibatch_size) // horizon * horizon)}"
            )
        if t.max_minibatch_size % horizon:
            raise ConfigError(
                f"train.max_minibatch_size ({t.max_minibatch_size}) must be a multiple of bptt_horizon ({horizon})"
            )
        self.batch_size, self.horizon = batch, horizon
        self.segments = batch // horizon
        self.mb_segments = t.minibatch_size // horizon
        self.chunk_segments = min(self.mb_segments, t.max_minibatch_size // horizon)

        # ---- preallocated experience: one row per segment
        obs_space, act_space = vec.single_observation_space, vec.single_action_space
        obs_device = torch.device("cpu") if t.cpu_offload else self.device
        pin = t.cpu_offload and self.device.type == "cuda"
        S, T = self.segments, horizon
        obs_dtype = torch.from_numpy(np.zeros(0, obs_space.dtype)).dtype
        self.obs = torch.zeros((S, T, *obs_space.shape), dtype=obs_dtype, device=obs_device, pin_memory=pin)
        act_shape = () if isinstance(act_space, spaces.Discrete) else tuple(np.shape(act_space.sample()))
        act_dtype = torch.float32 if isinstance(act_space, spaces.Box) else torch.int64
        self.actions = torch.zeros((S, T, *act_shape), dtype=act_dtype, device=self.device)
        self.logprobs, self.values, self.rewards, self.dones, self.ratios, self.masks = (
            torch.zeros((S, T), device=self.device) for _ in range(6)
        )
        self.state = self.policy.initial_state(n, self.device)
        self.initial_state = self.policy.initial_state(S, self.device)

        self.optimizer = make_optimizer(self.policy, t)
        self.timings = Timings(sync=profile)
        self.global_step, self.epoch = 0, 0
        self.start_time, self._start_step = time.time(), 0
        self.losses: dict[str, float] = {}
        self.env_stats: dict[str, float] = {}
        self._episodes: list[dict[str, float]] = []
        self.run_dir = Path(run_dir) if run_dir else None
        self.last_checkpoint: Path | None = None
        self.vec.async_reset(t.seed)

    # ------------------------------------------------------------------ rollout

    def _gather_state(self, ids: torch.Tensor) -> State:
        return tuple(s[ids] for s in self.state)

    def evaluate(self) -> None:
        """Step the envs until every segment row holds ``horizon`` steps."""
        t, n, T = self.t, self.vec.num_agents, self.horizon
        agent_row = np.arange(n)  # row each agent writes; -1: no row left this rollout
        agent_pos = np.zeros(n, dtype=np.int64)
        next_free, filled = n, 0
        with self.timings.phase("evaluate"):
            while filled < self.segments:
                with self.timings("env"):
                    obs, rew, term, trunc, infos, ids, mask = self.vec.recv()
                self._collect_infos(infos)
                ids_np = np.asarray(ids)
                rows_np, pos_np = agent_row[ids_np], agent_pos[ids_np]
                with self.timings("copy"):
                    obs_t = torch.as_tensor(obs).to(self.device, non_blocking=True)
                    rew_t = (
                        torch.as_tensor(rew)
                        .to(self.device, non_blocking=True)
                        .clamp(-t.reward_clamp, t.reward_clamp)
                    )
                    done_t = (
                        torch.as_tensor(np.logical_or(term, trunc)).to(self.device, non_blocking=True).float()
                    )
                    mask_t = (
                        torch.as_tensor(np.ones(len(ids_np), bool) if mask is None else mask)
                        .to(self.device)
                        .float()
                    )
                    ids_t = torch.as_tensor(ids_np, device=self.device)
                with (
                    self.timings("forward"),
                    torch.no_grad(),
                    torch.autocast(self.device.type, torch.bfloat16, enabled=self.amp),
                ):
                    state = self._gather_state(ids_t)
                    out, value, new_state = self.forward_step(obs_t, state)
                    action, logprob = self.policy.sample(out.float())
                    for s, new in zip(self.state, new_state, strict=True):
                        s[ids_t] = new.to(s.dtype)
                valid = rows_np >= 0
                if valid.any():
                    sel = torch.as_tensor(np.flatnonzero(valid), device=self.device)
                    r = torch.as_tensor(rows_np[valid], device=self.device)
                    p = torch.as_tensor(pos_np[valid], device=self.device)
                    starting = torch.as_tensor(pos_np[valid] == 0, device=self.device)
                    for s_buf, s_now in zip(self.initial_state, state, strict=True):
                        s_buf[r[starting]] = s_now[sel[starting]].to(s_buf.dtype)
                    self.obs[r.to(self.obs.device), p.to(self.obs.device)] = obs_t[sel].to(self.obs.device)
                    self.actions[r, p] = action[sel].to(self.actions.dtype)
                    self.logprobs[r, p] = logprob[sel].float()
                    self.values[r, p] = value[sel].float()
                    self.rewards[r, p] = rew_t[sel]
                    self.dones[r, p] = done_t[sel]
                    self.masks[r, p] = mask_t[sel]
                    agent_pos[ids_np[valid]] += 1
                    full = ids_np[valid][agent_pos[ids_np[valid]] == T]
                    filled += len(full)
                    for agent in full:  # a full row: the agent moves to the next free one, if any
                        agent_row[agent] = next_free if next_free < self.segments else -1
                        agent_pos[agent] = 0
                        next_free += 1
                with self.timings("copy"):
                    action_np = action.cpu().numpy()
                with self.timings("env"):
                    self.vec.send(action_np)
                self.global_step += int(mask_t.sum().item()) if mask is not None else len(ids_np)
        self._update_env_stats()

    def _collect_infos(self, infos: list[dict[str, Any]]) -> None:
        for info in infos or ():
            if "episode_return" in info:
                self._episodes.append({k: float(v) for k, v in info.items() if k != "env"})

    def _update_env_stats(self) -> None:
        log = self.vec.log() if hasattr(self.vec, "log") else {}
        if log:
            self.env_stats = dict(log)
        elif self._episodes:
            keys = self._episodes[0].keys()
            self.env_stats = {k: float(np.mean([e[k] for e in self._episodes])) for k in keys}
            self.env_stats["n"] = float(len(self._episodes))
            self._episodes = []

    # ------------------------------------------------------------------ update

    def train(self) -> dict[str, float]:
        """PPO over the buffer; returns the epoch's mean losses."""
        t = self.t
        progress = min(1.0, self.global_step / max(1, t.total_timesteps))
        lr_scale = 0.5 * (1 + math.cos(math.pi * progress)) if t.anneal_lr else 1.0
        for g in self.optimizer.param_groups:
            g["lr"] = g["initial_lr"] * lr_scale
        beta = t.prio_beta0 + (1 - t.prio_beta0) * progress
        sums: dict[str, float] = {}
        minibatches = t.update_epochs * self.segments // self.mb_segments
        with self.timings.phase("train"):
            self.ratios.fill_(1.0)
            for _ in range(minibatches):
                adv = compute_advantages(
                    self.values,
                    self.rewards,
                    self.dones,
                    self.ratios,
                    t.gamma,
                    t.gae_lambda,
                    t.vtrace_rho_clip,
                    t.vtrace_c_clip,
                )
                prio = adv.abs().sum(1).pow(t.prio_alpha)
                probs = prio / prio.sum() if prio.sum() > 0 else torch.full_like(prio, 1.0 / self.segments)
                idx = torch.multinomial(
                    probs.cpu(), self.mb_segments, replacement=True, generator=self.generator
                ).to(self.device)
                importance = (self.segments * probs[idx]).pow(-beta)
                mb_adv = adv[idx]
                mb_returns = mb_adv + self.values[idx]
                norm_adv = importance[:, None] * (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                self.optimizer.zero_grad()
                stats = self._minibatch(idx, norm_adv, mb_returns)
                with self.timings("learn"):
                    grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), t.max_grad_norm)
                    self.optimizer.step()
                stats["grad_norm"] = float(grad_norm)
                stats["importance"] = float(importance.mean())
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v / minibatches
            returns = adv + self.values
            var = returns.var()
            sums["explained_variance"] = (
                float(1 - (returns - self.values).var() / var) if var > 0 else float("nan")
            )
            sums["learning_rate"] = self.optimizer.param_groups[0]["lr"]
        self.epoch += 1
        self.losses = sums
        return sums

    def _minibatch(
        self, idx: torch.Tensor, norm_adv: torch.Tensor, returns: torch.Tensor
    ) -> dict[str, float]:
        t = self.t
        stats: dict[str, float] = {}
        for start in range(0, len(idx), self.chunk_segments):
            sl = slice(start, start + self.chunk_segments)
            rows = idx[sl]
            weight = len(rows) / len(idx)
            with self.timings("copy"):
                obs = self.obs[rows.to(self.obs.device)].to(self.device, non_blocking=True)
            with self.timings("forward"), torch.autocast(self.device.type, torch.bfloat16, enabled=self.amp):
                state = tuple(s[rows] for s in self.initial_state)
                out, new_value = self.forward_sequence(obs, state)
                new_logprob, entropy = self.policy.evaluate_actions(out.float(), self.actions[rows])
                new_value = new_value.float()
            mask = self.masks[rows]
            logratio = new_logprob - self.logprobs[rows]
            ratio = logratio.exp()
            adv = norm_adv[sl]
            pg_loss = _masked_mean(
                torch.max(-adv * ratio, -adv * ratio.clamp(1 - t.clip_coef, 1 + t.clip_coef)), mask
            )
            old_value = self.values[rows]
            v_clipped = old_value + (new_value - old_value).clamp(-t.vf_clip_coef, t.vf_clip_coef)
            v_loss = 0.5 * _masked_mean(
                torch.max((new_value - returns[sl]) ** 2, (v_clipped - returns[sl]) ** 2), mask
            )
            ent = _masked_mean(entropy, mask)
            loss = pg_loss + t.vf_coef * v_loss - t.ent_coef * ent
            if not torch.isfinite(loss):
                where = (
                    f"the last good checkpoint {self.last_checkpoint} is kept"
                    if self.last_checkpoint
                    else "no checkpoint was written yet"
                )
                raise TrainingError(
                    f"loss became {loss.item()} in epoch {self.epoch} (step {self.global_step}); stopping; {where}"
                )
            with self.timings("learn"):
                (loss * weight).backward()
            with torch.no_grad():  # fresh ratios and values for the next minibatch's V-trace advantages
                self.ratios[rows] = ratio.detach()
                self.values[rows] = new_value.detach()
                part = {
                    "policy_loss": pg_loss.item(),
                    "value_loss": v_loss.item(),
                    "entropy": ent.item(),
                    "approx_kl": _masked_mean((ratio - 1) - logratio, mask).item(),
                    "clipfrac": _masked_mean(((ratio - 1).abs() > t.clip_coef).float(), mask).item(),
                }
            for k, v in part.items():
                stats[k] = stats.get(k, 0.0) + v * weight
        return stats

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> Path | None:
        """Model and trainer state, each written atomically; returns the model path."""
        if self.run_dir is None:
            return None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        model = self.run_dir / "model.pt"
        buf = io.BytesIO()
        torch.save(self.policy.state_dict(), buf)
        write_bytes_atomic(self.run_dir / f"model_{self.epoch:06d}.pt", buf.getvalue())
        write_bytes_atomic(model, buf.getvalue())
        buf = io.BytesIO()
        torch.save(
            {
                "optimizer": self.optimizer.state_dict(),
                "global_step": self.global_step,
                "epoch": self.epoch,
                "torch_rng": torch.get_rng_state(),
                "generator": self.generator.get_state(),
            },
            buf,
        )
        write_bytes_atomic(self.run_dir / "trainer_state.pt", buf.getvalue())
        self.last_checkpoint = model
        return model

    def load_checkpoint(self, run_dir: Path, resume: bool = True) -> None:
        self.policy.load_state_dict(
            torch.load(run_dir / "model.pt", map_location=self.device, weights_only=True)
        )
        if resume:
            state = torch.load(run_dir / "trainer_state.pt", map_location="cpu", weights_only=False)
            self.optimizer.load_state_dict(state["optimizer"])
            self.global_step, self.epoch = state["global_step"], state["epoch"]
            self._start_step = self.global_step
            torch.set_rng_state(state["torch_rng"])
            self.generator.set_state(state["generator"])
            self.last_checkpoint = run_dir / "model.pt"

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
        }
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
        return record

    @property
    def sps(self) -> float:
        """Agent-steps that reached the trainer per wall-clock second, end to end."""
        return (self.global_step - self._start_step) / max(1e-9, time.time() - self.start_time)

    def close(self) -> None:
        self.vec.close()
