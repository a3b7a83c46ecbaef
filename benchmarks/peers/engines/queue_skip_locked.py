"""The queue floor: a bare ``FOR UPDATE SKIP LOCKED`` claim + complete loop (psycopg 3).

Scenario 7 only (``engines/_queue_common.py``). One table, ``jobs(id, job,
steps, step, status)``; the producer inserts every job in one ``COPY``. A
worker process runs ``concurrency`` asyncio tasks, each with a connection
of its own (``psycopg_pool.AsyncConnectionPool``, autocommit), each looping:

1. claim: ``UPDATE jobs SET status = 'running' WHERE id = (SELECT id FROM
   jobs WHERE status = 'queued' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
   RETURNING ...``, one statement, one transaction (a partial index on the
   queued rows keeps it off the finished ones);
2. each step: the no-op, then its checkpoint, ``UPDATE jobs SET step = k``,
   the last one setting ``status = 'done'`` too (the completion), one
   statement and one transaction each.

So a 1-step job costs 2 statements in 2 transactions, a 10-step job 11. An
empty claim waits 10 ms before the next (no notifications): the floor's
only idle cost. SIGTERM stops the loops between jobs.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import psycopg
import psycopg_pool

from engines._queue_common import Job, queue_main, ready, record

ENGINE = "bare SKIP LOCKED loop (psycopg 3, floor)"
DISTRIBUTION = "psycopg"
QUEUE = True
UNFINISHED_SQL = "SELECT count(*) FROM jobs WHERE status <> 'done'"
IDLE = 0.01  #: seconds an empty claim waits before the next

CLAIM = """UPDATE jobs SET status = 'running' WHERE id = (
    SELECT id FROM jobs WHERE status = 'queued' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1
) RETURNING id, job, steps"""
SAVE = "UPDATE jobs SET step = %s WHERE id = %s"
COMPLETE = "UPDATE jobs SET step = %s, status = 'done' WHERE id = %s"


def version() -> str:
    return psycopg.__version__


def setup(job: Job) -> None:
    with psycopg.connect(job.url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE jobs (id bigserial PRIMARY KEY, job integer NOT NULL, "
            "steps integer NOT NULL, step integer NOT NULL DEFAULT -1, "
            "status text NOT NULL DEFAULT 'queued')"
        )
        conn.execute("CREATE INDEX jobs_queued ON jobs (id) WHERE status = 'queued'")


def submit(job: Job) -> None:
    with (
        psycopg.connect(job.url) as conn,
        conn.cursor() as cur,
        cur.copy("COPY jobs (job, steps) FROM STDIN") as copy,
    ):
        for i in range(job.jobs):
            copy.write_row((i, job.steps))


async def loop(pool: psycopg_pool.AsyncConnectionPool, stopping: asyncio.Event) -> None:
    async with pool.connection() as conn:
        while not stopping.is_set():
            row = await (await conn.execute(CLAIM)).fetchone()
            if row is None:
                await asyncio.sleep(IDLE)
                continue
            run_id, job, steps = row
            for k in range(steps):
                record(job, k)  # the no-op step
                await conn.execute(COMPLETE if k == steps - 1 else SAVE, (k, run_id))


async def worker(job: Job) -> None:
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    pool = psycopg_pool.AsyncConnectionPool(
        job.url,
        min_size=job.concurrency,
        max_size=job.concurrency,
        kwargs={"autocommit": True},
        open=False,
    )
    async with pool:
        await pool.wait()
        tasks = [asyncio.create_task(loop(pool, stopping)) for _ in range(job.concurrency)]
        ready()
        await asyncio.gather(*tasks)


def serve(job: Job) -> None:
    asyncio.run(worker(job))


if __name__ == "__main__":
    queue_main(sys.modules[__name__])
