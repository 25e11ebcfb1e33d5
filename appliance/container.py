"""Run a benchmark suite inside the puffer-bench Docker image from the host (``run --container IMAGE``).

Uses the Docker SDK for Python (the ``docker`` extra). The host's results folder is mounted at the
image's ``results/`` and the container runs as the host user, so reports land on the host owned by
you; the GPU is passed through (``--gpus all``) when Docker has the NVIDIA runtime. Like ``docker.sh``
(which does the same from plain shell for hosts without Python) the container gets an init (SIGTERM
reaches puffer-bench), no network, and a /dev/shm of half the host's RAM for multiprocessing.
The container goes with the process that started it, however that one ends (SIGKILL included: a
watcher process, ``lifeline.OnParentDeath``, removes it).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError, DeviceError

WORKDIR = "/opt/puffer-bench"  # the images' project folder (images/*.Dockerfile)
# run by lifeline.OnParentDeath's watcher (sys.argv[2]: the container's id) when the caller died first
REMOVE_CONTAINER = (
    "import contextlib, docker, sys\n"
    "with contextlib.suppress(Exception):\n"
    "    docker.from_env().containers.get(sys.argv[2]).remove(force=True)\n"
)


class ContainerError(ApplianceError):
    """Docker, the daemon or the image is not usable."""

    exit_code = 2


def _client() -> Any:
    try:
        import docker
    except ImportError:
        raise ContainerError(
            "run --container needs the Docker SDK for Python: pip install 'puffer-bench[docker]' "
            "(or use ./docker.sh bench)"
        ) from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:
        raise ContainerError(
            f"the Docker daemon is not reachable ({type(e).__name__}: {e}); is it running?"
        ) from None
    return client


def shm_size() -> int:
    """Bytes of /dev/shm for the container: half the host's RAM (Docker's default is 64 MB)."""
    import psutil

    return psutil.virtual_memory().total // 2


def has_nvidia_runtime(client: Any) -> bool:
    try:
        return "nvidia" in (client.info().get("Runtimes") or {})
    except Exception:
        return False


def option_value(args: list[str], name: str) -> str | None:
    """The value given to ``name`` (``--gpu h100`` or ``--gpu=h100``), the last one winning."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def strip_host_options(args: list[str]) -> list[str]:
    """``run`` arguments minus those that concern the host: --container IMAGE and --out DIR."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--container", "--out"):
            skip = True
            continue
        if a.startswith(("--container=", "--out=")):
            continue
        out.append(a)
    if out and out[0] == "run":
        out = out[1:]
    return out


def run_in_container(image: str, args: list[str], results: Path, client: Any = None) -> int:
    """``puffer-bench run ARGS`` inside ``image``; stream its output; return its exit code."""
    from docker import errors as docker_errors
    from docker.types import DeviceRequest

    client = client or _client()
    try:
        client.images.get(image)
    except docker_errors.ImageNotFound:
        cpu = image.endswith(":cpu")
        raise ContainerError(
            f"image {image} is not built yet; build it with: ./docker.sh build{' --cpu' if cpu else ''}"
            + ("" if image.startswith("puffer-bench:") else f" --tag {image}")
        ) from None
    gpus = has_nvidia_runtime(client)
    profile = option_value(args, "--gpu")
    if profile not in (None, "cpu") and not gpus:
        raise DeviceError(
            "a GPU profile was asked for but Docker has no NVIDIA runtime to pass the GPU into the container; "
            "install the NVIDIA Container Toolkit or run with --gpu cpu"
        )
    results = results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    command = ["run", *strip_host_options(args), "--out", "results"]
    print(
        f"container {image}: puffer-bench {' '.join(command)} (GPU {'passed in' if gpus else 'none'})",
        file=sys.stderr,
    )
    container = client.containers.run(
        image,
        command,
        detach=True,
        init=True,
        network_mode="none",
        shm_size=shm_size(),
        user=f"{os.getuid()}:{os.getgid()}",
        volumes={str(results): {"bind": f"{WORKDIR}/results", "mode": "rw"}},
        device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else None,
    )
    from appliance.lifeline import OnParentDeath

    # the container is the daemon's child, not ours: a watcher removes it if we die first (SIGKILL too)
    watcher = OnParentDeath(REMOVE_CONTAINER, container.id)
    try:
        for chunk in container.logs(stream=True, follow=True):
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
        return int(container.wait().get("StatusCode", 1))
    except KeyboardInterrupt:
        container.stop(timeout=5)
        raise
    finally:
        with contextlib.suppress(Exception):  # already gone
            container.remove(force=True)
        watcher.done()
