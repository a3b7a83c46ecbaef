"""tether's adapter for the portable long-horizon benchmark of PostgreSQL job queues.

Run: ``DATABASE_URL=postgresql://... python benchmarks/portable/tether-bench/main.py``

The public cross-system benchmark of PostgreSQL job queues runs each system
as one long-lived process that produces and consumes jobs on its database
while the harness injects faults (restarts, killed backends, an idle
transaction holding vacuum back...) and watches the tables. This process is
tether's side of that contract (see ``README.md`` beside it):

- **in** (environment): ``DATABASE_URL``, ``SCENARIO`` (only
  ``long_horizon``), ``PRODUCER_MODE`` (``fixed``: ``PRODUCER_RATE`` jobs/s,
  open loop; ``depth-target``: keep ``TARGET_DEPTH`` jobs queued),
  ``WORKER_COUNT`` (the worker's concurrency), ``JOB_PAYLOAD_BYTES``,
  ``JOB_WORK_MS``, ``SAMPLE_EVERY_S``;
- **out** (stdout, JSON lines): one ``descriptor`` record at startup, then at
  every wall-clock multiple of ``SAMPLE_EVERY_S`` one record per metric:
  ``claim_p50_ms``, ``claim_p95_ms``, ``claim_p99_ms`` (from submit to the
  workflow's start, over the last 30 s, to three significant figures, from
  histograms of bounded memory), ``enqueue_rate``,
  ``completion_rate`` (per second since the last sample) and ``queue_depth``
  (runs ``queued`` now); logs go to stderr;
- **SIGTERM** (or SIGINT): stop producing and consuming, and exit 0.

One engine on the database's ``tether`` schema serves both sides: the
producer's ``engine.submit`` and one ``tether.open_worker`` executing
:func:`job`, a workflow of one step that sleeps ``JOB_WORK_MS``. A job
counts as completed when its outcome is stored (the ``on_run_end`` hook);
its pickup latency is taken when its workflow starts (again if it is taken
over and executed again). A submit that fails (the database restarting) is
logged and tried again with the same run id, which makes it idempotent,
while the following ones go on.
"""

from __future__ import annotations

import collections
import datetime
import itertools
import json
import logging
import math
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, TextIO
from urllib.parse import urlsplit

import attrs
import trio

import tether
from tether.stores import PostgresStore

SYSTEM: Final = "tether"
SCHEMA: Final = "tether"  #: the schema ``tether worker --store postgresql://...`` serves
#: the tables a job writes, which the harness watches (runs, journals, owners, workers)
EVENT_TABLES: Final = tuple(
    f"{SCHEMA}.{t}" for t in ("runs", "entries", "owners", "workers", "messages")
)
LATENCY_WINDOW: Final = 30  #: seconds of pickup latencies each percentile covers
#: a latency bin's width, relative: bins of three significant figures
BIN_RATIO: Final = 1.001
SMALLEST_MS: Final = 0.001  #: latencies below it share the first bin
SUBMITTING: Final = 64  #: a fixed producer's submits in flight at most (the rest wait)
RETRY_SUBMIT: Final = 0.2  #: seconds before a failed submit is tried again
DEPTH_EVERY: Final = 0.2  #: seconds between reads of the queue's depth
QUEUED_SQL: Final = f"SELECT count(*) FROM {SCHEMA}.runs WHERE status = 'queued'"

log = logging.getLogger("tether-bench")


class SettingsError(ValueError):
    """An environment variable of the contract is missing or not what it must be."""


@attrs.frozen
class Settings:
    """The contract's environment, checked."""

    database_url: str
    producer_mode: str
    producer_rate: float
    target_depth: int
    worker_count: int
    payload_bytes: int
    work_ms: float
    sample_every: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Read the contract's variables from *env*.

        Raises:
            SettingsError: one names a variable that is missing, malformed or out of
                range, or a scenario or producer mode this adapter does not implement.
        """
        url = env.get("DATABASE_URL", "")
        if urlsplit(url).scheme not in ("postgres", "postgresql"):
            raise SettingsError(f"DATABASE_URL must be a postgresql:// URL, not {url!r}")
        scenario = env.get("SCENARIO", "long_horizon")
        if scenario != "long_horizon":
            raise SettingsError(f"SCENARIO={scenario!r}: only 'long_horizon' is implemented")
        mode = env.get("PRODUCER_MODE", "fixed")
        if mode not in ("fixed", "depth-target"):
            raise SettingsError(f"PRODUCER_MODE={mode!r}: 'fixed' or 'depth-target'")

        def number(name: str, default: float, *, least: float, whole: bool = False) -> Any:
            text = env.get(name)
            if text is None or text == "":
                return default
            try:
                value = int(text) if whole else float(text)
            except ValueError:
                value = math.nan
            if not (value >= least and math.isfinite(value)):
                kind = "an integer" if whole else "a number"
                raise SettingsError(f"{name}={text!r}: must be {kind} >= {least}")
            return value

        return cls(
            database_url=url,
            producer_mode=mode,
            producer_rate=number("PRODUCER_RATE", 100.0, least=0.0),
            target_depth=number("TARGET_DEPTH", 1000, least=0, whole=True),
            worker_count=number("WORKER_COUNT", 16, least=1, whole=True),
            payload_bytes=number("JOB_PAYLOAD_BYTES", 256, least=0, whole=True),
            work_ms=number("JOB_WORK_MS", 1.0, least=0.0),
            sample_every=number("SAMPLE_EVERY_S", 5, least=1, whole=True),
        )


@attrs.define
class Pickups:
    """Pickup latencies of the last :data:`LATENCY_WINDOW` seconds, as histograms.

    One histogram per second of the monotonic clock, of bins :data:`BIN_RATIO`
    wide (three significant figures, as an HDR histogram keeps them): memory
    is bounded by the window and the bins in use, not by the rate, and a
    percentile merges at most a window of histograms instead of sorting every
    latency.
    """

    #: (second, {bin: count}), oldest first
    seconds: collections.deque[tuple[int, collections.Counter[int]]] = attrs.field(
        factory=collections.deque
    )

    def add(self, at: float, ms: float) -> None:
        """A pickup of *ms* milliseconds at monotonic time *at* (in order of *at*)."""
        second = math.floor(at)
        if not self.seconds or self.seconds[-1][0] != second:
            self.seconds.append((second, collections.Counter()))
        self.seconds[-1][1][_bin(ms)] += 1

    def percentiles(self, now: float, *qs: float) -> tuple[float, ...]:
        """The nearest-rank percentiles *qs* (fractions) of the pickups of the last
        :data:`LATENCY_WINDOW` seconds before monotonic *now*, to three significant
        figures; zeros when there were none."""
        while self.seconds and self.seconds[0][0] < math.floor(now) - LATENCY_WINDOW:
            self.seconds.popleft()
        merged: collections.Counter[int] = collections.Counter()
        for _, histogram in self.seconds:
            merged.update(histogram)
        total = merged.total()
        if not total:
            return tuple(0.0 for _ in qs)
        bins = sorted(merged.items())
        found = []
        for q in qs:
            rank, seen = max(1, math.ceil(q * total)), 0
            for b, count in bins:
                seen += count
                if seen >= rank:
                    found.append(_ms(b))
                    break
        return tuple(found)


def _bin(ms: float) -> int:
    return 0 if ms <= SMALLEST_MS else round(math.log(ms / SMALLEST_MS, BIN_RATIO))


def _ms(b: int) -> float:
    return float(f"{SMALLEST_MS * BIN_RATIO**b:.3g}")


@attrs.define
class Meter:
    """What the samples report: counters, and the pickup latencies."""

    enqueued: int = 0
    completed: int = 0
    queue_depth: int = 0
    pickups: Pickups = attrs.field(factory=Pickups)

    def picked(self, enqueued_at: float) -> None:
        """A job submitted at wall-clock *enqueued_at* has started."""
        self.pickups.add(time.monotonic(), max(0.0, (time.time() - enqueued_at) * 1000))

    async def on_run_end(self, event: tether.HookEvent) -> None:
        """The engine's hook: a run's outcome is stored (a completion, unless it failed)."""
        if event.exception is None:
            self.completed += 1


METER: Final = Meter()


@tether.step(name="portable.work")
async def work(ms: float) -> None:
    await trio.sleep(ms / 1000)


@tether.workflow(name="portable.job")
async def job(enqueued_at: float, work_ms: float, payload: str) -> None:
    METER.picked(enqueued_at)
    await work(work_ms)


# -- the process ---------------------------------------------------------------------------


def emit(record: Mapping[str, Any], out: TextIO = sys.stdout) -> None:
    """One JSON line on *out*, flushed: the harness tails it live."""
    out.write(json.dumps(record, separators=(",", ":")) + "\n")
    out.flush()


def iso(at: float) -> str:
    """Wall-clock *at* (seconds since the epoch) as the contract writes it."""
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class Depth:
    """The count of queued runs, read on a connection of its own (in a thread).

    A read cancelled at shutdown is abandoned, not awaited (a database that
    hangs must not hold the exit up): its thread and connection end with the
    process.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: Any = None

    def read(self) -> int:
        """The count now. Raises what psycopg raises; the next read reconnects."""
        import psycopg

        try:
            if self._conn is None:
                self._conn = psycopg.connect(self._url, autocommit=True)
            row = self._conn.execute(QUEUED_SQL).fetchone()
        except psycopg.Error:
            self.close()
            raise
        return int(row[0])

    def schema_version(self) -> str:
        """The version of tether's schema in the database."""
        row = self._conn.execute(f"SELECT version FROM {SCHEMA}.tether_schema").fetchone()
        return str(row[0])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


async def read_depth(depth: Depth) -> int | None:
    """The count of queued runs now; ``None`` when the read failed (logged: the database
    restarting, a killed backend...; the next read tries again)."""
    try:
        return await trio.to_thread.run_sync(depth.read, abandon_on_cancel=True)
    except Exception as exc:
        log.warning("reading the queue's depth failed: %s", exc)
        return None


async def follow_depth(depth: Depth) -> None:
    """Keep :attr:`Meter.queue_depth` current (a failed read keeps the last count)."""
    while True:
        queued = await read_depth(depth)
        if queued is not None:
            METER.queue_depth = queued
        await trio.sleep(DEPTH_EVERY)


async def submit(engine: tether.Engine, settings: Settings, run_id: str, payload: str) -> None:
    """Submit one job; while the store fails, try again (the same id: idempotent) every
    :data:`RETRY_SUBMIT` seconds, for as long as the database is away: the harness's
    faults last seconds, and the process is there to ride them out. Any other error
    is a bug here and raised."""
    enqueued_at = time.time()
    while True:
        try:
            await engine.submit(job, enqueued_at, settings.work_ms, payload, run_id=run_id)
        except tether.StoreError as exc:
            log.warning("submitting %s failed, trying again: %s", run_id, exc)
            await trio.sleep(RETRY_SUBMIT)
            continue
        METER.enqueued += 1
        return


async def produce(engine: tether.Engine, settings: Settings, depth: Depth) -> None:
    """Submit jobs as ``PRODUCER_MODE`` says, each in a task of its own; the depth-target
    mode reads the queue's depth on *depth* (and keeps :attr:`Meter.queue_depth`)."""
    payload = "x" * settings.payload_bytes
    boot = uuid.uuid4().hex[:8]  # a restarted adapter's run ids are new ones
    ids = (f"{boot}-{i}" for i in itertools.count())
    if settings.producer_mode == "depth-target":
        # Each round reads the depth, submits what is missing and waits for those
        # submits, so that the next read counts them: the depth never overshoots.
        while True:
            queued = await read_depth(depth)
            if queued is not None:
                METER.queue_depth = queued
            missing = 0 if queued is None else settings.target_depth - queued
            async with trio.open_nursery() as nursery:
                for _ in range(missing):
                    nursery.start_soon(submit, engine, settings, next(ids), payload)
            await trio.sleep(DEPTH_EVERY)
    if settings.producer_rate == 0:
        return
    limiter = trio.CapacityLimiter(SUBMITTING)

    async def one(run_id: str) -> None:
        async with limiter:
            await submit(engine, settings, run_id, payload)

    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        for i, run_id in enumerate(ids):  # open loop: the schedule does not wait
            await trio.sleep_until(start + i / settings.producer_rate)
            nursery.start_soon(one, run_id)


async def sample(settings: Settings, out: Callable[[Mapping[str, Any]], None]) -> None:
    """Emit the metrics at every wall-clock multiple of ``SAMPLE_EVERY_S``."""
    every = settings.sample_every
    tick = (math.floor(time.time() / every) + 1) * every
    last = (time.monotonic(), METER.enqueued, METER.completed)
    while True:
        await trio.sleep(max(0.0, tick - time.time()))
        now = time.monotonic()
        elapsed = max(now - last[0], 1e-3)
        p50, p95, p99 = METER.pickups.percentiles(now, 0.50, 0.95, 0.99)
        metrics = (
            ("claim_p50_ms", p50, LATENCY_WINDOW),
            ("claim_p95_ms", p95, LATENCY_WINDOW),
            ("claim_p99_ms", p99, LATENCY_WINDOW),
            ("enqueue_rate", (METER.enqueued - last[1]) / elapsed, every),
            ("completion_rate", (METER.completed - last[2]) / elapsed, every),
            ("queue_depth", METER.queue_depth, 0),
        )
        for metric, value, window in metrics:
            out(
                {
                    "t": iso(tick),
                    "system": SYSTEM,
                    "kind": "adapter",
                    "subject_kind": "adapter",
                    "subject": "",
                    "metric": metric,
                    "value": round(float(value), 3),
                    "window_s": window,
                }
            )
        last = (now, METER.enqueued, METER.completed)
        tick += every * max(1, math.ceil((time.time() - tick) / every))  # skip missed ticks


async def serve(settings: Settings, out: Callable[[Mapping[str, Any]], None]) -> None:
    """The process: the descriptor, then producer, worker and sampler until a signal."""
    depth = Depth(settings.database_url)
    store = PostgresStore(settings.database_url, schema=SCHEMA)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with tether.open_engine(store, hooks=[METER]) as engine:
            METER.queue_depth = await trio.to_thread.run_sync(depth.read)
            out(
                {
                    "kind": "descriptor",
                    "system": SYSTEM,
                    "event_tables": list(EVENT_TABLES),
                    "extensions": [],
                    "version": tether.__version__,
                    "schema_version": await trio.to_thread.run_sync(depth.schema_version),
                    "db_name": urlsplit(settings.database_url).path.lstrip("/"),
                    "started_at": iso(time.time()),
                }
            )
            async with trio.open_nursery() as nursery:
                async with tether.open_worker(
                    engine, concurrency=settings.worker_count, grace=0, workflows=[job]
                ):
                    if settings.producer_mode == "fixed":  # (depth-target reads it anyway)
                        nursery.start_soon(follow_depth, depth)
                    nursery.start_soon(produce, engine, settings, depth)
                    nursery.start_soon(sample, settings, out)
                    async for signum in signals:
                        log.info("%s: stopping", signal.Signals(signum).name)
                        break
                nursery.cancel_scope.cancel()


def main(env: Mapping[str, str] = os.environ) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    try:
        settings = Settings.from_env(env)
    except SettingsError as exc:
        print(f"tether-bench: {exc}", file=sys.stderr)
        return 2
    trio.run(serve, settings, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
