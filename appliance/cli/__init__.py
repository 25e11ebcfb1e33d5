"""The ``puffer-bench`` command line: parse options, call one function, print what it returns.

Every command reports user errors (:class:`~appliance.errors.ApplianceError`) in one line on stderr
and exits with the error's code (2 for configuration errors), never with a traceback. The work
itself lives in the layers below (``bench``, ``train``, ``vector``); see docs/architecture.md.
Commands are grouped by topic: :mod:`.machine`, :mod:`.training`, :mod:`.bench`, :mod:`.scale`.
"""

from __future__ import annotations

import sys

from appliance.redact import hide_in_process_title

hide_in_process_title()  # first, before the imports below take seconds: ps shows no --storage password

from appliance.signals import hold_during_imports  # noqa: E402

# a Ctrl-C while the modules below are imported (a second or more on a slow machine) is held until
# they are, then raised where the command line answers it in one line
hold_during_imports()

from appliance.sysinfo.cpu import cap_torch  # noqa: E402

cap_torch()  # PUFFER_CPU_KIND: torch's kernels capped to the emulated kind's ISA, before torch is imported

from appliance.cli import bench, config, envs, machine, scale, training  # noqa: E402, F401  (each module registers its commands)
from appliance.cli.common import cli  # noqa: E402

__all__ = ["cli", "main"]


def main() -> None:
    """Console-script entry point."""
    hold_during_imports()
    cli.main(prog_name="puffer-bench")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
