"""pgqueuer in the queue scenario: jobs enqueued to PostgreSQL, ``PgQueuer.run``.

Scenario 7 only (``engines/_queue_common.py``). pgqueuer has jobs, not
workflows of steps: a job of *steps* steps is a chain of jobs, each step a
job of the entrypoint ``peers_queue_step`` (payload ``"job step steps"``)
that records its execution and, unless it is the last, enqueues the next
step before it returns. Everything goes through psycopg 3
(``PgQueuer.from_psycopg_connection``, an autocommit ``AsyncConnection``);
the tables are pgqueuer's ``Queries.install()`` with its default (durable:
logged) tables. The producer enqueues every job's first step in one
``Queries.enqueue`` of lists. A worker process is ``PgQueuer.run(
max_concurrent_tasks=N, batch_size=N // 2)`` (pgqueuer refuses a batch above
half the tasks) with its defaults otherwise (LISTEN/NOTIFY wake-ups); SIGTERM
sets its ``shutdown`` event. A step enqueues the next on a connection of its
own, not the listener's (sharing it made the chains wait for the notices).
It says it is ready half a second after ``run`` started (its listener is
set up by then).
A finished job is deleted from the queue table (its log row is written in
batches), so the queue is drained when the table ``pgqueuer`` is empty.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import psycopg
from _protocol import package_version
from pgqueuer import PgQueuer, PsycopgDriver, Queries
from pgqueuer.models import Job as PgqJob

from engines._queue_common import Job, queue_main, ready, record

ENGINE = "pgqueuer"
DISTRIBUTION = "pgqueuer"
QUEUE = True
UNFINISHED_SQL = "SELECT count(*) FROM pgqueuer"
ENTRYPOINT = "peers_queue_step"
SETTLE = 0.5  #: seconds after run() started until the worker says it is ready


def version() -> str:
    return package_version(DISTRIBUTION)


async def connect(url: str) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(url, autocommit=True)


def setup(job: Job) -> None:
    async def create() -> None:
        async with await connect(job.url) as conn:
            await Queries(PsycopgDriver(conn)).install()

    asyncio.run(create())


def submit(job: Job) -> None:
    async def produce() -> None:
        async with await connect(job.url) as conn:
            payloads: list[bytes | None] = [f"{i} 0 {job.steps}".encode() for i in range(job.jobs)]
            await Queries(PsycopgDriver(conn)).enqueue(
                [ENTRYPOINT] * job.jobs, payloads, [0] * job.jobs
            )

    asyncio.run(produce())


def serve(job: Job) -> None:
    async def work() -> None:
        async with await connect(job.url) as conn, await connect(job.url) as chain:
            pgq = PgQueuer.from_psycopg_connection(conn)
            queries = Queries(PsycopgDriver(chain))  # the steps' enqueues: not the listener's

            @pgq.entrypoint(ENTRYPOINT)
            async def step(item: PgqJob) -> None:
                assert item.payload is not None
                number, k, steps = map(int, item.payload.decode().split())
                record(number, k)
                if k + 1 < steps:
                    await queries.enqueue(ENTRYPOINT, f"{number} {k + 1} {steps}".encode())

            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
            loop.call_later(SETTLE, ready)
            # pgqueuer wants max_concurrent_tasks >= 2 * batch_size (its default is 10)
            batch = max(1, job.concurrency // 2)
            await pgq.run(batch_size=batch, max_concurrent_tasks=job.concurrency)

    asyncio.run(work())


if __name__ == "__main__":
    queue_main(sys.modules[__name__])
