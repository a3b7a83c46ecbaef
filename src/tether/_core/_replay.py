"""Replay: the journal an execution loaded, matched call by call.

Layer: the kernel (``_core``).

Every call a run makes (a step, a stream, an ``ask``, a durable timer, a
``parallel()`` branch, a ``tether.patched()`` marker, a ``tether.child()``
call, a ``tether.receive()``) has a key, ``parent/name#n``, and a
*position*: its index among the calls of its parent (the workflow, a step,
a branch), counted in program order when it is called or started, like its
key. Journal entries carry both (entries of older formats only the key).
On replay, each call is matched against the entries loaded when the
execution began:

- **by key**: the call journaled under this key must have been made at
  this same position, with the same arguments, and its value must decode as
  the call's current type;
- **by place**: no other call may be journaled at this position of this
  parent (an inserted, removed or reordered call);
- **at the end** of a parent that executed (the workflow returned, a step
  or a branch returned): every completed call the journal holds directly in
  it must have been reached.

A mismatch is a :class:`NonDeterminismError` naming the run, the first call
that diverges (key, position, parent) and what differs. The execution that
finds one is undone (see ``Execution``), so the stored run keeps its status
and error and resumes once the code matches its journal again.

Every kind of call takes its position the same way, from one counter per
parent, when its key is taken: a step call when it is called, a
``parallel()`` child when it is started (spawn order, never completion
order), a stream when ``open_stream`` is called, an ``ask`` when it asks (its
response is journaled, by a later resume, at that position). A retried step
keeps its position; its attempts number their nested calls from 0 again. A
call is *reached* in the task of its parent, in program order (a
``parallel()`` child when it is started, not when it gets to run), so what a
parent has reached at any point, and the first call that diverges, are the
same in every execution. A ``parallel()`` branch has no entry of its own: the
journal knows it through the calls in it, and cannot say at which position
it was started.

Only entries loaded from the store are matched by position: what this
execution journals itself is replayed by key alone (a retried step whose
attempts call different nested steps is no divergence).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, Final

from .._codec._converter import describe
from .._codec._json import loads
from .._codec._values import Signature, codec
from .._errors import CheckpointCorruptError, CodecError, NonDeterminismError
from ..stores._records import Entry, EntryKind, EntryStatus

__all__ = (
    "ADVICE",
    "REPLAYED",
    "Replay",
    "decode_workflow_args",
    "divergence",
    "parent_of",
    "undecodable",
)

#: Entry kinds a replay takes from the journal (when completed).
REPLAYED: Final = frozenset(
    {
        EntryKind.STEP,
        EntryKind.STREAM,
        EntryKind.RESPONSE,
        EntryKind.MARKER,
        EntryKind.TIMER,
        EntryKind.CHILD,
        EntryKind.MESSAGE,
    }
)

#: What every divergence error ends with: what happened to the run, what to do.
ADVICE: Final = (
    "The code changed since the run started: resume the run with code that matches its "
    "journal (a resume that diverges leaves the stored run as it was). To change a workflow "
    "that has unfinished runs, branch on tether.patched() (see the how-to 'Change a "
    "workflow safely')."
)

_KIND_NAMES: Final = {
    EntryKind.STEP: "step",
    EntryKind.STREAM: "stream",
    EntryKind.RESPONSE: "the response to",
    EntryKind.MARKER: "the patch marker",
    EntryKind.TIMER: "timer",
    EntryKind.CHILD: "the child run call",
    EntryKind.MESSAGE: "the receive",
}


def parent_of(key: str) -> str:
    """The key path of the parent a call's *key* was made in (``""``: the workflow)."""
    return key.rpartition("/")[0]


def _where(key: str, position: int | None) -> str:
    parent = parent_of(key)
    place = parent or "the workflow"
    return f"position {position} in {place}" if position is not None else f"in {place}"


def _entry(entry: Entry, *, where: bool = False) -> str:
    place = f", {_where(entry.key, entry.position)}" if where else ""
    return f"{_KIND_NAMES.get(entry.kind, entry.kind.value)} {entry.key} (seq {entry.seq}{place})"


def json_kind(text: str | None, *, what: str) -> str:
    """What stored JSON *text* is, for a message: ``a JSON string ("ab")``.

    Raises:
        CheckpointCorruptError: the text is not JSON at all (it was stored
            that way: corruption, not a code change).
    """
    try:
        value = loads(text or "null")
    except (ValueError, CodecError) as exc:
        raise CheckpointCorruptError(f"{what}: the stored value is not JSON: {exc}") from exc
    return _kind_of(value)


def _kind_of(value: Any) -> str:
    if value is None:
        return "JSON null"
    if isinstance(value, bool):
        return f"a JSON boolean ({'true' if value else 'false'})"
    if isinstance(value, int):
        return f"a JSON integer ({value})"
    if isinstance(value, float):
        return f"a JSON number ({value!r})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f'a JSON string ("{shown}")'
    if isinstance(value, list):
        return f"a JSON array of {len(value)} item{'' if len(value) == 1 else 's'}"
    if not value:
        return "an empty JSON object"
    return f"a JSON object with keys {', '.join(sorted(value)[:8])}" + (
        ", ..." if len(value) > 8 else ""
    )


def divergence(
    run_id: str, call: str, key: str, position: int | None, detail: str
) -> NonDeterminismError:
    """The error for a replayed call *key* (a *call*: "step", "ask", ...) that diverges."""
    return NonDeterminismError(
        f"run {run_id!r} diverged from its journal at {call} {key} "
        f"({_where(key, position)}): {detail}. {ADVICE}"
    )


def undecodable(entry: Entry, tp: Any, noun: str, role: str, what: str) -> str:
    """What differs when *entry*'s value no longer decodes as *tp*: stored and expected type.

    *noun* names the value (``result``), *role* what *tp* is now.

    Raises:
        CheckpointCorruptError: the stored value is not JSON at all (*what* names it).
    """
    return (
        f"its journaled {noun} (seq {entry.seq}) is {json_kind(entry.value, what=what)}, "
        f"which does not decode as {describe(tp)} ({role} now)"
    )


class Replay:
    """The completed entries one execution loaded, indexed for matching (see the module doc).

    Args:
        run_id: the run, for messages.
        entries: the run's journal, in seq order.
        abort: called with each divergence before it is raised (the
            execution stops and is undone).
    """

    __slots__ = ("abort", "journal", "pending", "places", "run_id")

    def __init__(
        self, run_id: str, entries: Iterable[Entry], abort: Callable[[BaseException], None]
    ) -> None:
        self.run_id = run_id
        self.abort = abort
        #: completed entries by key: the loaded ones, then what this execution stores
        self.journal: dict[str, Entry] = {}
        #: loaded entries with a position, by (parent, position)
        self.places: dict[tuple[str, int], Entry] = {}
        #: parent -> key -> loaded entry not reached yet; ``None`` for a key the
        #: journal knows only as the parent of entries (a branch, a step that
        #: did not complete): reached, but not required at the parent's end
        self.pending: dict[str, dict[str, Entry | None]] = {}
        journal = self.journal
        for entry in entries:
            if entry.status is EntryStatus.COMPLETED and entry.kind in REPLAYED:
                # The first completed record of a key is the one the workflow
                # saw; a later duplicate (a save retried after an unclear
                # failure) carries the same call.
                if entry.key in journal:
                    continue
                journal[entry.key] = entry
                parent = parent_of(entry.key)
                if entry.position is not None:
                    self.places.setdefault((parent, entry.position), entry)
                self.pending.setdefault(parent, {})[entry.key] = entry
        for key in list(journal):
            parent = parent_of(key)
            while parent:
                # Each ancestor is a call of its own parent, with or without an entry.
                grand = parent_of(parent)
                self.pending.setdefault(grand, {}).setdefault(parent, journal.get(parent))
                parent = grand

    def __bool__(self) -> bool:
        return bool(self.journal)

    def diverged(self, call: str, key: str, position: int | None, detail: str) -> Exception:
        """A divergence at the call *key* (the execution is aborted); raise what this returns."""
        error = divergence(self.run_id, call, key, position, detail)
        self.abort(error)
        return error

    def reach(self, call: str, key: str, position: int) -> Entry | None:
        """The call *key* was made at *position*; its loaded entry, if any.

        Raises:
            NonDeterminismError: the journal holds this call at another
                position, or another call at this one.
        """
        parent = parent_of(key)
        children = self.pending.get(parent)
        loaded = children.pop(key, None) if children else None
        other = self.places.get((parent, position))
        if loaded is not None and loaded.position is not None and loaded.position != position:
            here = f", and {_entry(other)} at this one" if other is not None else ""
            raise self.diverged(
                call,
                key,
                position,
                f"the journal holds it at position {loaded.position} (seq {loaded.seq}){here}: "
                "a call before it was inserted, removed or moved",
            )
        if other is not None and other.key != key:
            raise self.diverged(
                call,
                key,
                position,
                f"the journal holds {_entry(other)} at this position: a call was inserted "
                f"here, or {other.key} was removed or moved",
            )
        return loaded

    def unreached(self, parent: str) -> bool:
        """Whether the journal holds calls in *parent* this execution has not reached yet."""
        return bool(self.pending.get(parent))

    def ended(self, parent: str, what: str) -> None:
        """Check that the returning *parent* (*what*, for messages) reached all its calls.

        Every completed call the journal holds directly in it must have been
        reached.

        Raises:
            NonDeterminismError: naming the first call it did not reach.
        """
        children = self.pending.get(parent)
        if not children:
            return
        left = [e for e in children.values() if e is not None]
        if not left:
            return
        first = min(left, key=lambda e: (e.position is None, e.position or 0, e.seq or 0))
        error = NonDeterminismError(
            f"run {self.run_id!r} diverged from its journal: {what} returned without "
            f"reaching {_entry(first, where=True)}, which the "
            f"journal holds as completed: a call was removed, or the code returns earlier "
            f"now. {ADVICE}"
        )
        self.abort(error)
        raise error


def decode_workflow_args(
    name: str, fn: Callable[..., Any], signature: Signature, run_id: str, text: str
) -> tuple[Any, ...]:
    """The stored arguments *text* of run *run_id*, decoded for the workflow as it is now.

    *name* is the workflow's, *fn* its function, *signature* its types.

    Raises:
        CheckpointCorruptError: *text* is not a JSON array (it was stored so).
        NonDeterminismError: the workflow no longer takes them (it gained or
            lost a parameter), or one no longer decodes as its parameter's
            type; the message names the parameter.
    """
    try:
        stored = loads(text)
    except (ValueError, CodecError) as exc:
        raise CheckpointCorruptError(
            f"run {run_id!r}: stored arguments are not JSON: {exc}"
        ) from exc
    if not isinstance(stored, list):
        raise CheckpointCorruptError(
            f"run {run_id!r}: stored arguments are not a JSON array but {_kind_of(stored)}"
        )

    def started() -> str:
        return f"run {run_id!r} was started with {len(stored)} argument(s) ({text:.200})"

    try:
        types, names = signature.positional(len(stored))
    except TypeError as exc:
        params = ", ".join(inspect.signature(fn).parameters) or "none"
        raise NonDeterminismError(
            f"{started()}, which workflow {name} no longer takes: {exc} (its parameters now: "
            f"{params}). {ADVICE}"
        ) from None
    decoded = []
    for value, tp, param in zip(stored, types, names, strict=True):
        try:
            decoded.append(codec.structure(value, tp, what=f"parameter {param!r}"))
        except CodecError as exc:
            raise NonDeterminismError(
                f"{started()}: parameter {param!r} of workflow {name} is now {describe(tp)}, "
                f"and the run's stored argument, {_kind_of(value)}, does not decode as "
                f"that. {ADVICE}"
            ) from exc
    return tuple(decoded)
