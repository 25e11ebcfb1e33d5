"""Reading a process tree while it changes: the tests that kill launchers, ranks and sweep drivers.

A child listed a moment ago may have ended since, or wait unreaped as a zombie (a compiler, or
py-cpuinfo's probe while a run reads its machine); its command line then raises. These helpers
read such a child as one that is gone.
"""

from __future__ import annotations

import psutil


def children(pid: int) -> list[psutil.Process]:
    """Every live descendant of ``pid``; none when ``pid`` itself has gone."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def command_line(proc: psutil.Process) -> str:
    """The command line as one string; empty for a process that ended or waits unreaped."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""
