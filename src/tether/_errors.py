"""The exception hierarchy, and the records its errors carry (:class:`ErrorInfo`,
:class:`Request`).
Layer: values, the bottom layer; it imports nothing of tether's.

Every failure tether reports is a :class:`TetherError`. Messages name the run,
the step key and, for files, the path, and say what to do next.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from datetime import datetime
from types import FunctionType
from typing import Any, Final, final

import attrs

__all__ = (
    "MAX_MEMBERS",
    "MAX_MESSAGE",
    "MAX_TRACEBACK",
    "ErrorInfo",
    "Paused",
    "Request",
    "CheckpointCorruptError",
    "ChildPausedError",
    "CodecError",
    "InvalidResponseError",
    "InvariantViolation",
    "LeaseLostError",
    "MessageRejectedError",
    "NonDeterminismError",
    "NotInRunError",
    "QueueFullError",
    "RunCancelledError",
    "RunConflictError",
    "RunFailedError",
    "RunNotFoundError",
    "SaveTimeoutError",
    "StoreError",
    "StreamClosed",
    "TetherError",
    "UnjournaledAwaitWarning",
    "UnknownRequestError",
    "UnsupportedTrioError",
    "UsageError",
    "WorkflowNotFoundError",
    "set_public_module",
    "storable_text",
)


#: The longest :attr:`ErrorInfo.message` stored, in characters (its middle is cut beyond).
MAX_MESSAGE: Final = 8 * 1024
#: The longest :attr:`ErrorInfo.traceback` stored, in characters (its middle is cut beyond).
MAX_TRACEBACK: Final = 16 * 1024
#: The most :attr:`ErrorInfo.members` stored for one exception group (the first ones).
MAX_MEMBERS: Final = 64


def storable_text(text: str, limit: int | None = None) -> str:
    """*text* as every store can keep it: the one guard of text that reaches a store.

    Lone surrogates (as in a file name from ``os.listdir`` that is not
    UTF-8), which UTF-8 cannot hold, are written as their backslash escapes
    (the six characters ``\\udce9``); beyond *limit* characters (``None``:
    no limit), the middle is cut and replaced by a line saying how many
    characters were cut, so the beginning and the end stay readable. Text
    that needs neither is returned as it is.
    """
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if limit is not None and len(text) > limit:
        # The marker's length depends on the count it states: size it for the largest.
        marker = f"\n[... {len(text)} characters cut ...]\n"
        keep = max(0, limit - len(marker))
        head = keep // 2
        tail = keep - head
        cut = len(text) - head - tail
        marker = f"\n[... {cut} characters cut ...]\n"
        text = text[:head] + marker + (text[len(text) - tail :] if tail else "")
    return text


def _plain_members(_: object, __: object, members: tuple[ErrorInfo, ...]) -> None:
    """A group's members are stored plain: each without a traceback or members of its own
    (the group's traceback shows theirs), so that what is written can be read back."""
    for member in members:
        if member.traceback is not None or member.members:
            raise UsageError(
                f"ErrorInfo member {member.type} has a traceback or members of its own; "
                "a group's members hold type, message and key only"
            )


@final
@attrs.frozen(kw_only=True)
class ErrorInfo:
    """A stored description of an exception (never the exception itself).

    Made by tether from the exception (every text in it made storable: see
    :func:`storable_text`). Records stored before ``traceback`` and
    ``members`` existed read with ``None`` and ``()``.
    """

    type: str  #: qualified name of the exception class
    message: str  #: ``str(exc)``, at most :data:`MAX_MESSAGE` characters
    key: str | None = None  #: the step key the error came out of, if any
    #: the formatted traceback (``traceback.format_exception``: chained causes
    #: and exception-group members included), at most :data:`MAX_TRACEBACK`
    #: characters; ``None`` for an error stored without one (by an older tether)
    traceback: str | None = None
    #: for an exception group, the exceptions inside it (nested groups
    #: flattened; the first :data:`MAX_MEMBERS`), each with its ``type``,
    #: ``message`` and ``key`` (no traceback: the group's shows theirs)
    members: tuple[ErrorInfo, ...] = attrs.field(default=(), validator=_plain_members)

    def to_json(self) -> dict[str, Any]:
        """This error as a JSON-ready dict.

        ``traceback`` and ``members`` only when there are some: an error
        without them is written exactly as before they existed, so the
        checksums of journal entries stored by older versions still verify.
        """
        data: dict[str, Any] = {"type": self.type, "message": self.message, "key": self.key}
        if self.traceback is not None:
            data["traceback"] = self.traceback
        if self.members:
            data["members"] = [m.to_json() for m in self.members]
        return data

    def __str__(self) -> str:
        where = f" (step {self.key})" if self.key else ""
        return f"{self.type}: {self.message}{where}"


@final
@attrs.frozen(kw_only=True)
class Request:
    """A question a paused run is waiting on, made by :func:`tether.ask`.

    Answer it with ``engine.resume(run_id, responses={request.key: value})``.
    """

    key: str  #: the ask's key, fixed at call time like a step key: ``path/ask#n``
    payload: Any  #: what was asked, as JSON values (dicts, lists, str, numbers, ...)
    response_type: str  #: the name of the type the response must decode into, e.g. ``bool``


class Paused(Exception):
    """The run is waiting for human input; raised by ``engine.run``/``engine.resume``.

    Every live task of the run was finished or waiting in :func:`tether.ask`,
    so the run *settled*: completed steps' saves drained, the pending
    requests were stored with the run (status ``paused``), and nothing is
    left running. Resume it with
    ``engine.resume(paused.run_id, responses={request.key: value, ...})``;
    answering only some requests pauses it again on the rest.

    Not a :class:`tether.TetherError`: a pause is an outcome, not a failure.
    """

    def __init__(self, run_id: str, requests: tuple[Request, ...]) -> None:
        keys = ", ".join(r.key for r in requests)
        super().__init__(f"run {run_id!r} is paused, waiting for responses to: {keys}")
        self.run_id = run_id
        self.requests = requests

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.requests))


class TetherError(Exception):
    """Base class of every error tether raises on its own account.

    A :class:`tether.Paused` is *not* a ``TetherError``: a pause is an outcome,
    not a failure.
    """


class UsageError(TetherError):
    """The API was used in a way it does not support.

    Raised, for example, for a handle's ``.result`` read before its
    ``parallel()`` block exited, or a plain function passed where a step or
    workflow is expected. Retrying the same call fails the same way; fix the code.
    """


class NotInRunError(UsageError):
    """A step (or ``parallel()``) was used outside a task tether tracks.

    Steps journal their results into the current run, so they must be awaited
    from the workflow's own task, from a step, or from a task started with
    :func:`tether.parallel`. A task started in a plain ``trio.open_nursery``
    inside a workflow is not tracked: use ``tether.parallel()`` there. To test
    a step's logic without a run, call its undecorated function, ``step.fn``.
    """


class CodecError(TetherError):
    """A value could not be encoded to JSON, or decoded back into its type.

    Raised when a step or workflow returns (or is called with) a value tether
    cannot store faithfully, naming the step; the step's result is *not*
    journaled. Retrying gives the same error: change the value or its type
    annotation.
    """


class NonDeterminismError(TetherError):
    """On replay, the workflow's calls do not match its journal: the code changed.

    Raised at the first call that differs, naming the run, the call (its key,
    its position and its parent) and what differs: a journaled call reached
    with other arguments, a call where the journal holds another one (a call
    inserted, removed or moved), a journaled value that no longer decodes as
    the call's type (stored and expected types named), a parent that returns
    without reaching calls the journal holds, or stored workflow arguments the
    workflow's parameters no longer take (the parameter named).

    The execution stops and is undone: the stored run keeps its status and
    error (a worker's claim is stored ``failed`` with this error instead) and
    resumes once the code matches its journal again. Resuming with the same
    code fails the same way. To change a workflow with runs in flight, branch
    on :func:`tether.patched`.
    """


class RunNotFoundError(TetherError, LookupError):
    """No run with this id is stored. Check the id and the store."""


class WorkflowNotFoundError(TetherError, LookupError):
    """A stored run names a workflow that is not registered in this process.

    Import the module that defines the workflow (decorated with
    ``@tether.workflow``) before resuming the run.
    """


class RunConflictError(TetherError):
    """The run cannot be started or resumed in the requested way.

    Raised when another live owner (an engine in this or another process)
    holds the run's lease, when a run id is already executing in this engine,
    when ``run()`` names an existing run id with other arguments or another
    workflow, when responses are sent to a run that has finished, or when a
    completed run is cancelled. Raised before anything executed: nothing
    stored is changed. Retrying is safe; for a held lease, it succeeds once
    the owner releases the run or its lease expires.

    Attributes:
        owner: the lease holder (``host:pid:engine-id``) when the conflict is
            a held lease, else ``None``.
        expires_at: when that lease expires, on the store's clock, if known.
    """

    def __init__(
        self, message: str, *, owner: str | None = None, expires_at: datetime | None = None
    ) -> None:
        super().__init__(message)
        self.owner = owner
        self.expires_at = expires_at


class QueueFullError(TetherError):
    """``engine.submit`` refused a run: its queue holds ``max_queued`` runs waiting to start.

    Checked in the submit's own atomic step: nothing was stored. Submit again
    once workers have taken some.

    Attributes:
        queue: the queue's name.
        depth: how many of its runs were waiting to start.
        max_queued: the queue's limit.
    """

    def __init__(self, message: str, *, queue: str, depth: int, max_queued: int) -> None:
        super().__init__(message)
        self.queue = queue
        self.depth = depth
        self.max_queued = max_queued


class LeaseLostError(TetherError):
    """This engine held a run's lease and lost it while executing the run.

    Raised by ``engine.run``/``engine.resume`` (promptly: the run is cut short
    like a caller cancellation, and nothing more is written) when a renewal or
    a fenced write was refused because another owner took the run over, or
    when no renewal succeeded for ``lease_ttl`` (the process was paused, the
    store was unreachable). Stores raise it for a write whose fencing token is
    not the run's current one; that write stored nothing.

    Whether to retry: the run now belongs to its new owner (or to nobody,
    when the lease just expired); resuming it here raises
    :class:`RunConflictError` while another owner holds it.
    """


class RunCancelledError(TetherError):
    """The run is, or became, ``cancelled`` (``engine.cancel``).

    Raised by ``engine.run``/``engine.resume`` of a cancelled run before any
    other check, having executed nothing, and by an executing run that was
    cancelled (its completed steps keep their records). ``cancelled`` is
    final: retrying raises the same error; start a new run instead.
    """


class RunFailedError(TetherError):
    """``engine.wait``: the run ended ``failed`` (or was set aside as ``dead_letter``).

    :attr:`error` is the run's stored :class:`~tether.stores.ErrorInfo`; its
    ``type`` is the qualified class name of what the workflow raised (the
    exception itself stays in the process that executed the run). The run is
    resumable: ``engine.resume(run_id)`` continues it from its journal.
    """

    def __init__(self, message: str, *, run_id: str, error: ErrorInfo) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.error = error

    def __reduce__(self) -> tuple[object, ...]:
        return (_run_failed, (str(self), self.run_id, self.error))


def _run_failed(message: str, run_id: str, error: ErrorInfo) -> RunFailedError:
    return RunFailedError(message, run_id=run_id, error=error)


class ChildPausedError(TetherError):
    """A child run (``tether.child``) paused, waiting for responses to its requests.

    Raised in the parent, by the call that started or reattached to the
    child: a parent does not pause with its child's requests. Answer them on
    the child, ``engine.resume(error.run_id, responses=...)``, then resume
    the parent: its call reattaches to the child and returns its result.

    Attributes:
        run_id: the child run's id.
        requests: its pending requests (:class:`tether.Request`).
    """

    def __init__(self, message: str, *, run_id: str, requests: tuple[Request, ...]) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.requests = requests

    def __reduce__(self) -> tuple[object, ...]:
        return (_child_paused, (str(self), self.run_id, self.requests))


def _child_paused(message: str, run_id: str, requests: tuple[Request, ...]) -> ChildPausedError:
    return ChildPausedError(message, run_id=run_id, requests=requests)


class UnknownRequestError(TetherError, LookupError):
    """A response names a request the run is not waiting for.

    Nothing is journaled and the run is unchanged; check the keys against
    ``Paused.requests`` (or ``engine.get_run(run_id).requests``).
    """


class InvalidResponseError(TetherError, TypeError):
    """A response does not decode strictly into the type its request expects.

    Raised by ``engine.resume(run_id, responses=...)`` naming the request key
    and the expected type (no lenient coercion: ``{"a": 1}`` is not a
    ``bool``, ``"1"`` is not an ``int``). Nothing is journaled and the run
    stays ``paused`` with the same pending requests; resume again with a
    response of the right type.
    """


class MessageRejectedError(TetherError, TypeError):
    """``engine.send`` refused a message: the run's workflow does not take it.

    Raised when the workflow does not declare the message's name
    (``@tether.workflow(messages={...})``; the message names the declared
    ones), or when the value does not encode and decode back strictly as the
    declared type (no lenient coercion: ``"1"`` is not an ``int``). Nothing
    was stored; the run is unchanged. Retrying the same message fails the
    same way: send a declared name with a value of its type.
    """


class StoreError(TetherError):
    """The store failed to read or write.

    The operation that raised did not complete; a completed step whose save
    raised this is *not* journaled and runs again on resume. Retrying (resuming
    the run) is safe once the store is healthy again.
    """


class SaveTimeoutError(StoreError):
    """A shielded save (or an end hook) did not finish within ``save_timeout``.

    The store may be hung or very slow. The record may or may not have been
    written; resuming is safe either way: a stored step is replayed, a missing
    one runs again.
    """


class CheckpointCorruptError(TetherError):
    """A stored record could not be read or decoded.

    Names the run and the location (file, row or entry). tether never skips a
    record it cannot read to return an older one; repair or remove the record
    by hand. Retrying fails the same way.
    """


class StreamClosed(Exception):
    """A streaming step was closed by its consumer before it was exhausted.

    Not a :class:`TetherError`: leaving an ``open_stream`` block early (by
    ``break``, or by ``await items.aclose()``) is a normal way to stop a
    stream, not a failure. tether never raises it into your code; it is the
    ``exception`` an ``on_step_end`` hook (and a ``StepFinished`` event) is
    given for such a stream, and the type named in its ``interrupted`` journal
    entry. The stream runs again on resume.
    """


class UnsupportedTrioError(TetherError):
    """The installed trio is outside the range tether's seeded scheduling supports.

    Seeded schedules (:func:`tether.testing.run_deterministic`) rely on a
    private trio hook; tether pins the trio versions it was tested with. The
    message names the installed version and the supported range.
    """


class InvariantViolation(TetherError, AssertionError):
    """The explorer (:func:`tether.testing.explore`) found a broken invariant.

    The message names the invariant, what happened, the seed and fault plan,
    and one line of Python that reproduces it. Also an ``AssertionError``, so
    test runners report it as a failed test. :attr:`plan` is the
    :class:`tether.testing.FaultPlan` that broke it.
    """

    def __init__(self, message: str, plan: object = None) -> None:
        super().__init__(message)
        self.plan = plan


def set_public_module(module: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Make *module* the home (``__module__``) of the public classes and functions in *names*.

    For a package's ``__init__`` (``tether``, ``tether.stores``,
    ``tether.testing``), over its ``__all__``: each class or function of
    *namespace* defined in a private module of tether is shown at its public
    home in tracebacks and reprs (``tether.CodecError``, not
    ``tether._errors.CodecError``). One exported by two packages keeps the
    first public home it was given. A class's annotations are resolved
    first, against the module that defines it (attrs, cattrs and
    ``typing.get_type_hints`` look them up by ``__module__``).
    """
    for name in names:
        obj = namespace[name]
        if not isinstance(obj, type | FunctionType):
            continue
        home = obj.__module__
        if home.split(".")[0] != "tether" or not any(p.startswith("_") for p in home.split(".")):
            continue  # not tether's, or at a public home already
        if isinstance(obj, type) and "__annotations__" in vars(obj):
            # String annotations resolve against __module__: resolve them at home
            # first, so that attrs, cattrs and typing.get_type_hints still can.
            if attrs.has(obj):
                attrs.resolve_types(obj)
            hints = typing.get_type_hints(obj, include_extras=True)
            obj.__annotations__ = {name: hints[name] for name in vars(obj)["__annotations__"]}
        obj.__module__ = module


class UnjournaledAwaitWarning(UserWarning):
    """A workflow blocked in an await that is not a tether call.

    What it awaited (an undecorated ``async def`` doing I/O, ``trio.sleep``,
    a socket) is not journaled: it runs again when the run resumes. The
    message names the workflow, the file and line, and what to use instead
    (a ``@tether.step``, ``tether.sleep``). Emitted once per location (the
    warnings module's default); tether's pytest plugin makes it an error,
    which fails the run with this exception, raised at the await.
    """
