"""The ``[segments, horizon]`` experience buffer, and which row each agent writes next.

Each agent fills its own row, one step per ``recv``; a full row sends the agent to the next free
one, until every row is full. The recurrent state an agent had at the start of each row is kept in
``initial_state`` so the update replays the rollout exactly. Every tensor is allocated once; the
GPU fast path replaces what is behind :meth:`Rollout.write` without changing its callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from appliance.train.policy import State
from appliance.train.rewards import ReturnScale, scale_and_clamp


class Rollout:
    """Experience of one epoch: ``obs``, ``actions``, ``logprobs``, ``values``, ``rewards``, ``dones``,
    ``ratios`` and ``masks``, each ``[segments, horizon, ...]``, plus each row's starting state."""

    def __init__(
        self,
        segments: int,
        horizon: int,
        num_agents: int,
        obs_space: spaces.Space,
        action_space: spaces.Space,
        initial_state: State,
        device: torch.device,
        obs_device: torch.device,
        pin_obs: bool = False,
    ) -> None:
        if segments < num_agents:
            raise ValueError(f"{segments} segments cannot give each of {num_agents} agents a row")
        self.segments, self.horizon, self.num_agents = segments, horizon, num_agents
        S, T = segments, horizon
        obs_dtype = torch.from_numpy(np.zeros(0, obs_space.dtype)).dtype
        self.obs = torch.zeros(
            (S, T, *obs_space.shape), dtype=obs_dtype, device=obs_device, pin_memory=pin_obs
        )
        act_shape = (
            () if isinstance(action_space, spaces.Discrete) else tuple(np.shape(action_space.sample()))
        )
        act_dtype = torch.float32 if isinstance(action_space, spaces.Box) else torch.int64
        self.actions = torch.zeros((S, T, *act_shape), dtype=act_dtype, device=device)
        self.logprobs, self.values, self.rewards, self.dones, self.ratios, self.masks = (
            torch.zeros((S, T), device=device) for _ in range(6)
        )
        self.initial_state = initial_state
        self.row = np.arange(num_agents)  # row each agent writes; -1: no row left this epoch
        self.pos = np.zeros(num_agents, dtype=np.int64)  # next step index in that row
        self.next_free = num_agents
        self.filled = 0

    def reset(self) -> None:
        """Start a new epoch: agent ``i`` writes row ``i`` again."""
        self.row[:] = np.arange(self.num_agents)
        self.pos[:] = 0
        self.next_free, self.filled = self.num_agents, 0

    @property
    def full(self) -> bool:
        return self.filled >= self.segments

    def write(
        self,
        ids: np.ndarray,
        state: State,
        obs: torch.Tensor,
        action: torch.Tensor,
        logprob: torch.Tensor,
        value: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        mask: torch.Tensor,
    ) -> None:
        """Store one step of the agents ``ids`` (batch order); ``state`` is theirs before the step."""
        rows, pos = self.row[ids], self.pos[ids]
        valid = rows >= 0
        if not valid.any():
            return
        device = self.values.device
        sel = torch.as_tensor(np.flatnonzero(valid), device=device)
        r = torch.as_tensor(rows[valid], device=device)
        p = torch.as_tensor(pos[valid], device=device)
        starting = torch.as_tensor(pos[valid] == 0, device=device)
        for saved, now in zip(self.initial_state, state, strict=True):
            saved[r[starting]] = now[sel[starting]].to(saved.dtype)
        self.obs[r.to(self.obs.device), p.to(self.obs.device)] = obs[sel].to(self.obs.device)
        self.actions[r, p] = action[sel].to(self.actions.dtype)
        self.logprobs[r, p] = logprob[sel].float()
        self.values[r, p] = value[sel].float()
        self.rewards[r, p] = reward[sel]
        self.dones[r, p] = done[sel]
        self.masks[r, p] = mask[sel]
        self._advance(ids[valid])

    def write_column(
        self,
        rows: slice,
        t: int | torch.Tensor,
        obs: torch.Tensor,
        action: torch.Tensor,
        logprob: torch.Tensor,
        value: torch.Tensor,
    ) -> None:
        """Step ``t`` of the consecutive ``rows`` at once (the rollout engine, one buffer's agents in
        order): ``t`` an int, or a one-element device tensor, as a CUDA graph needs (no host read)."""
        columns = (
            (self.obs, obs, self.obs.dtype),
            (self.actions, action, self.actions.dtype),
            (self.logprobs, logprob, torch.float32),
            (self.values, value, torch.float32),
        )
        for column, src, dtype in columns:
            src = src.to(column.device, dtype, non_blocking=True)
            if isinstance(t, torch.Tensor):
                column[rows].index_copy_(1, t, src.unsqueeze(1))
            else:
                column[rows, t] = src

    def save_initial_state(self, rows: slice, state: State) -> None:
        """The recurrent state the consecutive ``rows`` start from (what the update replays them from)."""
        for saved, now in zip(self.initial_state, state, strict=True):
            saved[rows] = now.to(saved.dtype)

    def _advance(self, agents: np.ndarray) -> None:
        self.pos[agents] += 1
        full = agents[self.pos[agents] == self.horizon]
        self.filled += len(full)
        for agent in full:  # a full row: the agent moves on to the next free one, if any
            self.row[agent] = self.next_free if self.next_free < self.segments else -1
            self.pos[agent] = 0
            self.next_free += 1


@dataclass
class Step:
    """One batch from ``recv``, on the trainer's device."""

    obs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    masks: torch.Tensor
    ids: torch.Tensor


def recv_to_device(
    obs: Any,
    rewards: Any,
    terminals: Any,
    truncations: Any,
    ids: np.ndarray,
    masks: Any,
    device: torch.device,
    return_scale: ReturnScale | None,
    clamp: float,
) -> Step:
    """One ``recv`` on the trainer's device: rewards scaled (:class:`ReturnScale`) and clamped,
    dones = terminal or truncated."""
    dones = np.logical_or(terminals, truncations)
    rewards = scale_and_clamp(return_scale, ids, rewards, dones, clamp)
    return Step(
        obs=torch.as_tensor(obs).to(device, non_blocking=True),
        rewards=rewards.to(device, non_blocking=True),
        dones=torch.as_tensor(dones).to(device, non_blocking=True).float(),
        masks=torch.as_tensor(np.ones(len(ids), bool) if masks is None else masks).to(device).float(),
        ids=torch.as_tensor(ids, device=device),
    )
