"""Signals: the messages a workflow declares, and ``engine.send``, which checks and stores them.

A workflow declares the messages it takes, by name and type
(``@tether.workflow(signals={"approve": bool})``; :func:`check_signals`). A
send checks the message against that declaration before anything is stored:
the value is encoded by the declared type and decoded back strictly
(:func:`encode_message`), so a bad message is refused at ``send``, never found
by the run. The store keeps it in the run's *mailbox*, numbered 1, 2, 3, ...
in send order (:class:`~.stores._mailbox.MailboxStore`), where
``tether.receive`` takes it (see :mod:`._receive`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, Protocol

from ._codec import codec, describe
from ._codec_check import _explain
from ._codec_types import show
from ._errors import (
    CodecError,
    MessageRejectedError,
    RunConflictError,
    RunNotFoundError,
    UsageError,
    WorkflowNotFoundError,
)
from ._store_calls import StoreErrors
from .stores._mailbox import FINISHED, MailboxStore, check_message_name, mailbox_of
from .stores._protocol import RunRecord, Store

__all__ = ("check_signals", "encode_message", "mailbox", "send")

_NONE: Final[Mapping[str, Any]] = MappingProxyType({})


def check_signals(signals: object) -> Mapping[str, Any]:
    """``@tether.workflow(signals=...)``, validated: a read-only mapping of names to types.

    Raises:
        UsageError: not a mapping, a name that is not 1 to 100 letters,
            digits, ``_``, ``-`` or ``.``, or a type the codec cannot decode into.
    """
    if signals is None:
        return _NONE
    if not isinstance(signals, Mapping):
        raise UsageError(
            "signals= takes a mapping of message names to types, such as "
            f'{{"approve": bool}}, not {signals!r:.100}'
        )
    for name, tp in signals.items():
        check_message_name(name)
        reason = codec.unsupported(tp)
        if reason is not None:
            raise UsageError(f"signals=: message {name!r} cannot be decoded as {tp!r}: {reason}")
    return MappingProxyType(dict(signals))


def mailbox(store: object) -> MailboxStore:
    """*store* as a :class:`MailboxStore`.

    Raises:
        UsageError: it keeps no messages (it lacks ``send_message`` or ``load_messages``).
    """
    found = mailbox_of(store)
    if found is None:
        raise UsageError(
            f"{store!r} keeps no messages: signals (engine.send, tether.receive) need a store "
            "with send_message and load_messages (see tether.stores.MailboxStore); every "
            "built-in store has them, and a wrapper must forward them"
        )
    return found


def _declared(run_id: str, workflow: str, signals: Mapping[str, Any], name: str) -> Any:
    """The type *workflow* declares for the message *name*, for a send to *run_id*.

    Raises:
        MessageRejectedError: it declares no message of that name.
    """
    try:
        return signals[name]
    except KeyError:
        declared = ", ".join(map(repr, sorted(signals))) or "none"
        raise MessageRejectedError(
            f"run {run_id!r} refused message {name!r}: workflow {workflow} declares no such "
            f"message (it declares {declared}); nothing was stored. Declare it with "
            f"@tether.workflow(signals={{{name!r}: <type>}})"
        ) from None


def encode_message(
    run_id: str, workflow: str, signals: Mapping[str, Any], name: str, value: Any
) -> str:
    """The JSON text of message *name* with *value*, for a run of *workflow*, checked.

    The value is encoded by the declared type and decoded back strictly, as
    the receive will decode it.

    Raises:
        MessageRejectedError: *workflow* does not declare *name*, or *value*
            does not encode and decode back as its type (naming run, name,
            type and reason).
    """
    tp = _declared(run_id, workflow, signals, name)
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
    why = str(exc) if cause is None else _explain(cause)
    return (
        f"run {run_id!r} refused message {name!r}: workflow {workflow} declares it as "
        f"{describe(tp)}, and {shown} is not one ({why}); nothing was stored"
    )


class _Declares(Protocol):
    """What a send needs of a workflow (a ``tether.Workflow``)."""

    @property
    def name(self) -> str: ...
    @property
    def signals(self) -> Mapping[str, Any]: ...


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
    if not isinstance(run_id, str) or not run_id:
        raise UsageError(f"engine.send() takes a run id, not {run_id!r:.100}")
    check_message_name(name)
    box = mailbox(store)
    with StoreErrors(f"reading run {run_id!r}"):
        record = await store.get_run(run_id)
    if record is None:
        raise RunNotFoundError(f"no run {run_id!r} in {store!r}")
    if record.status in FINISHED:
        raise RunConflictError(
            f"run {run_id!r} is {record.status.value.replace('_', '-')}: a finished run takes "
            f"no messages; message {name!r} was not stored"
        )
    try:
        wf = find(record)
    except WorkflowNotFoundError:
        version = "" if record.version is None else f" version {record.version!r}"
        raise WorkflowNotFoundError(
            f"run {run_id!r} is a run of workflow {record.workflow!r}{version}, which is "
            f"not defined in this process, so message {name!r} cannot be checked against "
            "the messages it declares; import the module that defines it before sending "
            "(tether send --import MODULE). Nothing was stored"
        ) from None
    text = encode_message(run_id, wf.name, wf.signals, name, value)
    with StoreErrors(f"sending message {name!r} to run {run_id!r}"):
        await box.send_message(run_id, name, text, now=now())
