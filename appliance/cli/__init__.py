"""The ``puffer-bench`` command line: parse options, call one function, print what it returns.

Every command reports user errors (:class:`~appliance.errors.ApplianceError`) in one line on stderr
and exits with the error's code (2 for configuration errors), never with a traceback. The work
itself lives in the layers below (``bench``, ``train``, ``vector``); see docs/architecture.md.
Commands are grouped by topic: :mod:`.machine`, :mod:`.training`, :mod:`.bench`, :mod:`.scale`.
"""

from __future__ import annotations

import sys

from appliance.cli import bench, machine, scale, training  # noqa: F401  (each module registers its commands)
from appliance.cli.common import cli
from appliance.cli.interrupts import hold_during_imports

__all__ = ["cli", "main"]


def main() -> None:
    """Console-script entry point."""
    hold_during_imports()
    cli.main(prog_name="puffer-bench")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
