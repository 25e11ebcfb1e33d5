"""A study shared by sweep workers on several processes or machines: ``--storage URL``.

Two kinds of URL name a shared study (the default, a sweep folder's ``study.db``, is one machine's):

* ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE``: Optuna's RDBStorage through SQLAlchemy, with
  psycopg (3) as its driver (``postgresql://`` without a driver means ``postgresql+psycopg://``).
* ``journal:///PATH/study.log``: Optuna's JournalStorage on a file (JournalFileBackend) that every
  worker sees: a shared file system.

Every worker records a heartbeat for each trial it runs (:class:`Heartbeat`): Optuna's own heartbeat
for PostgreSQL (RDBStorage ``heartbeat_interval``, ``grace_period``; the database server's clock) and,
as Optuna 5's JournalStorage has none, a trial system attribute with the worker's clock for the journal
(the machines' clocks must agree to well within the grace period). A worker that stops beating (it was
SIGKILLed, its machine was lost) leaves its trials RUNNING only until another worker sees them stale:
they fail, and their settings run again once (:func:`appliance.sweep.study.requeue_dead`).

Errors (a bad URL, a missing driver, an unreachable server) are one line naming what to fix; a URL's
password is never shown (:attr:`Shared.shown`).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import ConfigError

HEARTBEAT = 30  # seconds between a worker's heartbeats; a trial is stale after two missed ones
BEAT = "puffer_heartbeat"  # the journal's heartbeat: a trial system attribute (the time, in seconds)
FORMS = "postgresql://USER:PASSWORD@HOST:PORT/DATABASE or journal:///PATH/study.log"


@dataclass(frozen=True)
class Shared:
    """Where a shared study lives: ``kind`` is postgresql or journal; ``url`` the full URL (with its
    password: never print it), ``shown`` the URL to print; ``heartbeat`` the seconds between beats."""

    kind: str
    url: str
    shown: str
    heartbeat: int = HEARTBEAT

    @property
    def grace(self) -> int:
        return 2 * self.heartbeat


def parse(url: str, heartbeat: int = HEARTBEAT) -> Shared:
    """Check a ``--storage`` URL's form (nothing is connected yet); one line when it is not usable."""
    if heartbeat < 1:
        raise ConfigError(f"--heartbeat {heartbeat}: must be at least 1 second")
    if url.startswith("journal:"):
        path = url.removeprefix("journal:").removeprefix("//")
        if not path.startswith("/"):
            raise ConfigError(
                f"--storage {url}: a journal needs an absolute path, as in journal:///PATH/study.log"
            )
        folder = Path(path).parent
        if not folder.is_dir():
            raise ConfigError(
                f"--storage {url}: the folder {folder} does not exist; create it on the shared file system"
            )
        return Shared("journal", path, url, heartbeat)
    import sqlalchemy.engine
    import sqlalchemy.exc

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        raise ConfigError(f"--storage: not a storage URL (give {FORMS})") from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() != "postgresql":
        extra = (
            "; a SQLite study is the default: drop --storage and pass --out FOLDER"
            if parsed.get_backend_name() == "sqlite"
            else ""
        )
        raise ConfigError(f"--storage {shown}: not a shared study URL (give {FORMS}){extra}")
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if not parsed.host and not parsed.query.get("host"):
        raise ConfigError(
            f"--storage {shown}: no server named (postgresql://USER:PASSWORD@HOST:PORT/DATABASE)"
        )
    if not parsed.database:
        raise ConfigError(
            f"--storage {shown}: no database named (postgresql://USER:PASSWORD@HOST:PORT/DATABASE)"
        )
    return Shared("postgresql", parsed.render_as_string(hide_password=False), shown, heartbeat)


def open_storage(shared: Shared, on_stale: Callable[[Any, Any], None]) -> Any:
    """The Optuna storage of ``shared``, connected; ``on_stale(study, trial)`` runs for each trial
    whose worker stopped beating once it is failed. One line for a missing driver or an unreachable
    server."""
    import optuna

    if shared.kind == "journal":
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        try:
            return JournalStorage(JournalFileBackend(shared.url))
        except OSError as e:
            raise ConfigError(
                f"--storage {shared.shown}: cannot open the journal: {e.strerror or e}"
            ) from None
    import sqlalchemy.exc

    try:
        with warnings.catch_warnings():  # Optuna calls the heartbeat experimental: it is what we need
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                shared.url,
                engine_kwargs={"pool_pre_ping": True},
                heartbeat_interval=shared.heartbeat,
                grace_period=shared.grace,
                heartbeat_stale_trial_callback=on_stale,
            )
    except ImportError as e:  # the driver, which SQLAlchemy imports on connecting (Optuna wraps it)
        missing = getattr(e.__cause__, "name", None) or getattr(e, "name", None) or "its module"
        raise ConfigError(
            f"--storage {shared.shown}: the PostgreSQL driver is missing ({missing}): "
            "pip install 'puffer-bench[postgres]' (psycopg), and use postgresql:// URLs"
        ) from None
    except sqlalchemy.exc.NoSuchModuleError:
        raise ConfigError(
            f"--storage {shared.shown}: SQLAlchemy has no such driver; use postgresql:// (psycopg)"
        ) from None
    except sqlalchemy.exc.OperationalError as e:
        raise ConfigError(
            f"--storage {shared.shown}: cannot connect (is the server running; are its host, port, user, "
            f"password and database right?): {_first_line(e, shared)}"
        ) from None
    except (sqlalchemy.exc.SQLAlchemyError, RuntimeError, ValueError) as e:
        raise ConfigError(f"--storage {shared.shown}: {_first_line(e, shared)}") from None


def _first_line(e: BaseException, shared: Shared) -> str:
    """The driver's own reason in one line (SQLAlchemy's wrapper text, the SQL and its link dropped),
    with no password in it."""
    cause = getattr(e, "orig", None) or e
    lines = [ln.strip() for ln in str(cause).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(cause).__name__
    import sqlalchemy.engine

    password = sqlalchemy.engine.make_url(shared.url).password
    return text.replace(str(password), "***") if password else text


class Heartbeat:
    """Beats for the trials this worker runs, from a thread, every ``shared.heartbeat`` seconds, and
    fails the study's stale trials (:meth:`fail_stale`) before this worker asks for one."""

    def __init__(self, study: Any, shared: Shared, on_stale: Callable[[Any, Any], None]) -> None:
        self.study, self.shared, self.on_stale = study, shared, on_stale
        self.ids: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="sweep-heartbeat", daemon=True)
        self.thread.start()

    def add(self, trial: Any) -> None:
        self._beat(trial._trial_id)
        with self.lock:
            self.ids.add(trial._trial_id)

    def remove(self, trial: Any) -> None:
        with self.lock:
            self.ids.discard(trial._trial_id)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()

    def _beat(self, trial_id: int) -> None:
        storage = self.study._storage
        if self.shared.kind == "journal":
            storage.set_trial_system_attr(trial_id, BEAT, time.time())
        else:
            storage.record_heartbeat(trial_id)

    def _loop(self) -> None:
        while not self.stop.wait(self.shared.heartbeat):
            with self.lock:
                ids = list(self.ids)
            for trial_id in ids:
                with contextlib.suppress(Exception):  # a trial told meanwhile; a server away a moment
                    self._beat(trial_id)

    def fail_stale(self) -> None:
        """Fail the trials of workers that stopped beating and hand each to ``on_stale``."""
        import optuna
        from optuna.trial import TrialState

        if self.shared.kind != "journal":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(self.study)  # RDBStorage calls on_stale itself
            return
        storage, now = self.study._storage, time.time()
        with self.lock:
            ours = set(self.ids)
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t._trial_id in ours:
                continue
            last = t.system_attrs.get(BEAT, t.datetime_start.timestamp() if t.datetime_start else now)
            if now - last <= self.shared.grace:
                continue
            try:
                if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:  # another worker failed it first
                continue
            self.on_stale(self.study, storage.get_trial(t._trial_id))
