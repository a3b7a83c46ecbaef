"""``tether.patched()`` and ``tether.deprecate_patch()``: changing a workflow with runs in flight.

Layer: the API of workflow code (``_api``).

A change to a workflow's calls (a step added, removed, moved, or called
with other arguments) diverges from the journal of every run started
before it (see :mod:`tether._core._replay`). ``if tether.patched("change-id"): <new
code> else: <old code>`` lets both kinds of run go on: a run that executes
the call for the first time takes the new path, and journals a *marker*
(an entry of kind ``marker``, keyed ``<parent>/patched(change-id)``) at the
call's position; a replay that finds the marker takes the new path again;
a replay of a run journaled before the change takes the old one.

When a replay counts as "journaled before the change": the journal holds
calls in this parent (the workflow, a step, a branch) that this execution
has not reached yet, and no marker for this change. Such a run did not
reach the call of ``patched()`` (there was none), and went past the place
where it stands now. Otherwise (the journal ends before this place) the run
may take the new path, and does.

Positions: a ``True`` takes the call's position (the marker's), like any
call; a ``False`` takes none, so an old run's later calls keep their
journaled positions. Within one parent the first call decides; later calls
with the same change id return the same answer and take no position.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from .._core._frame import current_frame
from .._core._replay import REPLAYED
from .._core._run import own
from .._core._store_calls import StoreErrors
from .._errors import UsageError
from ..stores._records import EntryKind, EntryStatus, RunStatus, utcnow
from ..stores._store import Store

__all__ = ("deprecate_patch", "on_old_path", "patched")


def _marker_key(change_id: object, api: str) -> str:
    if not isinstance(change_id, str) or not change_id or "/" in change_id:
        raise UsageError(
            f"{api} takes a change id: a non-empty string without '/', not {change_id!r}"
        )
    return f"patched({change_id})"


def patched(change_id: str) -> bool:
    """Whether this run takes the new path of the change *change_id*.

    ``True`` when the run executes this place for the first time (the
    marker is journaled, with the run's next save) and when it replays a
    run that recorded the marker; ``False`` when it replays a run journaled
    before the change. Branch on it: ``if tether.patched("fee-v2"): ...``
    for the new code, ``else:`` for the old. Once no unfinished run is on
    the old path (``tether runs list --workflow W --patch fee-v2``), drop
    the old code and replace the call with ``tether.deprecate_patch``.

    Use inside a workflow, a step or a ``parallel()`` branch. Not a
    checkpoint: it never waits.

    Raises:
        UsageError: *change_id* is not a non-empty string without ``/``.
        NotInRunError: outside a run, or in a task tether does not track.
        NonDeterminismError: the journal holds this marker at another
            position (calls before it were inserted, removed or moved).
    """
    name = _marker_key(change_id, "tether.patched()")
    frame = current_frame("tether.patched()")
    run = frame.run
    key = frame.key_of(name)
    decided = run.patches.get(key)
    if key in run.seen:
        # Called again in this parent: the first call decided.
        return bool(decided)
    position = frame.position
    run.claim(key)
    if decided is None:
        replay = run.replay
        if key in run.journal:  # the run recorded the marker
            if replay is not None:
                replay.reach("patch marker", key, position)  # ...at this position
            decided = True
        elif replay is not None and replay.unreached(frame.path):
            decided = False  # journaled before the change: the old path
        else:
            decided = True
            entry = run.call_entry(EntryKind.MARKER, key, position, "true", at=utcnow())
            run.markers = own(run.markers)
            run.markers.append(entry)
        run.patches = own(run.patches)
        run.patches[key] = decided
    if decided:
        frame.skip_position()
    return decided


def deprecate_patch(change_id: str) -> None:
    """Mark where ``tether.patched(change_id)`` was, once its old path is gone.

    Replace ``if tether.patched("x"): new() else: old()`` with
    ``tether.deprecate_patch("x"); new()`` when no unfinished run is on the
    old path any more. Runs that recorded the marker replay as before (the
    marker keeps its position); new runs journal nothing here. Once no run
    with the marker is unfinished either, delete the call.

    Not a checkpoint.

    Raises:
        UsageError: *change_id* is not a non-empty string without ``/``.
        NotInRunError: outside a run, or in a task tether does not track.
        NonDeterminismError: the journal holds this marker at another position.
    """
    name = _marker_key(change_id, "tether.deprecate_patch()")
    frame = current_frame("tether.deprecate_patch()")
    run = frame.run
    key = frame.key_of(name)
    if key in run.seen:
        return
    position = frame.position
    run.claim(key)
    if key in run.journal:  # the run recorded the marker: it keeps its position
        if run.replay is not None:
            run.replay.reach("patch marker", key, position)
        frame.skip_position()


class _Listed(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> RunStatus: ...


L = TypeVar("L", bound=_Listed)


async def on_old_path(store: Store, runs: Iterable[L], change_id: str) -> list[L]:
    """The unfinished *runs* that may still take the old path of *change_id*.

    That is: not completed or cancelled, with journaled calls, and no marker
    of ``tether.patched(change_id)`` in their journal (in any parent). A run
    whose journal ends before the ``patched()`` call is counted too, though it
    would take the new path: once this is empty, no run takes the old one.
    (``tether runs list --workflow W --patch CHANGE_ID``.)

    A checkpoint: one journal read per unfinished run.

    Raises:
        UsageError: *change_id* is not a change id.
        StoreError, CheckpointCorruptError: a journal cannot be read.
    """
    name = _marker_key(change_id, "--patch")
    found: list[L] = []
    for run in runs:
        if not run.status.may_execute:  # it takes one path or the other no more
            continue
        with StoreErrors(f"loading the journal of run {run.run_id!r}"):
            entries = await store.load_entries(run.run_id)
        calls = [e for e in entries if e.status is EntryStatus.COMPLETED and e.kind in REPLAYED]
        marked = any(
            e.kind is EntryKind.MARKER and (e.key == name or e.key.endswith("/" + name))
            for e in calls
        )
        if calls and not marked:
            found.append(run)
    return found
