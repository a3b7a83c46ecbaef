"""The engine: the public API of runs (run, resume, cancel, inspect) and open_engine.

An engine reads a run, claims its lease (:mod:`._ownership`), and hands the
claimed run to one :class:`~._execution.Execution`, which owns the nurseries,
the lease and the outcome of that execution. ``open_engine`` owns the store's
lifetime and the engine's one lease task.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, nullcontext
from datetime import datetime
from typing import Any, ParamSpec, TypeVar, final

import attrs
import trio

from ._changes import Changes
from ._children import cancel_children, take_parent
from ._clock import Clock, check_clock
from ._codec import codec
from ._context import RunState, StoreErrors, error_info
from ._errors import (
    CheckpointCorruptError,
    CodecError,
    InvalidResponseError,
    NonDeterminismError,
    RunCancelledError,
    RunConflictError,
    RunFailedError,
    RunNotFoundError,
    UnknownRequestError,
    UsageError,
    WorkflowNotFoundError,
)
from ._events import OpenRun, take_observer
from ._execution import Execution
from ._hooks import Hooks
from ._nurseries import exit_nursery
from ._ownership import Leases, engine_closed, engine_opened, new_owner, owner_is_gone
from ._replay import decode_workflow_args
from ._requests import Paused, Request, request_from_json
from ._serving import live_workers, stranded_records
from ._signals import send
from ._workflow import Workflow, lookup_workflow, registered_keys, registered_names
from .stores._leases import version_conflict
from .stores._protocol import (
    STORE_METHODS,
    Entry,
    ErrorInfo,
    RunRecord,
    RunStatus,
    Served,
    Store,
    WorkerAd,
    utcnow,
)
from .stores._queue import check_run_filter

__all__ = ("Engine", "RunInfo", "open_engine")

P = ParamSpec("P")
R = TypeVar("R")


@final
@attrs.frozen(kw_only=True)
class RunInfo:
    """A run as stored: what :meth:`Engine.get_run` and :meth:`Engine.list_runs` return."""

    run_id: str
    workflow: str
    status: RunStatus
    #: the result when completed, decoded by the workflow's return annotation
    #: (as plain JSON values when the workflow is not defined in this process)
    result: Any
    error: ErrorInfo | None  #: what the run failed with, when failed
    requests: tuple[Request, ...]  #: pending requests (when paused)
    entries: tuple[Entry, ...]  #: the journal (``get_run`` only; empty from ``list_runs``)
    created_at: datetime
    updated_at: datetime
    #: the lease holder (``host:pid:engine-id``) of a run that is executing, or
    #: that was executing when its owner vanished; ``None`` once released
    owner: str | None = None
    #: when the owner's lease expires (store's clock); ``None`` once expired or released
    lease_expires_at: datetime | None = None
    #: ``True`` while a live owner executes the run; a ``running`` run that is
    #: not executing was interrupted (a crash, a caller cancellation) and can be resumed
    executing: bool = False
    #: a cancel was recorded; the owner stops the run within one renewal interval
    cancel_requested: bool = False
    #: how many times workers claimed the run without an outcome since it was
    #: submitted or last resumed by hand (``dead_letter`` at ``max_dispatches``)
    dispatches: int = 0
    #: the workflow version the run was started under (``None``: unversioned)
    version: str | None = None
    #: when a ``waiting`` run (parked on its timers) is due; ``None`` otherwise
    wake_at: datetime | None = None


#: engine.wait reads a waiting run again after this long at first, doubling to _MAX_POLL.
_FIRST_POLL = 0.01
_MAX_POLL = 1.0


def _validate_timeout(value: float | None, name: str) -> None:
    if value is not None and (not isinstance(value, int | float) or math.isnan(value) or value < 0):
        raise UsageError(f"{name} must be a non-negative number of seconds or None, not {value!r}")


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
        self._hooks = Hooks(hooks)
        self._save_timeout = float(save_timeout)
        self._owner, self._engine_id = new_owner()
        self._leases = Leases(store, self._owner, float(lease_ttl), self._save_timeout)
        self._active: set[str] = set()
        # Workflows this engine was handed, by (name, version); they win over the registry.
        self._workflows: dict[Served, Workflow[..., Any]] = {}
        self._changes = Changes()
        self._closed = False

    def __repr__(self) -> str:
        return f"<tether.Engine {self._owner} store={self._store!r} active={len(self._active)}>"

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
        if not isinstance(wf, Workflow):
            raise UsageError(f"engine.run() takes a @tether.workflow, not {wf!r}")
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise UsageError(f"run_id must be a non-empty string or None, not {run_id!r}")
        _validate_timeout(timeout, "timeout")
        self._check_open()
        args_text, decoded_args = self._encode_args(wf, args)
        self._workflows[(wf.name, wf.version)] = wf
        run_id = run_id or uuid.uuid4().hex
        with trio.fail_after(timeout) if timeout is not None else nullcontext():
            with StoreErrors(f"reading run {run_id!r}"):
                record = await self._store.get_run(run_id)
            if record is not None:
                _check_not_cancelled(record)
                if record.workflow != wf.name:
                    raise RunConflictError(
                        f"run {run_id!r} belongs to workflow {record.workflow!r}, not {wf.name!r}"
                    )
                if record.version != wf.version:
                    # Never another version's code over this run's journal.
                    raise version_conflict(record, wf.version)
                if record.args != args_text:
                    raise RunConflictError(
                        f"run {run_id!r} was started with other arguments ({record.args:.200}) "
                        f"than given now ({args_text:.200}); resume it with "
                        f"engine.resume({run_id!r}) or choose a new run_id"
                    )
            now = utcnow()
            # Given to the claim, which creates the run with its first lease if
            # it is (still) not stored, or else claims the stored one, if it is
            # the same workflow with the same arguments (a retry whose first
            # attempt's create landed after all resumes it).
            create = RunRecord(
                run_id=run_id,
                workflow=wf.name,
                version=wf.version,
                args=args_text,
                created_at=now,
                updated_at=now,
            )
            return await self._continue(wf, record, decoded_args, create=create)  # type: ignore[no-any-return]

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
        if not isinstance(wf, Workflow):
            raise UsageError(f"engine.open_run() takes a @tether.workflow, not {wf!r}")
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise UsageError(f"run_id must be a non-empty string or None, not {run_id!r}")
        _validate_timeout(timeout, "timeout")
        self._check_open()
        run_id = run_id or uuid.uuid4().hex
        return OpenRun(
            self, run_id, wf.name, lambda: self.run(wf, *args, run_id=run_id, timeout=timeout)
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
        _validate_timeout(timeout, "timeout")
        self._check_open()
        return OpenRun(self, run_id, None, lambda: self.resume(run_id, responses, timeout=timeout))

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
        _validate_timeout(timeout, "timeout")
        self._check_open()
        with trio.fail_after(timeout) if timeout is not None else nullcontext():
            with StoreErrors(f"reading run {run_id!r}"):
                record = await self._store.get_run(run_id)
            if record is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self._store!r}")
            _check_not_cancelled(record)
            provided = self._check_responses(record, responses) if responses else {}
            wf = self._find_workflow(record)
            return await self._continue(
                wf, record, self._decode_args(wf, record), provided=provided
            )

    async def submit(self, wf: Workflow[P, R], *args: Any, run_id: str | None = None) -> str:
        """Store a run of ``wf(*args)`` as ``queued`` for a worker, and return its id at once.

        Nothing executes here: a worker (:func:`tether.open_worker`, in any
        process sharing the store) claims and executes it; ``engine.run`` or
        ``engine.resume`` of the id executes it in the caller instead.
        Submitting an id that exists with the same workflow and arguments
        returns it and changes nothing, whatever the run's status (an
        idempotent start), so a retried submit never starts a second run.

        A checkpoint. A cancelled submit may or may not have stored the run;
        submitting again is safe.

        Raises:
            UsageError: *wf* is not a workflow, or the arguments do not fit it.
            RunConflictError: the id exists with another workflow or other arguments.
            CodecError: an argument cannot be encoded.
            StoreError: the store failed.
        """
        if not isinstance(wf, Workflow):
            raise UsageError(f"engine.submit() takes a @tether.workflow, not {wf!r}")
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise UsageError(f"run_id must be a non-empty string or None, not {run_id!r}")
        self._check_open()
        args_text, _ = self._encode_args(wf, args)
        self._workflows[(wf.name, wf.version)] = wf
        run_id = run_id or uuid.uuid4().hex
        now = utcnow()
        record = RunRecord(
            run_id=run_id,
            workflow=wf.name,
            version=wf.version,
            args=args_text,
            status=RunStatus.QUEUED,
            created_at=now,
            updated_at=now,
        )
        with StoreErrors(f"submitting run {run_id!r}"):
            try:
                await self._store.create_run(record)
            except RunConflictError:
                existing = await self._store.get_run(run_id)
                if existing is None:
                    raise
                if (existing.workflow, existing.args) != (wf.name, args_text):
                    raise RunConflictError(
                        f"run {run_id!r} exists with workflow {existing.workflow!r} and "
                        f"arguments {existing.args:.200}, not {wf.name!r} with "
                        f"{args_text:.200}; choose a new run_id"
                    ) from None
                if existing.version != wf.version:
                    raise version_conflict(existing, wf.version) from None
                return run_id
        self._changes.notify()
        return run_id

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
        _validate_timeout(timeout, "timeout")
        self._check_open()
        poll = _FIRST_POLL
        with trio.fail_after(timeout) if timeout is not None else nullcontext():
            while True:
                seen = self._changes.generation
                with StoreErrors(f"reading run {run_id!r}"):
                    record = await self._store.get_run(run_id)
                if record is None:
                    raise RunNotFoundError(f"no run {run_id!r} in {self._store!r}")
                if record.status is RunStatus.COMPLETED:
                    return self._decode_result(record, self._defined(record))
                if record.status in (RunStatus.FAILED, RunStatus.DEAD_LETTER):
                    error = record.error or ErrorInfo(type="unknown", message="(no error stored)")
                    where = f" in step {error.key}" if error.key else ""
                    raise RunFailedError(
                        f"run {run_id!r} {record.status.value.replace('_', '-')}{where}: "
                        f"{error.type}: {error.message}",
                        run_id=run_id,
                        error=error,
                    )
                if record.status is RunStatus.CANCELLED:
                    _check_not_cancelled(record)
                if record.status is RunStatus.PAUSED:
                    raise Paused(run_id, self._requests(record))
                await self._changes.wait(seen, poll)
                poll = min(poll * 2, _MAX_POLL)

    async def send(self, run_id: str, name: str, value: Any) -> None:
        """Send the message *name* with *value* to the run *run_id*, from any process.

        The run's workflow must be defined in this process (its name and
        version), and declare the message
        (``@tether.workflow(signals={name: type})``); the value is encoded by
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
        await send(self._store, run_id, name, value, find=self._find_workflow, now=self._clock.now)
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
        await self._cancel_one(run_id)
        await cancel_children(self._store, run_id, self._cancel_one)

    async def _cancel_one(self, run_id: str) -> None:
        """Record the cancel of *run_id*, not of its children (see :meth:`cancel`)."""
        with StoreErrors(f"cancelling run {run_id!r}"):
            record = await self._store.get_run(run_id)
            if record is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self._store!r}")
            takeover = None
            if (
                record.owner is not None
                and record.lease_expires_at is not None
                and (
                    owner_is_gone(record.owner)
                    # ours, and no longer executing here (a caller cancelled it;
                    # its release is pending): nobody executes it either
                    or (record.owner == self._owner and run_id not in self._active)
                )
            ):
                takeover = record.token  # its owner is gone: cancelled at once
            stored = await self._store.cancel_run(run_id, takeover=takeover)
        held = self._leases.held.get(run_id)
        if held is not None and stored.cancel_requested and stored.token == held.token:
            held.cancelled()

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The stored state of a run and its journal, or ``None`` for an unknown id.

        A checkpoint. Raises :class:`CheckpointCorruptError` for a record that
        cannot be read.
        """
        self._check_open()
        with StoreErrors(f"reading run {run_id!r}"):
            record = await self._store.get_run(run_id)
            if record is None:
                return None
            entries = await self._store.load_entries(run_id)
        return self._info(record, tuple(entries))

    async def list_runs(
        self,
        *,
        status: RunStatus | str | Iterable[RunStatus | str] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        version: str | None = None,
        stranded: bool = False,
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

        A checkpoint.

        Raises:
            UsageError: invalid filters, or *stranded* on a store that keeps
                no worker advertisements.
            RunNotFoundError: *after* names no stored run.
            CheckpointCorruptError: a listed record cannot be read.
        """
        self._check_open()
        if status is not None and not isinstance(status, str):
            status = list(status)
        selected = check_run_filter(status, workflow, after, limit, version)
        if stranded:
            with StoreErrors("listing stranded runs"):
                waiting = await stranded_records(self._store, selected)
            return [self._info(r, ()) for r in waiting]
        filters: dict[str, Any] = {
            k: v
            for k, v in (
                ("status", selected.status),
                ("workflow", workflow),
                ("after", after),
                ("limit", limit),
                ("version", version),
            )
            if v is not None
        }
        with StoreErrors("listing runs"):
            # Without filters, as stores written before filters existed take it.
            records = await self._store.list_runs(**filters)
        return [self._info(r, ()) for r in records]

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

    # -- internals ---------------------------------------------------------------

    def _check_responses(self, record: RunRecord, responses: Mapping[str, Any]) -> dict[str, Any]:
        """The responses as JSON primitives, once each names a pending request."""
        run_id = record.run_id
        if not isinstance(responses, Mapping):
            raise UsageError(
                f"responses must be a mapping of request keys to values, not {responses!r}"
            )
        keys = ", ".join(map(repr, responses))
        if (
            record.status is RunStatus.RUNNING
            and record.owner is not None
            and record.lease_expires_at is not None
            and (record.owner == self._owner or not owner_is_gone(record.owner))
        ):
            # Executing now, here or elsewhere: that execution took the run's
            # requests. A conflict, like any claim of a live lease.
            raise RunConflictError(
                f"run {run_id!r} is executing: owner {record.owner} holds its lease until "
                f"{record.lease_expires_at.isoformat()} (got responses {keys}); nothing was "
                "journaled. Answer again once the run has paused.",
                owner=record.owner,
                expires_at=record.lease_expires_at,
            )
        if record.status is RunStatus.COMPLETED:
            raise RunConflictError(
                f"run {run_id!r} has completed; it takes no responses (got {keys})"
            )
        pending = (
            [r.key for r in self._requests(record)] if record.status is RunStatus.PAUSED else []
        )
        unknown = [k for k in responses if k not in pending]
        if unknown:
            raise UnknownRequestError(
                f"run {run_id!r} (status {record.status}) has no pending request with key "
                f"{', '.join(map(repr, unknown))}; its pending requests: "
                f"{', '.join(map(repr, pending)) or 'none'}. Nothing was journaled."
            )
        provided: dict[str, Any] = {}
        for key, value in responses.items():
            try:
                provided[key] = codec.to_primitive(value, what=f"the response to {key}")
            except CodecError as exc:
                raise InvalidResponseError(
                    f"run {run_id!r}: {exc}. Nothing was journaled; the run stays paused."
                ) from None
        return provided

    def _requests(self, record: RunRecord) -> tuple[Request, ...]:
        try:
            return tuple(request_from_json(text) for text in record.requests)
        except (ValueError, TypeError) as exc:
            raise CheckpointCorruptError(
                f"run {record.run_id!r}: a stored pending request cannot be read: {exc}"
            ) from exc

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(
                "this engine is closed: use it inside its `async with open_engine(...)` block"
            )

    @contextmanager
    def _active_here(self, run_id: str) -> Iterator[None]:
        """Mark *run_id* as executing in this engine for the block."""
        if run_id in self._active:
            raise RunConflictError(f"run {run_id!r} is already executing in this engine")
        self._active.add(run_id)
        try:
            yield
        finally:
            self._active.discard(run_id)

    @staticmethod
    def _encode_args(wf: Workflow[..., Any], args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        """``wf(*args)``'s arguments as stored (JSON text), and decoded back from it (a copy).

        Static: :func:`tether.schedule` checks a schedule's arguments with it, at definition.

        Raises:
            UsageError: the arguments do not fit *wf*'s parameters.
            CodecError: an argument cannot be encoded, or decoded back.
        """
        try:
            wf.signature.bind(args, {})
        except TypeError as exc:
            raise UsageError(f"workflow {wf.name}: {exc}") from None
        text, decoded = codec.snapshot(
            args, wf.signature.args_type(len(args)), what=f"arguments of workflow {wf.name}"
        )
        return text, tuple(decoded)

    def _decode_args(self, wf: Workflow[..., Any], record: RunRecord) -> tuple[Any, ...]:
        # NonDeterminismError when the workflow's parameters changed (see there).
        return decode_workflow_args(wf.name, wf.fn, wf.signature, record.run_id, record.args)

    def _defined(self, record: RunRecord) -> Workflow[..., Any] | None:
        """The run's workflow if it is defined in this process, else ``None``."""
        try:
            return self._find_workflow(record)
        except WorkflowNotFoundError:
            return None

    def _find_workflow(self, record: RunRecord) -> Workflow[..., Any]:
        """The code of the run's workflow *and version*: given to this engine, or registered.

        Raises:
            WorkflowNotFoundError: neither here nor registered (naming the
                version and the versions that are registered).
        """
        wf = self._workflows.get((record.workflow, record.version))
        if wf is None:
            try:
                wf = lookup_workflow(record.workflow, record.version)
            except WorkflowNotFoundError as exc:
                v = record.version
                started = "" if v is None else f" (started under version {v!r})"
                raise WorkflowNotFoundError(f"run {record.run_id!r}{started}: {exc}") from None
        return wf

    def _decode_result(self, record: RunRecord, wf: Workflow[..., Any] | None) -> Any:
        if record.result is None:
            return None
        tp = wf.signature.return_type if wf is not None else Any
        try:
            return codec.decode(record.result, tp, what=f"result of run {record.run_id!r}")
        except CodecError as exc:
            raise CheckpointCorruptError(
                f"run {record.run_id!r}: stored result does not decode: {exc}"
            ) from exc

    def _info(self, record: RunRecord, entries: tuple[Entry, ...]) -> RunInfo:
        # Not defined here: the result is shown as stored (JSON values).
        wf = self._defined(record)
        executing = (
            record.owner is not None
            and record.lease_expires_at is not None
            and not owner_is_gone(record.owner)
        )
        return RunInfo(
            run_id=record.run_id,
            workflow=record.workflow,
            status=record.status,
            result=self._decode_result(record, wf),
            error=record.error,
            requests=self._requests(record),
            entries=entries,
            created_at=record.created_at,
            updated_at=record.updated_at,
            owner=record.owner,
            lease_expires_at=record.lease_expires_at if executing else None,
            executing=executing,
            cancel_requested=record.cancel_requested,
            dispatches=record.dispatches,
            version=record.version,
            wake_at=record.wake_at,
        )

    async def _continue(
        self,
        wf: Workflow[..., Any],
        current: RunRecord | None,
        args: tuple[Any, ...],
        *,
        create: RunRecord | None = None,
        provided: dict[str, Any] | None = None,
    ) -> Any:
        """Claim the run (read as *current*, or created from *create*) and execute it."""
        if current is not None and current.status is RunStatus.COMPLETED:
            return self._decode_result(current, wf)
        run_id = current.run_id if current is not None else create.run_id  # type: ignore[union-attr]
        with self._active_here(run_id):
            with StoreErrors(f"claiming run {run_id!r}"):
                record = await self._leases.claim(run_id, current=current, create=create)
            if record.status is RunStatus.COMPLETED:  # it completed since it was read
                return self._decode_result(record, wf)
            # Created by this claim (our record, first token): its journal is empty.
            created = (
                current is None
                and create is not None
                and record.token == 1
                and record.created_at == create.created_at
            )
            return await self._execute(
                wf,
                record,
                args,
                provided=provided or {},
                original=current or record,
                created=created,
            )

    async def execute_claimed(self, record: RunRecord, *, park_after: float | None = None) -> Any:
        """Execute a run a worker claimed (``record``, with this engine's lease); its outcome.

        For :mod:`._worker`. The workflow must be defined here (workers claim
        only those). With *park_after*, a run whose tasks all wait and whose
        next durable timer is due more than that many seconds from now parks
        (stored ``waiting``, released). A checkpoint; cancellation is a
        caller cancellation. Raises what :meth:`run` raises, ``Paused``, and
        ``Waiting`` for a parked run.
        """
        wf = self._find_workflow(record)
        with self._active_here(record.run_id):
            try:
                args = self._decode_args(wf, record)
            except (CheckpointCorruptError, NonDeterminismError) as exc:
                # Stored as failed (fenced by the claim's token), not released:
                # a released run would be claimed again, and fail again, forever.
                failed = attrs.evolve(
                    record,
                    status=RunStatus.FAILED,
                    error=error_info(exc),
                    owner=None,
                    updated_at=utcnow(),
                    lease_expires_at=None,
                )
                with StoreErrors(f"storing run {record.run_id!r} as failed"):
                    await self._store.update_run(failed)
                raise
            return await self._execute(
                wf, record, args, provided={}, original=record, park_after=park_after
            )

    def define(self, wf: Workflow[..., Any]) -> None:
        """Execute runs of ``wf.name`` and ``wf.version`` as *wf* in this engine (for workers)."""
        self._workflows[(wf.name, wf.version)] = wf

    def workflow_names(self) -> frozenset[str]:
        """The workflows this engine can execute: those defined in this process."""
        return registered_names() | {name for name, _ in self._workflows}

    def workflow_keys(self) -> frozenset[Served]:
        """``(name, version)`` of every workflow this engine can execute (for workers)."""
        return registered_keys() | self._workflows.keys()

    @property
    def changes(self) -> Changes:
        """What wakes this engine's waiters and workers (see :mod:`._changes`)."""
        return self._changes

    @property
    def leases(self) -> Leases:
        """This engine's leases (for :mod:`._worker`)."""
        return self._leases

    async def _execute(
        self,
        wf: Workflow[..., Any],
        record: RunRecord,
        args: tuple[Any, ...],
        *,
        provided: dict[str, Any],
        original: RunRecord,
        created: bool = False,
        park_after: float | None = None,
    ) -> Any:
        """Execute the claimed run *record*, holding its lease throughout."""
        parent = take_parent()  # (a child run, tether.child: it parks as its parent may)
        state = RunState(
            run_id=record.run_id,
            workflow=wf.name,
            store=self._store,
            hooks=self._hooks,
            save_timeout=self._save_timeout,
            journal={},
            provided=provided,
            observer=take_observer(),
            token=record.token,
            engine=self,
            parent=parent,
            clock=self._clock,
            park_after=park_after if parent is None else parent.park_after,
            signals=wf.signals,
        )
        execution = Execution(
            store=self._store,
            hooks=self._hooks,
            leases=self._leases,
            state=state,
            workflow=wf,
            args=args,
            record=record,
            original=original,
            created=created,
        )
        return await execution.execute()


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
    missing = [m for m in STORE_METHODS if not callable(getattr(store, m, None))]
    if missing:
        raise UsageError(
            f"open_engine() takes a tether store (see tether.stores.Store), not {store!r}: "
            f"it lacks {', '.join(missing)}. Stores of this version also take leases "
            "(claim, renew, cancel_run); a wrapper must forward those too, with their "
            "keyword arguments, and a store should pass tether.testing.check_store"
        )
    if (
        not isinstance(save_timeout, int | float)
        or isinstance(save_timeout, bool)
        or math.isnan(save_timeout)
        or save_timeout <= 0
    ):
        raise UsageError(f"save_timeout must be a positive number of seconds, not {save_timeout!r}")
    if (
        not isinstance(lease_ttl, int | float)
        or isinstance(lease_ttl, bool)
        or not 0 < lease_ttl < math.inf
    ):
        raise UsageError(
            f"lease_ttl must be a positive, finite number of seconds, not {lease_ttl!r}"
        )
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
            watch = getattr(store, "watch", None)
            if callable(watch):
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


def _check_not_cancelled(record: RunRecord) -> None:
    if record.status is RunStatus.CANCELLED:
        raise RunCancelledError(
            f"run {record.run_id!r} is cancelled; it never executes again (start a new run)"
        )
