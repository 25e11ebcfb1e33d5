"""Serial: every env stepped in this process, one after another. For debugging; same shapes as the rest."""

from __future__ import annotations

from typing import Any

import numpy as np

from appliance.vector.base import Vector, WorkerError
from appliance.vector.buffers import allocate
from appliance.vector.groups import EnvStepError, make_group
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource


class Serial(Vector):
    backend = "serial"

    def __init__(self, source: EnvSource, sizes: Sizes, seed: int | None = 0, **_: Any) -> None:
        super().__init__(source, sizes)
        self.buffers = allocate(source, self.num_agents)
        try:
            self.group = make_group(source, 0, self.num_envs, self.buffers)
        except EnvStepError as e:
            raise WorkerError(f"{source.name}: {e}") from None
        self.agent_ids = np.arange(self.num_agents)
        self._infos: list[dict[str, Any]] = []
        self._closed = False

    def _run(self, fn: Any, *args: Any) -> list[dict[str, Any]]:
        if self._closed:
            raise RuntimeError(f"{self.source.name}: this vector is closed")
        try:
            return fn(*args)
        except EnvStepError as e:
            raise WorkerError(f"{self.source.name}: {e}") from None

    def async_reset(self, seed: int | None = 0) -> None:
        self._infos = self._run(self.group.reset, seed)

    def send(self, actions: Any) -> None:
        actions = self._check_actions(actions)
        np.copyto(self.buffers.actions, actions, casting="unsafe")
        self._infos = self._run(self.group.step)

    def recv(self) -> tuple[Any, ...]:
        b = self.buffers
        return b.observations, b.rewards, b.terminals, b.truncations, self._infos, self.agent_ids, b.masks

    def log(self) -> dict[str, float]:
        return self.group.log()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.group.close()
