"""A study shared by sweep workers on several processes or machines: ``--storage URL``.

Two kinds of URL name a shared study (the default, a sweep folder's ``study.db``, is one machine's):

* ``postgresql://USER:PASSWORD@HOST:PORT/DATABASE``: Optuna's RDBStorage through SQLAlchemy, with
  psycopg (3) as its driver (``postgresql://`` without a driver means ``postgresql+psycopg://``).
* ``journal:///PATH/study.log``: Optuna's JournalStorage on a file that every worker sees (a shared
  file system), read and appended through the safe-file layer (:func:`journal_backend`): no link,
  FIFO, device or foreign file is written, a cut-short last record is set aside, never glued onto.

Every worker records a heartbeat for each trial it runs (:class:`Heartbeat`): Optuna's own heartbeat
for PostgreSQL (RDBStorage ``heartbeat_interval``, ``grace_period``; the database server's clock) and,
as Optuna 5's JournalStorage has none, a trial system attribute with the worker's clock for the journal
(the machines' clocks must agree to well within the grace period). A worker that stops beating (it was
SIGKILLed, its machine was lost) leaves its trials RUNNING only until another worker sees them stale:
they fail, and their settings run again once (:func:`appliance.sweep.study.requeue_dead`). Optuna's
RDBStorage never calls a trial stale that has no heartbeat at all (its worker died between asking for
it and beating), so a PostgreSQL worker marks each trial once its first beat is in (``puffer_beating``),
and another worker fails a RUNNING trial that it has seen unmarked for longer than the grace period.

Errors (a bad URL, a missing driver, an unreachable server) are one line naming what to fix; a URL's
password is never shown (:attr:`Shared.shown`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
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
BEATING = "puffer_beating"  # PostgreSQL: a trial system attribute, set once its first beat is in
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
        from optuna.storages.journal import JournalStorage

        try:
            return JournalStorage(journal_backend(shared))
        except OSError as e:
            raise ConfigError(
                f"--storage {shared.shown}: cannot open the journal: {e.strerror or e}"
            ) from None
    import sqlalchemy.exc

    try:
        with warnings.catch_warnings():  # Optuna calls the heartbeat experimental: it is what we need
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return while_created(
                lambda: optuna.storages.RDBStorage(
                    shared.url,
                    engine_kwargs={"pool_pre_ping": True},
                    heartbeat_interval=shared.heartbeat,
                    grace_period=shared.grace,
                    heartbeat_stale_trial_callback=on_stale,
                )
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


JOURNAL_HEAD = b'{"op_code":'  # how every record of an Optuna journal starts (compact JSON, op_code first)


def journal_backend(shared: Shared) -> Any:
    """The journal file of ``shared`` as an Optuna journal backend that goes through the safe-file
    layer (:mod:`appliance.safe_files`): the file is checked before anything reads or writes it (a
    symbolic link, a FIFO, a device, a folder, a file with other hard links, or a file that is not an
    Optuna journal are refused in one line, untouched); a last record cut short (a kill or a full
    disk mid-append) is set aside into ``<name>.damaged`` and reported, never glued onto; each append
    starts on a line boundary; a damaged record amid the others is one line naming it."""
    from optuna.storages.journal import BaseJournalBackend, JournalFileSymlinkLock

    from appliance.safe_files import append_line, open_own, refuse_link, repair_tail

    path = Path(shared.url)
    what = "the sweep's journal"

    def check() -> None:
        refuse_link(path, what)
        if not path.exists():
            return
        fd = open_own(path, what, os.O_RDONLY)  # not a FIFO, device, folder or shared hard link
        try:
            head = os.pread(fd, 4096, 0)
        finally:
            os.close(fd)
        if head and not _journal_head(head):
            raise ConfigError(
                f"--storage {shared.shown}: {path} is not an Optuna journal (its first record is not "
                "one): refused, nothing written; pass a new file's path or move it away"
            )

    @contextlib.contextmanager
    def held(lock: Any) -> Any:  # Optuna's own lock beside the file: every worker takes the same
        lock.acquire()
        try:
            yield
        finally:
            lock.release()

    class SafeJournal(BaseJournalBackend):  # type: ignore[misc]
        def __init__(self) -> None:
            check()
            self.lock = JournalFileSymlinkLock(str(path))
            self.at = (0, 0)  # (the number of the next record to read, its offset in the file)
            with held(self.lock):  # no other worker is mid-append while the tail is judged
                check()
                if not path.exists():
                    os.close(open_own(path, what, os.O_WRONLY | os.O_CREAT))
                _warn(repair_tail(path, what))

        def read_logs(self, log_number_from: int) -> Any:
            number, offset = self.at if log_number_from >= self.at[0] else (0, 0)
            with os.fdopen(open_own(path, what, os.O_RDONLY), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(offset)
                while offset < size:
                    line = f.readline()
                    if not line.endswith(b"\n") or offset + len(line) > size:
                        break  # a record still being written (or cut short): not read yet
                    try:
                        log = json.loads(line)
                    except (ValueError, RecursionError):
                        log = None
                    if not isinstance(log, dict) or "op_code" not in log:
                        raise ConfigError(
                            f"--storage {shared.shown}: record {number + 1} of {path} is damaged (not a "
                            "journal record): the study cannot be read; restore the file or start a new "
                            "study in another"
                        )
                    offset += len(line)
                    number += 1
                    self.at = (number, offset)
                    if number > log_number_from:
                        yield log

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
            with held(self.lock):
                _warn(append_line(path, text, what, sync=True))

    return SafeJournal()


def _journal_head(head: bytes) -> bool:
    """Whether the first bytes of a file are those of an Optuna journal: its first line (or, cut
    short, what there is of it) is a JSON record starting with its ``op_code``."""
    first = head.split(b"\n", 1)[0]
    if not first.startswith(JOURNAL_HEAD[: len(first)]) or len(first) < 1:
        return False
    if b"\n" not in head:
        return True  # one record, cut short: set aside like any cut-short last record
    try:
        return isinstance(json.loads(first), dict)
    except (ValueError, RecursionError):
        return False


def _warn(note: str | None) -> None:
    if note:
        print(f"warning: {note}", file=sys.stderr, flush=True)


CREATION_TRIES = 8
# PostgreSQL's SQLSTATEs for a thing another session created first: unique_violation (a row, or a
# type's catalogue entry while both create it), duplicate_object (an enum type such as Optuna's
# studydirection, once the other's creation has committed) and duplicate_table
CREATED_STATES = frozenset({"23505", "42710", "42P07"})
CREATED_ERRORS = frozenset({"UniqueViolation", "DuplicateObject", "DuplicateTable", "IntegrityError"})


def created_meanwhile(error: BaseException) -> bool:
    """Whether ``error`` says another worker created the same thing (a table, its type, the study's
    row) at the same moment: PostgreSQL's unique violation, or its "already exists" for a type or
    table created between the check and the creation, however Optuna or SQLAlchemy wrap it."""
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return False
        state = getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None)
        if (
            "duplicate key value violates unique constraint" in str(seen)
            or type(seen).__name__ in CREATED_ERRORS
            or state in CREATED_STATES
        ):
            return True
        # SQLAlchemy's wrapper holds the driver's error as .orig (and raises from it)
        seen = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
    return False


def while_created(make: Callable[[], Any]) -> Any:
    """``make()``, tried again (after a short random wait) while it fails only because another worker
    starting at the same moment created the same tables or study first: a worker that joins during
    creation waits, and is never refused for it."""
    import random

    for attempt in range(1, CREATION_TRIES + 1):
        try:
            return make()
        except Exception as e:
            if attempt == CREATION_TRIES or not created_meanwhile(e):
                raise
            time.sleep(random.uniform(0.05, 0.25) * attempt)
    raise AssertionError("unreachable")


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
        self.unbeaten: dict[int, float] = {}  # PostgreSQL: unmarked RUNNING trials, when first seen
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="sweep-heartbeat", daemon=True)
        self.thread.start()

    def add(self, trial: Any) -> None:
        self._beat(trial._trial_id)
        if self.shared.kind != "journal":
            self.study._storage.set_trial_system_attr(trial._trial_id, BEATING, True)
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
        now = time.time()
        with self.lock:
            ours = set(self.ids)
        seen, unbeaten = time.monotonic(), {}
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t._trial_id in ours:
                continue
            if self.shared.kind == "journal":
                last = t.system_attrs.get(BEAT, t.datetime_start.timestamp() if t.datetime_start else now)
            elif BEATING in t.system_attrs:
                continue  # Optuna's heartbeat judges it
            else:  # never beaten: timed from when this worker first saw it, on its own clock
                first = unbeaten[t._trial_id] = self.unbeaten.get(t._trial_id, seen)
                if seen - first > self.shared.grace:
                    self._fail(t._trial_id)
                continue
            if now - last > self.shared.grace:
                self._fail(t._trial_id)
        self.unbeaten = unbeaten

    def _fail(self, trial_id: int) -> None:
        import optuna
        from optuna.trial import TrialState

        storage = self.study._storage
        try:
            if not storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                return
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker failed it first
            return
        self.on_stale(self.study, storage.get_trial(trial_id))
