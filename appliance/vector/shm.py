"""The multiprocessing backend's shared block: one POSIX shared-memory segment holding every array
(observations, actions, rewards, flags, masks) of every worker, its layout, and how it is created
(pages reserved up front, so a full /dev/shm is an error, not a SIGBUS), mapped and unlinked."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import signal
from multiprocessing import resource_tracker
from typing import Any

import numpy as np

from appliance.errors import ConfigError
from appliance.signals import STOP_SIGNALS as STOP_SIGNALS  # what stops a run; mp_worker takes it from here
from appliance.vector.buffers import Buffers, buffer_layout
from appliance.vector.sources import EnvSource

SHM_DIR = "/dev/shm"
FLAG_STRIDE = 64  # one cache line per worker flag: no false sharing between spinning workers


def _align(n: int, a: int = 64) -> int:
    return (n + a - 1) // a * a


def _plan(
    source: EnvSource, num_agents: int, num_workers: int
) -> tuple[list[tuple[str, tuple[int, ...], str, int]], int, int, int]:
    """Offsets of every array in the shared block: (name, shape, dtype, offset), flags, seeds, total."""
    arrays, offset = [], 0
    for name, shape, dtype in buffer_layout(source, num_agents):
        arrays.append((name, shape, dtype.str, offset))
        offset = _align(offset + int(np.prod(shape)) * dtype.itemsize)
    flags = offset
    offset = _align(offset + num_workers * FLAG_STRIDE)
    seeds = offset
    offset = _align(offset + num_workers * 8)
    return arrays, flags, seeds, offset


def _array(mm: mmap.mmap, shape: tuple[int, ...], dtype: Any, offset: int) -> np.ndarray:
    """An array over the mapping that keeps it alive: its base holds an exported buffer of ``mm``, so the
    mapping cannot be closed under it and is unmapped only once the last such array is gone."""
    dtype = np.dtype(dtype)
    return np.frombuffer(mm, dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)


def _views(mm: mmap.mmap, arrays: list[tuple[str, tuple[int, ...], str, int]]) -> Buffers:
    return Buffers(*(_array(mm, shape, dtype, off) for _, shape, dtype, off in arrays))


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def shm_state() -> tuple[int, int] | None:
    """(free, total) bytes of /dev/shm, or None where there is none."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _shm_full(size: int, free: int | None = None) -> ConfigError:
    state = shm_state()
    free = state[0] if free is None and state else free
    total = f" of {_mib(state[1])}" if state else ""
    return ConfigError(
        f"not enough shared memory: the vector's block needs {_mib(size)} but {SHM_DIR} has "
        f"{_mib(free or 0)} free{total}; use fewer envs, close other vectors, or give the container more "
        f"(docker run --shm-size=...)"
    )


def _create_block(name: str, size: int) -> mmap.mmap:
    """Create, size and map the segment. Its pages are reserved now (posix_fallocate), so a full
    /dev/shm is a clear error here rather than a SIGBUS in whichever process first touches a page.
    Stop signals (Ctrl-C) wait while the segment is made: registering it may start the resource
    tracker's process, and an interrupt anywhere in between would leave the name behind."""
    import _posixshmem

    state = shm_state()
    if state is not None and size > state[0]:
        raise _shm_full(size, state[0])
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        registered = False
        try:
            # until every worker has mapped it, the tracker unlinks it should this process be killed
            resource_tracker.register("/" + name, "shared_memory")
            registered = True
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    raise _shm_full(size) from None
                if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                os.ftruncate(fd, size)  # a file system without fallocate: sparse, as before
            return mmap.mmap(fd, size)
        except BaseException:
            _unlink_block(name, registered)
            raise
        finally:
            os.close(fd)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a stop signal held meanwhile arrives now


def _unlink_block(name: str, registered: bool = True) -> None:
    import _posixshmem

    with contextlib.suppress(FileNotFoundError):
        _posixshmem.shm_unlink("/" + name)
    if registered:
        resource_tracker.unregister("/" + name, "shared_memory")


def _attach(name: str, size: int) -> mmap.mmap:
    """Map the segment without multiprocessing's resource tracker (the main process owns it)."""
    import _posixshmem

    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
