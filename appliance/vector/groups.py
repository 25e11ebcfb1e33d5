"""Env groups: a contiguous slice of a vector's envs stepped in place into given buffer rows.

Every backend runs the same groups (serial: one over all envs; multiprocessing and Ray: one per
worker), so backends differ only in transport and their results are the same step for step. Env
``i`` of the vector is always seeded from (seed, i).
"""

from __future__ import annotations

import traceback
from typing import Any

from appliance.errors import EnvContractError
from appliance.vector.buffers import Buffers
from appliance.vector.sources import EnvSource


class OceanGroup:
    """``count`` Ocean envs (global indices from ``env_offset``) stepped by C in the given rows.

    Episode stats live in C and are read with :meth:`log`. A group in another process (the
    multiprocessing and Ray backends) cannot be asked, so with ``infos=True`` a step that ends an
    episode returns the log as one info: the means of ``n`` episodes, which the trainer weighs by n.
    """

    def __init__(
        self,
        source: EnvSource,
        env_offset: int,
        count: int,
        buffers: Buffers,
        num_threads: int = 1,
        infos: bool = False,
    ) -> None:
        from appliance import _ocean, ocean

        if source.name.startswith("pufferlib:"):  # in a worker process: its library is not loaded yet
            ocean.ocean_name(source.name)
        self.buffers, self.infos = buffers, infos
        buffers.masks[:] = True
        self.vec = _ocean.Vec(
            source.name,
            count,
            buffers.observations,
            buffers.actions,
            buffers.rewards,
            buffers.terminals,
            buffers.truncations,
            num_threads=num_threads,
            seed=0,
            params=source.params,
            env_offset=env_offset,
        )

    def reset(self, seed: int) -> list[dict[str, Any]]:
        self.vec.reset(int(seed))
        return []

    def step(self) -> list[dict[str, Any]]:
        self.vec.step()
        b = self.buffers
        if self.infos and (b.terminals.any() or b.truncations.any()):
            log = self.vec.log()
            if log:
                return [log]
        return []

    def log(self) -> dict[str, float]:
        return self.vec.log()

    def close(self) -> None:
        self.vec.close()


class EnvStepError(Exception):
    """An emulated env raised; carries the global env index and the formatted traceback."""

    def __init__(self, env_index: int, where: str, tb: str) -> None:
        super().__init__(f"env {env_index} raised in {where}:\n{tb}")
        self.env_index, self.where, self.tb = env_index, where, tb

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes (Ray sends exceptions)
        return (EnvStepError, (self.env_index, self.where, self.tb))


class EmulatedGroup:
    """``count`` emulated Python envs; env ``j`` writes rows ``j*k .. (j+1)*k`` (k agents per env)."""

    def __init__(self, source: EnvSource, env_offset: int, count: int, buffers: Buffers) -> None:
        from appliance.emulation import emulate

        creator = source.build_creator()
        self.offset, self.k, self.buffers = env_offset, source.agents_per_env, buffers
        self.envs = []
        for j in range(count):
            try:
                self.envs.append(emulate(creator()))
            except EnvContractError:
                self.close()
                raise
            except Exception as e:
                self.close()
                raise EnvStepError(env_offset + j, "creation", traceback.format_exc()) from e
            self._check_spaces(source, self.envs[-1])
            if hasattr(self.envs[-1], "stagger"):  # time-limited episodes do not all end together
                self.envs[-1].stagger(env_offset + j)
        # each env's row views, made once: slicing six arrays per env per step costs more than a small env
        b = buffers
        self._views = [
            tuple(
                a[self._rows(j)]
                for a in (b.actions, b.observations, b.rewards, b.terminals, b.truncations, b.masks)
            )
            for j in range(count)
        ]

    def _check_spaces(self, source: EnvSource, env: Any) -> None:
        """Every instance must have the spaces the vector's buffers were sized for (those of the env
        made when the vector was created)."""
        for kind, mine, first in (
            ("observation_space", env.obs_codec.flat_space, source.observation_space),
            ("action_space", env.action_codec.flat_space, source.action_space),
        ):
            if mine != first:
                from appliance.emulation import describe_space

                self.close()
                raise EnvContractError(
                    f"{env.name}: an instance was made with {kind} {describe_space(getattr(env, kind))}, the "
                    f"first with {describe_space(first)}; every instance must have the same spaces"
                )

    def _rows(self, j: int) -> slice:
        return slice(j * self.k, (j + 1) * self.k)

    def reset(self, seed: int | None) -> list[dict[str, Any]]:
        b = self.buffers
        for j, env in enumerate(self.envs):
            rows = self._rows(j)
            try:
                env.reset(
                    None if seed is None else int(seed) + self.offset + j, b.observations[rows], b.masks[rows]
                )
            except EnvContractError:
                raise
            except Exception as e:
                raise EnvStepError(self.offset + j, "reset", traceback.format_exc()) from e
            b.rewards[rows] = 0
            b.terminals[rows] = False
            b.truncations[rows] = False
        return []

    def step(self) -> list[dict[str, Any]]:
        infos = []
        for j, (env, views) in enumerate(zip(self.envs, self._views, strict=True)):
            try:
                info = env.step(*views)
            except EnvContractError:
                raise
            except Exception as e:
                raise EnvStepError(self.offset + j, "step", traceback.format_exc()) from e
            if info:
                infos.append({"env": self.offset + j, **info})
        return infos

    def log(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


def make_group(
    source: EnvSource,
    env_offset: int,
    count: int,
    buffers: Buffers,
    num_threads: int = 1,
    infos: bool = False,
) -> OceanGroup | EmulatedGroup:
    """The group for ``source``; ``infos``: Ocean episode stats come back as infos (see OceanGroup)."""
    if source.kind == "ocean":
        return OceanGroup(source, env_offset, count, buffers, num_threads, infos)
    return EmulatedGroup(source, env_offset, count, buffers)
