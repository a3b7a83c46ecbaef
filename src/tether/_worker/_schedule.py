"""Schedules: a workflow started on a cron schedule, by every worker, exactly once per tick.

Layer: workers (``_worker``).

``tether.schedule(wf, cron=..., args=..., name=...)`` defines a
:class:`Schedule`; ``tether.open_worker(engine, schedules=(s,))`` serves it.
Each worker that serves a schedule runs one ticker task for it, which sleeps
until each tick (on ``engine.clock``) and submits ``wf(*args)`` under a run
id derived from the schedule and the tick, ``sched:NAME:2026-12-01T10:05:00Z``.
``engine.submit`` is idempotent on the run id, so however many workers serve
the schedule, a tick has exactly one run: the first submit stores it, the
others find it and change nothing. Nothing else is stored about a schedule;
its runs are its history.

The rules, where two readings were possible:

- **Ticks** are read in UTC, at whole seconds. A worker serves the ticks at
  or after the moment it starts, and submits each once its time has come,
  retrying store errors with backoff (logged on ``tether.worker``, never
  raised). The tick it is submitting when the store fails is submitted once
  the store answers again.
- **Missed ticks** are ticks no worker submitted while they were current:
  before the worker started (no worker was up), or while it could not reach
  its store or its process was suspended (ticks that came and went while it
  retried an earlier one). With ``catch_up="skip"`` they are not run. With
  ``catch_up="once"`` the most recent of them is submitted at once, then the
  worker goes on with the next. At start, a worker finds what was missed by
  looking for the most recent tick that has a run, probing the run ids of
  the ticks before it, newest first, at most :data:`LOOKBACK` of them: if
  the tick just before the start has a run, nothing was missed; if an older
  one has, the tick just before the start runs now; if none has (a new
  schedule, or one idle for longer than the lookback), nothing runs before
  the next tick.
- **A run id that exists with other arguments or another workflow** (the
  schedule was changed while runs of its old definition exist, or another
  process serves another definition under the same name): the submit raises
  ``RunConflictError``; the worker logs a warning and skips that tick (it
  has its one run already). Any other error of a tick is logged and the
  tick skipped; the worker never fails because of a schedule.
- **Cancellation**: the tickers run in the worker's nursery and stop when its
  block is left. A submit in flight then has stored the run or not; either
  way the tick has at most one run, and a worker still serving submits it.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any, Final, Literal, TypeVar, final

import attrs
import trio

from .._api._workflow import Workflow, encode_args
from .._core._clock import Clock, sleep_until
from .._core._store_calls import StoreErrors
from .._engine._engine import Engine
from .._errors import CodecError, RunConflictError, StoreError, UsageError
from ..stores._records import RunRecord
from ..stores._store import Store

__all__ = ("LOOKBACK", "CatchUp", "Schedule", "check_schedules", "last_run", "schedule")

log = logging.getLogger("tether.worker")

T = TypeVar("T")

CatchUp = Literal["skip", "once"]
_CATCH_UPS: Final = ("skip", "once")

#: Ticks probed, newest first, for the most recent tick that has a run.
LOOKBACK: Final = 1000

#: A schedule name: part of each run id (``sched:NAME:TICK``), so no ``:`` or ``/``.
_NAME: Final = re.compile(r"[A-Za-z0-9._+-]{1,100}")
_ID_PREFIX: Final = "sched"

#: Seconds before the first retry of a failed store call, and the longest wait between two.
_FIRST_RETRY: Final = 0.5
_LAST_RETRY: Final = 30.0

#: The definition check looks for a first tick from here, this many years ahead
#: (croniter's own default, 50, would refuse a cron for a year after 2050).
_CHECK_FROM: Final = datetime(2000, 1, 1, tzinfo=UTC)
_CHECK_YEARS: Final = 200

_US: Final = timedelta(microseconds=1)
_INSTALL_HINT: Final = (
    "tether.schedule needs croniter: pip install -e '.[schedules]' in tether's clone"
)


def _croniter() -> ModuleType:
    """The ``croniter`` module, imported on first use (the ``schedules`` extra).

    Raises:
        UsageError: it is not installed (says how to install it).
    """
    try:
        import croniter
    except ImportError as exc:
        raise UsageError(_INSTALL_HINT) from exc
    return croniter


@final
@attrs.frozen(kw_only=True)
class Schedule:
    """A workflow to start on a cron schedule: made by :func:`tether.schedule`.

    Serve it with ``tether.open_worker(engine, schedules=(...))`` or ``tether
    worker``; every worker serving it submits each tick, and the tick's run id
    makes it one run.
    """

    #: the schedule's name: each of its runs has the id ``sched:NAME:TICK``
    name: str
    #: the workflow each tick starts
    workflow: Workflow[..., Any]
    #: the cron expression, read in UTC (a 6th field is seconds, croniter's way)
    cron: str
    #: the workflow's arguments, as they were encoded when the schedule was defined
    args: tuple[Any, ...]
    #: what happens to ticks no worker could submit in time: ``"skip"`` or ``"once"``
    catch_up: CatchUp
    #: the arguments as each run stores them (JSON text)
    encoded_args: str

    def __repr__(self) -> str:
        return (
            f"tether.schedule({self.workflow.name}, cron={self.cron!r}, args={self.args!r:.200}, "
            f"name={self.name!r}, catch_up={self.catch_up!r})"
        )

    def run_id(self, tick: datetime) -> str:
        """The id of the run of *tick* (a timezone-aware moment): ``sched:NAME:<tick in UTC>``."""
        return f"{_ID_PREFIX}:{self.name}:{tick.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"

    def next_tick(self, now: datetime) -> datetime | None:
        """The first tick at or after *now*, in UTC; ``None`` when the cron fires no more."""
        return self._step(now - _US, prev=False)

    def _after(self, moment: datetime) -> datetime | None:
        return self._step(moment, prev=False)

    def _before(self, moment: datetime) -> datetime | None:
        return self._step(moment, prev=True)

    def _step(self, moment: datetime, *, prev: bool) -> datetime | None:
        """The tick strictly after (or before, *prev*) *moment*, or ``None``."""
        return next(self._walk(moment, prev=prev), None)

    def _walk(self, moment: datetime, *, prev: bool) -> Iterator[datetime]:
        """The ticks strictly after *moment* (or before it, newest first), in UTC."""
        cron = _croniter()
        walker = cron.croniter(self.cron, moment.astimezone(UTC), hash_id=self.name)
        while True:
            try:
                tick = walker.get_prev(datetime) if prev else walker.get_next(datetime)
            except cron.CroniterBadDateError:
                return  # no tick there within croniter's search (50 years)
            yield tick.astimezone(UTC)


def schedule(
    wf: Workflow[..., Any],
    *,
    cron: str,
    name: str,
    args: Sequence[Any] = (),
    catch_up: CatchUp = "skip",
) -> Schedule:
    """Define a schedule: start ``wf(*args)`` at each tick of *cron*, once per tick.

    Everything is checked now, so that a mistake fails where the schedule is
    defined, not at its first tick: the cron expression (parsed by croniter,
    the ``tether[schedules]`` extra), the name, and the arguments, encoded
    with the workflow's signature as ``engine.submit`` encodes them. The
    schedule keeps the decoded copy, which later changes to the values given
    cannot reach.

    Args:
        wf: the ``@tether.workflow`` each tick starts.
        cron: five fields (minute, hour, day of month, month, day of week),
            read in UTC; croniter's forms too: a sixth field for seconds,
            ``@daily``, ``L``, ``1#2``, and ``H``, spread by the schedule's name.
        name: the schedule's identity, 1 to 100 letters, digits, ``.``,
            ``_``, ``+`` or ``-``: each tick's run id is
            ``sched:NAME:2026-12-01T10:05:00Z``. Renaming a schedule starts
            its history anew.
        args: the workflow's arguments (a tuple or a list).
        catch_up: ticks missed while no worker was up are not run (``"skip"``),
            or the most recent of them runs when a worker starts (``"once"``).

    Raises:
        UsageError: *wf* is not a workflow; the name, the cron expression (one
            that does not parse or never fires) or *catch_up* is invalid; the
            arguments do not fit the workflow; croniter is not installed.
        CodecError: an argument cannot be encoded.
    """
    if not isinstance(wf, Workflow):
        raise UsageError(f"tether.schedule() takes a @tether.workflow, not {wf!r:.100}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(
            "a schedule name is 1 to 100 letters, digits, '.', '_', '+' or '-' (it is part "
            f"of each run id, sched:NAME:TICK), not {name!r:.100}"
        )
    what = f"schedule {name!r}"
    if catch_up not in _CATCH_UPS:
        raise UsageError(f"{what}: catch_up must be 'skip' or 'once', not {catch_up!r:.100}")
    _check_cron(what, cron, name)
    if not isinstance(args, tuple | list):
        raise UsageError(f"{what}: args must be a tuple of the workflow's arguments, not {args!r}")
    try:
        encoded, decoded = encode_args(wf, tuple(args))
    except UsageError as exc:
        raise UsageError(f"{what}: {exc}") from None
    except CodecError as exc:
        raise CodecError(f"{what}: {exc}") from exc
    return Schedule(
        name=name, workflow=wf, cron=cron, args=decoded, catch_up=catch_up, encoded_args=encoded
    )


def _check_cron(what: str, cron: object, name: str) -> None:
    """Raises: UsageError: *cron* is not a string, does not parse, or never fires."""
    if not isinstance(cron, str):
        raise UsageError(
            f"{what}: cron takes a cron expression such as '*/5 * * * *', not {cron!r:.100}"
        )
    module = _croniter()
    try:
        module.croniter(
            cron, _CHECK_FROM, hash_id=name, max_years_between_matches=_CHECK_YEARS
        ).get_next(datetime)
    except module.CroniterBadDateError:
        raise UsageError(f"{what}: cron {cron!r} never fires (no date matches it)") from None
    except (module.CroniterError, ValueError, TypeError) as exc:
        raise UsageError(f"{what}: cron {cron!r} is not a cron expression: {exc}") from None


def check_schedules(schedules: Iterable[object], where: str) -> tuple[Schedule, ...]:
    """*schedules* as a tuple, each once, checked (*where* names the caller in errors).

    Raises:
        UsageError: something is not a :class:`Schedule`, or two schedules have
            one name (their run ids would collide).
    """
    if isinstance(schedules, Schedule):
        raise UsageError(f"{where} takes a tuple of schedules, not one: ({schedules!r},)")
    if not isinstance(schedules, Iterable) or isinstance(schedules, str):
        raise UsageError(f"{where} takes a tuple of tether.schedule() objects, not {schedules!r}")
    found: dict[str, Schedule] = {}
    for s in schedules:
        if not isinstance(s, Schedule):
            raise UsageError(f"{where} takes tether.schedule() objects, not {s!r:.100}")
        other = found.setdefault(s.name, s)
        if other is not s:
            raise UsageError(
                f"{where}: two schedules are named {s.name!r} ({other!r} and {s!r}); the "
                "name makes each tick's run id: give each schedule its own"
            )
    return tuple(found.values())


async def last_run(
    store: Store, s: Schedule, until: datetime, *, lookback: int = LOOKBACK
) -> tuple[datetime, RunRecord] | None:
    """The most recent tick of *s* at or before *until* that has a run, with its record.

    Probes the run ids of the ticks, newest first, at most *lookback* of
    them (one ``get_run`` each); ``None`` when none has a run. A checkpoint.

    Raises:
        StoreError: the store failed.
        CheckpointCorruptError: a probed record cannot be read.
    """
    for tick in itertools.islice(s._walk(until + _US, prev=True), lookback):
        run_id = s.run_id(tick)
        with StoreErrors(f"reading run {run_id!r}"):
            record = await store.get_run(run_id)
        if record is not None:
            return tick, record
    return None


async def serve_schedules(engine: Engine, schedules: Sequence[Schedule]) -> None:
    """Serve each schedule in its own task until cancelled; never raises but ``Cancelled``."""
    async with trio.open_nursery() as nursery:
        for s in schedules:
            ticker = _Ticker(engine, s)
            nursery.start_soon(ticker.run, name=f"tether worker: schedule {s.name}")


@attrs.define(eq=False)
class _Ticker:
    """One schedule served by one worker: sleeps until each tick and submits it."""

    engine: Engine
    schedule: Schedule

    @property
    def clock(self) -> Clock:
        return self.engine.clock

    def _say(self, level: int, message: str, *args: object, exc_info: bool = False) -> None:
        log.log(
            level,
            f"tether worker %s: schedule %s: {message}",
            self.engine.owner,
            self.schedule.name,
            *args,
            exc_info=exc_info,
        )

    async def run(self) -> None:
        """Serve the schedule until cancelled (the worker's block is left)."""
        s = self.schedule
        start = self.clock.now()
        tick = s.next_tick(start)
        if s.catch_up == "once":
            await self._catch_up(start)
        while tick is not None:
            while self.clock.now() < tick:  # the clock may read a hair early after a sleep
                await sleep_until(self.clock, tick)
            await self._submit(tick)
            following = s._after(tick)
            now = self.clock.now()
            if following is not None and following <= now:
                latest = s._before(now + _US)
                assert latest is not None  # following is one
                how = "the latest runs now" if s.catch_up == "once" else "skipped"
                self._say(logging.WARNING, "missed ticks %s to %s (%s)", following, latest, how)
                following = latest if s.catch_up == "once" else s._after(now)
            tick = following
        self._say(logging.WARNING, "the cron %r fires no more: it is no longer served", s.cron)

    async def _catch_up(self, start: datetime) -> None:
        """``once``: submit the tick just before *start* if it was missed (see the module)."""
        s = self.schedule
        latest = s._before(start)
        if latest is None:
            return
        try:
            found = await self._retrying(
                "looking for its last run", lambda: last_run(self.engine.store, s, latest)
            )
        except Exception:
            self._say(logging.ERROR, "looking for its last run failed", exc_info=True)
            return
        if found is not None and found[0] < latest:
            self._say(logging.INFO, "last run at %s: catching up the tick %s", found[0], latest)
            await self._submit(latest)

    async def _submit(self, tick: datetime) -> None:
        """Submit the run of *tick*, retrying store errors; log and skip any other error."""
        s = self.schedule
        run_id = s.run_id(tick)
        try:
            await self._retrying(
                f"submitting {run_id}",
                lambda: self.engine.submit(s.workflow, *s.args, run_id=run_id),
            )
        except RunConflictError as exc:
            self._say(logging.WARNING, "tick %s skipped: %s", tick, exc)
        except Exception:
            self._say(
                logging.ERROR, "tick %s skipped: submitting %s failed", tick, run_id, exc_info=True
            )

    async def _retrying(self, what: str, afn: Callable[[], Awaitable[T]]) -> T:
        """``await afn()``, retried with backoff while it raises ``StoreError``."""
        delay = _FIRST_RETRY
        while True:
            try:
                return await afn()
            except StoreError as exc:
                self._say(logging.WARNING, "%s failed (retried in %g s): %r", what, delay, exc)
            await trio.sleep(delay)
            delay = min(2 * delay, _LAST_RETRY)
