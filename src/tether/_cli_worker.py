"""``tether worker`` and ``tether submit``: the queue from the command line.

``tether worker --store URL --import MODULE`` serves the workflows MODULE
defines (``tether.open_worker``) until SIGTERM or SIGINT, then drains: it
stops claiming, gives the runs it holds ``--grace`` seconds, cancels the
rest as a caller cancellation and releases their leases, so other workers
take them over at once. Run outcomes and lost leases are logged to stderr
(the ``tether.worker`` logger); the worker itself exits 0 after a drain.

``tether submit MODULE:WORKFLOW ARGS…`` stores a queued run and prints its id.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from typing import Any, TextIO

import trio

from ._cli_exec import parse_value, resolve_workflow
from ._engine import open_engine
from ._worker import open_worker
from .stores import Store

__all__ = ("serve", "submit")


async def _serve(
    store: Store,
    shown: str,
    *,
    concurrency: int,
    max_dispatches: int,
    grace: float,
    lease_ttl: float,
    poll_interval: float,
    out: TextIO,
) -> int:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_engine(store, lease_ttl=lease_ttl) as engine:
            names = ", ".join(sorted(engine.workflow_names())) or "(none)"
            async with open_worker(
                engine,
                concurrency=concurrency,
                max_dispatches=max_dispatches,
                grace=grace,
                poll_interval=poll_interval,
            ) as worker:
                print(
                    f"tether worker {engine.owner} serving {names} from {shown} "
                    f"(concurrency {concurrency})",
                    file=out,
                    flush=True,
                )
                async for signum in signals:
                    name = signal.Signals(signum).name
                    print(
                        f"tether worker {engine.owner}: {name}: draining "
                        f"({len(worker.running)} held, grace {grace:g} s)",
                        file=out,
                        flush=True,
                    )
                    break
    done = ", ".join(f"{n} {how}" for how, n in sorted(worker.outcomes.items())) or "none"
    print(f"tether worker {engine.owner}: stopped; claimed {worker.claimed}, {done}", file=out)
    return 0


def serve(store: Store, shown: str, args: Any, out: TextIO, err: TextIO) -> int:
    """``tether worker``: serve until SIGTERM/SIGINT; the exit status."""
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("tether")
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    # The PostgreSQL driver's pool warns as connections drop (a server restart):
    # the same format, so a worker's log reads as one.
    driver = logging.getLogger("psycopg")
    driver.addHandler(handler)
    try:
        return trio.run(
            lambda: _serve(
                store,
                shown,
                concurrency=args.concurrency,
                max_dispatches=args.max_dispatches,
                grace=args.grace,
                lease_ttl=args.lease_ttl,
                poll_interval=args.poll_interval,
                out=out,
            )
        )
    finally:
        logger.removeHandler(handler)
        driver.removeHandler(handler)


async def _submit(store: Store, target: str, values: Sequence[Any], run_id: str | None) -> str:
    wf = resolve_workflow(target)
    async with open_engine(store) as engine:
        return await engine.submit(wf, *values, run_id=run_id)


def submit(store: Store, args: Any, out: TextIO) -> int:
    """``tether submit``: store a queued run, print its id; the exit status."""
    values = [parse_value(a) for a in args.args]
    run_id = trio.run(_submit, store, args.workflow, values, args.run_id)
    print(run_id, file=out)
    return 0
