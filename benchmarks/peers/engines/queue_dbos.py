"""DBOS in the queue scenario: workflows enqueued by a ``DBOSClient``, drained by DBOS queues.

Scenario 7 only (``engines/_queue_common.py``). A job is a run of the async
workflow ``peers_queue_job(job, steps)``: *steps* sequential no-op
``@DBOS.step()`` calls, each recording its execution, written as DBOS's docs
write one. DBOS runs on the fresh database as its system database
(``system_database_url``), with ``application_version`` fixed so that the
producer's enqueues match the workers. The producer is a ``DBOSClient`` that
``enqueue``s every job on the queue ``peers_queue``. A worker process
launches DBOS with that queue registered as ``DBOS.register_queue(
"peers_queue", worker_concurrency=N, polling_interval_sec=0.01)``: DBOS's queues are polled
(its default is once a second; 10 ms here, as the issue's figures were
measured), and each worker takes at most N at once. SIGTERM destroys DBOS.
Drained when no workflow is ``ENQUEUED`` or ``PENDING``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Any

from _protocol import package_version
from dbos import DBOS, DBOSClient

from engines._queue_common import Job, queue_main, ready, record

ENGINE = "DBOS (queue polled every 10 ms)"
DISTRIBUTION = "dbos"
QUEUE = True
UNFINISHED_SQL = "SELECT count(*) FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING')"
QUEUE_NAME = "peers_queue"
APP_VERSION = "peers"
POLL = 0.01  #: seconds between DBOS's polls of its queue


def version() -> str:
    return package_version(DISTRIBUTION)


@DBOS.step(name="peers_queue_noop")
async def noop(job: int, k: int) -> int:
    record(job, k)
    return k


@DBOS.workflow(name="peers_queue_job")
async def job_workflow(job: int, steps: int) -> int:
    for k in range(steps):
        await noop(job, k)
    return job


def launch(url: str) -> None:
    config: Any = {
        "name": "peers-queue",
        "system_database_url": url,
        "application_version": APP_VERSION,
    }
    DBOS(config=config)
    for name in ("dbos", "sqlalchemy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    DBOS.launch()


def register(job: Job) -> None:
    DBOS.register_queue(QUEUE_NAME, worker_concurrency=job.concurrency, polling_interval_sec=POLL)


def setup(job: Job) -> None:
    launch(job.url)  # creates DBOS's system tables
    register(job)
    DBOS.destroy()


def submit(job: Job) -> None:
    client = DBOSClient(system_database_url=job.url)
    try:
        for i in range(job.jobs):
            client.enqueue(
                {
                    "queue_name": QUEUE_NAME,
                    "workflow_name": "peers_queue_job",
                    "workflow_id": f"job-{i}",
                    "app_version": APP_VERSION,
                },
                i,
                job.steps,
            )
    finally:
        client.destroy()


def serve(job: Job) -> None:
    async def work() -> None:
        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        launch(job.url)
        await DBOS.register_queue_async(
            QUEUE_NAME, worker_concurrency=job.concurrency, polling_interval_sec=POLL
        )
        ready()
        await stopping.wait()
        DBOS.destroy()

    asyncio.run(work())


if __name__ == "__main__":
    queue_main(sys.modules[__name__])
