"""Ray backend: the same Vector API over Ray actors, for env workers spread across machines.

Each actor owns one env group (the same code the other backends run) and returns its rows by value;
``recv`` takes the first ready batch of actors (``ray.wait``) while the others keep stepping.
``ray.init(address=...)`` uses ``vec.ray_address`` ("" starts a local runtime, which close() stops).
Ray is optional: ``pip install 'puffer-bench[ray]'``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

import numpy as np

from appliance.errors import ConfigError, EnvContractError
from appliance.vector.base import Vector, WorkerError
from appliance.vector.buffers import allocate
from appliance.vector.groups import EnvStepError, make_group
from appliance.vector.sizes import Sizes
from appliance.vector.sources import EnvSource

REACH_SECONDS = 5.0  # how long a Ray cluster's address may take to accept a connection


def connect_ray(ray: Any, address: str, option: str, **kwargs: Any) -> None:
    """``ray.init`` on ``address`` ("" or "local": a local runtime; "auto": the cluster on this
    machine; "HOST:PORT" or "ray://HOST:PORT": that cluster), its failures one line naming
    ``option``. A remote address is reached first (a TCP connect, at most :data:`REACH_SECONDS`):
    Ray itself would retry for a minute, warning all the while, before its traceback."""
    import socket

    given = address
    address = "" if address in ("", "local") else address
    hostport = address.removeprefix("ray://")
    if address and address != "auto":
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(
                f"{option} {given!r}: not a Ray address (HOST:PORT, ray://HOST:PORT, auto or local)"
            )
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_SECONDS).close()
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise ConfigError(
                f"{option} {given}: no Ray cluster answers there ({why}); start it (ray start --head), "
                "give the address it printed, or 'local' for a runtime on this machine"
            ) from None
    try:
        ray.init(address=address or None, **kwargs)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(f"{option} {given or 'local'}: Ray did not start or connect ({reason})") from None


class _Worker:
    """One actor: ``count`` envs from global index ``offset``, in its own buffers."""

    def __init__(self, source: EnvSource, offset: int, count: int) -> None:
        self.buffers = allocate(source, count * source.agents_per_env)
        self.group = make_group(source, offset, count, self.buffers, infos=True)

    def ready(self) -> bool:
        return True

    def _out(self, infos: list[dict[str, Any]]) -> tuple[Any, ...]:
        b = self.buffers
        return b.observations, b.rewards, b.terminals, b.truncations, b.masks, infos

    def reset(self, seed: int | None) -> tuple[Any, ...]:
        return self._out(self.group.reset(seed))

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        np.copyto(self.buffers.actions, actions, casting="unsafe")
        return self._out(self.group.step())

    def close(self) -> None:
        self.group.close()


class RayVector(Vector):
    backend = "ray"

    def __init__(
        self,
        source: EnvSource,
        sizes: Sizes,
        recv_timeout: float = 30.0,
        address: str = "",
        overwork: bool = False,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError(
                "the ray backend needs Ray, an optional extra: pip install 'puffer-bench[ray]'"
            ) from None
        super().__init__(source, sizes)
        self._ray = ray
        self.recv_timeout = float(recv_timeout)
        self._owns_runtime = not ray.is_initialized()
        if self._owns_runtime:
            # ray.init installs its own SIGTERM handler in this process: put back the one the training
            # loop (or the shell) had, so a SIGTERM still saves a checkpoint and ends the run as usual
            sigterm = (
                signal.getsignal(signal.SIGTERM)
                if threading.current_thread() is threading.main_thread()
                else None
            )
            connect_ray(
                ray,
                address,
                "vec.ray_address",
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                ignore_reinit_error=True,
            )
            if sigterm is not None:
                signal.signal(signal.SIGTERM, sigterm)
        cpus = ray.cluster_resources().get("CPU", 0)
        if sizes.num_workers > cpus and not overwork:
            self._shutdown()
            raise ConfigError(
                f"num_workers ({sizes.num_workers}) > CPUs in the Ray cluster ({cpus:g}); "
                f"use num_workers <= {int(cpus)} or overwork=True"
            )
        per_actor = min(1.0, cpus / sizes.num_workers) if cpus else 0
        actor = ray.remote(num_cpus=per_actor)(_Worker)
        epw = sizes.envs_per_worker
        self._actors = [actor.remote(source, w * epw, epw) for w in range(sizes.num_workers)]
        k = self.agents_per_env
        self._rows = [np.arange(w * epw * k, (w + 1) * epw * k) for w in range(sizes.num_workers)]
        self._futures: dict[Any, int] = {}
        self._batch: list[int] | None = None
        self._gathered = allocate(source, self.agents_per_batch)
        self._closed = False
        # like the other backends, return only once every worker's envs exist (creation errors surface here)
        ready, _ = ray.wait(
            [a.ready.remote() for a in self._actors],
            num_returns=len(self._actors),
            timeout=self.recv_timeout + 60,
        )
        self._get(ready)
        if len(ready) < len(self._actors):
            self.close()
            raise WorkerError(f"{source.name}: Ray workers did not start within {self.recv_timeout + 60:g} s")

    def _get(self, refs: list[Any]) -> list[Any]:
        ray = self._ray
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as e:
            cause = e.as_instanceof_cause()
            inner = getattr(cause, "cause", None)
            detail = str(inner) if isinstance(inner, EnvStepError) else str(e)
            self.close()
            if isinstance(inner, EnvContractError):  # the env's one line, as the other backends raise it
                raise EnvContractError(str(inner)) from None
            raise WorkerError(f"{self.source.name}: a Ray worker failed: {detail}") from None
        except ray.exceptions.RayActorError as e:
            self.close()
            raise WorkerError(f"{self.source.name}: a Ray worker died: {e}") from None
        except ray.exceptions.RayError as e:
            self.close()
            raise WorkerError(f"{self.source.name}: a Ray worker failed: {e}") from None

    def async_reset(self, seed: int | None = 0) -> None:
        if self._closed:
            raise RuntimeError(f"{self.source.name}: this vector is closed")
        if self._futures:
            self._get(list(self._futures))
        self._futures = {a.reset.remote(seed): w for w, a in enumerate(self._actors)}
        self._batch = None

    def recv(self) -> tuple[Any, ...]:
        if self._batch is not None:
            raise RuntimeError(
                f"{self.source.name}: recv() called twice; send() actions for the last batch first"
            )
        k = self.sizes.workers_per_batch
        ready, _ = self._ray.wait(list(self._futures), num_returns=k, timeout=self.recv_timeout)
        if len(ready) < k:
            self.close()
            raise WorkerError(
                f"{self.source.name}: recv timed out after {self.recv_timeout:g} s waiting for Ray workers"
            )
        results = self._get(ready)
        batch = [self._futures.pop(ref) for ref in ready]
        order = np.argsort(batch)
        batch = [batch[i] for i in order]
        results = [results[i] for i in order]
        g, infos = self._gathered, []
        n = 0
        for obs, rew, term, trunc, masks, inf in results:
            m = len(rew)
            g.observations[n : n + m], g.rewards[n : n + m] = obs, rew
            g.terminals[n : n + m], g.truncations[n : n + m], g.masks[n : n + m] = term, trunc, masks
            infos.extend(inf)
            n += m
        self._batch = batch
        ids = np.concatenate([self._rows[w] for w in batch])
        return g.observations, g.rewards, g.terminals, g.truncations, infos, ids, g.masks

    def send(self, actions: Any) -> None:
        actions = self._check_actions(actions)
        if self._batch is None:
            raise RuntimeError(f"{self.source.name}: send() before recv(); call reset() or recv() first")
        n = 0
        for w in self._batch:
            m = len(self._rows[w])
            self._futures[self._actors[w].step.remote(actions[n : n + m])] = w
            n += m
        self._batch = None

    def _shutdown(self) -> None:
        if self._owns_runtime and self._ray.is_initialized():
            self._ray.shutdown()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for a in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(a)
        self._actors = []
        self._shutdown()
