"""One Vector API over every backend (docs/architecture.md, layer 5).

    vec = appliance.vector.make(env, backend="native"|"serial"|"multiprocessing"|"ray",
                                num_envs=..., num_workers=..., batch_size=..., zero_copy=True, seed=0, **env_params)
    vec.async_reset(seed); obs, rewards, terminals, truncations, infos, agent_ids, masks = vec.recv(); vec.send(actions)
    vec.reset(seed) / vec.step(actions) / vec.close()

``env`` is an Ocean name ("breakout", or "ocean:breakout"), a Gymnasium id ("CartPole-v1"), or a
zero-argument creator of a Gymnasium env or a PettingZoo parallel env (emulated: structured spaces
flattened; ``vec.obs_codec.unflatten`` restores them). A creator or ``module:factory`` that returns a
``gymnasium.vector.VectorEnv`` is used as it is (:mod:`appliance.vector.gymvec`); a factory with a
``num_envs`` parameter is given ``num_envs``. ``env_params`` are an Ocean env's parameters or
keyword arguments for ``gymnasium.make``; ``preprocess`` (``auto``: the Atari preprocessing for ALE
ids) wraps Python envs. Sizes are checked by
:func:`appliance.vector.sizes.check_sizes`; broken rules raise ConfigError with valid alternatives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from appliance.errors import ConfigError
from appliance.vector.base import Vector, WorkerError
from appliance.vector.sizes import check_sizes
from appliance.vector.sources import accepts_num_envs, resolve_source

if TYPE_CHECKING:
    from appliance.config import Config

BACKENDS = ("native", "serial", "multiprocessing", "ray")

__all__ = ["BACKENDS", "Vector", "WorkerError", "check_fits", "make", "make_from_config"]


def make(
    env: Any,
    backend: str = "native",
    num_envs: int = 1,
    num_workers: int | str | None = None,
    batch_size: int | str | None = None,
    zero_copy: bool = True,
    seed: int = 0,
    overwork: bool = False,
    recv_timeout: float = 30.0,
    num_threads: int | str | None = None,
    ray_address: str = "",
    start_method: str = "spawn",
    preprocess: str = "auto",
    run_config: Mapping[str, Any] | None = None,
    **env_params: Any,
) -> Any:
    """Create a vector of ``num_envs`` envs on ``backend``; see the module docstring.

    The first env is made under ``recv_timeout`` (as a worker's reset is), and the vector's memory
    (buffers and env objects, measured on that env) is checked against what this machine has before
    anything is allocated; ``run_config``, a resolved config's data, adds its training buffers."""
    from appliance.sysinfo import physical_cores

    if backend not in BACKENDS:
        import difflib

        guess = difflib.get_close_matches(str(backend), BACKENDS, n=1)
        raise ConfigError(
            f"unknown backend {backend!r}"
            + (f"; did you mean {guess[0]!r}?" if guess else "")
            + f" valid backends: {', '.join(BACKENDS)}"
        )
    cores = physical_cores()
    if backend == "native":
        from appliance import ocean
        from appliance.vector.native import OceanVec

        name = ocean.ocean_name(env)
        if name is None:
            raise ConfigError(
                f"the native backend runs Ocean C envs only ({', '.join(ocean.names())}); "
                f"use backend='multiprocessing' or 'serial' for {env!r}"
            )
        if batch_size not in (None, "auto", num_envs):
            raise ConfigError(
                f"the native backend steps all envs at once: batch_size must be num_envs ({num_envs}) or 'auto', "
                f"got {batch_size}; use backend='multiprocessing' for async batches"
            )
        return OceanVec(name, num_envs, num_threads=num_threads, seed=seed, **env_params)
    from appliance import ocean

    env, env_params, preprocess = ale_vector_source(env, preprocess, num_envs, env_params)
    if (
        isinstance(env, str)
        and ocean.ocean_name(env) is None
        and "num_envs" not in env_params
        and accepts_num_envs(env)
    ):
        env_params["num_envs"] = num_envs  # a VectorEnv factory makes the vector's envs itself
    from appliance import lifeline

    if "num_envs" in env_params and int(env_params["num_envs"]) > PROBE_ABOVE and backend != "ray":
        check_vector_env_fits(env, preprocess, recv_timeout, env_params, run_config)
    with lifeline.forked_children_die_with_us():  # a VectorEnv factory's own workers (gymvec)
        source = resolve_source(env, preprocess=preprocess, timeout=recv_timeout, **env_params)
    if source.kind == "vector":
        return _vector_env(source, backend, batch_size, recv_timeout)
    if backend != "ray":  # a Ray cluster's envs live on its machines
        check_fits(source, num_envs, run_config)
    if backend == "serial":
        from appliance.vector.serial import Serial

        sizes = check_sizes(num_envs, 1, batch_size, False, True, cores)
        if sizes.batch_size != num_envs:
            raise ConfigError(
                f"the serial backend is synchronous: batch_size must be num_envs ({num_envs}) or 'auto'"
            )
        return Serial(source, sizes, seed=seed, recv_timeout=recv_timeout)
    if backend == "ray":
        from appliance.vector.ray_backend import RayVector

        # Ray moves data by value: zero_copy does not apply, and the cluster (not this host) has the cores
        sizes = check_sizes(num_envs, num_workers, batch_size, zero_copy=False, overwork=True, cores=cores)
        return RayVector(source, sizes, recv_timeout=recv_timeout, address=ray_address, overwork=overwork)
    sizes = check_sizes(num_envs, num_workers, batch_size, zero_copy, overwork, cores)
    from appliance.vector.mp import Multiprocessing

    return Multiprocessing(
        source, sizes, zero_copy=zero_copy, recv_timeout=recv_timeout, start_method=start_method
    )


def _vector_env(source: Any, backend: str, batch_size: Any, recv_timeout: float = 30.0) -> Any:
    """A factory's own gymnasium VectorEnv, used as it is (:mod:`appliance.vector.gymvec`): it steps its
    envs its own way, so ``vec.backend`` serial or multiprocessing (the default) both mean "as it is"."""
    from appliance.vector.gymvec import GymVector

    env = source.vector_env
    if backend == "ray":
        env.close()
        raise ConfigError(
            f"{source.name} returned a gymnasium VectorEnv, which steps its envs in this process; "
            "it cannot run on backend ray: use --vec.backend multiprocessing (or serial)"
        )
    n = int(env.num_envs)
    if batch_size not in (None, "auto", n):
        env.close()
        raise ConfigError(
            f"{source.name} returned a gymnasium VectorEnv of {n} envs, stepped all at once: "
            f"vec.batch_size must be {n} or auto, got {batch_size}"
        )
    return GymVector(source, env, recv_timeout=recv_timeout)


def make_from_config(cfg: Config, env: Any | None = None) -> Any:
    """A vector from a resolved config (``appliance.config.resolve``): vec section plus env params."""
    v = cfg.vec
    return make(
        env if env is not None else cfg.env_name,
        backend=v.backend,
        num_envs=v.num_envs,
        num_workers=v.num_workers,
        batch_size=v.batch_size,
        zero_copy=v.zero_copy,
        seed=cfg.train.seed,
        overwork=v.overwork,
        recv_timeout=v.recv_timeout,
        num_threads=v.num_threads,
        ray_address=v.ray_address,
        preprocess=v.preprocess,
        run_config=cfg.data,
        **dict(cfg.env),
    )


def check_fits(
    source: Any, num_envs: int, run_config: Mapping[str, Any] | None = None, ranks: int | None = None
) -> None:
    """Refuse in one line, with the figures, a vector of ``source`` (and a run's buffers) that
    cannot fit here. ``ranks``: processes on this machine that each need as much (default: in a
    rank of ``train --nproc``, the machine's ranks; else 1)."""
    import os

    from appliance.config.memory import check_memory, source_layout

    data = dict(run_config or {})
    data["vec"] = {**data.get("vec", {}), "num_envs": num_envs}
    if ranks is None:
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if run_config is not None else 1
    check_memory(source.name, data, info=source_layout(source), ranks=ranks)


ALE_VECTOR = "appliance.emulation.atari:vector"
PROBE_ABOVE = 64  # a VectorEnv factory asked for more envs is first measured on PROBE_SIZES of them
PROBE_SIZES = (2, 6)


def _resident(pid: int | None = None) -> int:
    """Resident bytes of this process and every process below it (a VectorEnv's workers)."""
    import contextlib

    import psutil

    me = psutil.Process(pid)
    total = 0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a worker that ended meanwhile
            total += p.memory_info().rss
    return total


def _allocated() -> int:
    """Bytes glibc's malloc has handed out and not had back, over all its arenas (``mallinfo2``:
    in-use heap chunks plus mmapped ones); 0 where that is not glibc 2.33 or later. Unlike resident
    memory it grows however much freed memory malloc reuses (memory it kept resident, at times even
    after ``malloc_trim``)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
            )
        ]  # fmt: skip

    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return 0
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def _release_freed_memory() -> None:
    """Collect what is garbage and hand glibc's freed heap back to the system, so that the next
    resident-memory reading counts what is alive (elsewhere, nothing to trim)."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _probe_vector(
    env: Any, preprocess: str, recv_timeout: float, env_params: Mapping[str, Any], size: int
) -> tuple[tuple[int, int], dict[str, Any], str] | None:
    """Make and close a vector of ``size`` envs: what it added while alive (to the resident memory
    of this process and its workers, and to malloc's bytes in use here), its layout and its name,
    or None when ``env`` is not a VectorEnv factory. It is closed when this returns, and what an
    earlier probe left is collected before this one is measured."""
    import contextlib

    from appliance import lifeline
    from appliance.config.memory import source_layout

    _release_freed_memory()
    resident, allocated = _resident(), _allocated()
    with lifeline.forked_children_die_with_us():
        source = resolve_source(
            env, preprocess=preprocess, timeout=recv_timeout, **{**env_params, "num_envs": size}
        )
    try:
        if source.kind != "vector":
            return None
        grown = (max(0, _resident() - resident), max(0, _allocated() - allocated))
        return grown, source_layout(source), source.name
    finally:
        if source.vector_env is not None:
            with contextlib.suppress(Exception):
                source.vector_env.close()


def check_vector_env_fits(
    env: Any,
    preprocess: str,
    recv_timeout: float,
    env_params: Mapping[str, Any],
    run_config: Mapping[str, Any] | None = None,
) -> None:
    """Before a VectorEnv factory (ale-py's AtariVectorEnv, EnvPool, a ``module:factory`` taking
    ``num_envs``) allocates ``env_params["num_envs"]`` envs, measure what one env holds: the growth
    of this process's and its workers' resident memory, or of malloc's bytes in use here where that
    grew more, from a vector of 2 envs to one of 6 (what both share, imports and ROMs, cancels out:
    a first vector of 2, not measured, loads what a factory loads once), then refuse with the
    figures what cannot fit."""
    import os

    from appliance.config.memory import check_memory

    num_envs = int(env_params["num_envs"])
    small, large = PROBE_SIZES
    if _probe_vector(env, preprocess, recv_timeout, env_params, small) is None:
        return
    seen = []
    for size in PROBE_SIZES:
        probe = _probe_vector(env, preprocess, recv_timeout, env_params, size)
        if probe is None:
            return
        grown, layout, name = probe
        seen.append(grown)
    layout["env_bytes"] = max(0, *((grew - had) // (large - small) for had, grew in zip(*seen, strict=True)))
    data = dict(run_config or {})
    data["vec"] = {**data.get("vec", {}), "num_envs": num_envs}
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if run_config is not None else 1
    check_memory(name, data, info=layout, ranks=ranks)


def ale_vector_source(
    env: Any, preprocess: str, num_envs: int, env_params: dict[str, Any]
) -> tuple[Any, dict[str, Any], str]:
    """An ALE id with ``vec.preprocess`` ``ale_vector`` (or ``auto`` where ale-py has its
    ``AtariVectorEnv``) becomes that VectorEnv (:func:`appliance.emulation.atari.vector`: the same
    frames as the Python preprocessing, stepped by C++ threads, 10-20x the envs' speed on 2 cores;
    docs/vectorization.md), with nothing left to preprocess; anything else is returned as it is."""
    if preprocess not in ("auto", "ale_vector") or not isinstance(env, str):
        return env, env_params, preprocess
    from appliance.config import gymids

    if not gymids.is_ale(env):
        if preprocess == "ale_vector":
            raise ConfigError(
                f"vec.preprocess ale_vector applies to Arcade Learning Environment ids (ALE/Pong-v5 with "
                f"ale-py); {env!r} is not one: use --vec.preprocess none"
            )
        return env, env_params, preprocess
    if preprocess == "auto" and not ale_vector_available():
        return env, env_params, preprocess
    return ALE_VECTOR, {**env_params, "game": env, "num_envs": num_envs}, "none"


def ale_vector_available() -> bool:
    """Whether ale-py has ``AtariVectorEnv`` (0.10 and later)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ale_py.vector_env") is not None
    except ImportError:
        return False
