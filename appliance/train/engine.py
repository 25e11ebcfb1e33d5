"""The rollout engine: :meth:`Trainer.evaluate` for native Ocean envs, in buffers stepped by native threads.

The agents are split into ``train.buffers`` groups of consecutive envs. Each buffer owns a slice of
the env threads (``vec.num_threads`` shared out), its agents' recurrent state, its own rows of the
:class:`~appliance.train.rollout.Rollout` and, on CUDA, its own stream. ``appliance._ocean.Engine``
runs one C thread per buffer that, for every step of the horizon, records the rewards and done flags
the policy sees, runs the buffer's policy step (here :meth:`Engine._step`, a Python callback that
takes the GIL; a captured CUDA graph through ``run_graphs``), checks the actions and steps the
buffer's envs with the GIL released. So one buffer's policy step overlaps the others' env steps.

The result is the plain loop's, step for step: every native recv returns all agents, so agent ``i``
writes row ``j * num_agents + i`` in its ``j``-th pass, as :class:`Rollout` assigns them; rewards are
scaled by :func:`~appliance.train.rewards.scale_and_clamp` after the horizon, in step order over all
agents (the policy never reads them), and actions are sampled by ``Trainer.policy_step`` keyed on the agents'
global ids. ``buffers = 1`` is the plain loop with the loop moved into C.

Per buffer and horizon the C loop times its policy steps, the wait for the GIL before each callback
(waits inside it, between torch ops, count as policy) and its env steps; ``_step`` times the copies
within the policy step. They reach ``Timings.buffers``, the dashboard, metrics and reports. A graphed
policy step is timed from its launch to its stream's synchronization, as a whole: it is the
rollout's ``evaluate.graphed``, not its forward.

Envs are the vector's own (the C buffers are views of its env structs: same seeds, state and episode
logs), so the vector stays usable for ``log()``, rendering and evaluation.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from appliance.config import check_buffers
from appliance.errors import ConfigError, DeviceError, TrainingError
from appliance.train.graphs import RolloutGraphs
from appliance.train.rewards import scale_and_clamp

if TYPE_CHECKING:
    from appliance.config import TrainConfig
    from appliance.train.trainer import Trainer

MODES = ("auto", "on", "off")


def is_native(vec: Any) -> bool:
    """Whether ``vec`` is the native Ocean backend (the engine needs its C vector)."""
    return getattr(vec, "backend", None) == "native" and hasattr(vec, "_c")


def wanted(hp: TrainConfig, vec: Any) -> bool:
    """``train.engine``: ``auto`` uses the engine for native Ocean envs, ``on`` insists, ``off`` never."""
    mode = str(hp.engine)
    if mode == "off":
        return False
    if mode == "on" and not is_native(vec):
        raise ConfigError(
            f"train.engine on needs the native Ocean backend, but the vector is {getattr(vec, 'backend', type(vec).__name__)!r}; "
            "use train.engine auto (the plain loop for other backends) or vec.backend native"
        )
    return is_native(vec)


def split_threads(total: int, buffers: int) -> list[int]:
    """``total`` env threads shared out over the buffers, at least one each (the buffer's own thread)."""
    return [max(1, total // buffers + (b < total % buffers)) for b in range(buffers)]


@dataclass
class _Buffer:
    index: int
    first: int  # first agent
    count: int  # agents
    ids: torch.Tensor  # global agent ids on the trainer's device
    obs: torch.Tensor  # the vector's observation rows (host, pinned on CUDA when registered)
    actions: torch.Tensor  # the vector's int32 action rows the C envs read
    obs_device: torch.Tensor | None  # CUDA: where the observations go before the forward
    stream: Any  # CUDA: torch.cuda.Stream
    state: tuple[torch.Tensor, ...] = ()

    @property
    def rows(self) -> slice:
        """This buffer's agents as rows of the vector's and the trainer's arrays."""
        return slice(self.first, self.first + self.count)


class Engine:
    """Runs :meth:`Trainer.evaluate` for a native Ocean vector in ``train.buffers`` buffers."""

    def __init__(self, trainer: Trainer) -> None:
        from appliance import _ocean

        vec, hp = trainer.vec, trainer.hp
        self.trainer = trainer
        check_buffers(hp.buffers, vec.num_envs)
        self.buffers_n = int(hp.buffers)
        n = vec.num_agents
        self.per = n // self.buffers_n
        self.threads = split_threads(int(vec.num_threads), self.buffers_n)
        self.device = trainer.device
        rollout = trainer.rollout
        # every native recv holds every agent: passes of `horizon` steps until each segment row is full
        self.passes = math.ceil(rollout.segments / n)
        self.steps = self.passes * rollout.horizon
        self.hist_rewards = np.zeros((self.steps, n), np.float32)
        self.hist_dones = np.zeros((self.steps, n), np.bool_)
        self._pinned: list[int] = []
        if self.device.type == "cuda":
            self._pin(vec)
        self.buffers = [self._buffer(b, vec) for b in range(self.buffers_n)]
        self._copy = [0.0] * self.buffers_n  # per buffer: seconds of its policy steps spent copying
        self._c = _ocean.Engine(vec._c, self.threads)
        self.graphs: tuple[list[int], list[int]] | None = None  # (graph execs, streams): set_graphs
        self._step0 = trainer.global_step
        # the policy step as device work (graphs.RolloutGraphs): on CUDA with train.graphs, run eagerly
        # for one horizon on the buffers' streams, then captured once per buffer and launched from C
        self.device_steps: RolloutGraphs | None = None
        self.graph_reason: str | None = "train.graphs is off, or the device is not CUDA"
        if self.device.type == "cuda" and hp.graphs:
            self.graph_reason = "train.compile makes graphs of its own" if hp.compile else None
            self.graph_reason = self.graph_reason or RolloutGraphs.supported(trainer, self)
            if self.graph_reason is None:
                self.device_steps = RolloutGraphs(trainer, self)

    def _buffer(self, b: int, vec: Any) -> _Buffer:
        first, count = b * self.per, self.per
        rows = slice(first, first + count)
        obs = torch.from_numpy(vec.observations[rows])
        actions = torch.from_numpy(vec.actions[rows])
        cuda = self.device.type == "cuda"
        return _Buffer(
            index=b,
            first=first,
            count=count,
            ids=torch.arange(first, first + count, device=self.device),
            obs=obs,
            actions=actions,
            obs_device=torch.empty(obs.shape, dtype=obs.dtype, device=self.device) if cuda else None,
            stream=torch.cuda.Stream(self.device) if cuda else None,
        )

    def _pin(self, vec: Any) -> None:
        """Page-lock the vector's arrays in place (the C envs keep writing into them), so the
        host-device copies are asynchronous DMA; unpinned they still work, synchronously."""
        cudart = torch.cuda.cudart()
        for array in (vec.observations, vec.actions, vec.rewards, vec.terminals, vec.truncations):
            ptr, size = array.ctypes.data, array.nbytes
            if not size or torch.from_numpy(array).is_pinned():  # e.g. another trainer on this vector
                continue
            if int(cudart.cudaHostRegister(ptr, size, 0)) == 0:
                self._pinned.append(ptr)
            elif hasattr(cudart, "cudaGetLastError"):  # leave no error for torch's next launch check
                cudart.cudaGetLastError()

    # ------------------------------------------------------------------ rollout

    def evaluate(self) -> None:
        """One epoch's rollout: ``steps`` steps of every buffer, then rewards and dones into the rollout."""
        tr = self.trainer
        tr.rollout.reset()
        self._step0 = tr.global_step  # the plain loop's global_step at step t is _step0 + t * num_agents
        device_steps = self.device_steps
        if device_steps is not None:  # column 0, the step, the segments' initial states (default stream)
            device_steps.begin()
        for buf in self.buffers:  # views of the trainer's recurrent state, the same storage every epoch
            buf.state = tuple(s[buf.rows] for s in tr.state)
            if buf.stream is not None:  # the update's kernels (new weights) and begin() come first
                buf.stream.wait_stream(torch.cuda.current_stream(self.device))
        if self.graphs is not None:
            self._c.run_graphs(self.steps, *self.graphs, self.hist_rewards, self.hist_dones)
        elif device_steps is not None:
            self._c.run(self.steps, self._device_step, self.hist_rewards, self.hist_dones)
        else:
            self._c.run(self.steps, self._step, self.hist_rewards, self.hist_dones)
        if device_steps is not None and (what := device_steps.nonfinite()) is not None:
            kind = (
                "the env returned NaN or Inf observations"
                if what == "observations"
                else "the policy's logits became NaN or Inf"
            )
            raise TrainingError(
                f"{kind} in epoch {tr.epoch} (steps from {tr.global_step}); stopping; {tr.kept()}"
            )
        self._account()
        self._finish()
        if device_steps is not None and self.graphs is None and self.device.type == "cuda":
            self.set_graphs(device_steps.capture())  # after one eager horizon warmed everything up

    def use_device_steps(self) -> None:
        """Step with :class:`RolloutGraphs`' eager body instead of :meth:`_step` (what CUDA captures;
        on a CPU it stays eager: tests compare it with the plain loop there)."""
        reason = RolloutGraphs.supported(self.trainer, self)
        if reason is not None:
            raise ConfigError(f"the rollout's device steps cannot run here: {reason}")
        self.device_steps = RolloutGraphs(self.trainer, self)

    @torch.no_grad()
    def _device_step(self, b: int, t: int) -> None:
        """Buffer ``b``'s step as :meth:`RolloutGraphs.body` (device-held column and step), on its stream."""
        buf = self.buffers[b]
        with torch.cuda.stream(buf.stream) if buf.stream is not None else contextlib.nullcontext():
            self.device_steps.body(b)
            if buf.stream is not None:
                buf.stream.synchronize()

    @torch.no_grad()
    def _step(self, b: int, t: int) -> None:
        """Policy step of buffer ``b`` at step ``t``, on the buffer's own thread (the plain loop's
        forward, write and action copy for these agents)."""
        tr, buf, rollout = self.trainer, self.buffers[b], self.trainer.rollout
        n = tr.vec.num_agents
        j, pos = divmod(t, rollout.horizon)
        r0 = j * n + buf.first
        m = max(0, min(buf.count, rollout.segments - r0))  # this pass's rows for these agents
        clock = time.perf_counter
        if tr.threads_sync is not None:
            tr.threads_sync()
        with torch.cuda.stream(buf.stream) if buf.stream is not None else contextlib.nullcontext():
            t0 = clock()
            obs = buf.obs if buf.obs_device is None else buf.obs_device.copy_(buf.obs, non_blocking=True)
            if pos == 0 and m:
                rollout.save_initial_state(slice(r0, r0 + m), tuple(s[:m] for s in buf.state))
            t1 = clock()
            action, logprob, value = tr.act(obs, buf.state, buf.ids, step=self._step0 + t * n, rows=buf.rows)
            t2 = clock()
            if m:
                rollout.write_column(slice(r0, r0 + m), pos, obs[:m], action[:m], logprob[:m], value[:m])
            buf.actions.copy_(action.reshape(buf.actions.shape), non_blocking=buf.stream is not None)
            self._copy[b] += (t1 - t0) + (clock() - t2)  # the rest of the policy step is the forward
            if buf.stream is not None:
                buf.stream.synchronize()

    def _finish(self) -> None:
        """After the horizon: step counts, rewards scaled as the plain loop scales them (in step order,
        all agents at once), dones, masks, and the episode stats."""
        tr, rollout = self.trainer, self.trainer.rollout
        n, H, S = tr.vec.num_agents, rollout.horizon, rollout.segments
        tr.global_step += self.steps * n
        rewards = scale_and_clamp(
            tr.return_scale, np.arange(n), self.hist_rewards, self.hist_dones, tr.hp.reward_clamp
        ).to(rollout.rewards.device, non_blocking=True)
        dones = torch.from_numpy(self.hist_dones).to(rollout.dones.device, non_blocking=True).float()
        for j in range(self.passes):
            m = min(n, S - j * n)
            rows = slice(j * n, j * n + m)
            rollout.rewards[rows] = rewards[j * H : (j + 1) * H, :m].T
            rollout.dones[rows] = dones[j * H : (j + 1) * H, :m].T
        rollout.masks.fill_(1.0)
        rollout.filled, rollout.next_free = S, S
        rollout.row[:] = -1
        tr.update_env_stats()

    # ------------------------------------------------------------------ graphs

    def set_graphs(self, execs: list[int] | None, streams: list[int] | None = None) -> None:
        """Step with one captured CUDA graph per buffer (``torch.cuda.CUDAGraph.raw_cuda_graph_exec()``,
        launched on ``torch.cuda.Stream.cuda_stream``) instead of :meth:`_step`; None goes back. The
        graph does what :meth:`_step` does (copy in, forward, sample, rollout write at a device-side step
        index, actions out to the vector's pinned rows)."""
        if execs is None:
            self.graphs = None
            return
        from appliance import _ocean

        why = _ocean.cuda_driver()
        if why is not None:
            raise DeviceError(f"the rollout engine cannot launch CUDA graphs: {why}")
        streams = streams or [buf.stream.cuda_stream for buf in self.buffers if buf.stream is not None]
        if len(execs) != self.buffers_n or len(streams) != self.buffers_n:
            raise ConfigError(f"set_graphs needs one graph and one stream per buffer ({self.buffers_n})")
        self.graphs = ([int(e) for e in execs], [int(s) for s in streams])

    # ------------------------------------------------------------------ timings

    def _account(self) -> None:
        """The horizon's per-buffer seconds (policy step, of which copies, GIL wait, env step) into the
        trainer's Timings."""
        times = self._c.take_times()
        for t, copy in zip(times, self._copy, strict=True):
            t["copy"] = min(copy, t["policy"])
        self._copy = [0.0] * self.buffers_n
        self.trainer.timings.add_buffers(times, graphed=self.graphs is not None)

    def close(self) -> None:
        c = getattr(self, "_c", None)
        if c is not None:
            c.close()
        if self._pinned:
            cudart = torch.cuda.cudart()
            for ptr in self._pinned:
                cudart.cudaHostUnregister(ptr)
            self._pinned = []
