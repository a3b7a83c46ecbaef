"""The state one execution of a run shares between its tasks.

Every task tether tracks runs with a :class:`Frame` in a context variable:
which run it belongs to, the key path of the step (or branch) it is inside,
and the counters that give the next call's key and position (see
:mod:`._replay`). A frame remembers the task it was made for, so a task
started in a plain ``trio.open_nursery`` (which inherits the context
variable) is recognised and refused.

:class:`RunState` holds the rest: the journal, settlement (when every task
waits in ``ask``, the run pauses; under a worker, when every task waits,
in ``receive`` or for a durable timer that is far off, the run parks), live
events, hooks, human input, the messages read from the run's mailbox, and
the execution's :class:`~._saver.Saver` (every save and shielded call).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

import attrs
import trio

from ._clock import Clock, SystemClock, sleep_until
from ._codec import codec
from ._codec_converter import describe
from ._codec_json import digest, dumps
from ._errors import (
    CodecError,
    InvalidResponseError,
    NotInRunError,
    UsageError,
)
from ._events import Observer, RunEvent
from ._hooks import HookEvent, Hooks
from ._replay import Replay, divergence, undecodable
from ._requests import Request
from ._saver import Saver
from .stores._mailbox import Message
from .stores._protocol import Entry, EntryKind, EntryStatus, ErrorInfo, Store, utcnow

__all__ = (
    "Frame",
    "RunState",
    "Wait",
    "current_frame",
    "error_info",
    "frame_var",
    "note_key",
)

log = logging.getLogger("tether")

_KEY_ATTR = "_tether_step_key"

#: The counter of a frame's positions, kept with its per-name counters (so a
#: ``parallel()`` block, which shares them, shares it too). Never a step name:
#: those cannot contain "#".
_POSITION = "#"


class Frame:
    """Where a tracked task is: its run, its key path and its call counters."""

    __slots__ = ("counters", "path", "run", "task")

    def __init__(self, run: RunState, path: str, task: trio.lowlevel.Task) -> None:
        self.run = run
        #: "" for the workflow itself, else the key of the enclosing step or branch
        self.path = path
        self.task = task
        self.counters: dict[str, int] | None = None  # made by the first call

    def next_call(self, name: str, explicit: str | None) -> tuple[str, int]:
        """The key (``name#n``, or *explicit*) and position of the next call of *name* here."""
        counters = self.counters
        if counters is None:
            counters = self.counters = {}
        position = counters.get(_POSITION, 0)
        counters[_POSITION] = position + 1
        if explicit is None:
            n = counters.get(name, 0)
            counters[name] = n + 1
            explicit = f"{name}#{n}"
        return (f"{self.path}/{explicit}" if self.path else explicit), position

    def key_of(self, name: str) -> str:
        """The key of a call named *name* here, taking no counter (patch markers)."""
        return f"{self.path}/{name}" if self.path else name

    @property
    def position(self) -> int:
        """The position the next call here takes."""
        return 0 if self.counters is None else self.counters.get(_POSITION, 0)

    def skip_position(self) -> None:
        """Take the next position without a key (a patch marker's)."""
        if self.counters is None:
            self.counters = {}
        self.counters[_POSITION] = self.position + 1


frame_var: ContextVar[Frame | None] = ContextVar("tether_frame", default=None)


def current_frame(what: str) -> Frame:
    """The frame of the calling task; *what* names the API in the error.

    Raises:
        NotInRunError: outside a run, or in a task tether does not track.
    """
    frame = frame_var.get()
    if frame is None:
        raise NotInRunError(
            f"{what} was used outside a tether run; await it inside a workflow run by "
            "engine.run() (to test a step's logic alone, call step.fn)"
        )
    if frame.task is not trio.lowlevel.current_task():
        raise NotInRunError(
            f"{what} was used in a task tether does not track (one started in a plain "
            f"trio nursery inside run {frame.run.run_id!r}); start it with tether.parallel() "
            "so its key is fixed and its result journaled"
        )
    return frame


def _key_order(request: Request) -> list[tuple[str, int]]:
    # Requests come out in key order, counting "#n" as a number, so the order
    # is the same in every execution whatever the scheduler did.
    order: list[tuple[str, int]] = []
    for part in request.key.split("/"):
        name, _, n = part.rpartition("#")
        order.append((name, int(n)) if n.isdigit() and name else (part, -1))
    return order


def note_key(exc: BaseException, key: str, *, replace: bool = False) -> None:
    """Remember on *exc* the step it came out of (the innermost one is worth naming).

    With *replace*, *key* replaces a key noted before (a child run's error
    names the parent's call, not a step of the child's journal).
    """
    if isinstance(exc, Exception) and (replace or getattr(exc, _KEY_ATTR, None) is None):
        with contextlib.suppress(AttributeError):  # exotic exception types
            setattr(exc, _KEY_ATTR, key)


def _step_key_of(exc: BaseException) -> str | None:
    key = getattr(exc, _KEY_ATTR, None)
    if key is None and isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            key = _step_key_of(sub)
            if key is not None:
                break
    return key


def _type_name(cls: type[BaseException]) -> str:
    if cls.__module__ == "builtins":
        return cls.__qualname__
    if cls.__module__ == "tether._errors":
        return f"tether.{cls.__qualname__}"  # the public name
    return f"{cls.__module__}.{cls.__qualname__}"


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            yield from _leaves(sub)
    else:
        yield exc


def error_info(exc: BaseException) -> ErrorInfo:
    """The stored description of *exc*, naming the step it came out of.

    For an exception group the message lists the errors inside it, so the
    stored record says what actually failed.
    """
    message = str(exc)
    if isinstance(exc, BaseExceptionGroup):
        leaves = [f"{_type_name(type(e))}: {e}" for e in _leaves(exc)]
        message = f"{exc.message}: {'; '.join(leaves)}"
    return ErrorInfo(type=_type_name(type(exc)), message=message, key=_step_key_of(exc))


class Wait:
    """A tracked task waiting for other tracked tasks: it does not keep the run from settling.

    ``with wait: await event.wait()``. The task that sets the event calls
    :meth:`end` *before* setting it: the woken task is busy again from that
    moment, not only once the scheduler gets to it, so a settlement checked
    in between cannot take it for idle. :meth:`end` is idempotent, and the
    block ends the wait however it is left.

    A wait for a durable timer has a *due* time instead: only the clock ends
    it, so while it lasts the run pauses on nobody's ``ask`` (the timer will
    wake a task), and may park (see :meth:`RunState._check_settled`). A wait
    in ``tether.receive`` has the message's name (*receive*): only a send
    ends it, and it never keeps the run from pausing or parking.
    """

    __slots__ = ("active", "due", "receive", "request", "run")

    def __init__(
        self,
        run: RunState,
        request: Request | None = None,
        due: datetime | None = None,
        receive: str | None = None,
    ) -> None:
        self.run = run
        self.request = request  # the ask this wait answers, if any
        self.due = due  # the timer this wait sleeps on, if any
        self.receive = receive  # the message name this wait receives, if any
        self.active = False

    def __enter__(self) -> Wait:
        run = self.run
        self.active = True
        run.idle += 1
        if self.request is not None:
            run.asking[self.request.key] = self.request
        if self.due is not None:
            run.timers[self] = self.due
        if self.receive is not None:
            run.receiving[self] = self.receive
        run._check_settled()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end()

    def end(self) -> None:
        """The waiting task is busy again (called by whoever wakes it)."""
        if self.active:
            self.active = False
            self.run.idle -= 1
            if self.request is not None:
                del self.run.asking[self.request.key]
            if self.due is not None:
                del self.run.timers[self]
            if self.receive is not None:
                del self.run.receiving[self]


@attrs.define(eq=False)
class RunState:
    """Everything one execution of a run shares between its tasks."""

    run_id: str
    workflow: str
    store: Store
    hooks: Hooks
    save_timeout: float
    journal: dict[str, Entry]  # completed step entries by key, from the store
    seen: set[str] = attrs.field(factory=set)  # keys called in this execution
    #: the loaded journal, matched call by call; ``None`` when it is empty
    replay: Replay | None = None
    # -- tether.patched() (see _patches) --
    markers: list[Entry] = attrs.field(factory=list)  # made, not stored yet: the next save's
    patches: dict[str, bool] = attrs.field(factory=dict)  # marker key -> what patched() said
    # -- settlement (see ask()) --
    run_scope: trio.CancelScope | None = None  # the run's own scope (framework-owned)
    live: int = 0  # tracked tasks alive: the workflow task and parallel() children
    idle: int = 0  # ...of which waiting in ask() or for their parallel() children
    asking: dict[str, Request] = attrs.field(factory=dict)  # requests now waited on
    response_waits: list[Wait] = attrs.field(factory=list)  # asks waiting for _store_responses
    settled: tuple[Request, ...] | None = None  # the requests, once the run settled
    # responses given to resume(), as JSON primitives, until journaled
    provided: dict[str, Any] = attrs.field(factory=dict)
    accepted: dict[str, Entry] = attrs.field(factory=dict)  # ...decoded, waiting to be stored
    responses_stored: trio.Event = attrs.field(factory=trio.Event)
    aborted: BaseException | None = None  # a response did not decode: undo the resume
    observer: Observer | None = None  # receives live events (Engine.open_run)
    # -- child runs (see _children) --
    engine: Any = None  # the engine executing this run: tether.child() starts runs with it
    #: the parent's, when this run executes as a child run inside its parent's execution
    parent: RunState | None = None
    # -- durable timers (see _timers) --
    clock: Clock = attrs.field(factory=SystemClock)  # the engine's: what timers measure
    #: under a worker, park the run when its next timer is more than this many
    #: seconds off and every task waits; ``None`` (engine.run): never park
    park_after: float | None = None
    timers: dict[Wait, datetime] = attrs.field(factory=dict)  # timer waits now, with due times
    parked: bool = False  # settled to park (stored ``waiting``) under a worker
    wake_at: datetime | None = None  # once parked: when the run is due again (None: a message)
    # -- messages (see _receive) --
    #: the messages the workflow declares (``@tether.workflow(signals=...)``): name -> type
    signals: Mapping[str, Any] = attrs.field(factory=dict)
    receiving: dict[Wait, str] = attrs.field(factory=dict)  # receive waits now, with names
    #: once parked: the names receives waited for then (a message of one wakes the run)
    awaited: frozenset[str] = frozenset()
    #: messages read from the run's mailbox and not taken yet, in seq order
    messages: list[Message] = attrs.field(factory=list)
    mailbox_read: int = 0  # the highest seq read from the mailbox so far
    #: seqs journaled by any execution or taken by this one (built when first needed)
    taken: set[int] | None = None
    #: the last failed attempt of each step with a retry policy, from the loaded journal
    failures: dict[str, Entry] = attrs.field(factory=dict)
    # -- ownership --
    token: int = 0  # the fencing token every write of this execution carries
    cancel_requested: bool = False  # engine.cancel reached this execution
    #: every save and shielded call of this execution (and the caller's verdict)
    saver: Saver = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.saver = Saver(self.store, self.run_id, self.save_timeout)

    # -- settlement ----------------------------------------------------------

    def task_started(self) -> None:
        """Count a tracked task; call when it is *scheduled*, not when it starts.

        Counting at spawn time matters: a task that is scheduled but has not
        run yet is live, and must keep the run from settling.
        """
        self.live += 1

    def task_done(self) -> None:
        """A tracked task finished (however it ended)."""
        self.live -= 1
        if self.asking or self.timers or self.receiving:  # else nothing can settle
            self._check_settled()

    def wait(self, request: Request | None = None) -> Wait:
        """A wait of the current task that other tracked tasks end; see :class:`Wait`."""
        return Wait(self, request)

    def timer(self, due: datetime) -> Wait:
        """A wait of the current task for the durable timer *due*; see :class:`Wait`."""
        return Wait(self, due=due)

    def receive_wait(self, name: str) -> Wait:
        """A wait of the current task for a message called *name*; see :class:`Wait`."""
        return Wait(self, receive=name)

    def _check_settled(self) -> None:
        # Only when every live task is finished or waiting can the run settle.
        if (
            not (self.asking or self.timers or self.receiving)
            or self.settled is not None
            or self.aborted is not None
            or self.idle < self.live
            or self.run_scope is None
        ):
            return
        if self.asking:
            # Someone waits in ask(), and nothing in this execution can ever
            # answer it, unless a timer wakes a task first. Settle: cancel the
            # run scope (framework-owned, so completed saves drain) and pause.
            # A receive waiting too does not keep it: its messages wait in the
            # mailbox for the resume.
            if not self.timers:
                self.settled = tuple(sorted(self.asking.values(), key=_key_order))
                self.run_scope.cancel()
            return
        # Only timers and messages wake the run now. Outside a worker, the
        # run waits here for them. Under a worker, a wake-up far off (or a
        # message, which may never come) is not worth a lease and a slot:
        # park until the earliest timer, or until a send (wake_at None),
        # unless a timer wakes a task within park_after anyway. Time passing
        # only brings timers closer, so checking when a task starts waiting
        # or ends is enough. (park_after=math.inf: never park.)
        if self.park_after is None or self.park_after == math.inf:
            return
        wake_at = min(self.timers.values()) if self.timers else None
        if wake_at is not None and (wake_at - self.clock.now()).total_seconds() <= self.park_after:
            return
        self.settled = ()
        self.parked = True
        self.wake_at = wake_at
        self.awaited = frozenset(self.receiving.values())
        self.run_scope.cancel()

    async def sleep_until(self, due: datetime) -> None:
        """Sleep until the engine's clock reads *due*, as a durable timer's wait.

        A plain ``trio.sleep`` of what remains (a checkpoint, at once when
        *due* has passed), cancelled like one. It does not keep the run from
        settling: under a worker it may park the run, which cancels this
        sleep (framework-owned); see :meth:`_check_settled`.
        """
        with self.timer(due):
            await sleep_until(self.clock, due)

    def abort(self, exc: BaseException) -> None:
        """Stop this execution and undo the resume that started it (bad response)."""
        if self.aborted is None:
            self.aborted = exc
        if self.run_scope is not None:
            self.run_scope.cancel()

    def request_cancel(self) -> None:
        """A cancel was recorded for the run: stop it (framework-owned, saves drain)."""
        self.cancel_requested = True
        if self.run_scope is not None:
            self.run_scope.cancel()

    def emit(self, event: RunEvent) -> None:
        """Tell the run's observer, if any, about *event* (never blocks).

        On hot paths, check :attr:`observer` first: an event nobody observes
        is not worth building.
        """
        if self.observer is not None:
            self.observer(event)

    # -- keys, saves and hooks ---------------------------------------------------

    def call_entry(
        self,
        kind: EntryKind,
        key: str,
        position: int,
        value: str,
        *,
        at: datetime,
        args_digest: str = "",
    ) -> Entry:
        """The journal entry of a call that completes as it is made (a timer's
        start, a patch marker, a child's start): started and finished *at*,
        with this execution's token."""
        return Entry(
            run_id=self.run_id,
            key=key,
            kind=kind,
            value=value,
            args_digest=args_digest,
            started_at=at,
            finished_at=at,
            token=self.token,
            position=position,
        )

    def claim(self, key: str) -> None:
        """Mark *key* as called in this execution.

        Raises:
            UsageError: it was called already (an explicit key used twice).
        """
        if key in self.seen:
            raise UsageError(
                f"key {key!r} is used twice in run {self.run_id!r}; explicit keys "
                "must be unique within their parent"
            )
        self.seen.add(key)

    def diverged(self, call: str, key: str, position: int | None, detail: str) -> Exception:
        """The call *key* diverges from the journal: abort this execution; raise what this returns.

        The execution is undone (see :func:`._replay.divergence`).
        """
        error = divergence(self.run_id, call, key, position, detail)
        self.abort(error)
        return error

    def take_markers(self) -> list[Entry]:
        """The patch markers no save has carried yet, for the save about to be made.

        A marker rides with the run's next save (saves are stored in the order
        they are made), so it is stored no later than anything journaled after
        ``tether.patched()`` returned. Give them back (:meth:`put_back`) when
        that save fails.
        """
        markers, self.markers = self.markers, []
        return markers

    def put_back(self, markers: Sequence[Entry]) -> None:
        """Markers whose save failed: the next save carries them."""
        self.markers[:0] = markers

    async def save(self, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Journal *entries* (:meth:`Saver.save <._saver.Saver.save>`); return them as stored.

        Pending patch markers go first, in the same append (see :meth:`take_markers`).

        A checkpoint; see ``Saver.save`` for cancellation and what it raises.
        """
        markers = self.take_markers() if self.markers else ()
        try:
            stored = await self.saver.save([*markers, *entries] if markers else entries)
        except BaseException:
            self.put_back(markers)
            raise
        for entry in stored:
            self.journal[entry.key] = entry
        return stored[len(markers) :]

    async def end_hook(
        self, method: str, event: HookEvent, propagating: BaseException | None
    ) -> None:
        """Call an end hook under a tracked shield (prompt when the caller cancels).

        An error from the hook never replaces *propagating*; it is logged
        instead.
        """
        if not self.hooks.has(method):
            return
        try:
            await self.saver.shielded(
                f"hook {method} for {event.key or event.name} in run {self.run_id!r}",
                self.hooks.call,
                method,
                event,
            )
        except BaseException as exc:
            if propagating is None:
                raise
            if exc is not propagating and not isinstance(exc, trio.Cancelled):
                log.error(
                    "tether: %s hook error superseded by %r (run %s, %s)",
                    method,
                    propagating,
                    self.run_id,
                    event.key or event.name,
                    exc_info=exc,
                )

    # -- human input -----------------------------------------------------------

    async def ask(self, key: str, position: int, payload: Any, response_type: Any) -> Any:
        """Return the response to the request *key*, or wait until the run settles.

        *position* is the ask's among its parent's calls. A checkpoint; see
        :func:`tether.ask`.
        """
        self.claim(key)
        if self.replay is not None:
            self.replay.reach("ask", key, position)  # reached when called, cancelled or not
        await trio.lowlevel.checkpoint_if_cancelled()
        what = f"request {key} of run {self.run_id!r}"
        shown = codec.to_primitive(payload, what=f"the payload of {what}")
        payload_digest = digest(dumps(shown))
        entry = self.journal.get(key)
        if entry is not None:
            if entry.kind is not EntryKind.RESPONSE:
                raise self.diverged(
                    "ask",
                    key,
                    position,
                    f"the journal holds a {entry.kind} entry (seq {entry.seq}) under this key",
                )
            if entry.args_digest != payload_digest:
                raise self.diverged(
                    "ask",
                    key,
                    position,
                    f"its response was journaled (seq {entry.seq}) for another payload "
                    f"than it asks now ({dumps(shown):.200})",
                )
            await trio.lowlevel.cancel_shielded_checkpoint()
            try:
                return codec.decode(entry.value or "null", response_type, what=what)
            except CodecError as exc:
                raise self.diverged(
                    "ask",
                    key,
                    position,
                    undecodable(entry, response_type, "response", "the response type", what),
                ) from exc
        request = Request(key=key, payload=shown, response_type=describe(response_type))
        if key in self.provided:
            return await self._take_response(request, position, response_type, payload_digest)
        with self.wait(request):
            # Only the settlement (or the caller) ends this wait.
            await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _take_response(
        self, request: Request, position: int, response_type: Any, payload_digest: str
    ) -> Any:
        key = request.key
        started = utcnow()
        try:
            value = codec.structure(
                self.provided[key], response_type, what=f"the response to {key}"
            )
        except CodecError as exc:
            error = InvalidResponseError(
                f"run {self.run_id!r}: the response to request {key} does not decode as "
                f"{request.response_type}: {exc}. Nothing was journaled; the run stays "
                "paused: resume it with a response of that type."
            )
            self.abort(error)
            await trio.lowlevel.checkpoint()  # raises Cancelled: the run is stopping
            raise error from exc  # pragma: no cover - only under a shield of the user's own
        self.accepted[key] = Entry(
            run_id=self.run_id,
            key=key,
            kind=EntryKind.RESPONSE,
            status=EntryStatus.COMPLETED,
            value=dumps(self.provided[key]),
            args_digest=payload_digest,
            started_at=started,
            finished_at=utcnow(),
            token=self.token,
            position=position,
        )
        if len(self.accepted) == len(self.provided):
            # The last response to be checked stores them all, in one append:
            # either every response given to resume() is journaled, or none.
            await self._store_responses()
        else:
            wait = self.wait(request)
            self.response_waits.append(wait)
            with wait:
                await self.responses_stored.wait()
        return value

    async def _store_responses(self) -> None:
        await self.save(list(self.accepted.values()))
        self.provided.clear()
        self.accepted.clear()
        for wait in self.response_waits:
            wait.end()
        self.responses_stored.set()
