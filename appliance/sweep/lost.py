"""The study's storage failing after the sweep opened it, told from any other error in one line.

:class:`StorageLost` carries the results it did not take; :func:`storage_failure` says whether an error
is the storage's (Optuna's, SQLAlchemy's, the driver's, SQLite's, the OS's) and why, in one line. What
the sweep keeps then is :mod:`appliance.sweep.kept`'s job.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from appliance.errors import ApplianceError


class StorageLost(ApplianceError):
    """The study's storage failed while results were recorded: ``unrecorded`` holds (trial, result)
    of each measured trial it did not take."""

    def __init__(self, why: str, unrecorded: list[tuple[Any, dict[str, Any]]] | None = None) -> None:
        super().__init__(f"the study's storage failed ({why})")
        self.why, self.unrecorded = why, list(unrecorded or [])


def storage_failure(error: BaseException) -> str | None:
    """Why the storage failed, in one line, if ``error`` is the study's storage failing (Optuna's
    storage error, SQLAlchemy's, the driver's, SQLite's, the OS's); None for any other error."""
    import optuna
    import sqlalchemy.exc

    if isinstance(error, StorageLost):
        return error.why
    if isinstance(error, ApplianceError):
        return None
    kinds: tuple[type[BaseException], ...] = (
        optuna.exceptions.StorageInternalError,
        sqlalchemy.exc.SQLAlchemyError,
        sqlite3.Error,
        OSError,
    )
    try:
        import psycopg

        kinds = (*kinds, psycopg.Error)
    except ImportError:
        pass
    if not isinstance(error, kinds):
        return None
    return _reason(error)


def _reason(error: BaseException) -> str:
    """The first line of the deepest cause (the driver's or the OS's own words), at most 200 chars."""
    seen, cause = {id(error)}, error
    while True:
        nxt = getattr(cause, "orig", None) or cause.__cause__
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        cause = nxt
    if isinstance(cause, OSError) and cause.strerror:
        text = cause.strerror
    else:
        lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip()]
        text = lines[0] if lines else type(cause).__name__
    return text[:200]
