"""The state one execution of a run shares between its tasks.

Layer: the kernel (``_core``).

:class:`RunState` holds the journal, settlement (when every task waits in
``ask``, the run pauses; under a worker, when every task waits, in ``receive``
or for a durable timer that is far off, the run parks), live events, hooks,
human input, the messages read from the run's mailbox, and the execution's
:class:`~._saver.Saver` (every save and shielded call). A tracked task finds
its run through its :class:`~._frame.Frame`; what reads and writes the state
lives with its API: human input in :mod:`tether._api._ask`, messages in
:mod:`tether._api._receive`, timers in :mod:`tether._api._timers`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

import attrs
import trio

from .._errors import Request, UsageError
from ..stores._mailbox import Message
from ..stores._records import Entry, EntryKind
from ..stores._store import Store
from ._clock import Clock, SystemClock, sleep_until
from ._events import Observer, RunEvent
from ._hooks import HookEvent, Hooks
from ._host import Host
from ._replay import Replay, divergence
from ._saver import Saver

__all__ = ("RunState", "Wait", "own")

log = logging.getLogger("tether")

#: What a container of :class:`RunState` that most runs never fill holds until it is
#: first written (through :func:`own`): one empty dict or list shared by every run, never
#: written to, so that a held run costs no memory for it. Read it as any empty container.
_NO_DICT: Final[dict[Any, Any]] = {}
_NO_LIST: Final[list[Any]] = []

C = TypeVar("C", dict[Any, Any], list[Any])


def own(container: C) -> C:
    """*container*, a field of a :class:`RunState`, made the run's own before a write:
    a new one in place of the shared empty one."""
    if container is _NO_DICT:
        return {}  # type: ignore[return-value]
    if container is _NO_LIST:
        return []  # type: ignore[return-value]
    return container


def _key_order(request: Request) -> list[tuple[str, int]]:
    # Requests come out in key order, counting "#n" as a number, so the order
    # is the same in every execution whatever the scheduler did.
    order: list[tuple[str, int]] = []
    for part in request.key.split("/"):
        name, _, n = part.rpartition("#")
        order.append((name, int(n)) if n.isdigit() and name else (part, -1))
    return order


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
            run.asking = own(run.asking)
            run.asking[self.request.key] = self.request
        if self.due is not None:
            run.timers = own(run.timers)
            run.timers[self] = self.due
        if self.receive is not None:
            run.receiving = own(run.receiving)
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
    #: keys called in this execution (a dict: smaller than a set of as many keys)
    seen: dict[str, None] = attrs.field(factory=dict)
    #: the loaded journal, matched call by call; ``None`` when it is empty
    replay: Replay | None = None
    # The containers below that most runs never fill are shared empty ones until a
    # write makes them the run's own (see own()): a held run costs no memory for them.
    # -- tether.patched() (see _patches) --
    markers: list[Entry] = _NO_LIST  # made, not stored yet: the next save's
    patches: dict[str, bool] = _NO_DICT  # marker key -> what patched() said
    # -- settlement (see ask()) --
    run_scope: trio.CancelScope | None = None  # the run's own scope (framework-owned)
    live: int = 0  # tracked tasks alive: the workflow task and parallel() children
    idle: int = 0  # ...of which waiting in ask() or for their parallel() children
    asking: dict[str, Request] = _NO_DICT  # requests now waited on
    response_waits: list[Wait] = _NO_LIST  # asks waiting for _store_responses
    settled: tuple[Request, ...] | None = None  # the requests, once the run settled
    # responses given to resume(), as JSON primitives, until journaled
    provided: dict[str, Any] = _NO_DICT
    accepted: dict[str, Entry] = _NO_DICT  # ...decoded, waiting to be stored
    #: set once they are (made by the first ask that waits for it)
    responses_stored: trio.Event | None = None
    aborted: BaseException | None = None  # a response did not decode: undo the resume
    observer: Observer | None = None  # receives live events (Engine.open_run)
    # -- child runs (see _children) --
    #: the engine executing this run, as its code sees it (``tether.child``, ``tether.receive``)
    host: Host | None = None
    #: the parent's, when this run executes as a child run inside its parent's execution
    parent: RunState | None = None
    # -- durable timers (see _timers) --
    clock: Clock = attrs.field(factory=SystemClock)  # the engine's: what timers measure
    #: under a worker, park the run when its next timer is more than this many
    #: seconds off and every task waits; ``None`` (engine.run): never park
    park_after: float | None = None
    timers: dict[Wait, datetime] = _NO_DICT  # timer waits now, with due times
    parked: bool = False  # settled to park (stored ``waiting``) under a worker
    wake_at: datetime | None = None  # once parked: when the run is due again (None: a message)
    # -- messages (see _receive) --
    #: the messages the workflow declares (``@tether.workflow(messages=...)``): name -> type
    declared_messages: Mapping[str, Any] = attrs.field(factory=dict)
    receiving: dict[Wait, str] = _NO_DICT  # receive waits now, with names
    #: once parked: the names receives waited for then (a message of one wakes the run)
    awaited: frozenset[str] = frozenset()
    #: messages read from the run's mailbox and not taken yet, in seq order
    messages: list[Message] = _NO_LIST
    mailbox_read: int = 0  # the highest seq read from the mailbox so far
    #: seqs journaled by any execution or taken by this one (built when first needed)
    taken: set[int] | None = None
    #: the last failed attempt of each step with a retry policy, from the loaded journal
    failures: dict[str, Entry] = _NO_DICT
    # -- ownership --
    token: int = 0  # the fencing token every write of this execution carries
    cancel_requested: bool = False  # engine.cancel reached this execution
    #: every save and shielded call of this execution (and the caller's verdict)
    saver: Saver = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.saver = Saver(self.store, self.run_id, self.save_timeout)
        if not self.provided:
            self.provided = _NO_DICT  # (the empty one given is let go)

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

    def live_host(self) -> Host:
        """The engine executing this run.

        Raises:
            UsageError: the run was not started by an engine (a state made by hand).
        """
        if self.host is None:
            raise UsageError(f"run {self.run_id!r} was not started by an engine")
        return self.host

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
        self.seen[key] = None

    async def reach(self, call: str, key: str, position: int) -> Entry | None:
        """The *call* with *key* is made at *position*: claim the key and check the place
        against the journal (cancelled or not), then a cancel point; the key's journaled entry.

        Raises:
            UsageError: the key was called already.
            NonDeterminismError: the journal holds this call elsewhere, or another one here.
        """
        self.claim(key)
        if self.replay is not None:
            self.replay.reach(call, key, position)
        await trio.lowlevel.checkpoint_if_cancelled()
        return self.journal.get(key)

    def check_kind(
        self, entry: Entry, kind: EntryKind, call: str, key: str, position: int | None
    ) -> None:
        """Diverge (:meth:`diverged`) unless *entry*, journaled under *key*, is of *kind*."""
        if entry.kind is not kind:
            raise self.diverged(
                call,
                key,
                position,
                f"the journal holds a {entry.kind} entry (seq {entry.seq}) under this key",
            )

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
        markers, self.markers = self.markers, _NO_LIST
        return markers

    def put_back(self, markers: Sequence[Entry]) -> None:
        """Markers whose save failed: the next save carries them."""
        if markers:
            self.markers = own(self.markers)
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
