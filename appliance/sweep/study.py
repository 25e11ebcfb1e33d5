"""The sweep folder and its study: the lock, ``study.db`` checked before use, resume bookkeeping.

A sweep folder is held by one sweep at a time (:func:`locked`). Its ``study.db`` is an Optuna SQLite
study named ``sweep``; :func:`load_study` refuses, in one line saying what to do, a file that is
damaged or truncated, not SQLite, another program's database, another Optuna study, or of a table
schema this Optuna cannot use. A new study records the base config its trials start from and the
space and objective it searches (:func:`adopt`); resuming with another of either is refused. Trials a stopped sweep left running fail
and run again (:func:`put_back`, :func:`requeue_stale`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from appliance.config import Config
from appliance.errors import ApplianceError, ConfigError
from appliance.redact import command_line, redact_args, redact_tree
from appliance.report_io import disk_full, kind_of, lock_or_refuse
from appliance.safe_files import open_lock, refuse_link
from appliance.sweep.lost import StorageLost, storage_failure
from appliance.sweep.space import SECTIONS, Base, Space, sections_of
from appliance.sweep.storage import Shared, open_storage, while_created

STUDY = "sweep"
DB = "study.db"
LOCK = "sweep.lock"
INTERRUPTED = "interrupted; run again"
SCHEMA = "puffer-bench/sweep/2"  # what the study's user attributes hold (2: the base config)
SQLITE_HEADER = b"SQLite format 3\x00"
JOURNALS = ("-journal", "-wal", "-shm")  # the files SQLite keeps beside a database while it writes


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the sweep folder for this process; a second sweep gets a one-line error naming the first.

    An flock on ``sweep.lock``: the kernel drops it when the holder dies, however it dies.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        f = open_lock(folder / LOCK, "the sweep lock")
    except OSError as e:
        raise ConfigError(f"cannot write into the sweep folder {folder}: {e.strerror or e}") from None
    lock_or_refuse(f, f"sweep folder {folder}", "wait for it to end, or pass another --out", ConfigError)
    try:
        f.seek(0)
        f.truncate()
        f.write(f"process {os.getpid()} ({command_line()})\n")
        f.flush()
        yield
    finally:
        with contextlib.suppress(OSError):
            f.truncate(0)
        f.close()  # closing releases the lock


def _fresh(db: Path) -> str:
    return f"move {db} away to start a new sweep there, or pass another --out"


def _check_db(db: Path) -> None:
    """Refuse a study.db that is not a sweep's study, before Optuna or SQLAlchemy touch it: damaged
    or truncated, not SQLite, another program's database, another Optuna study, another schema; and one
    (or its journal) that is a symbolic link, which SQLite would write through into another file, or
    a journal that is no regular file (SQLite would wait forever reading a FIFO there)."""
    journals = [db.with_name(db.name + end) for end in JOURNALS]
    for path in (db, *journals):
        refuse_link(path, "the sweep's study")
    for path in journals:
        with contextlib.suppress(FileNotFoundError):
            mode = path.stat().st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(
                    f"{path}, beside the sweep's study, is {kind_of(mode)}, not SQLite's journal: refused; "
                    f"move it away (SQLite would wait on it or write into it)"
                )
    if not db.exists() or (db.is_file() and db.stat().st_size == 0):
        return  # a new sweep (SQLite treats an empty file as an empty database)
    if not db.is_file():
        raise ConfigError(f"{db} is not a file; {_fresh(db)}")
    if db.stat().st_nlink > 1:  # SQLite would write into the other name's file too
        raise ConfigError(f"{db} has other hard links (it is another file too); {_fresh(db)}")
    try:
        with open(db, "rb") as f:
            head = f.read(100)  # SQLite's database header
    except OSError as e:
        raise ConfigError(f"cannot read {db}: {e.strerror or e}") from None
    if head[: len(SQLITE_HEADER)] != SQLITE_HEADER:
        raise ConfigError(f"{db} is not an SQLite database (damaged, or another kind of file); {_fresh(db)}")
    past = _past_last_page(db, head)
    if past:
        raise ConfigError(
            f"{db} holds {past:,} bytes past its last page (damaged, or something was appended to it); "
            f"{_fresh(db)}"
        )
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            status = con.execute("PRAGMA quick_check").fetchone()[0]
            if status != "ok":
                raise sqlite3.DatabaseError(status)
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                return
            if not {"studies", "alembic_version", "version_info"} <= tables:
                shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
                raise ConfigError(
                    f"{db} is another program's database (tables {shown}), not a sweep's study; {_fresh(db)}"
                )
            names = [r[0] for r in con.execute("SELECT study_name FROM studies")]
            version = con.execute("SELECT version_num FROM alembic_version").fetchone()
            written_by = con.execute("SELECT library_version FROM version_info").fetchone()
    except sqlite3.DatabaseError as e:
        raise ConfigError(f"{db} is damaged or truncated (SQLite: {e}); {_fresh(db)}") from None
    if names and STUDY not in names:
        raise ConfigError(
            f"{db} holds Optuna studies {', '.join(names[:5])}, not a puffer-bench sweep ('{STUDY}'); {_fresh(db)}"
        )
    _check_schema(db, version[0] if version else None, written_by[0] if written_by else "an unknown version")


def _past_last_page(db: Path, head: bytes) -> int:
    """Bytes of ``db`` past the pages its header counts (0 when none, or when the header's count is
    not to be trusted: SQLite's "version-valid-for" differs from the change counter, or a WAL is open)."""
    if len(head) < 100 or head[24:28] != head[92:96] or db.with_name(db.name + "-wal").exists():
        return 0
    page_size = int.from_bytes(head[16:18], "big")
    pages = int.from_bytes(head[28:32], "big")
    if not pages:
        return 0
    return max(0, db.stat().st_size - pages * (65536 if page_size == 1 else page_size))


def _check_schema(db: Path, version: str | None, written_by: str) -> None:
    """The study's table schema must be this Optuna's (Optuna's own migrations say which are known)."""
    import optuna

    here = optuna.storages.RDBStorage("sqlite://")  # an empty study in memory: this Optuna's schema
    head, known = here.get_head_version(), here.get_all_versions()
    if version == head:
        return
    if version in known:
        raise ConfigError(
            f"{db} was written by Optuna {written_by}, whose table schema ({version}) this Optuna "
            f"({optuna.__version__}) cannot use: to resume, upgrade it in place (keep a copy) with "
            f"`optuna storage upgrade --storage sqlite:///{db.resolve()}`; or {_fresh(db)}"
        )
    raise ConfigError(
        f"{db} was written by Optuna {written_by}, newer than this one ({optuna.__version__}; schema "
        f"{version} unknown here): to resume, pip install -U optuna; or {_fresh(db)}"
    )


def load_study(
    out: Path,
    create: bool = False,
    seed: int = 0,
    startup: int = 2,
    shared: Shared | None = None,
    name: str = STUDY,
) -> Any:
    """The sweep's study in ``out`` (checked first: see :func:`_check_db`), or the study ``name`` of a
    shared storage (:mod:`appliance.sweep.storage`); ``create`` makes a new one."""
    import optuna
    import sqlalchemy.exc

    if shared is not None:
        return _load_shared(shared, name, create, seed, startup)
    db = out / DB
    _check_db(db)
    if not create and not db.is_file():
        raise ConfigError(f"no sweep in {out}: no {DB} there")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.create_study(
            study_name=STUDY,
            storage=f"sqlite:///{db}",
            directions=["maximize", "minimize"],
            sampler=_sampler(seed, startup),
            load_if_exists=True,
        )
    except (sqlalchemy.exc.SQLAlchemyError, RuntimeError, ValueError) as e:
        if disk_full(e):
            raise ConfigError(f"disk full: cannot write {db}; free some space and run again") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"cannot open {db}: {first}; {_fresh(db)}") from None


def _sampler(seed: int, startup: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)


def _load_shared(shared: Shared, name: str, create: bool, seed: int, startup: int) -> Any:
    """The study ``name`` of a shared storage; a worker joins it if it exists (workers racing to
    create it: Optuna's load_if_exists lets one create and the rest load it)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(shared, requeue_dead)
    try:
        if not create:
            return optuna.load_study(study_name=name, storage=storage, sampler=_sampler(seed, startup))
        study = while_created(
            lambda: optuna.create_study(
                study_name=name,
                storage=storage,
                directions=["maximize", "minimize"],
                sampler=_sampler(seed, startup),
                load_if_exists=True,
            )
        )
    except KeyError:
        raise ConfigError(f"no study '{name}' in {shared.shown}") from None
    except Exception as e:
        if isinstance(e, ApplianceError):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"cannot open study '{name}' in {shared.shown}: {first}") from None
    if [d.name for d in study.directions] != ["MAXIMIZE", "MINIMIZE"]:
        raise ConfigError(
            f"study '{name}' in {shared.shown} is not a sweep (its directions are "
            f"{', '.join(d.name.lower() for d in study.directions)}); pass another --study-name"
        )
    return study


def open_study(out: str | Path, shared: Shared | None = None, name: str = STUDY) -> Any:
    """The study of the sweep folder ``out``, or of a shared storage (for reading its trials)."""
    return load_study(Path(out), shared=shared, name=name)


def adopt(study: Any, out: Path, base: Base, cfg: Config, space: Space, where: str | None = None) -> None:
    """A new study records what its trials start from and what it searches; a resumed one must be
    given the same: the same base config, and the same space and objective (a trial scored on
    another metric, or pruned against curves of another one, would be compared with the rest)."""
    where = where or str(out / DB)
    given = {
        "schema": SCHEMA,
        "env": base.env,
        "metric": space.metric,
        "profile": base.profile,
        "overrides": redact_args(base.overrides),  # the study (a file, a server) holds no secret
        "config_file": base.config_file,
        "base": redact_tree(sections_of(cfg)),
        "space": space_of(space),
    }
    attrs = study.user_attrs
    if attrs.get("env") not in (None, base.env):
        raise ConfigError(
            f"{where} holds a sweep of {attrs['env']}, not {base.env}; pick another --out (or --study-name)"
        )
    if "base" in attrs:
        changed = _differences(attrs["base"], given["base"])
        if changed:
            raise ConfigError(
                f"{where} was swept from another config: {'; '.join(changed)} (from the overrides, "
                "--config or --gpu); give the same ones to resume, or pass another --out (or --study-name) for a new sweep"
            )
    elif study.trials:  # made before the study kept its base config: compare what it did keep
        old = {"overrides": attrs.get("overrides", []), "config_file": attrs.get("config_file")}
        if old["overrides"] != redact_args(base.overrides) or old["config_file"] != base.config_file:
            raise ConfigError(
                f"{where} was swept with overrides {' '.join(old['overrides']) or '(none)'} and --config "
                f"{old['config_file'] or '(none)'}; give the same ones to resume, or pass another --out"
            )
    before = attrs.get("space") or ({"objective": {"metric": attrs["metric"]}} if "metric" in attrs else {})
    changed = _space_differences(before, given["space"])
    if changed:
        raise ConfigError(
            f"{where} was swept over another space: {'; '.join(changed)} (now from {space.source}); "
            "give the same space to resume, or pass another --out (or --study-name) for a new sweep"
        )
    for k, v in given.items():
        if k not in attrs or attrs.get("base") is None:
            study.set_user_attr(k, v)


def space_of(space: Space) -> dict[str, Any]:
    """What a study searches, as plain JSON data (what it stores): the swept params as fitted to the
    config, the objective and the pruning rule."""
    return json.loads(
        json.dumps(
            {
                "objective": {"metric": space.metric, "target": space.target, "window": space.window},
                "prune": {"warmup": space.warmup, "margin": space.margin, "min_trials": space.min_trials},
                "space": space.params,
            }
        )
    )


def _space_differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """How two spaces differ, part by part (``objective.metric was 'perf', now 'score'``); only the
    parts ``before`` holds are compared (a study from before the space was kept holds its metric)."""
    out = []
    for part in ("objective", "prune", "space"):
        if part not in before:
            continue
        a, b = before[part] or {}, now.get(part) or {}
        for key in sorted(set(a) | set(b)) if part == "space" else sorted(a):
            if key not in b:
                out.append(f"{part}.{key} was swept, now not")
            elif key not in a:
                out.append(f"{part}.{key} was not swept, now is")
            elif a[key] != b[key]:
                out.append(f"{part}.{key} was {a[key]!r}, now {b[key]!r}")
    return out[:3] + ([f"{len(out) - 3} more"] if len(out) > 3 else [])


def _differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out = []
    for section in SECTIONS:
        a, b = before.get(section, {}), now.get(section, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                out.append(f"{section}.{key} was {a.get(key)!r}, now {b.get(key)!r}")
    return out[:3] + ([f"{len(out) - 3} more"] if len(out) > 3 else [])


def put_back(study: Any, trials: Any, why: str, rerun_of: bool = False) -> None:
    """Mark trials that did not finish as failed-interrupted and queue their settings again."""
    from optuna.trial import TrialState

    for t in list(trials):
        study._storage.set_trial_user_attr(t._trial_id, "error", INTERRUPTED)
        study._storage.set_trial_user_attr(t._trial_id, "why", why)
        study.tell(t.number, state=TrialState.FAIL)
        attrs = {"baseline": True} if t.user_attrs.get("baseline") else {}
        if rerun_of:
            attrs["rerun_of"] = t.number
        study.enqueue_trial(t.params, user_attrs=attrs or None)


def requeue_stale(study: Any) -> None:
    """Trials a sweep left RUNNING (it was killed: SIGKILL, a crash, the OOM killer) fail now and run
    again, once: one that was already such a rerun is left failed (it may be what kills the sweep)."""
    from optuna.trial import TrialState

    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    again = [t for t in stale if t.user_attrs.get("rerun_of") is None]
    for t in stale:
        if t not in again:
            study._storage.set_trial_user_attr(
                t._trial_id,
                "error",
                f"the sweep died twice while these settings ran (trials {t.user_attrs['rerun_of']} and "
                f"{t.number}); not run again",
            )
            study.tell(t.number, state=TrialState.FAIL)
    put_back(study, again, "the sweep died while it ran", rerun_of=True)


DEAD = "its worker stopped sending heartbeats (killed, or its machine lost)"


def requeue_dead(study: Any, trial: Any) -> None:
    """A trial of a worker that stopped sending heartbeats, failed by the storage: its settings run
    again, once, as :func:`requeue_stale` does for one machine's sweep. A finished trial cannot take
    attributes, so why it failed is a study attribute (``stale:N``, read by :func:`trial_error`)."""
    rerun_of = trial.user_attrs.get("rerun_of")
    if rerun_of is not None:
        study.set_user_attr(
            f"stale:{trial.number}",
            f"the workers running these settings died twice (trials {rerun_of} and {trial.number}); not run again",
        )
        return
    study.set_user_attr(f"stale:{trial.number}", f"{DEAD}; run again")
    attrs = {"baseline": True} if trial.user_attrs.get("baseline") else {}
    study.enqueue_trial(trial.params, user_attrs={**attrs, "rerun_of": trial.number})


def trial_error(study: Any, trial: Any) -> str | None:
    """Why a trial failed: its own ``error``, or what the worker that failed it as stale wrote."""
    return trial.user_attrs.get("error") or study.user_attrs.get(f"stale:{trial.number}")


def interrupted(study: Any) -> set[int]:
    """Trials that did not finish and whose settings run again: not counted, not in the table."""
    rerun = f"{DEAD}; run again"
    dead = {
        int(k.split(":", 1)[1]) for k, v in study.user_attrs.items() if k.startswith("stale:") and v == rerun
    }
    return dead | {
        t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("error") == INTERRUPTED
    }


def running_trials(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def queued(study: Any) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def finished_trials(study: Any, complete: bool = False) -> list[Any]:
    from optuna.trial import TrialState

    states = (TrialState.COMPLETE,) if complete else (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    skip = interrupted(study)
    return [t for t in study.get_trials(deepcopy=False, states=states) if t.number not in skip]


class DiskFull(ApplianceError):
    """The disk filled while the study was written; ``unrecorded`` is the result line of the trial
    it could not record (None when it failed elsewhere: asking for a trial, putting one back)."""

    def __init__(self, why: str, unrecorded: str | None = None) -> None:
        super().__init__(f"disk full ({why})")
        self.why, self.unrecorded = why, unrecorded


def record(study: Any, trial: Any, result: dict[str, Any]) -> str:
    """Tell the study a trial's result; the line to print. A full disk raises :class:`DiskFull`
    with the result line, for the driver to keep what fits and name it in one line."""
    import optuna

    line = result_line(trial.number, result)
    try:
        _tell(study, trial, result)
    except optuna.exceptions.UpdateFinishedTrialError:  # its heartbeat was late: another worker failed it
        return f"{line} (not recorded: another worker failed it as stale, its heartbeat late; it runs again)"
    except Exception as e:
        if disk_full(e):
            raise DiskFull(disk_full_words(e), line) from None
        why = storage_failure(e)
        if why is not None:  # the measured result is kept by the driver, not lost with the server
            raise StorageLost(why, [(trial, result)]) from None
        raise
    return line


def disk_full_words(e: BaseException) -> str:
    """A full disk's words: the OS's, or SQLite's."""
    return (e.strerror if isinstance(e, OSError) and e.strerror else None) or "database or disk is full"


def result_line(number: int, result: dict[str, Any]) -> str:
    state = result["state"]
    if state == "complete":
        what = f"score {result['score']:.3f} in {result['seconds']:.1f} s ({result.get('reason')})"
    elif state == "pruned":
        what = f"pruned: {result['error']}"
    else:
        what = f"failed: {result['error']}"
    return f"trial {number}: {what}"


def _tell(study: Any, trial: Any, result: dict[str, Any]) -> None:
    from optuna.trial import TrialState

    for k in ("curve", "steps", "error", "reason"):
        if result.get(k) is not None:
            trial.set_user_attr(k, result[k])
    if result.get("score") is not None:
        trial.set_user_attr("score", result["score"])
    trial.set_user_attr("seconds", result["seconds"])
    state = result["state"]
    if state == "complete":
        study.tell(trial, [result["score"], result["seconds"]])
    elif state == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)
