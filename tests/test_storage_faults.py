"""Storage faults after a sweep opened its study are one line and lose nothing (docs/reliability.md):
a server lost (or its database dropped) mid-trial keeps the measured trial in the sweep folder, named
in the line, and writes trials.md and best.yaml from what is known; workers starting at the same
moment on a fresh PostgreSQL database are never refused (they wait while the tables are created)."""

from __future__ import annotations

import json
import multiprocessing
import os
import uuid

import pytest
import yaml

from appliance import sweep as sw
from appliance.errors import ApplianceError
from appliance.sweep import storage as st
from appliance.sweep.kept import UNRECORDED
from appliance.testing import tiny_sweep_args

TINY = tiny_sweep_args(64)
POSTGRES = os.environ.get("PUFFER_TEST_POSTGRES_URL")
SPACE = {
    "objective": {"metric": "perf", "window": 2},
    "space": {"train.learning_rate": {"low": 0.001, "high": 0.05, "log": True}},
}
BREAK: dict[str, object] = {}  # what the trial below does to the storage once it has measured


def measured_then_storage_lost(spec):
    """A trial that measures 0.5 + its number / 10, and on trial 1 the storage goes away before the
    result is recorded."""
    if spec["trial"] == 1 and BREAK:
        BREAK["now"]()
    score = 0.5 + spec["trial"] / 10
    return {"state": "complete", "score": score, "seconds": 1.0 + spec["trial"], "steps": 64,
            "curve": [[64.0, score]], "reason": "measured", "error": None}  # fmt: skip


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE))
    return str(path)


def _lost_sweep(out, space, shared=None):
    options = sw.Options(trials=3, shared=shared)
    lines = []
    with pytest.raises(ApplianceError) as caught:
        for line in sw.sweep(
            "squared", out, options, space, overrides=TINY, profile="cpu", trial=measured_then_storage_lost
        ):
            lines.append(line)
    return str(caught.value), lines


def _check_kept(out, line):
    assert "\n" not in line and line.startswith("the study's storage failed while the sweep ran ("), line
    assert f"kept the result of trial 1 in {out / UNRECORDED}" in line, line
    assert "wrote trials.md and best.yaml from the 2 trials known here" in line, line
    kept = [json.loads(x) for x in (out / UNRECORDED).read_text().splitlines()]
    assert [(k["trial"], k["result"]["score"]) for k in kept] == [(1, 0.6)]
    assert "train.learning_rate" in kept[0]["params"]
    table = (out / "trials.md").read_text()
    assert "| 0 | complete | 0.5 |" in table and "| 1 | complete | 0.6 |" in table, table
    best = (out / "best.yaml").read_text()
    assert (
        "trial 1" in best
        and yaml.safe_load(best)["train"]["learning_rate"] == kept[0]["params"]["train.learning_rate"]
    )


def test_a_storage_lost_while_recording_keeps_the_measured_trial_and_writes_what_is_known(
    tmp_path, space, monkeypatch
):
    """The folder's SQLite study, its storage failing as a lost server fails (Optuna's storage error
    over SQLAlchemy's OperationalError) from the moment trial 1 has measured."""
    import optuna
    import sqlalchemy.exc

    broken = {"yes": False}
    for name in ("set_trial_state_values", "set_trial_user_attr", "get_all_trials", "get_study_user_attrs"):
        real = getattr(optuna.storages.RDBStorage, name)

        def failing(self, *a, _real=real, **k):
            if broken["yes"]:
                raise optuna.exceptions.StorageInternalError(
                    "An exception is raised during the commit."
                ) from (
                    sqlalchemy.exc.OperationalError(
                        "UPDATE", {}, Exception("server closed the connection unexpectedly")
                    )
                )
            return _real(self, *a, **k)

        monkeypatch.setattr(optuna.storages.RDBStorage, name, failing)
    monkeypatch.setitem(BREAK, "now", lambda: broken.update(yes=True))
    out = tmp_path / "sweep"
    line, lines = _lost_sweep(out, space)
    assert "(server closed the connection unexpectedly)" in line, line
    _check_kept(out, line)
    assert any(x.startswith("wrote") and "trials.md" in x for x in lines), lines


@pytest.fixture
def postgres_admin():
    if not POSTGRES:
        pytest.skip("no PostgreSQL server: set PUFFER_TEST_POSTGRES_URL (.ci/run starts one)")
    psycopg = pytest.importorskip(
        "psycopg", reason="the PostgreSQL driver: pip install 'puffer-bench[postgres]'"
    )
    import sqlalchemy.engine

    url = sqlalchemy.engine.make_url(POSTGRES)
    plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        admin = psycopg.connect(plain, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        pytest.skip(
            f"the PostgreSQL server of PUFFER_TEST_POSTGRES_URL is not reachable: {str(e).strip()[:120]}"
        )
    made = []

    def fresh():
        name = f"puffer_test_{uuid.uuid4().hex[:12]}"
        admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return name, url.set(database=name).render_as_string(hide_password=False)

    with admin:
        yield admin, fresh
        for name in made:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_postgres_database_lost_mid_trial_keeps_the_measured_trial(
    tmp_path, space, postgres_admin, monkeypatch
):
    """The real thing: the study's database is dropped (its connections ended) while trial 1 trains."""
    admin, fresh = postgres_admin
    name, url = fresh()
    monkeypatch.setitem(BREAK, "now", lambda: admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)'))
    out = tmp_path / "sweep"
    line, _ = _lost_sweep(out, space, st.parse(url, heartbeat=30))
    import sqlalchemy.engine

    print(line)
    assert sqlalchemy.engine.make_url(url).password not in line, line
    _check_kept(out, line)


def _start_at_once(url, barrier, answers):
    from appliance.sweep import study

    barrier.wait()
    try:
        study.load_study("unused", create=True, shared=st.parse(url), name="sweep")
        answers.put("joined")
    except BaseException as e:
        answers.put(f"{type(e).__name__}: {e}")


def _wrapped(orig: Exception) -> Exception:
    """``orig`` as SQLAlchemy raises a driver's error: its DBAPIError wrapper, raised from it."""
    import sqlalchemy.exc

    try:
        try:
            raise orig
        except Exception as e:
            raise sqlalchemy.exc.ProgrammingError("CREATE TYPE studydirection", {}, e) from e
    except Exception as wrapper:
        return wrapper


def test_a_type_or_table_another_worker_created_first_is_waited_for_and_nothing_else():
    """Seen in CI: of four workers creating a fresh database's tables at once, one was refused with
    'type "studydirection" already exists' (PostgreSQL's duplicate_object, not the unique violation
    it gives while both are still creating)."""
    pytest.importorskip("psycopg")
    import psycopg.errors as pg

    assert st.created_meanwhile(_wrapped(pg.DuplicateObject('type "studydirection" already exists')))
    assert st.created_meanwhile(_wrapped(pg.DuplicateTable('relation "studies" already exists')))
    assert st.created_meanwhile(
        _wrapped(pg.UniqueViolation("duplicate key value violates unique constraint"))
    )
    assert not st.created_meanwhile(_wrapped(pg.InsufficientPrivilege("permission denied for schema public")))
    assert not st.created_meanwhile(ValueError("already exists"))


@pytest.mark.slow
def test_workers_starting_at_once_on_a_fresh_postgres_database_all_join(postgres_admin):
    """Four workers create the same study's tables at the same moment: none is refused with
    PostgreSQL's unique violation (it was, in most tries, before they waited for each other)."""
    _, fresh = postgres_admin
    ctx = multiprocessing.get_context("fork")
    for _ in range(2):
        _, url = fresh()
        barrier, answers = ctx.Barrier(4), ctx.Queue()
        workers = [ctx.Process(target=_start_at_once, args=(url, barrier, answers)) for _ in range(4)]
        for w in workers:
            w.start()
        got = [answers.get(timeout=120) for _ in workers]
        for w in workers:
            w.join(30)
        assert got == ["joined"] * 4, got
