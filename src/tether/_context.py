"""The current run: step execution, keys, shielded saves and ``parallel()``.

Every task tether tracks runs with a :class:`_Frame` in a context variable:
which run it belongs to, the key path of the step (or branch) it is inside,
and the per-name counters that give the next step key. A frame remembers the
task it was made for, so a task started in a plain ``trio.open_nursery``
(which inherits the context variable) is recognised and refused.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final, overload

import attrs
import trio

from ._codec import codec, describe, digest, dumps
from ._errors import (
    CheckpointCorruptError,
    CodecError,
    InvalidResponseError,
    LeaseLostError,
    NonDeterminismError,
    NotInRunError,
    SaveTimeoutError,
    StoreError,
    TetherError,
    UsageError,
)
from ._events import CheckpointStored, Observer, RunEvent, StepFinished, StepStarted
from ._hooks import HookEvent, Hooks
from ._requests import Request
from .stores._protocol import Entry, EntryKind, EntryStatus, ErrorInfo, Store, utcnow

if TYPE_CHECKING:
    from ._workflow import Step

#: Set to ``True`` on step classes (``Step``): ``parallel().start_soon`` journals
#: them under their own name. (A marker, so that this module, below the
#: definitions, never imports them.)
STEP_MARKER = "_tether_is_step"

__all__ = (
    "Handle",
    "Parallel",
    "RunState",
    "StoreErrors",
    "ask",
    "call_step",
    "check_key",
    "error_info",
    "parallel",
)

log = logging.getLogger("tether")

T = TypeVar("T")
R = TypeVar("R")

_KEY_ATTR = "_tether_step_key"


@attrs.define(eq=False, slots=True)
class _Frame:
    run: RunState
    path: str  # "" for the workflow itself, else the key of the enclosing step or branch
    task: trio.lowlevel.Task
    counters: dict[str, int] = attrs.field(factory=dict)

    def next_key(self, name: str, explicit: str | None) -> str:
        if explicit is None:
            n = self.counters.get(name, 0)
            self.counters[name] = n + 1
            explicit = f"{name}#{n}"
        return f"{self.path}/{explicit}" if self.path else explicit


_frame: ContextVar[_Frame | None] = ContextVar("tether_frame", default=None)


def _current_frame(what: str) -> _Frame:
    frame = _frame.get()
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


def check_key(key: object) -> str:
    """An explicit step key, validated: a non-empty string without ``/``."""
    if not isinstance(key, str) or not key or "/" in key:
        raise UsageError(f"a step key is a non-empty string without '/', not {key!r}")
    return key


def _note_key(exc: BaseException, key: str) -> None:
    # The innermost step an error came out of is the one worth naming.
    if isinstance(exc, Exception) and getattr(exc, _KEY_ATTR, None) is None:
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


class StoreErrors:
    """Turns a store's own exceptions (``OSError``, a driver's) into :class:`StoreError`.

    tether's errors and ``BaseException``s (``Cancelled``) pass through as they are.
    """

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, etype: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, TetherError):
            raise StoreError(f"{self.what} failed: {exc!r}") from exc


class Wait:
    """A tracked task waiting for other tracked tasks: it does not keep the run from settling.

    ``with wait: await event.wait()``. The task that sets the event calls
    :meth:`end` *before* setting it: the woken task is busy again from that
    moment, not only once the scheduler gets to it, so a settlement checked
    in between cannot take it for idle. :meth:`end` is idempotent, and the
    block ends the wait however it is left.
    """

    __slots__ = ("active", "request", "run")

    def __init__(self, run: RunState, request: Request | None = None) -> None:
        self.run = run
        self.request = request  # the ask this wait answers, if any
        self.active = False

    def __enter__(self) -> Wait:
        run = self.run
        self.active = True
        run.idle += 1
        if self.request is not None:
            run.asking[self.request.key] = self.request
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
    shields: set[trio.CancelScope] = attrs.field(factory=set)
    caller_cancelled: bool = False
    # -- settlement (see ask()) --
    run_scope: trio.CancelScope | None = None  # the run nursery's scope
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
    # -- ownership --
    token: int = 0  # the fencing token every write of this execution carries
    lose: Callable[[LeaseLostError], None] | None = None  # the engine's: the lease is gone
    cancel_requested: bool = False  # engine.cancel reached this execution

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
        self._check_settled()

    def wait(self, request: Request | None = None) -> Wait:
        """A wait of the current task that other tracked tasks end; see :class:`Wait`."""
        return Wait(self, request)

    def _check_settled(self) -> None:
        # Every live task is finished or waiting, and someone waits in ask():
        # nothing can ever answer it in this execution. Settle: cancel the
        # run nursery (framework-owned, so completed saves drain) and pause.
        if (
            self.asking
            and self.settled is None
            and self.aborted is None
            and self.idle >= self.live
            and self.run_scope is not None
        ):
            self.settled = tuple(sorted(self.asking.values(), key=_key_order))
            self.run_scope.cancel()

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
        """Tell the run's observer, if any, about *event* (never blocks)."""
        if self.observer is not None:
            self.observer(event)

    # -- caller cancellation -------------------------------------------------

    def cancel_by_caller(self) -> None:
        """The caller cancelled: cut every shielded save short, now and later.

        Each shield is lifted, so the caller's own cancellation reaches the
        save and propagates from it directly (one unwind, not a caught and
        re-raised one); the scope is cancelled too, so a save that user code
        wrapped in a shield of its own is cut short all the same.
        """
        self.caller_cancelled = True
        for scope in self.shields:
            scope.shield = False
            scope.cancel()

    def tracked_scope(self, seconds: float) -> trio.CancelScope:
        """A new scope shielded from framework cancellation for *seconds*, tracked.

        :meth:`cancel_by_caller` cuts it short; the caller of this method
        enters it and removes it from :attr:`shields` once it has exited.
        """
        scope = trio.CancelScope(
            shield=not self.caller_cancelled, deadline=trio.current_time() + seconds
        )
        if self.caller_cancelled:
            # The verdict is sticky: a scope opened after the caller
            # cancelled does not wait at all.
            scope.cancel()
        self.shields.add(scope)
        return scope

    async def shielded(self, what: str, afn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``afn(*args)`` shielded from framework cancellation.

        *what* names the operation and its run in error messages.

        A sibling's failure cannot interrupt it; the caller's cancellation can
        (the scope is cut short by :meth:`cancel_by_caller`, or starts cut short
        if the caller has already cancelled), and so can ``save_timeout``.

        Raises:
            trio.Cancelled: the caller cancelled.
            SaveTimeoutError: ``save_timeout`` expired first.
        """
        scope = self.tracked_scope(self.save_timeout)
        try:
            with scope:
                return await afn(*args)
        except LeaseLostError as exc:
            # The store refused the write's token: another owner has the run.
            if self.lose is not None:
                self.lose(exc)
            raise
        finally:
            self.shields.discard(scope)
        # Only reached when the scope caught a cancellation: never pretend the
        # call returned. The caller's cancellation normally propagates through
        # the lifted shield and never gets here; under a shield of the user's
        # own it does, and this checkpoint raises Cancelled if anything can.
        if self.caller_cancelled:
            await trio.lowlevel.checkpoint()
            raise StoreError(
                f"{what} was cut short by the caller's cancellation; "
                "the record may not be stored (resuming is safe)"
            )
        raise SaveTimeoutError(
            f"{what} did not finish within save_timeout="
            f"{self.save_timeout}s; the store may be hung (resuming is safe)"
        )

    async def save(self, entry: Entry) -> Entry:
        """Append *entry* to the journal, shielded; return the stored entry."""
        what = f"saving step {entry.key} in run {self.run_id!r}"
        with StoreErrors(what):
            stored = await self.shielded(what, self.store.append, self.run_id, (entry,))
        if stored is None:
            # A store that does not report what it stored (a minimal wrapper
            # that forgot to return): the write succeeded, the seq is unknown.
            result = entry
        elif len(stored) == 1:
            result = stored[0]
        else:
            raise StoreError(f"{what}: the store returned {len(stored)} entries for one")
        self.journal[entry.key] = result
        return result

    async def end_hook(
        self, method: str, event: HookEvent, propagating: BaseException | None
    ) -> None:
        """Call an end hook under the tracked shield.

        An error from the hook never replaces *propagating*; it is logged
        instead.
        """
        if not self.hooks.has(method):
            return
        try:
            await self.shielded(
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

    # -- steps ---------------------------------------------------------------

    def _claim(self, key: str) -> None:
        if key in self.seen:
            raise UsageError(
                f"key {key!r} is used twice in run {self.run_id!r}; explicit keys "
                "must be unique within their parent"
            )
        self.seen.add(key)

    async def execute_step(
        self, step: Step[..., Any], key: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Replay the step with *key* from the journal, or run and journal it."""
        self._claim(key)
        # Every step call is a cancel point, replayed or not (a replay has no
        # other await; a fresh step's save is shielded).
        await trio.lowlevel.checkpoint_if_cancelled()
        what = f"step {key} of run {self.run_id!r}"
        args_digest = digest(codec.encode_args(args, kwargs, what=what))
        entry = self.journal.get(key)
        if entry is not None:
            if entry.args_digest != args_digest:
                raise NonDeterminismError(
                    f"{what} was journaled (seq {entry.seq}) with other arguments than it is "
                    "called with now: the workflow's code or inputs changed since the run "
                    "started. Start a new run, or give differing calls explicit keys."
                )
            # ...and a schedule point: a long replay must not starve other tasks.
            await trio.lowlevel.cancel_shielded_checkpoint()
            try:
                return codec.decode(entry.value or "null", step.signature.return_type, what=what)
            except CodecError as exc:
                raise CheckpointCorruptError(
                    f"{what}: journal entry seq {entry.seq} cannot be decoded as the step's "
                    f"return type: {exc}"
                ) from exc
        return await self._run_step(step, key, args, kwargs, args_digest)

    async def _run_step(
        self,
        step: Step[..., Any],
        key: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        args_digest: str,
    ) -> Any:
        hooks = self.hooks.any_step
        event = (
            HookEvent(run_id=self.run_id, workflow=self.workflow, name=step.name, key=key)
            if hooks
            else None
        )
        propagating: BaseException | None = None
        try:
            self.emit(StepStarted(run_id=self.run_id, key=key, name=step.name))
            if event is not None:
                await self.hooks.call("on_step_start", event)
            started = utcnow()
            if step.retries or step.timeout is not None:
                value, attempt = await self._attempts(step, key, args, kwargs)
            else:  # the common case, without the retry loop's frame
                token = _frame.set(_Frame(self, key, trio.lowlevel.current_task()))
                try:
                    value = await step.fn(*args, **kwargs)
                finally:
                    _frame.reset(token)
                attempt = 1
            # Snapshot now, synchronously: no other task runs before the value
            # is encoded, so nothing can change what is stored.
            text, decoded = codec.snapshot(
                value, step.signature.return_type, what=f"step {key} of run {self.run_id!r}"
            )
            entry = Entry(
                run_id=self.run_id,
                key=key,
                kind=EntryKind.STEP,
                status=EntryStatus.COMPLETED,
                value=text,
                args_digest=args_digest,
                started_at=started,
                finished_at=utcnow(),
                attempt=attempt,
                token=self.token,
            )
            stored = await self.save(entry)
            self.emit(CheckpointStored(run_id=self.run_id, key=key, name=step.name, entry=stored))
            if event is not None:
                await self.shielded(
                    f"hook on_checkpoint for {key} in run {self.run_id!r}",
                    self.hooks.call,
                    "on_checkpoint",
                    attrs.evolve(event, entry=stored),
                )
            return decoded
        except BaseException as exc:
            propagating = exc
            _note_key(exc, key)
            raise
        finally:
            if event is not None:
                await self.end_hook(
                    "on_step_end", attrs.evolve(event, exception=propagating), propagating
                )
            self.emit(
                StepFinished(run_id=self.run_id, key=key, name=step.name, exception=propagating)
            )
            del propagating

    async def _attempts(
        self, step: Step[..., Any], key: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, int]:
        attempt = 1
        while True:
            # A fresh frame per attempt: nested steps get keys under this step,
            # and a retry replays the nested steps an earlier attempt stored.
            token = _frame.set(_Frame(self, key, trio.lowlevel.current_task()))
            try:
                if step.timeout is None:
                    value = await step.fn(*args, **kwargs)
                else:
                    with trio.fail_after(step.timeout):
                        value = await step.fn(*args, **kwargs)
                return value, attempt
            except Exception as exc:
                if attempt > step.retries:
                    raise
                log.info(
                    "tether: step %s of run %s failed (attempt %d of %d), retrying: %r",
                    key,
                    self.run_id,
                    attempt,
                    step.retries + 1,
                    exc,
                )
                attempt += 1
            finally:
                _frame.reset(token)
            # The retry calls the nested steps again: those the failed attempt
            # stored replay from the journal, the rest run.
            prefix = key + "/"
            self.seen = {k for k in self.seen if not k.startswith(prefix)}

    # -- human input -----------------------------------------------------------

    async def ask(self, key: str, payload: Any, response_type: Any) -> Any:
        """Return the response to the request *key*, or wait until the run settles."""
        self._claim(key)
        await trio.lowlevel.checkpoint_if_cancelled()
        what = f"request {key} of run {self.run_id!r}"
        shown = codec.to_primitive(payload, what=f"the payload of {what}")
        payload_digest = digest(dumps(shown))
        entry = self.journal.get(key)
        if entry is not None:
            if entry.kind is not EntryKind.RESPONSE or entry.args_digest != payload_digest:
                raise NonDeterminismError(
                    f"{what}: the journal holds {entry.kind} seq {entry.seq} for this key "
                    "with another payload or kind than asked now: the workflow's code or "
                    "inputs changed since the run started. Start a new run, or give "
                    "differing asks explicit keys."
                )
            await trio.lowlevel.cancel_shielded_checkpoint()
            try:
                return codec.decode(entry.value or "null", response_type, what=what)
            except CodecError as exc:
                raise CheckpointCorruptError(
                    f"{what}: journaled response seq {entry.seq} cannot be decoded: {exc}"
                ) from exc
        request = Request(key=key, payload=shown, response_type=describe(response_type))
        if key in self.provided:
            return await self._take_response(request, response_type, payload_digest)
        with self.wait(request):
            # Only the settlement (or the caller) ends this wait.
            await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _take_response(
        self, request: Request, response_type: Any, payload_digest: str
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
        entries = list(self.accepted.values())
        what = f"saving the responses {', '.join(self.accepted)} in run {self.run_id!r}"
        with StoreErrors(what):
            stored = await self.shielded(what, self.store.append, self.run_id, entries)
        for entry in stored or entries:
            self.journal[entry.key] = entry
        self.provided.clear()
        self.accepted.clear()
        for wait in self.response_waits:
            wait.end()
        self.responses_stored.set()


async def call_step(
    step: Step[..., R], args: tuple[Any, ...], kwargs: dict[str, Any], key: str | None
) -> R:
    """What awaiting ``step(*args)`` does."""
    frame = _current_frame(f"step {step.name!r}")
    result: R = await frame.run.execute_step(step, frame.next_key(step.name, key), args, kwargs)
    return result


# -- parallel() ------------------------------------------------------------


_PENDING: Any = object()


@final
class Handle(Generic[R]):
    """A step (or branch) started by :meth:`Parallel.start_soon`.

    Its :attr:`key` is fixed when it is started; its :attr:`result` can be
    read once the ``parallel()`` block has exited.
    """

    __slots__ = ("_block", "_value", "key")

    def __init__(self, block: Parallel, key: str) -> None:
        self._block = block
        self.key = key
        self._value: Any = _PENDING

    def __repr__(self) -> str:
        state = "pending" if self._value is _PENDING else "done"
        return f"<tether.Handle {self.key} {state}>"

    @property
    def result(self) -> R:
        """The decoded result.

        Raises:
            UsageError: the ``parallel()`` block has not exited yet, or the
                step did not complete (it raised or was cancelled).
        """
        if not self._block._closed:
            raise UsageError(
                f"the result of {self.key} is read inside its `async with tether.parallel()` "
                "block; read .result after the block has exited"
            )
        if self._value is _PENDING:
            raise UsageError(f"{self.key} did not complete (it raised or was cancelled)")
        value: R = self._value
        return value


@final
class Parallel:
    """A nursery inside a run whose children are tracked steps; see :func:`parallel`."""

    def __init__(self) -> None:
        self._frame: _Frame | None = None
        self._manager: Any = None
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self._children = 0  # children not finished yet
        self._exit_wait: Wait | None = None

    async def __aenter__(self) -> Parallel:
        if self._manager is not None:
            raise UsageError("a tether.parallel() block can be entered only once")
        self._frame = _current_frame("tether.parallel()")
        self._exit_wait = self._frame.run.wait()
        self._manager = trio.open_nursery()
        self._nursery = await self._manager.__aenter__()
        return self

    async def __aexit__(
        self, etype: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        assert self._exit_wait is not None
        try:
            # Waiting for the children does not keep the run from settling;
            # the last child to finish ends the wait (see _child_done).
            with self._exit_wait if self._children else contextlib.nullcontext():
                suppress: bool = await self._manager.__aexit__(etype, exc, tb)
            return suppress
        finally:
            self._closed = True

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """The block's cancel scope (cancelling it is framework-owned: saves drain)."""
        assert self._nursery is not None, "enter the block first"
        return self._nursery.cancel_scope

    def start_soon(
        self, fn: Callable[..., Awaitable[R]], *args: Any, key: str | None = None
    ) -> Handle[R]:
        """Start ``fn(*args)`` as a child of this block and return its handle.

        *fn* is a step (journaled under its key) or any other async function
        (a *branch*: its own steps journal under ``branch-name#n/``). The key
        is fixed now, in program order, so replay maps results to the same
        calls whatever order they finished in.

        Raises:
            UsageError: the block is not open, or this is not the task that
                opened it.
        """
        if self._nursery is None or self._frame is None or self._closed:
            raise UsageError("start_soon() needs an open `async with tether.parallel()` block")
        frame = self._frame
        if frame.task is not trio.lowlevel.current_task():
            raise UsageError(
                "start_soon() must be called from the task that opened the parallel() block"
            )
        if key is not None:
            check_key(key)
        if getattr(type(fn), STEP_MARKER, False):
            step: Step[..., R] = fn  # type: ignore[assignment]
            handle: Handle[R] = Handle(self, frame.next_key(step.name, key or step.key))
            child: Callable[..., Awaitable[None]] = self._child_step
        else:
            if not callable(fn):
                raise UsageError(f"start_soon() takes a step or an async function, not {fn!r}")
            name = getattr(fn, "name", None) or getattr(fn, "__name__", None) or "branch"
            handle = Handle(self, frame.next_key(name, key))
            child = self._child_branch
        self._nursery.start_soon(child, fn, handle, args, name=handle.key)
        self._children += 1
        frame.run.task_started()
        return handle

    def _child_done(self, run: RunState) -> None:
        self._children -= 1
        if not self._children and self._exit_wait is not None:
            self._exit_wait.end()  # the block's task is about to go on
        run.task_done()

    async def _child_step(
        self, step: Step[..., Any], handle: Handle[Any], args: tuple[Any, ...]
    ) -> None:
        assert self._frame is not None
        run = self._frame.run
        try:
            handle._value = await run.execute_step(step, handle.key, args, {})
        finally:
            self._child_done(run)

    async def _child_branch(
        self, fn: Callable[..., Awaitable[Any]], handle: Handle[Any], args: tuple[Any, ...]
    ) -> None:
        assert self._frame is not None
        run = self._frame.run
        _frame.set(_Frame(run, handle.key, trio.lowlevel.current_task()))
        try:
            handle._value = await fn(*args)
        finally:
            self._child_done(run)


@overload
async def ask(payload: Any, response_type: type[T], key: str | None = None) -> T: ...
@overload
async def ask(payload: Any, response_type: Any, key: str | None = None) -> Any: ...
async def ask(payload: Any, response_type: Any, key: str | None = None) -> Any:
    """Ask a human (or any outside party) and wait for the response.

    Use inside a workflow, a step or a ``parallel()`` branch. The request's
    key is fixed at call time like a step key (``path/ask#n``, or
    ``path/<key>`` with ``key=``), so it is stable across replays. With a
    journaled response (given to an earlier ``resume``), that response is
    returned at once, decoded strictly into *response_type*. Otherwise the
    asking task waits; when every live task of the run is finished or
    waiting in ``ask``, the run *settles*: completed steps' saves drain, the
    pending requests are stored with the run, the run's tasks are cancelled
    (framework-owned), and ``engine.run``/``engine.resume`` raise
    :class:`tether.Paused` listing every pending request.

    A checkpoint. The pause reaches the asking code as ``trio.Cancelled``,
    which ``except Exception`` cannot swallow; a step that asks is not
    failed by the pause, it runs again on resume and its nested steps that
    completed replay from the journal.

    Args:
        payload: what to ask; any value tether can encode to JSON (it is
            stored and shown as JSON values in ``Paused.requests``).
        response_type: the type the response is decoded into, strictly.
        key: an explicit key instead of ``ask#n`` (no ``/``).

    Raises:
        NotInRunError: outside a run, or in a task tether does not track.
        CodecError: the payload cannot be encoded to JSON.
        NonDeterminismError: the journal holds another payload for this key.
    """
    if key is not None:
        check_key(key)
    frame = _current_frame("tether.ask()")
    return await frame.run.ask(frame.next_key("ask", key), payload, response_type)


def parallel() -> Parallel:
    """Open a nursery inside the run: ``async with tether.parallel() as p:``.

    Children started with ``p.start_soon(step, *args)`` run concurrently; the
    block exits when all have finished. If one raises, the others are
    cancelled (framework-owned: steps that already completed still finish
    saving their records), and the errors propagate as an exception group.
    Only usable in a task tether tracks (the workflow, a step, a branch).
    """
    return Parallel()
