"""The engine: the public API of runs (run, resume, submit, wait, cancel, inspect) and open_engine.

Layer: the engine (``_engine``), its face. :class:`Engine` shows users'
methods only: each checks its arguments (:mod:`._inputs`) and hands the
work to the part that does it:

- :mod:`._launch` reads a run, claims its lease (:mod:`._ownership`) and
  hands the claimed run to one :class:`~._execution.Execution`, which owns
  the nurseries and the lease of that execution, and its
  :class:`~._outcomes.Outcome`;
- :mod:`._control` submits, waits for and cancels runs through the store
  without executing them;
- :mod:`._info` reads stored runs as :class:`RunInfo`;
- :mod:`._catalog` finds the code of a stored run's workflow.

:class:`Internals` is what workers and a run's own code need beyond that
(:func:`internals`): the engine's leases, its changes, executing a claimed
run. ``open_engine`` owns the store's lifetime and the engine's one lease task.

Whole because it is one concern, the engine's face: every public method is
a few lines of argument checks and a docstring (most of the module) that
hands over to the modules above; :class:`Internals` reads the engine's
private state, so it lives beside the class whose state it is.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, ParamSpec, TypeVar, final

import trio

from .._api._workflow import Workflow, encode_args
from .._core._changes import Changes
from .._core._clock import Clock, check_clock
from .._core._hooks import Hooks
from .._core._nurseries import exit_nursery
from .._core._owners import engine_closed, engine_opened, new_owner
from .._core._store_calls import StoreErrors
from .._errors import UsageError
from ..stores._capabilities import Capability, has
from ..stores._flow import Queue
from ..stores._owners import Served, WorkerAd
from ..stores._records import Entry, RunRecord, RunStatus
from ..stores._store import Store
from ._catalog import Catalog
from ._control import check_placement, record_cancel, submit_run, wait_for_run
from ._info import RunInfo, list_infos, read_info
from ._inputs import (
    check_engine_options,
    check_run_id,
    check_workflow,
    deadline,
    validate_timeout,
)
from ._launch import Launcher
from ._live import OpenRun
from ._ownership import Leases
from ._respond import respond
from ._send import send
from ._serving import live_serves, live_workers

# RunInfo is re-exported: its home is ._info.
__all__ = ("Engine", "Internals", "RunInfo", "internals", "open_engine")

P = ParamSpec("P")
R = TypeVar("R")


@final
class Engine:
    """Runs workflows against one store. Made by :func:`open_engine`."""

    def __init__(
        self,
        store: Store,
        *,
        hooks: Iterable[object],
        save_timeout: float,
        lease_ttl: float = 15.0,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._clock = check_clock(clock)
        self._save_timeout = float(save_timeout)
        self._owner, self._engine_id = new_owner()
        self._leases = Leases(store, self._owner, float(lease_ttl), self._save_timeout)
        self._catalog = Catalog()
        self._changes = Changes()
        self._internals = Internals(self)
        self._launcher = Launcher(
            store=store,
            hooks=Hooks(hooks),
            save_timeout=self._save_timeout,
            leases=self._leases,
            clock=self._clock,
            catalog=self._catalog,
            host=self._internals,
        )
        self._closed = False

    def __repr__(self) -> str:
        active = len(self._launcher.active)
        return f"<tether.Engine {self._owner} store={self._store!r} active={active}>"

    @property
    def store(self) -> Store:
        """The store this engine journals into."""
        return self._store

    @property
    def owner(self) -> str:
        """This engine's owner name, ``host:pid:engine-id``, as leases show it."""
        return self._owner

    @property
    def save_timeout(self) -> float:
        """Seconds each shielded save (and each lease release on close) may take."""
        return self._save_timeout

    @property
    def clock(self) -> Clock:
        """The wall clock durable timers and schedules measure against."""
        return self._clock

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts without renewal; renewed every third of that."""
        return self._leases.ttl

    # -- public API ------------------------------------------------------------

    async def run(
        self,
        wf: Workflow[P, R],
        *args: Any,
        run_id: str | None = None,
        timeout: float | None = None,
    ) -> R:
        """Run ``wf(*args)`` durably and return its result.

        With a *run_id* that is stored and unfinished, the run resumes instead
        (the arguments must equal the stored ones); with one that completed,
        the stored result is returned and nothing executes.

        This is a checkpoint. ``timeout=`` behaves like ``trio.fail_after``;
        an enclosing cancel scope works the same way. Either is prompt even
        when the store hangs: saves in flight are cut short, no status is
        written, and the run stays ``running`` and resumable.

        Before anything executes, the engine claims the run's lease (a new
        run is created with its first lease, in one write); while it
        executes, every write carries the lease's fencing token.

        Raises:
            Exception: whatever the workflow raised, as itself (exception
                groups from ``parallel()`` as groups); the run is stored as
                ``failed`` and can be resumed.
            trio.TooSlowError: ``timeout`` expired.
            RunConflictError: the run id exists with another workflow or other
                arguments, is executing in this engine now, or another live
                owner holds its lease (raised at once, naming the owner and
                its lease expiry; nothing was executed or written).
            RunCancelledError: the run is cancelled (raised before any other
                check), or was cancelled while it executed here.
            LeaseLostError: this engine lost the run's lease while executing
                it (prompt; nothing more was written).
            StoreError, CodecError, NonDeterminismError: see their docs.
        """
        check_workflow(wf, "engine.run()")
        check_run_id(run_id)
        validate_timeout(timeout, "timeout")
        self._check_open()
        args_text, decoded_args = encode_args(wf, args)
        self._catalog.define(wf)
        run_id = run_id or uuid.uuid4().hex
        with deadline(timeout):
            execution = await self._launcher.start(wf, run_id, args_text, decoded_args)
            return await execution.execute()  # type: ignore[no-any-return]

    def open_run(
        self,
        wf: Workflow[P, R],
        *args: Any,
        run_id: str | None = None,
        timeout: float | None = None,
    ) -> OpenRun[R]:
        """Run ``wf(*args)`` in the background of a block and watch it live.

        ``async with engine.open_run(wf, *args) as run:`` starts (or resumes,
        like :meth:`run`) the run in a task the block owns; ``async for event
        in run.events()`` yields its events as they happen, and ``await
        run.result()`` its outcome. Events are buffered without bound, so the
        run never waits for the reader.

        Leaving the block while the run executes cancels it, as a *caller*
        cancellation: promptly, even when the store hangs, and the run stays
        ``running`` and resumable. Errors of the run do not propagate out of
        the block; :meth:`LiveRun.result <tether.LiveRun.result>` raises them.

        Raises:
            UsageError: *wf* is not a workflow, or *run_id* or *timeout* is invalid.
        """
        check_workflow(wf, "engine.open_run()")
        check_run_id(run_id)
        validate_timeout(timeout, "timeout")
        self._check_open()
        run_id = run_id or uuid.uuid4().hex

        async def workflow_of() -> str:
            return wf.name

        return OpenRun(
            run_id, workflow_of, lambda: self.run(wf, *args, run_id=run_id, timeout=timeout)
        )

    def open_resume(
        self,
        run_id: str,
        responses: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> OpenRun[Any]:
        """Resume a run in the background of a block and watch it live.

        ``async with engine.open_resume(run_id, responses=...) as run:`` is to
        :meth:`resume` what :meth:`open_run` is to :meth:`run`: same events,
        same ``run.result()``, and leaving the block early is a prompt caller
        cancellation.

        Raises:
            UsageError: *timeout* is invalid. (What :meth:`resume` raises
                comes out of ``run.result()``.)
        """
        validate_timeout(timeout, "timeout")
        self._check_open()

        async def workflow_of() -> str | None:  # the run names its workflow
            info = await self.get_run(run_id)
            return info.workflow if info is not None else None

        return OpenRun(run_id, workflow_of, lambda: self.resume(run_id, responses, timeout=timeout))

    async def resume(
        self,
        run_id: str,
        responses: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Continue a failed, paused, waiting or interrupted run from its journal.

        The workflow is found by the name stored with the run (it must be
        defined in this process). Completed steps replay without executing;
        the rest run. A completed run returns its stored result.

        This is a checkpoint; cancellation behaves as for :meth:`run`.

        Raises:
            RunNotFoundError: no run with this id.
            RunCancelledError: the run is cancelled (before any other check).
            WorkflowNotFoundError: its workflow is not registered here.
            RunConflictError: *responses* were given for a finished run, or
                another live owner holds the run's lease.
            UnknownRequestError: a response names no pending request.
            BaseException: anything :meth:`run` raises, for the same reasons.
        """
        validate_timeout(timeout, "timeout")
        self._check_open()
        with deadline(timeout):
            execution = await self._launcher.resume(run_id, responses)
            return await execution.execute()

    async def respond(self, run_id: str, responses: Mapping[str, Any]) -> None:
        """Respond to the paused run's requests and queue it for the workers; execute nothing.

        Each response is encoded and decoded back strictly into the type its
        request asks for (as :meth:`resume` would decode it; the type is
        found by its name in the workflow's module, so the run's workflow
        must be defined in this process). Then the responses are journaled
        **and** the run made ``queued`` in one atomic store write, and this
        returns: a worker (:func:`tether.open_worker`, in any process
        sharing the store) executes the run from there. Requests not
        answered stay pending; the run asks them again when it pauses. A
        run that no live worker serves waits, listed as stranded (``tether
        runs list --stranded``) until a worker comes or it is resumed here.

        A checkpoint. Cancelled, the responses were recorded whole or not at
        all (for a store that writes in a thread, the write may land after
        the cancellation: a respond sent again then gets ``RunConflictError``).
        On any error, nothing was stored.

        Raises:
            UsageError: *responses* is not a non-empty mapping, the store
                cannot take responses (it is not a ``RespondingStore``), or a
                response type is not found in the workflow's module.
            RunNotFoundError: no run with this id.
            UnknownRequestError: a key is not among the paused run's pending
                requests (the error names them).
            InvalidResponseError: a response does not encode, or does not
                decode strictly into its type.
            RunConflictError: the run is finished, cancelled or executing, or
                its requests were answered already (two responds racing for
                one request: exactly one wins).
            WorkflowNotFoundError: the run's workflow is not defined here.
            StoreError: the store failed.
        """
        self._check_open()
        await respond(self._store, run_id, responses, find=self._catalog.find, now=self._clock.now)
        self._changes.notify()  # a worker of this engine claims it at once

    async def submit(
        self,
        wf: Workflow[P, R],
        *args: Any,
        run_id: str | None = None,
        queue: Queue | None = None,
        key: str | None = None,
        dedupe: str | None = None,
        debounce: float | None = None,
        not_before: datetime | None = None,
    ) -> str:
        """Store a run of ``wf(*args)`` for a worker, and return its id at once.

        Nothing executes here: a worker (:func:`tether.open_worker`, in any
        process sharing the store) claims and executes it; ``engine.run`` or
        ``engine.resume`` of the id executes it in the caller instead.
        Submitting an id that exists with the same workflow and arguments
        returns it and changes nothing, whatever the run's status (an
        idempotent start), so a retried submit never starts a second run.

        The run is ``queued`` in *queue* (:class:`tether.Queue`; ``None``: the
        unlimited default queue), with *key* (kept with the run, listed), or:

        - *not_before* (timezone-aware, later than now): ``waiting`` until
          then; workers claim it once it is due;
        - *dedupe*: while a run of *queue* submitted with this id is
          unfinished, return its id and store nothing (a new run once it
          finished); checked in the submit's own atomic step, so concurrent
          submits from any process make one run;
        - *debounce* seconds (with *dedupe*): ``waiting`` until now +
          *debounce*; a submit while the dedupe id's run has not started
          replaces its arguments and moves its start to now + *debounce*:
          the last submit wins;
        - a queue with ``max_queued``: a submit that finds that many of its
          runs waiting to start raises :class:`~tether.QueueFullError`.

        A checkpoint. A cancelled submit may or may not have stored the run;
        submitting again is safe.

        Raises:
            UsageError: *wf* is not a workflow, the arguments do not fit it,
                a flow-control argument is invalid, or the store does not
                keep queues' rules and *dedupe* or ``max_queued`` is given.
            QueueFullError: the queue is at ``max_queued``; nothing was stored.
            RunConflictError: the id exists with another workflow or other
                arguments; or a debounced submit names another workflow than
                its dedupe id's run.
            CodecError: an argument cannot be encoded.
            StoreError: the store failed.
        """
        check_workflow(wf, "engine.submit()")
        check_run_id(run_id)
        placement = check_placement(queue, key, dedupe, debounce, not_before)
        self._check_open()
        args_text, _ = encode_args(wf, args)
        self._catalog.define(wf)
        run_id = run_id or uuid.uuid4().hex
        return await submit_run(
            self._store, self._changes, wf, run_id, args_text, placement, self._clock.now()
        )

    async def wait(self, run_id: str, *, timeout: float | None = None) -> Any:
        """Wait, from any process, until the run finishes or pauses; return its result.

        Never claims or executes anything. The result is decoded by the
        workflow's return annotation when the workflow is defined in this
        process (else it comes as stored JSON values). A queued or running
        run is read again on every change this engine learns of (at once
        where the store announces changes) and at least every second; a
        ``waiting`` run (parked by a worker on its timers) is waited through.

        A checkpoint; ``timeout=`` behaves like ``trio.fail_after``.

        Raises:
            RunNotFoundError: no run with this id.
            RunFailedError: the run failed, or was set aside as ``dead_letter``
                (its ``.error`` is the stored error).
            RunCancelledError: the run was cancelled.
            Paused: the run paused, waiting for responses (``.requests``).
            trio.TooSlowError: ``timeout`` expired.
            StoreError, CheckpointCorruptError: the store failed, or the
                record cannot be read.
        """
        validate_timeout(timeout, "timeout")
        self._check_open()
        with deadline(timeout):
            return await wait_for_run(self._store, self._changes, run_id, self._catalog.defined)

    async def send(self, run_id: str, name: str, value: Any) -> None:
        """Send the message *name* with *value* to the run *run_id*, from any process.

        The run's workflow must be defined in this process (its name and
        version), and declare the message
        (``@tether.workflow(messages={name: type})``); the value is encoded by
        that type and decoded back strictly, as ``tether.receive`` will decode
        it. Only then is it stored in the run's mailbox, after the messages
        sent before it; it waits there until a ``tether.receive(name, type)``
        of the run takes it (each message is taken by exactly one receiving
        call, in send order per name). A receive waiting in this process
        wakes at once; one in another process where the store announces
        changes, else within a second. A run parked by a worker, waiting for
        messages or timers, is made due in the same write, so any worker
        claims it at once. A paused run keeps its messages for its resume.

        A checkpoint. Cancelled, the message was stored whole or not at all
        (for a store that writes in a thread, it may land after the
        cancellation): a message sent again is a second message.

        Raises:
            UsageError: *run_id* or *name* is invalid, or the store keeps no
                messages (it is not a ``MailboxStore``).
            RunNotFoundError: no run with this id.
            RunConflictError: the run has finished (completed, failed,
                dead-letter or cancelled: the error names which); nothing was
                stored.
            WorkflowNotFoundError: the run's workflow (or its version) is not
                defined in this process: import the module that defines it.
            MessageRejectedError: the workflow declares no message *name*, or
                *value* is not of its type; nothing was stored.
            StoreError: the store failed.
        """
        self._check_open()
        await send(self._store, run_id, name, value, find=self._catalog.find, now=self._clock.now)
        self._changes.notify()  # receives waiting here read the mailbox at once

    async def cancel(self, run_id: str) -> None:
        """Cancel the run *run_id*, wherever it executes; ``cancelled`` is final.

        Returns once the cancel is recorded; it does not wait for a remote
        owner. A run executing in this engine is told at once; one executing
        in another engine or process stops within one lease renewal interval
        (``lease_ttl / 3``): its owner cancels it (completed steps' saves
        drain, bounded by ``save_timeout``), stores ``cancelled``, and its
        ``engine.run`` raises :class:`RunCancelledError`. A paused, failed,
        waiting or interrupted run (no live owner, or only this engine's lease
        on a run it no longer executes) becomes ``cancelled`` at once. The
        journal is kept; pending requests are cleared. Cancelling a cancelled
        run does nothing.

        The run's child runs (``tether.child``) are cancelled with it, and
        theirs: each unfinished child its journal names gets a cancel
        recorded the same way, after the run's own.

        A checkpoint; cancelling this call leaves the cancel recorded or not.

        Raises:
            RunNotFoundError: no run with this id.
            RunConflictError: the run has completed (nothing changes).
            StoreError: the store failed.
        """
        self._check_open()
        await record_cancel(self._store, self._leases, self._launcher.active, run_id)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The stored state of a run and its journal, or ``None`` for an unknown id.

        A checkpoint. Raises :class:`CheckpointCorruptError` for a record that
        cannot be read.
        """
        self._check_open()
        return await read_info(self._store, run_id, self._catalog.defined)

    async def list_runs(
        self,
        *,
        status: RunStatus | str | Iterable[RunStatus | str] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        version: str | None = None,
        stranded: bool = False,
        queue: str | None = None,
        key: str | None = None,
    ) -> list[RunInfo]:
        """Stored runs, oldest first, without journals (use :meth:`get_run`).

        Args:
            status: only runs with this status, or one of these.
            workflow: only runs of this workflow (its registered name).
            after: a run id: the runs after it (pass the last id of a page
                to get the next page).
            limit: at most this many.
            version: only runs started under this workflow version.
            stranded: only runs that wait for a worker (``queued``,
                ``waiting`` on a timer, or ``running`` without a live
                lease) whose workflow and version
                no live worker serves, as workers advertise it in the store
                (with no worker alive, every waiting run is stranded). The
                answer is as fresh as the advertisements: a worker that
                started a moment ago may not be counted yet, and a crashed
                one counts until its advertisement expires (``lease_ttl``).
            queue: only runs of this queue (its name; ``"default"``: runs
                submitted without ``queue=``).
            key: only runs submitted with this key.

        Filters that a run listing did not have at first (*version*,
        *queue*, *key*) are passed to the store only when given, so a
        store written before them still lists runs.

        A checkpoint.

        Raises:
            UsageError: invalid filters, or *stranded* on a store that keeps
                no worker advertisements.
            RunNotFoundError: *after* names no stored run.
            CheckpointCorruptError: a listed record cannot be read.
        """
        self._check_open()
        return await list_infos(
            self._store,
            self._catalog.defined,
            status=status,
            workflow=workflow,
            after=after,
            limit=limit,
            version=version,
            stranded=stranded,
            queue=queue,
            key=key,
        )

    async def list_workers(self) -> list[WorkerAd]:
        """The workers alive on this store and what each serves (their advertisements).

        A checkpoint.

        Raises:
            UsageError: the store keeps no worker advertisements.
            CheckpointCorruptError: an advertisement cannot be read.
        """
        self._check_open()
        with StoreErrors("listing workers"):
            return await live_workers(self._store)

    def workflow_names(self) -> frozenset[str]:
        """The workflows this engine can execute: those defined in this process."""
        return self._catalog.names()

    # -- internals ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(
                "this engine is closed: use it inside its `async with open_engine(...)` block"
            )


@final
class Internals:
    """What workers and a run's own code need of an engine beyond its users' methods.

    Not part of :class:`Engine`'s face: :func:`internals` hands it to the
    worker layer, and the engine hands it to each run it executes as the
    run's :class:`~tether._core._host.Host` (``tether.child``, ``tether.receive``).
    """

    __slots__ = ("_engine",)

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def owner(self) -> str:
        """The engine's owner name, ``host:pid:engine-id``."""
        return self._engine._owner

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts without renewal."""
        return self._engine._leases.ttl

    @property
    def changes(self) -> Changes:
        """What wakes this engine's waiters and workers (see :mod:`tether._core._changes`)."""
        return self._engine._changes

    @property
    def leases(self) -> Leases:
        """This engine's leases."""
        return self._engine._leases

    @property
    def engine_id(self) -> str:
        """The engine's id, the last part of its owner name (see ``tether._core._owners``)."""
        return self._engine._engine_id

    def mark_closed(self) -> None:
        """The engine takes no more calls, as when its ``open_engine`` block is over.

        For ``tether.testing``'s simulated processes, which open engines by hand.
        """
        self._engine._closed = True

    async def execute_claimed(
        self,
        record: RunRecord,
        *,
        park_after: float | None = None,
        journal: Sequence[Entry] | None = None,
    ) -> Any:
        """Execute a run a worker claimed (``record``, with this engine's lease); its outcome.

        For :mod:`._worker`. The workflow must be defined here (workers claim
        only those). With *park_after*, a run whose tasks all wait and whose
        next durable timer is due more than that many seconds from now parks
        (stored ``waiting``, released). *journal* is the run's journal as the
        claim read it (``None``: it is loaded). A checkpoint; cancellation is
        a caller cancellation. Raises what :meth:`run` raises, ``Paused``, and
        ``Waiting`` for a parked run.
        """
        execution = await self._engine._launcher.claimed(
            record, park_after=park_after, journal=journal
        )
        return await execution.execute()

    async def served(self) -> frozenset[Served] | None:
        """Every ``(workflow, version)`` a live worker serves now (the dashboard and
        ``runs`` say which runs wait in vain, and which a worker takes over);
        ``None`` when the store cannot tell. A checkpoint."""
        return await live_serves(self._engine._store)

    def define(self, wf: Workflow[..., Any]) -> None:
        """Execute runs of ``wf.name`` and ``wf.version`` as *wf* in this engine (for workers)."""
        self._engine._catalog.define(wf)

    def workflow_keys(self) -> frozenset[Served]:
        """``(name, version)`` of every workflow this engine can execute (for workers)."""
        return self._engine._catalog.keys()

    async def run(self, workflow: Any, /, *args: Any, run_id: str | None = None) -> Any:
        """:meth:`Engine.run`, for ``tether.child``."""
        return await self._engine.run(workflow, *args, run_id=run_id)

    async def resume(self, run_id: str, /) -> Any:
        """:meth:`Engine.resume`, for ``tether.child``."""
        return await self._engine.resume(run_id)

    async def wait(self, run_id: str, /) -> Any:
        """:meth:`Engine.wait`, for ``tether.child``."""
        return await self._engine.wait(run_id)

    async def cancel(self, run_id: str, /) -> None:
        """:meth:`Engine.cancel`, for ``tether.child``."""
        await self._engine.cancel(run_id)


def internals(engine: Engine) -> Internals:
    """*engine*'s internals, for the worker layer and ``tether.testing``."""
    return engine._internals


@asynccontextmanager
async def open_engine(
    store: Store,
    *,
    hooks: Sequence[object] = (),
    save_timeout: float = 30.0,
    lease_ttl: float = 15.0,
    clock: Clock | None = None,
) -> AsyncIterator[Engine]:
    """Open *store* and yield an :class:`Engine` that runs workflows on it.

    The engine owns the store's lifetime: ``store.open()`` is awaited on
    entry and ``store.close()`` on exit. Runs execute in the tasks that call
    :meth:`Engine.run`, so no task outlives the block.

    Args:
        store: any :class:`tether.stores.Store`.
        hooks: objects with any of the async methods ``on_run_start``,
            ``on_run_end``, ``on_step_start``, ``on_step_end``,
            ``on_checkpoint``; each is called with one :class:`HookEvent`.
        save_timeout: seconds each shielded save (and each end hook) may
            take. Saves are shielded from framework-owned cancellation (a
            failing sibling), so this bound is what keeps a hung store from
            holding a failing run forever; a save that overruns fails with
            :class:`SaveTimeoutError`. Must be positive; ``math.inf``
            disables the bound.
        lease_ttl: seconds a run's lease lasts without renewal. The engine
            claims each run before executing it and renews all its leases
            in one store call every ``lease_ttl / 3``, in a task this block
            owns. A run whose lease is lost stops with
            :class:`LeaseLostError`; a crashed owner's runs can be taken over
            once its lease expires (at once on the same machine when its
            process is gone). Must be positive.
        clock: the wall clock durable waits are measured against (an object
            with ``now() -> datetime``); the system clock by default.
            :class:`tether.testing.TrioWallClock` follows trio's clock, for
            virtual-time tests of workflows that wait for days.

    Leaving the block ends this engine's leases (best effort, bounded by
    ``save_timeout``), so another engine can take its runs over at once.
    """
    check_engine_options(store, save_timeout, lease_ttl)
    engine = Engine(
        store, hooks=hooks, save_timeout=save_timeout, lease_ttl=lease_ttl, clock=check_clock(clock)
    )
    await store.open()
    engine_opened(engine._engine_id)
    try:
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        try:
            # Named without the owner's random id: seeded schedule traces name tasks.
            nursery.start_soon(engine._leases.run, name="tether leases")
            if has(store, Capability.WATCH):
                watch = store.watch  # type: ignore[attr-defined]
                nursery.start_soon(engine._changes.follow, watch, name="tether changes")
            try:
                yield engine
            finally:
                engine._closed = True
                await engine._leases.close()
        finally:
            nursery.cancel_scope.cancel()
            await exit_nursery(manager)
    finally:
        engine_closed(engine._engine_id)
        await store.close()
