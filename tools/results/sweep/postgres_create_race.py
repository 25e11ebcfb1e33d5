#!/usr/bin/env python3
"""Four sweep workers joining one study on a fresh PostgreSQL database at the same moment, over and
over: how many rounds refuse a worker. Each round makes a database, starts four processes behind a
barrier, each opening the study with ``create=True`` as ``puffer-bench sweep --storage URL`` does,
and drops the database again. docs/reliability.md reads it (the workers' race to create Optuna's
tables, its enum types and the study).

    python tools/results/sweep/postgres_create_race.py postgresql://USER:PASSWORD@HOST:PORT/postgres [--rounds 30]

The URL's user must be allowed to create and drop databases.
"""

from __future__ import annotations

import argparse
import multiprocessing
import uuid
from typing import Any

import sqlalchemy

from appliance.sweep import storage, study


def _worker(url: str, barrier: Any, answers: Any) -> None:
    barrier.wait()
    try:
        study.load_study("unused", create=True, shared=storage.parse(url), name="sweep")
        answers.put("joined")
    except BaseException as e:  # the answer is what the test of the same race reads
        answers.put(f"{type(e).__name__}: {str(e)[:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    admin = sqlalchemy.create_engine(args.url, isolation_level="AUTOCOMMIT")
    ctx = multiprocessing.get_context("fork")
    refused = 0
    for _ in range(args.rounds):
        name = "race_" + uuid.uuid4().hex[:12]
        with admin.connect() as c:
            c.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
        try:
            url = (
                sqlalchemy.engine.make_url(args.url).set(database=name).render_as_string(hide_password=False)
            )
            barrier, answers = ctx.Barrier(args.workers), ctx.Queue()
            workers = [ctx.Process(target=_worker, args=(url, barrier, answers)) for _ in range(args.workers)]
            for w in workers:
                w.start()
            got = [answers.get(timeout=120) for _ in workers]
            for w in workers:
                w.join(30)
            if got != ["joined"] * args.workers:
                refused += 1
                print("refused:", [g for g in got if g != "joined"], flush=True)
        finally:
            with admin.connect() as c:
                c.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    print(f"{args.rounds} rounds of {args.workers} workers: {refused} refused a worker")


if __name__ == "__main__":
    main()
