"""The worker explorer's invariants on what the store took: one record per step, fencing, owners.

Layer: testing (``tether.testing``). Plain functions over a trial's journals
and over the log of writes that landed in its shared store
(:class:`~._explore_shared.Landed`), apart from the trial that makes them
(:mod:`._explore_fleet`), as the single-run explorer keeps its checks in
:mod:`._explore_execution`: (w2) a step stored once, (w3) no write with a
token older than the latest claim lands, (w4) a run is claimed from another
process only once that process's lease expired.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from ..stores._records import Entry, EntryKind, EntryStatus
from ._explore_shared import Landed

__all__ = ("check_fencing", "check_journal", "check_owners")


def _is_step(entry: Entry) -> bool:
    return entry.status is EntryStatus.COMPLETED and entry.kind in (
        EntryKind.STEP,
        EntryKind.STREAM,
    )


def check_journal(run_id: str, entries: Sequence[Entry]) -> list[str]:
    """(w2) one record per step; (w3) tokens never go down along the journal."""
    problems = []
    seqs: dict[str, list[int]] = {}
    for entry in entries:
        if _is_step(entry):
            seqs.setdefault(entry.key, []).append(entry.seq or 0)
    for key, found in seqs.items():
        if len(found) > 1:
            problems.append(
                f"(w2) step {key} of run {run_id} has {len(found)} stored records (seqs "
                f"{', '.join(map(str, found))}): a step that was stored ran again"
            )
    for before, after in itertools.pairwise(entries):
        if after.token < before.token:
            problems.append(
                f"(w3) run {run_id}'s entry seq {after.seq} ({after.key}) carries token "
                f"{after.token}, older than the token {before.token} of seq {before.seq} "
                f"({before.key}) stored before it: a fenced write was not refused"
            )
    return problems


def check_fencing(log: Sequence[Landed]) -> list[str]:
    """(w3) after a run was claimed, every write of it that landed carries that claim's token."""
    problems = []
    latest: dict[str, Landed] = {}  # run -> its latest claim
    for landed in log:
        run_id = landed.run_id
        if run_id is None:
            continue
        if landed.claimed is not None:
            latest[run_id] = landed
            continue
        claim = latest.get(run_id)
        stale = [t for t in landed.tokens if claim is not None and t < (claim.claimed or 0)]
        if claim is not None and stale:
            what = (
                "append of " + "+".join(e.key for e in landed.entries)
                if landed.method == "append"
                else f"{landed.status} record"
            )
            problems.append(
                f"(w3) {landed.process}'s {what} for run {run_id} landed at t={landed.at:g} "
                f"with token {stale[0]}, after {claim.process} had taken the run over with "
                f"token {claim.claimed} at t={claim.at:g}: a fenced write was not refused"
            )
    return problems


def check_owners(log: Sequence[Landed]) -> list[str]:
    """(w4) a run is claimed from another process only once that process's lease expired."""
    problems = []
    expires: dict[str, float] = {}  # process -> when its lease expires (store clock)
    holder: dict[str, Landed] = {}  # run -> the claim holding it
    for landed in log:
        run_id = landed.run_id
        if landed.claimed is not None and run_id is not None:
            held = holder.get(run_id)
            until = -math.inf if held is None else expires.get(held.process, -math.inf)
            if held is not None and held.process != landed.process and until > landed.at:
                problems.append(
                    f"(w4) {landed.process} claimed run {run_id} (token {landed.claimed}) at "
                    f"t={landed.at:g} while {held.process}'s lease on it (token "
                    f"{held.claimed}) was live until t={until:g}: two owners at once"
                )
            holder[run_id] = landed
        elif landed.released is not None and run_id is not None:
            held = holder.get(run_id)
            if held is not None and held.claimed == landed.released:
                del holder[run_id]
        if landed.expires is not None:
            expires[landed.process] = landed.expires
    return problems
