"""Stored runs as callers see them: :class:`RunInfo`, and reading records strictly.

Layer: the engine (``_engine``).

Everything here reads; nothing executes or writes. ``get_run``,
``list_runs``, ``wait`` and the claim paths all decode a stored record's
result and pending requests by these functions, so a record that cannot be
decoded raises the same :class:`CheckpointCorruptError` whichever call read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeAlias, final

import attrs

from .._api._workflow import Workflow
from .._codec._values import codec
from .._core._owners import owner_is_gone
from .._core._store_calls import StoreErrors
from .._errors import CheckpointCorruptError, CodecError, ErrorInfo, Request, RunCancelledError
from ..stores._queue import check_run_filter
from ..stores._records import DEFAULT_QUEUE, Entry, RunRecord, RunStatus, request_from_json
from ..stores._store import Store
from ._serving import stranded_records

__all__ = (
    "RunInfo",
    "backing_off",
    "check_not_cancelled",
    "decode_result",
    "list_infos",
    "pending_requests",
    "read_info",
    "run_info",
)

#: The run's workflow when it is defined in this process (see ``Catalog.defined``).
Defined: TypeAlias = Callable[[RunRecord], Workflow[..., Any] | None]


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
    #: when a ``waiting`` run (parked on its timers, or submitted to start
    #: later) is due; ``None`` otherwise
    wake_at: datetime | None = None
    #: the queue it was submitted to (``"default"`` without ``queue=``)
    queue: str = DEFAULT_QUEUE
    #: the key it was submitted with (``engine.submit(key=)``), or ``None``
    key: str | None = None
    #: its dedupe id (``engine.submit(dedupe=)``), or ``None``
    dedupe: str | None = None
    #: ``True`` for a ``waiting`` run that never started: submitted to start
    #: at ``wake_at`` (``not_before``, ``debounce``)
    scheduled: bool = False


def check_not_cancelled(record: RunRecord) -> None:
    """Raise :class:`RunCancelledError` for a cancelled run."""
    if record.status is RunStatus.CANCELLED:
        raise RunCancelledError(
            f"run {record.run_id!r} is cancelled; it never executes again (start a new run)"
        )


def decode_result(record: RunRecord, wf: Workflow[..., Any] | None) -> Any:
    """The run's stored result, decoded by *wf*'s return annotation (JSON values without *wf*).

    Raises:
        CheckpointCorruptError: the stored result does not decode.
    """
    if record.result is None:
        return None
    tp = wf.signature.return_type if wf is not None else Any
    try:
        return codec.decode(record.result, tp, what=f"result of run {record.run_id!r}")
    except CodecError as exc:
        raise CheckpointCorruptError(
            f"run {record.run_id!r}: stored result does not decode: {exc}"
        ) from exc


def pending_requests(record: RunRecord) -> tuple[Request, ...]:
    """The run's stored pending requests.

    Raises:
        CheckpointCorruptError: one cannot be read.
    """
    try:
        return tuple(request_from_json(text) for text in record.requests)
    except (ValueError, TypeError) as exc:
        raise CheckpointCorruptError(
            f"run {record.run_id!r}: a stored pending request cannot be read: {exc}"
        ) from exc


def run_info(record: RunRecord, entries: tuple[Entry, ...], defined: Defined) -> RunInfo:
    """*record* (with its journal *entries*) as a :class:`RunInfo`."""
    # Not defined here: the result is shown as stored (JSON values).
    wf = defined(record)
    executing = (
        record.owner is not None
        and record.lease_expires_at is not None
        and not owner_is_gone(record.owner)
    )
    return RunInfo(
        run_id=record.run_id,
        workflow=record.workflow,
        status=record.status,
        result=decode_result(record, wf),
        error=record.error,
        requests=pending_requests(record),
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
        queue=record.queue,
        key=record.key,
        dedupe=record.dedupe,
        scheduled=record.status is RunStatus.WAITING and record.token == 0,
    )


async def read_info(store: Store, run_id: str, defined: Defined) -> RunInfo | None:
    """What :meth:`Engine.get_run <tether.Engine.get_run>` returns (see there)."""
    with StoreErrors(f"reading run {run_id!r}"):
        record = await store.get_run(run_id)
        if record is None:
            return None
        entries = await store.load_entries(run_id)
    return run_info(record, tuple(entries), defined)


async def list_infos(
    store: Store,
    defined: Defined,
    *,
    status: RunStatus | str | Iterable[RunStatus | str] | None,
    workflow: str | None,
    after: str | None,
    limit: int | None,
    version: str | None,
    stranded: bool,
    queue: str | None = None,
    key: str | None = None,
) -> list[RunInfo]:
    """What :meth:`Engine.list_runs <tether.Engine.list_runs>` returns (see there)."""
    if status is not None and not isinstance(status, str):
        status = list(status)
    selected = check_run_filter(status, workflow, after, limit, version, queue, key)
    if stranded:
        with StoreErrors("listing stranded runs"):
            waiting = await stranded_records(store, selected)
        return [run_info(r, (), defined) for r in waiting]
    with StoreErrors("listing runs"):
        records = await store.list_runs(**selected.given())
    return [run_info(r, (), defined) for r in records]


def backing_off(info: RunInfo) -> bool:
    """Whether *info* waits because its last executions could not store their outcome.

    Such a run is ``waiting`` until its redispatch time with the dispatches
    it used (a run parked on its timers reached an outcome: it has none).
    """
    return info.status is RunStatus.WAITING and info.wake_at is not None and info.dispatches > 0
