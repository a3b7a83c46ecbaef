"""``engine.respond``: responses checked here, then recorded for the workers in one write.

Layer: the engine (``_engine``).

A respond never executes the run. It reads the run, finds each pending
request's response type again by the name stored with the request (in the
run's workflow module, :func:`~tether._codec._resolve.resolve_type`; failing
that, the response's own class if it has that name), encodes
each response and decodes it back strictly into that type, exactly as the
run will when its ``ask`` replays it, and then hands the store the response
entries. The store journals them and queues the run in one atomic step
(:class:`~tether.stores.RespondingStore`), deciding again on what it holds
then (:func:`~tether.stores.decide_respond`), so that a respond racing
another, or a worker's claim, is refused, never half-written. A worker then
executes the run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from .._api._ask import encode_response, refused_response, response_entry
from .._codec._converter import describe
from .._codec._json import digest, dumps
from .._codec._resolve import resolve_type
from .._codec._values import codec
from .._core._store_calls import StoreErrors
from .._errors import (
    CodecError,
    RunNotFoundError,
    UsageError,
    WorkflowNotFoundError,
)
from ..stores._capabilities import responder_of
from ..stores._records import Entry, RunRecord
from ..stores._respond import decide_respond
from ..stores._run_ids import check_run_id
from ..stores._store import Store
from ._catalog import not_defined_here
from ._info import pending_requests

__all__ = ("respond",)


class _Defines(Protocol):
    """What a respond needs of a workflow (a ``tether.Workflow``)."""

    @property
    def name(self) -> str: ...
    @property
    def fn(self) -> Callable[..., Any]: ...


async def respond(
    store: Store,
    run_id: str,
    responses: Mapping[str, Any],
    *,
    find: Callable[[RunRecord], _Defines],
    now: Callable[[], datetime],
) -> RunRecord:
    """``engine.respond``: check *responses* to the run's pending requests, then record them.

    See :meth:`Engine.respond <tether.Engine.respond>`. A checkpoint;
    cancelled, the responses were recorded whole or not at all.

    Raises:
        UsageError, RunNotFoundError, RunConflictError, UnknownRequestError,
        InvalidResponseError, WorkflowNotFoundError, StoreError: as
        ``engine.respond`` says.
    """
    check_run_id(run_id)
    if not isinstance(responses, Mapping) or not responses:
        raise UsageError(
            "engine.respond() takes a non-empty mapping of request keys to responses, "
            f"not {responses!r:.100}"
        )
    responder = responder_of(store)
    if responder is None:
        raise UsageError(
            f"{store!r} cannot take responses for the workers: it has no respond() "
            "(tether.stores.RespondingStore); respond with engine.resume(run_id, "
            "responses=...), which executes the run here"
        )
    with StoreErrors(f"reading run {run_id!r}"):
        record = await store.get_run(run_id)
    if record is None:
        raise RunNotFoundError(f"no run {run_id!r} in {store!r}: nothing was journaled")
    keys = list(responses)
    when = now()
    # Decided here first, on what was read, so that a bad respond is refused
    # with the store's own words before any work; the store decides again.
    decide_respond(record, run_id=run_id, keys=keys, now=when)
    types = _response_types(record, responses, find)
    entries = [_entry(record, key, responses[key], types[key], when) for key in keys]
    with StoreErrors(f"responding to run {run_id!r}"):
        return await responder.respond(run_id, entries, now=when)


def _response_types(
    record: RunRecord, responses: Mapping[str, Any], find: Callable[[RunRecord], _Defines]
) -> dict[str, tuple[str, Any, Any]]:
    """Each key's (type name, type, payload).

    The type is found by its name in the workflow's module; when that module
    does not name it, the response's own class is taken if it has that name
    (a caller that has the type passes a value of it).

    Raises:
        WorkflowNotFoundError: the run's workflow is not defined here.
        UsageError: a type is not found there.
    """
    run_id = record.run_id
    try:
        wf = find(record)
    except WorkflowNotFoundError:
        cannot = "its responses cannot be checked against the types it asks for"
        raise not_defined_here(record, cannot, "tether respond") from None
    module = sys.modules.get(wf.fn.__module__)
    modules = [] if module is None else [module]
    pending = {request.key: request for request in pending_requests(record)}
    found: dict[str, tuple[str, Any, Any]] = {}
    for key, value in responses.items():
        request = pending[key]  # decide_respond made sure
        tp: Any = resolve_type(request.response_type, modules)
        own = type(value)
        if tp is None and describe(own) == request.response_type:
            tp = own  # not named by the workflow's module: the caller's class of that name
        if tp is None and request.response_type != "None":
            raise UsageError(
                f"run {run_id!r}: the response to {key} cannot be checked here: its type "
                f"{request.response_type} is not found in module {wf.fn.__module__} (the "
                "workflow's module must name it, as a class it defines or imports). Nothing "
                "was journaled; engine.resume checks it as it executes the run here"
            )
        found[key] = (request.response_type, tp, request.payload)
    return found


def _entry(
    record: RunRecord, key: str, value: Any, typed: tuple[str, Any, Any], when: datetime
) -> Entry:
    """The response entry of *value* to *key*, once it decodes strictly into its type.

    Raises:
        InvalidResponseError: it does not encode, or does not decode back.
    """
    type_name, tp, payload = typed
    run_id = record.run_id
    primitive = encode_response(run_id, key, value)
    try:
        codec.structure(primitive, tp, what=f"the response to {key}")
    except CodecError as exc:
        raise refused_response(run_id, key, type_name, exc) from None
    return response_entry(
        run_id, key, primitive, digest(dumps(payload)), started=when, token=0, position=None
    )
