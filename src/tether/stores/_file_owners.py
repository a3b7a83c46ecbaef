"""What a FileStore writes about who executes runs: leases, cancels, workers.

Layer: stores (``tether.stores``).

Leases are per owner: an owner's expiry is one small file,
``.owners/<owner>.json``, so renewing an engine's leases rewrites one file
however many runs it holds; a run's record names its owner and token. A
claim, a cancel and a worker's claim of a queued run decide on the record
read under the run's lock (:mod:`._file_lock`) and write in that same step.
A worker's advertisement is one file, ``.workers/<owner>.json``. Owner and
worker files are not fsynced: neither outlives a crash. The synchronous
halves of :class:`~._file.FileStore`'s calls, run in a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from datetime import datetime
from functools import partial

import attrs

from .._errors import CheckpointCorruptError, RunConflictError
from ._file_disk import OWNERS, WORKERS, replace_small, time_of
from ._file_runs import FileRuns
from ._leases import decide_cancel, decide_claim, renewal_of
from ._owners import Renewal, Served, WorkerAd, served_from_json, served_to_json
from ._queue import Claimed, claimed_from, decide_batch, dispatchable
from ._records import RunRecord

__all__ = ("FileOwners",)


class FileOwners(FileRuns):
    """Claims, renewals, cancels, and workers' claims and advertisements (see the module doc)."""

    def _claim_sync(
        self, run_id: str, owner: str, ttl: float, create: RunRecord | None, takeover: int | None
    ) -> RunRecord:
        expires = time.time() + ttl
        if create is not None and self._run_dir(run_id) is None:
            decision = decide_claim(None, run_id=run_id, owner=owner, create=create)
            assert decision.store is not None
            self._write_owner(owner, expires)  # live before the run is visible
            with contextlib.suppress(RunConflictError):  # created meanwhile: claim it
                self._create_sync(decision.store)
                return attrs.evolve(decision.store, lease_expires_at=time_of(expires))
        with self._locked(run_id) as folder:
            decision = decide_claim(
                self._read_run(run_id, folder),
                run_id=run_id,
                owner=owner,
                create=create,
                takeover=takeover,
            )
            if decision.store is not None:
                if decision.claimed:
                    self._write_owner(owner, expires)
                self._replace_run(folder, decision.store)
        return decision.outcome(time_of(expires))

    def _renew_sync(self, owner: str, ttl: float, held: dict[str, int]) -> Renewal:
        if ttl:
            self._write_owner(owner, time.time() + ttl)
        else:
            (self._root / OWNERS / f"{owner}.json").unlink(missing_ok=True)
        records = {
            run_id: record
            for run_id in held
            if (record := self._unless_deleted(run_id, partial(self._read_held, run_id), None))
        }
        return renewal_of(owner, held, records)

    def _read_held(self, run_id: str) -> RunRecord | None:
        folder = self._run_dir(run_id)
        return None if folder is None else self._read_run(run_id, folder, lease=False)

    def _cancel_sync(self, run_id: str, takeover: int | None) -> RunRecord:
        with self._locked(run_id, "cannot cancel") as folder:
            current = self._read_run(run_id, folder)
            record = decide_cancel(current, run_id=run_id, takeover=takeover)
            if record is None:
                return current
            self._replace_run(folder, record)
            return record

    def _write_owner(self, owner: str, expires: float) -> None:
        """Publish *owner*'s lease expiry (not fsynced: a lease does not outlive a crash)."""
        data = json.dumps({"owner": owner, "expires": expires}).encode("utf-8")
        replace_small(self._root / OWNERS, f"{owner}.json", data)

    # -- workers -----------------------------------------------------------------------

    def _claim_batch_sync(
        self,
        owner: str,
        ttl: float,
        workflows: frozenset[Served],
        max_dispatches: int,
        limit: int,
        gone: frozenset[str],
        now: datetime,
    ) -> list[Claimed]:
        claimed: list[Claimed] = []
        try:
            self._claim_each(owner, ttl, workflows, max_dispatches, limit, gone, now, claimed)
        except Exception:
            # Each run is claimed under its own lock, not in one atomic step:
            # the runs claimed before a failure are returned (their executors
            # hold them), not left claimed by nobody; the failure comes again.
            if not claimed:
                raise
        return claimed

    def _claim_each(
        self,
        owner: str,
        ttl: float,
        workflows: frozenset[Served],
        max_dispatches: int,
        limit: int,
        gone: frozenset[str],
        now: datetime,
        claimed: list[Claimed],
    ) -> None:
        """Claim candidates one by one, each under its run's lock, into *claimed*."""
        for listed in self._list_sync():
            if len(claimed) >= limit:
                break
            if not dispatchable(listed, workflows=workflows, gone=gone, now=now):
                continue
            with self._locked_or_none(listed.run_id) as folder:
                if folder is None:
                    continue  # deleted since it was listed
                current = self._read_run(listed.run_id, folder)
                # Decided again under the run's lock: claimed or changed since it
                # was listed, it is passed over.
                for _, decision in decide_batch(
                    [current],
                    owner=owner,
                    limit=1,
                    max_dispatches=max_dispatches,
                    workflows=workflows,
                    gone=gone,
                    now=now,
                ):
                    expires = time.time() + ttl
                    if decision.claimed:
                        self._write_owner(owner, expires)
                    self._replace_run(folder, decision.store)
                    if decision.claimed:
                        claimed.append(claimed_from(current, decision, time_of(expires)))

    def _advertise_sync(self, owner: str, serves: frozenset[Served], ttl: float) -> None:
        folder = self._root / WORKERS
        path = folder / f"{owner}.json"
        now = time.time()
        for ad in self._workers_sync(now=-math.inf):
            if ad.expires_at.timestamp() <= now and ad.owner != owner:
                (folder / f"{ad.owner}.json").unlink(missing_ok=True)
        if not ttl:
            path.unlink(missing_ok=True)
            return
        data = {"owner": owner, "serves": served_to_json(serves), "expires": now + ttl}
        replace_small(folder, f"{owner}.json", json.dumps(data).encode("utf-8"))

    def _workers_sync(self, *, now: float) -> list[WorkerAd]:
        """The advertisements expiring after *now*, by owner."""
        folder = self._root / WORKERS
        try:
            with os.scandir(folder) as it:
                names = sorted(d.name for d in it if not d.name.startswith("."))
        except FileNotFoundError:
            return []
        ads = []
        for name in names:
            path = folder / name
            try:
                raw = self._read_file(name, path)
            except CheckpointCorruptError as exc:
                if not os.path.lexists(path):
                    continue  # withdrawn while listing
                problem = str(exc).rpartition(f"{path}: ")[2]
                raise CheckpointCorruptError(f"worker advertisement {path}: {problem}") from None
            try:
                data = json.loads(raw)
                owner, expires = data["owner"], data["expires"]
                if (
                    set(data) != {"owner", "serves", "expires"}
                    or f"{owner}.json" != name
                    or not isinstance(expires, float | int)
                ):
                    raise ValueError("not a worker advertisement of that name")
                serves = served_from_json(data["serves"])
            except (ValueError, KeyError, TypeError) as exc:
                raise CheckpointCorruptError(
                    f"worker advertisement {path} cannot be read: {exc}"
                ) from None
            if expires > now:
                ads.append(WorkerAd(owner=owner, serves=serves, expires_at=time_of(expires)))
        return ads
