"""Errors that carry a message meant for the user, printed by the CLI in one line."""


class ApplianceError(Exception):
    """Base class for errors the CLI reports without a traceback."""

    exit_code = 1


class ConfigError(ApplianceError, ValueError):
    """A configuration, size rule or input the user gave is invalid.

    The message names what was wrong (key, file, rule) and what would be right.
    """

    exit_code = 2


class DeviceError(ApplianceError, RuntimeError):
    """A device the user asked for (``--train.device cuda``) is not available."""

    exit_code = 2


class ReportError(ApplianceError, ValueError):
    """A benchmark report cannot be read or compared (bad file, other schema, nothing in common)."""

    exit_code = 2


class EnvContractError(ConfigError):
    """An env broke its own contract: what its ``reset`` or ``step`` returned does not fit the
    Gymnasium or PettingZoo API or the env's own spaces. The message names the env, the call and the
    rule, in one line; every vector backend raises it with the same message."""


class TrainingError(ApplianceError, RuntimeError):
    """Training cannot go on (a NaN/Inf loss, a fused kernel that disagrees with the torch loss); the
    message names the last good checkpoint where there is one."""
