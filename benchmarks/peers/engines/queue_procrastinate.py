"""procrastinate in the queue scenario: tasks deferred to PostgreSQL, ``run_worker_async``.

Scenario 7 only (``engines/_queue_common.py``). procrastinate has tasks, not
workflows of steps: a job of *steps* steps is a chain of tasks, each step a
job of the task ``peers_queue_step`` that records its execution and, unless
it is the last, defers the next step (``defer_async``) before it returns, so
that each step is stored as done before the next runs (what a durable step
is). The producer defers every job's first step in one ``batch_defer_async``;
the app is ``procrastinate.App(connector=PsycopgConnector(conninfo=url))``,
its schema applied by ``schema_manager.apply_schema_async``. A worker process
is ``app.run_worker_async(concurrency=N)`` with its defaults otherwise
(LISTEN/NOTIFY wake-ups, SIGTERM handled by procrastinate); it says it is
ready half a second after the worker started (its listener is set up by
then). Drained when no job is ``todo`` or ``doing``.
"""

from __future__ import annotations

import asyncio
import sys

import procrastinate
from _protocol import package_version

from engines._queue_common import Job, queue_main, ready, record

ENGINE = "procrastinate"
DISTRIBUTION = "procrastinate"
QUEUE = True
UNFINISHED_SQL = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
SETTLE = 0.5  #: seconds after the worker started until it says it is ready


def version() -> str:
    return package_version(DISTRIBUTION)


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="peers_queue_step")
    async def step(job: int, k: int, steps: int) -> None:
        record(job, k)
        if k + 1 < steps:
            await step.defer_async(job=job, k=k + 1, steps=steps)

    return app


def setup(job: Job) -> None:
    async def create() -> None:
        async with make_app(job.url).open_async() as app:
            await app.schema_manager.apply_schema_async()

    asyncio.run(create())


def submit(job: Job) -> None:
    async def produce() -> None:
        async with make_app(job.url).open_async() as app:
            task = app.tasks["peers_queue_step"]
            await task.batch_defer_async(
                *({"job": i, "k": 0, "steps": job.steps} for i in range(job.jobs))
            )

    asyncio.run(produce())


def serve(job: Job) -> None:
    async def work() -> None:
        async with make_app(job.url).open_async() as app:
            asyncio.get_running_loop().call_later(SETTLE, ready)
            await app.run_worker_async(concurrency=job.concurrency)

    asyncio.run(work())


if __name__ == "__main__":
    queue_main(sys.modules[__name__])
