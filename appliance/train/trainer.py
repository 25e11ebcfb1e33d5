"""PPO: rollout into a ``[segments, horizon]`` buffer, prioritized-segment minibatch updates.

Read top to bottom: :meth:`Trainer.evaluate` fills the buffer (each agent writes its own row, a new
row whenever one fills), :meth:`Trainer.train` runs the minibatches, :meth:`Trainer.close` ends it.
Every tensor is preallocated; rollout and update are plain functions of those tensors, so a GPU fast
path (fused kernels, graphs) can replace pieces behind the same calls.

Per minibatch: advantages are recomputed over the whole buffer with the values and ratios the
previous minibatches wrote back (V-trace), distinct segments are drawn with probability
proportional to (sum_t |A| + floor)^alpha (with ``train.prio_replacement``, independent draws by
the same probabilities, as PufferLib 4.0) and weighted by (N P)^-beta (beta annealed to 1;
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
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from appliance.config import Config, families
from appliance.config.build import batch_for_agents, draws_transitions
from appliance.errors import ConfigError, TrainingError
from appliance.gpu import host, kernels
from appliance.sysinfo.load import RunLoad
from appliance.train import advantage, checkpoint, engine, graphs, losses, runs
from appliance.train.cores.lstm import LSTM
from appliance.train.episodes import Episodes
from appliance.train.exploration import BoxNoise
from appliance.train.make import make_policy, native_bf16, resolve_device, resolve_precision
from appliance.train.optim import make_optimizer, set_lr
from appliance.train.policy import Policy, State, copy_weights, inference_copy
from appliance.train.rewards import ReturnScale
from appliance.train.rollout import Rollout, recv_to_device
from appliance.train.timings import Timings

MINIBATCH_UNITS = ("auto", "segments", "transitions")


def minibatch_in_transitions(unit: str, policy: Policy, prio_alpha: float) -> bool:
    """Whether minibatches are drawn in single transitions (``train.minibatch_unit``): ``transitions``
    needs a core without state (a recurrent core trains on whole segments from their starting state);
    ``auto`` is transitions for such a core when the sampling is uniform (``prio_alpha`` 0: CleanRL's
    and SB3's shuffled minibatches), segments otherwise (prioritized segments, as PufferLib)."""
    if unit not in MINIBATCH_UNITS:
        raise ConfigError(f"unknown train.minibatch_unit {unit!r}; choose {', '.join(MINIBATCH_UNITS)}")
    recurrent = bool(getattr(policy.core, "recurrent", True))
    if unit == "transitions" and recurrent:
        raise ConfigError(
            "train.minibatch_unit transitions needs a core without state (policy.core mlp): a recurrent "
            "core trains on whole segments; use --train.minibatch-unit segments"
        )
    return draws_transitions(unit, recurrent, prio_alpha)


class Rows:
    """A rollout's tensors indexed by minibatch row: as they are (``[segments, horizon, ...]``), or
    with ``transitions`` each step a row of its own (``[segments * horizon, 1, ...]`` views, so what a
    minibatch writes back lands in the rollout)."""

    NAMES = ("obs", "actions", "logprobs", "values", "rewards", "dones", "ratios", "masks")

    def __init__(self, rollout: Rollout, transitions: bool) -> None:
        for name in self.NAMES:
            t = getattr(rollout, name)
            setattr(self, name, t.flatten(0, 1).unsqueeze(1) if transitions else t)
        self.initial_state = rollout.initial_state


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
        self.precision = resolve_precision(hp.precision, self.device)  # auto: bf16 where the hardware has it
        self.amp = self.precision == "bfloat16"
        # auto only picks bf16 where it is native: an explicit bfloat16 on a CPU may not be
        if hp.precision == "bfloat16" and self.device.type == "cpu" and not native_bf16(self.device):
            warnings.warn(
                "train.precision bfloat16 on a CPU without bfloat16 instructions (AVX512-BF16 or AMX): "
                "each bf16 op is converted to float32 and back, so this trains slower than float32",
                stacklevel=2,
            )
        # bfloat16: the rollout steps a bfloat16 copy of the weights (refreshed before each rollout);
        # the update trains the float32 master weights under bf16 autocast
        self.rollout_policy = inference_copy(self.policy, torch.bfloat16) if self.amp else self.policy
        # train.rollout_int16: the float32 CPU rollout's LSTM products in int16 (the run's first line says so)
        self.rollout_int16 = bool(
            hp.rollout_int16
            and not self.amp
            and self.device.type == "cpu"
            and isinstance(self.policy.core, LSTM)
        )
        if self.rollout_int16 and (why := host.i16_missing()):
            self.rollout_int16 = False
            print(
                f"note: train.rollout_int16 left off ({why}): the rollout's LSTM products stay float32",
                file=sys.stderr,
                flush=True,
            )
        if self.rollout_int16:
            self.policy.core.rollout_int16 = True
        step = self.rollout_policy.step
        self.forward_step = torch.compile(step) if hp.compile else step
        self.forward_sequence = torch.compile(self.policy.sequence) if hp.compile else self.policy.sequence

        n, horizon = vec.num_agents, hp.bptt_horizon
        # a family's minibatch fits the batch this source makes (a VectorEnv of its own size, say)
        minibatch, refit = families.fit_minibatch(config, n)
        if refit:
            print(f"note: {refit}", file=sys.stderr, flush=True)
        # what minibatches are drawn in (train.minibatch_unit): whole segments, or single transitions
        self.transitions = minibatch_in_transitions(hp.minibatch_unit, self.policy, hp.prio_alpha)
        sizes = ("bptt_horizon", "max_minibatch_size", "batch_size")
        batch = batch_for_agents(
            {**{k: getattr(hp, k) for k in sizes}, "minibatch_size": minibatch}, n, self.transitions
        )
        self.batch_size, self.horizon = batch, horizon
        self.segments = batch // horizon
        unit = 1 if self.transitions else horizon  # agent-steps in one row of a minibatch
        self.mb_segments = minibatch // unit  # rows of a minibatch (transitions, or segments)
        self.chunk_segments = min(self.mb_segments, max(1, hp.max_minibatch_size // unit))
        # minibatches an epoch: train.replay_ratio passes over the batch (auto: update_epochs), at least one
        passes = hp.update_epochs if hp.replay_ratio == "auto" else hp.replay_ratio
        self.minibatches = max(1, int(passes * batch / minibatch))

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
        self._rows = Rows(self.rollout, self.transitions)  # views, made once: the rollout's tensors stay put
        self.state = self.policy.initial_state(n, self.device)
        # train.recompute_advantages false: the epoch's advantages, computed once before its minibatches
        self.epoch_advantages = None if hp.recompute_advantages else torch.zeros_like(self.rollout.values)
        self.box_noise = BoxNoise(n, hp.noise_corr)  # Box actions' exploration noise

        # the update: device work only, captured as a CUDA graph where that is possible
        self.loss_coefs = losses.Coefs(hp.clip_coef, hp.vf_clip_coef, hp.vf_coef, hp.ent_coef)
        losses.check_at_start(self.policy.nvec, self.loss_coefs, self.device)  # the fused loss, on a GPU
        self.advantage_coefs = advantage.Coefs.of(hp)
        # the kernel builds against advantage(): an edit there is never silently ignored
        self.advantage_accelerated = advantage.check_at_start(self.device, self.advantage_coefs)
        capture = graphs.can_capture(
            hp,
            self.device,
            self.policy,
            profile,
            type(self)._reduce_gradients is not Trainer._reduce_gradients,
        )
        self.optimizer = make_optimizer(self.policy, hp, graph_safe=capture)
        self.epoch_scalars = graphs.EpochScalars(self.device)
        self.update_step = graphs.MinibatchGraph(self._update_minibatch, capture)
        self.return_scale = ReturnScale(n, hp.gamma) if hp.reward_norm else None
        self.timings = Timings(sync=profile)
        self.global_step, self.epoch = 0, 0
        self.start_time, self._start_step = time.time(), 0
        self.load = RunLoad()  # others' load and the hypervisor's steal, in each record and over the run
        self.losses: dict[str, float] = {}
        self.episodes = Episodes()
        self.last_env_stats: dict[str, float] = {}  # the latest epoch's that ended episodes, for display
        self.last_env_step = 0  # global_step when they were reported
        self.env_stats = {}
        self.run_dir = Path(run_dir) if run_dir else None
        self.last_checkpoint: Path | None = None
        self.latest_pointer: Path | None = None
        # called on the thread about to work (each rollout step, each minibatch): torch's intra-op count
        # brought to what a load watch calls for (appliance.config.threads.Watch); None: left as it is
        self.threads_sync: Callable[[], None] | None = None
        # the rollout engine (train.engine, train.buffers) for native Ocean envs; None: the plain loop below
        self.engine = engine.Engine(self) if engine.wanted(hp, vec) else None
        self.vec.async_reset(hp.seed)

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
                if self.threads_sync is not None:
                    self.threads_sync()
                with self.timings("env"):
                    obs, rewards, terminals, truncations, infos, ids, masks = self.vec.recv()
                self.episodes.collect(infos)
                ids = np.asarray(ids)
                with self.timings("copy"):
                    step = recv_to_device(
                        obs,
                        rewards,
                        terminals,
                        truncations,
                        ids,
                        masks,
                        self.device,
                        self.return_scale,
                        self.hp.reward_clamp,
                    )
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
            action, logprob = self.policy.sample(logits.float(), self.box_noise.draw(ids, logits))
            return action, logprob, value.float(), new_state
        decoded = torch.cat([logits.float(), value.float()[:, None]], 1)  # one fused sampling kernel on a GPU
        into = {} if out is None else dict(zip(("action", "logprob", "value"), out, strict=True))
        action, logprob, value = kernels.sample_logits(
            decoded, self.policy.nvec, self.hp.seed, step, ids=ids, **into
        )
        return action, logprob, value, new_state

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        state: State,
        ids: torch.Tensor,
        step: int | None = None,
        rows: slice | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """:meth:`policy_step` for the agents ``ids`` at ``step`` (default ``global_step``), their
        recurrent state moved on in ``self.state`` (a copy into the ``rows`` slice when the ids are
        those rows, as a rollout buffer's are, else an indexed write); NaN observations or log-probs
        end training with a :class:`TrainingError` that says where they came from."""
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
            if rows is None:
                s[ids] = new.to(s.dtype)
            else:
                s[rows].copy_(new)
        return action, logprob, value

    def update_env_stats(self) -> None:
        """The env stats of the rollout just ended: the vector's own log, or the episodes its infos
        reported (:class:`~appliance.train.episodes.Episodes`); ``{}`` when none ended."""
        self.env_stats = self.episodes.stats(self.vec)

    @property
    def env_stats(self) -> dict[str, float]:
        """The stats of the episodes that ended in this epoch's rollout, ``{}`` when none did: never
        an earlier epoch's again (``last_env_stats`` keeps those, with ``last_env_step``)."""
        return self._env_stats

    @env_stats.setter
    def env_stats(self, stats: dict[str, float]) -> None:
        self._env_stats = dict(stats)
        self.episodes.note(self.epoch, self._env_stats)  # the next metrics record pools them
        if stats:
            self.last_env_stats, self.last_env_step = dict(stats), self.global_step

    # ------------------------------------------------------------------ update

    def train(self) -> dict[str, float]:
        """PPO over the buffer; returns the epoch's mean losses. The minibatches are device work only
        (:meth:`_update_minibatch`), replayed as one CUDA graph each on a GPU (their device time is
        the phase's ``graphed`` section); the statistics and the NaN checks are read back once, at the end."""
        hp, b, acc = self.hp, self.rollout, self.epoch_scalars
        progress = min(1.0, self.global_step / max(1, hp.total_timesteps))
        cosine = 0.5 * (1 + math.cos(math.pi * progress))
        lr_scale = hp.min_lr_ratio + (1 - hp.min_lr_ratio) * cosine if hp.anneal_lr else 1.0
        lr = set_lr(self.optimizer, lr_scale)
        minibatches = self.minibatches
        with self.timings.phase("train"):
            b.ratios.fill_(1.0)
            if self.epoch_advantages is not None:  # GAE once, from the rollout's values (ratios 1)
                self.epoch_advantages.copy_(self._advantages())
            acc.begin(self.epoch * minibatches, hp.prio_beta0 + (hp.prio_beta1 - hp.prio_beta0) * progress)
            for _ in range(minibatches):
                if self.threads_sync is not None:
                    self.threads_sync()
                self.update_step()
            sums = acc.finish(minibatches)  # the update's one read-back: every replay has run
            self.timings.add("graphed", self.update_step.clock.take())
            if sums.pop("nonfinite_advantages"):
                raise TrainingError(
                    f"advantages became NaN/Inf in epoch {self.epoch} (step {self.global_step}): "
                    "check the env's rewards and observations for NaN/Inf; " + self.kept()
                )
            if not math.isfinite(loss := sums.pop("loss")):
                raise TrainingError(
                    f"loss became {loss} in epoch {self.epoch} (step {self.global_step}); {self.kept()}"
                )
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
        previous minibatches wrote back, segments by priority (distinct, unless
        ``train.prio_replacement``), the loss and its gradient,
        clipping and the optimizer step; statistics summed into ``epoch_scalars``."""
        hp, acc = self.hp, self.epoch_scalars
        adv = self._advantages() if self.epoch_advantages is None else self.epoch_advantages
        # a NaN or an infinity anywhere makes the sum non-finite; in float64 no finite float32 sum overflows
        acc.sums[graphs.NONFINITE] += ~torch.isfinite(adv.sum(dtype=torch.float64))
        acc.last_advantages = adv
        rows = self.rows()
        if self.transitions:  # each step its own row of one
            adv = adv.reshape(-1, 1)
        # segments by priority, drawn on the device from torch's generator's uniforms (docs/lab/notes.md:
        # why not the kernel's Philox stream): distinct ones by exponential keys and a top-k (one
        # uniform per segment), or with replacement by the inverse cumulative priorities (one per draw)
        replace = hp.prio_replacement
        u = torch.rand(
            self.mb_segments if replace else adv.shape[0],
            generator=self.generator if adv.device.type == "cpu" else None,
            dtype=torch.float64, device=adv.device,
        )  # fmt: skip
        idx, importance = kernels.prio_sample(
            adv, hp.prio_alpha, acc.beta, self.mb_segments, hp.seed, acc.step, uniform=u, replacement=replace
        )
        mb_adv = adv[idx]
        mb_returns = mb_adv + rows.values[idx]
        mean, std = self._advantage_stats(mb_adv)
        norm_adv = importance[:, None] * (mb_adv - mean) / (std + 1e-8)
        self.optimizer.zero_grad(set_to_none=not self.update_step.capture)  # graphs: grads stay put
        self._minibatch(idx, norm_adv, mb_returns)
        with self.timings("learn"):
            self._reduce_gradients()
            acc.sums[graphs.GRAD_NORM] += torch.nn.utils.clip_grad_norm_(
                self.policy.parameters(), hp.max_grad_norm
            )
            self.optimizer.step()
        acc.sums[graphs.IMPORTANCE] += importance.mean()
        acc.step += 1

    def _advantages(self) -> torch.Tensor:
        """V-trace advantages over the rollout ``[segments, horizon]`` with its current values and ratios."""
        b = self.rollout
        return advantage.compute(  # fused on CUDA, the host build on a CPU, as check_at_start allowed
            b.values,
            b.rewards,
            b.dones,
            b.ratios,
            self.advantage_coefs,
            accelerated=self.advantage_accelerated,
        )

    def rows(self) -> Rows:
        """The rollout as minibatches index it: its ``[segments, horizon, ...]`` tensors, or views of
        them as ``[segments * horizon, 1, ...]`` when minibatches are drawn in transitions."""
        return self._rows

    # Data-parallel hooks (appliance.train.rank.RankTrainer): one process needs neither.

    def _advantage_stats(self, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std that normalize a minibatch's advantages (across ranks when data-parallel)."""
        return adv.mean(), adv.std()

    def _reduce_gradients(self) -> None:
        """Called after a minibatch's backward, before clipping: ranks average gradients here."""

    def _minibatch(self, idx: torch.Tensor, norm_adv: torch.Tensor, returns: torch.Tensor) -> None:
        """Forward and backward over the sampled rows ``idx`` (segments, or transitions: :meth:`rows`), in
        chunks of at most ``max_minibatch_size`` whose gradients add up (each scaled by its share of the
        minibatch)."""
        b = self.rows()
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
                if self.epoch_advantages is None:
                    b.ratios[rows] = ratio.reshape(len(rows), -1)
                    b.values[rows] = new_value.detach()
                self.epoch_scalars.sums[graphs.LOSS_TERMS] += terms * weight

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
        when the trainer starts (:func:`losses.check_at_start`)."""
        b = self.rows()
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

    # ------------------------------------------------------------------ checkpoints

    def kept(self) -> str:
        if self.last_checkpoint:
            return f"the last good checkpoint {self.last_checkpoint} is kept"
        return "no checkpoint was written yet"

    def train_state(self) -> checkpoint.TrainState:
        """What a checkpoint saves of this trainer and restores into it."""
        return checkpoint.TrainState(
            self.policy,
            self.optimizer,
            self.generator,
            self.config,
            self.device,
            self.epoch,
            self.global_step,
            self.return_scale,
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
        """One metrics record (also appended to metrics.jsonl in the run folder). Its ``env/`` keys
        pool the episodes that ended since the record before (``env/n`` their count, 0 when none
        did, and then no other ``env/`` key: a value is never repeated as fresh)."""
        record = {
            "epoch": self.epoch,
            "global_step": self.global_step,
            "sps": self.sps,
            "uptime": time.time() - self.start_time,
            "threads": torch.get_num_threads(),  # torch's intra-op pool now (a run may resize it)
            **{f"host/{k}": v for k, v in self.load.since_last().items()},  # since the record before
            **{f"loss/{k}": v for k, v in self.losses.items()},
            **{f"env/{k}": v for k, v in self.episodes.take_window().items()},
            **self.timings.metrics(),
        }
        if self.run_dir is not None:
            self.note(runs.append_metrics(self.run_dir, json.dumps(record) + "\n"))
        return record

    @staticmethod
    def note(line: str | None) -> None:
        """A one-line warning about the run folder (a cut-short metrics line set aside), on stderr."""
        if line:
            print(f"warning: {line}", file=sys.stderr, flush=True)

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
