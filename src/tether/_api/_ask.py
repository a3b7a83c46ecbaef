"""Human input: ``tether.ask()``, and how a run answers it or settles on it.

Layer: the API of workflow code (``_api``).

A request's key is fixed when ``ask`` is called, like a step's. A response
journaled by an earlier resume is replayed (its payload must match the
journal); one given to this resume is decoded, then journaled with the others
given with it, in one append; with neither, the asking task waits in a
:class:`~tether._core._run.Wait` that only the run's settlement (or the
caller) ends: when every live task waits so, the run pauses (see
:meth:`RunState._check_settled <tether._core._run.RunState._check_settled>`).
Separate from :mod:`tether._core._run`, which holds the state this reads and
writes (``provided``, ``accepted``, ``asking``) and the settlement itself.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, TypeVar, overload

import trio

from .._codec._check import diff
from .._codec._converter import describe
from .._codec._json import digest, dumps
from .._codec._values import codec
from .._core._frame import check_key, current_frame
from .._core._replay import undecodable
from .._core._run import RunState, own
from .._errors import CodecError, InvalidResponseError, Request
from ..stores._records import Entry, EntryKind, EntryStatus, utcnow

__all__ = ("ask", "encode_response", "refused_response", "response_entry")

T = TypeVar("T")


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
    frame = current_frame(
        "tether.ask()",
        alone="the run pauses there until engine.resume(run_id, responses={key: value}) "
        "answers it; to test code that asks, run its workflow and resume it",
    )
    ask_key, position = frame.next_call("ask", key)
    return await _response(frame.run, ask_key, position, payload, response_type)


async def _response(
    run: RunState, key: str, position: int, payload: Any, response_type: Any
) -> Any:
    """Return the response to the request *key*, or wait until the run settles.

    *position* is the ask's among its parent's calls. A checkpoint; see
    :func:`tether.ask`.
    """
    entry = await run.reach("ask", key, position)
    what = f"request {key} of run {run.run_id!r}"
    shown = codec.to_primitive(payload, what=f"the payload of {what}")
    payload_digest = digest(dumps(shown))
    if entry is not None:
        run.check_kind(entry, EntryKind.RESPONSE, "ask", key, position)
        if entry.args_digest != payload_digest:
            raise run.diverged(
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
            raise run.diverged(
                "ask",
                key,
                position,
                undecodable(entry, response_type, "response", "the response type", what),
            ) from exc
    request = Request(key=key, payload=shown, response_type=describe(response_type))
    if key in run.provided:
        return await _take_response(run, request, position, response_type, payload_digest)
    with run.wait(request):
        # Only the settlement (or the caller) ends this wait.
        await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


async def _take_response(
    run: RunState, request: Request, position: int, response_type: Any, payload_digest: str
) -> Any:
    key = request.key
    started = utcnow()
    try:
        value = codec.structure(run.provided[key], response_type, what=f"the response to {key}")
    except CodecError as exc:
        error = refused_response(run.run_id, key, request.response_type, exc)
        run.abort(error)
        await trio.lowlevel.checkpoint()  # raises Cancelled: the run is stopping
        raise error from exc  # pragma: no cover - only under a shield of the user's own
    run.accepted = own(run.accepted)
    run.accepted[key] = response_entry(
        run.run_id,
        key,
        run.provided[key],
        payload_digest,
        started=started,
        token=run.token,
        position=position,
    )
    if len(run.accepted) == len(run.provided):
        # The last response to be checked stores them all, in one append:
        # either every response given to resume() is journaled, or none.
        await _store_responses(run)
    else:
        wait = run.wait(request)
        run.response_waits = own(run.response_waits)
        run.response_waits.append(wait)
        if run.responses_stored is None:
            run.responses_stored = trio.Event()
        with wait:
            await run.responses_stored.wait()
    return value


async def _store_responses(run: RunState) -> None:
    await run.save(list(run.accepted.values()))
    run.provided.clear()
    run.accepted.clear()
    for wait in run.response_waits:
        wait.end()
    if run.responses_stored is not None:
        run.responses_stored.set()


#: Containers and scalars a response may be given as, that JSON holds as they are.
_PLAIN: Final = frozenset({str, int, float, bool, type(None), list, tuple, dict})
#: A high surrogate followed by a low one: JSON reads the pair back as one character.
_PAIR: Final = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _paired(value: Any) -> bool:
    """Whether a string in *value* (JSON-like values, nested) holds a surrogate pair."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if _PAIR.search(item):
                return True
        elif type(item) is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif type(item) in (list, tuple):
            stack.extend(item)
    return False


def encode_response(run_id: str, key: str, value: Any) -> Any:
    """*value*, a response to *key*, as the JSON values it is journaled as: checked to come
    back from JSON exactly (two lone surrogates never merge into one character).

    The one encoding of responses, for ``resume(responses=)`` and ``engine.respond``.

    Raises:
        InvalidResponseError: it cannot be encoded, or does not come back as it was.
    """
    what = f"the response to {key}"
    try:
        primitive = codec.to_primitive(value, what=what)
    except CodecError as exc:
        raise InvalidResponseError(
            f"run {run_id!r}: {exc}. Nothing was journaled; the run stays paused."
        ) from None
    if type(value) in _PLAIN:
        # JSON's own values: only a surrogate pair can change (into one character).
        different = f"{what} holds a pair of lone surrogates" if _paired(value) else None
    else:
        try:
            back = codec.structure(primitive, type(value), what=what)
        except CodecError:
            back = value  # not decodable by its own class alone: the request's type decides
        different = diff(value, back, what)
    if different is not None:
        raise InvalidResponseError(
            f"run {run_id!r}: {what} does not survive a round trip through JSON: {different}. "
            "Nothing was journaled; the run stays paused."
        )
    return primitive


def refused_response(
    run_id: str, key: str, type_name: str, exc: CodecError
) -> InvalidResponseError:
    """The one wording of a response to *key* that does not decode as its type *type_name*."""
    return InvalidResponseError(
        f"run {run_id!r}: the response to request {key} does not decode as {type_name}: "
        f"{exc}. Nothing was journaled; the run stays paused: respond with a value of "
        "that type."
    )


def response_entry(
    run_id: str,
    key: str,
    response: Any,
    payload_digest: str,
    *,
    started: datetime,
    token: int,
    position: int | None,
) -> Entry:
    """The journal entry of *response* (JSON primitives) to the request *key*.

    *payload_digest* is the digest of the request's payload (replay checks
    the request asks the same); *token* 0 and *position* ``None`` for a
    response journaled without executing the run (``engine.respond``):
    matched by its key alone.
    """
    return Entry(
        run_id=run_id,
        key=key,
        kind=EntryKind.RESPONSE,
        status=EntryStatus.COMPLETED,
        value=dumps(response),
        args_digest=payload_digest,
        started_at=started,
        finished_at=utcnow(),
        token=token,
        position=position,
    )
