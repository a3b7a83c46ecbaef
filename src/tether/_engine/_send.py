"""``engine.send``: a message checked against what the workflow declares, then stored.

Layer: the engine (``_engine``).

A workflow declares the messages it takes, by name and type
(``@tether.workflow(messages={"approve": bool})``; :func:`check_messages`). A
send checks the message against that declaration before anything is stored:
the value is encoded by the declared type and decoded back strictly
(:func:`encode_message`), so a bad message is refused at ``send``, never found
by the run. The store keeps it in the run's *mailbox*, numbered 1, 2, 3, ...
in send order (:class:`~tether.stores.MailboxStore`), where ``tether.receive``
takes it (see :mod:`tether._api._receive`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, Protocol

from .._codec._check import explain
from .._codec._types import show
from .._codec._values import codec, describe
from .._core._store_calls import StoreErrors, mailbox
from .._errors import (
    CodecError,
    MessageRejectedError,
    RunConflictError,
    RunNotFoundError,
    WorkflowNotFoundError,
)
from ..stores._mailbox import check_message_name
from ..stores._records import RunRecord
from ..stores._run_ids import check_run_id
from ..stores._store import Store
from ._catalog import not_defined_here

__all__ = ("encode_message", "refusal", "send")

_NONE: Final[Mapping[str, Any]] = MappingProxyType({})


def _declared(run_id: str, workflow: str, messages: Mapping[str, Any], name: str) -> Any:
    """The type *workflow* declares for the message *name*, for a send to *run_id*.

    Raises:
        MessageRejectedError: it declares no message of that name.
    """
    try:
        return messages[name]
    except KeyError:
        declared = ", ".join(map(repr, sorted(messages))) or "none"
        raise MessageRejectedError(
            f"run {run_id!r} refused message {name!r}: workflow {workflow} declares no such "
            f"message (it declares {declared}); nothing was stored. Declare it with "
            f"@tether.workflow(messages={{{name!r}: <type>}})"
        ) from None


def encode_message(
    run_id: str, workflow: str, messages: Mapping[str, Any], name: str, value: Any
) -> str:
    """The JSON text of message *name* with *value*, for a run of *workflow*, checked.

    The value is encoded by the declared type and decoded back strictly, as
    the receive will decode it.

    Raises:
        MessageRejectedError: *workflow* does not declare *name*, or *value*
            does not encode and decode back as its type (naming run, name,
            type and reason).
    """
    tp = _declared(run_id, workflow, messages, name)
    try:
        text, _ = codec.snapshot(value, tp, what=f"message {name!r}")
    except CodecError as exc:
        shown = f"the {type(value).__qualname__} value {show(value, 80)}"
        raise MessageRejectedError(refusal(run_id, name, workflow, tp, shown, exc)) from exc
    return text


def refusal(run_id: str, name: str, workflow: str, tp: Any, shown: str, exc: CodecError) -> str:
    """Why the message *name* (*shown*) does not fit the type *workflow* declares for it.

    The one wording of a refused value, for ``engine.send`` and ``tether send``.
    """
    # The codec's own words say why; a decode that failed says it best by its cause.
    cause = exc.__cause__
    why = str(exc) if cause is None else explain(cause)
    return (
        f"run {run_id!r} refused message {name!r}: workflow {workflow} declares it as "
        f"{describe(tp)}, and {shown} is not one ({why}); nothing was stored"
    )


class _Declares(Protocol):
    """What a send needs of a workflow (a ``tether.Workflow``)."""

    @property
    def name(self) -> str: ...
    @property
    def messages(self) -> Mapping[str, Any]: ...


async def send(
    store: Store,
    run_id: str,
    name: str,
    value: Any,
    *,
    find: Callable[[RunRecord], _Declares],
    now: Callable[[], datetime],
) -> None:
    """``engine.send``: check the message against the run's workflow (``find(record)``),
    then store it with the clock's ``now()``. See :meth:`Engine.send <tether.Engine.send>`.

    A checkpoint.

    Raises:
        UsageError, RunNotFoundError, RunConflictError, WorkflowNotFoundError,
        MessageRejectedError, StoreError: as ``engine.send`` says.
    """
    check_run_id(run_id)
    check_message_name(name)
    box = mailbox(store)
    with StoreErrors(f"reading run {run_id!r}"):
        record = await store.get_run(run_id)
    if record is None:
        raise RunNotFoundError(f"no run {run_id!r} in {store!r}")
    if record.status.finished:
        raise RunConflictError(
            f"run {run_id!r} is {record.status.value.replace('_', '-')}: a finished run takes "
            f"no messages; message {name!r} was not stored"
        )
    try:
        wf = find(record)
    except WorkflowNotFoundError:
        cannot = f"message {name!r} cannot be checked against the messages it declares"
        raise not_defined_here(record, cannot, "tether send") from None
    text = encode_message(run_id, wf.name, wf.messages, name, value)
    with StoreErrors(f"sending message {name!r} to run {run_id!r}"):
        await box.send_message(run_id, name, text, now=now())
