"""The config a command's run uses: every layer resolved, the hardware profile included (``--gpu``,
or detected from this machine's GPUs). ``train``, ``eval``, ``config``, ``sweep`` and ``autotune``
resolve through here, so ``config ENV`` prints what ``train ENV`` runs; resuming a run goes through
:func:`appliance.train.resume.resume_config`, which layers the run's own config.yaml under these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from appliance.config import Config


def pick_profile(given: str | None) -> str:
    """The hardware profile a command uses: ``--gpu NAME`` if given, else detected from this machine's
    GPUs (:func:`appliance.config.hardware.detect`: a measured profile that names the GPU, else its
    architecture's; ``cpu`` only where torch has no usable CUDA device)."""
    if given is not None:
        return given
    from appliance.config import hardware

    return hardware.detect().name


def run_config(
    env: str | None,
    profile: str | None,
    config_file: str | None,
    overrides: list[str],
    family: str | None = None,
) -> Config:
    """The config a run of ``env`` uses on this machine: every layer, the hardware profile included
    (``--gpu``, or detected as :func:`pick_profile` does). ``train``, ``eval`` and ``config`` all
    resolve through here, so ``config ENV`` prints what ``train ENV`` runs (``family``: ``--family``)."""
    from appliance.config import resolve

    return resolve(
        env=env, profile=pick_profile(profile), config_file=config_file, overrides=overrides, family=family
    )
