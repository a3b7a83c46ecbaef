"""What callers hand the engine, checked and encoded before anything is read or written.

Layer: the engine (``_engine``).

Run ids, timeouts, the options of ``open_engine``, a workflow's arguments
(encoded as they are stored, and decoded back) and the responses given to
``resume``. Each check raises a clear :class:`UsageError` (or the error its
docstring names) before the engine touches the store, so a bad call changes
nothing. A workflow's arguments are encoded by
:func:`tether._api._workflow.encode_args`, which ``tether.schedule`` and
``tether.child`` use too, so all three accept exactly the same ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final

import trio

from .._api._ask import encode_response
from .._api._workflow import Workflow
from .._core._owners import owner_is_gone
from .._core._replay import decode_workflow_args
from .._errors import (
    RunConflictError,
    UnknownRequestError,
    UsageError,
)
from ..stores._records import RunRecord, RunStatus
from ..stores._run_ids import check_run_id as check_stored_id
from ..stores._store import STORE_METHODS
from ._info import pending_requests

__all__ = (
    "check_engine_options",
    "check_responses",
    "check_run_id",
    "check_workflow",
    "deadline",
    "decode_args",
    "validate_timeout",
)


def validate_timeout(value: float | None, name: str) -> None:
    """Raise :class:`UsageError` unless *value* is ``None`` or a non-negative number."""
    if value is not None and (not isinstance(value, int | float) or math.isnan(value) or value < 0):
        raise UsageError(f"{name} must be a non-negative number of seconds or None, not {value!r}")


#: What :func:`deadline` gives without a timeout: one for every run (a nullcontext is
#: reusable, and a held run costs no memory for it).
_NO_DEADLINE: Final = nullcontext()


def deadline(timeout: float | None) -> AbstractContextManager[object]:
    """``trio.fail_after(timeout)``, or no deadline for ``None``: what ``timeout=`` means."""
    return trio.fail_after(timeout) if timeout is not None else _NO_DEADLINE


def check_run_id(run_id: str | None) -> None:
    """Raise :class:`UsageError` unless *run_id* is ``None`` (a new id) or a valid run id.

    The rule is every store's (:func:`tether.stores.check_run_id`), checked
    before anything is stored.
    """
    if run_id is not None:
        check_stored_id(run_id)


def check_workflow(wf: object, call: str) -> None:
    """Raise :class:`UsageError` unless *wf*, given to *call* (``engine.run()``), is a workflow."""
    if not isinstance(wf, Workflow):
        raise UsageError(f"{call} takes a @tether.workflow, not {wf!r}")


def check_engine_options(store: object, save_timeout: float, lease_ttl: float) -> None:
    """Raise :class:`UsageError` unless ``open_engine``'s arguments are usable (see there)."""
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


def decode_args(wf: Workflow[..., Any], record: RunRecord) -> tuple[Any, ...]:
    """The stored arguments of the run *record*, decoded for *wf*."""
    # NonDeterminismError when the workflow's parameters changed (see there).
    return decode_workflow_args(wf.name, wf.fn, wf.signature, record.run_id, record.args)


def check_responses(record: RunRecord, responses: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """The responses as JSON primitives, once each names a pending request.

    *owner* is the resuming engine's: a run whose lease it holds, or that
    another live owner holds, is executing and takes no responses.

    Raises:
        UsageError: *responses* is not a mapping.
        RunConflictError: the run is executing, or has completed.
        UnknownRequestError: a response names no pending request.
        InvalidResponseError: a response cannot be encoded.
    """
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
        and (record.owner == owner or not owner_is_gone(record.owner))
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
        raise RunConflictError(f"run {run_id!r} has completed; it takes no responses (got {keys})")
    # (A paused run's, or a queued one's that engine.respond answered in part.)
    pending = [r.key for r in pending_requests(record)]
    unknown = [k for k in responses if k not in pending]
    if unknown:
        raise UnknownRequestError(
            f"run {run_id!r} (status {record.status}) has no pending request with key "
            f"{', '.join(map(repr, unknown))}; its pending requests: "
            f"{', '.join(map(repr, pending)) or 'none'}. Nothing was journaled."
        )
    provided: dict[str, Any] = {}
    for key, value in responses.items():
        provided[key] = encode_response(run_id, key, value)
    return provided
