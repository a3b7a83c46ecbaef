"""tether in the queue scenario: ``engine.submit`` to a ``PostgresStore``, ``tether worker``.

Scenario 7 only (``engines/_queue_common.py``). A job is a run of the
workflow ``peers.queue.job(job, steps)``: *steps* sequential no-op steps
(``peers.queue.noop``), each recording its execution. The producer opens
an engine on ``tether.PostgresStore(url)`` (schema ``tether``, the one
``tether worker`` serves) and submits every run (``engine.submit``). The
workers are the CLI, as a user runs one: ``python -m tether worker --store
URL --import engines.queue_tether --concurrency N --grace 0`` (its defaults
otherwise); it prints ``serving`` once it claims. Drained when no run is
``queued`` or ``running``.
"""

from __future__ import annotations

import sys

import trio

import tether
from engines._queue_common import Job, queue_main, record

ENGINE = "tether"
DISTRIBUTION = None  # installed from this repository
QUEUE = True
SCHEMA = "tether"  #: the schema `tether worker --store postgresql://...` serves
UNFINISHED_SQL = f"SELECT count(*) FROM {SCHEMA}.runs WHERE status IN ('queued', 'running')"


def version() -> str:
    return tether.__version__


@tether.step(name="peers.queue.noop")
async def noop(job: int, k: int) -> int:
    record(job, k)
    return k


@tether.workflow(name="peers.queue.job")
async def job_workflow(job: int, steps: int) -> int:
    for k in range(steps):
        await noop(job, k)
    return job


def setup(job: Job) -> None:
    async def create() -> None:
        async with tether.open_engine(tether.PostgresStore(job.url, schema=SCHEMA)):
            pass  # opening the store creates its tables

    trio.run(create)


def submit(job: Job) -> None:
    async def produce() -> None:
        async with tether.open_engine(tether.PostgresStore(job.url, schema=SCHEMA)) as engine:
            for i in range(job.jobs):
                await engine.submit(job_workflow, i, job.steps, run_id=f"job-{i}")

    trio.run(produce)


def worker_argv(python: str, job: Job) -> list[str]:
    return [
        python,
        "-m",
        "tether",
        "worker",
        "--store",
        job.url,
        "--import",
        "engines.queue_tether",
        "--concurrency",
        str(job.concurrency),
        "--grace",
        "0",
    ]


def serve(job: Job) -> None:
    raise NotImplementedError("the worker is `tether worker` (worker_argv)")


if __name__ == "__main__":
    queue_main(sys.modules[__name__])
