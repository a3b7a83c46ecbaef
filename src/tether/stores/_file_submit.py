"""What a FileStore does for a submit by the queues' rules: dedupe ids, debounce,
``max_queued``.

Layer: stores (``tether.stores``).

A submit with a dedupe id or a ``max_queued`` holds its queue's ``flock``
(:mod:`._file_lock`), which every process's such submits take, while it
reads the queue's runs, decides (:func:`~._flow.decide_submit`) and writes:
so each sees every run the submits before it stored, and two never both
find a dedupe id free or a place left in the queue. The directory is the
index, as for a worker's claim: the read is a scan of every run record
(O(all runs)). The live run of the dedupe id is read again under its run's
lock, held until the submit is done, so a debounced rewrite is decided on
the record it replaces (a worker may have claimed it since the scan). A
new run is published as ``create_run`` publishes one. A plain submit reads
nothing, so it takes no lock: it is ``create_run``.

The synchronous half of :meth:`~._file.FileStore.submit_run`, run in a
worker thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ._file_runs import FileRuns
from ._flow import Submission, decide_submit, live_dedupe, pending
from ._records import RunRecord

__all__ = ("FileSubmits",)


class FileSubmits(FileRuns):
    """Submits by the queues' rules (see the module doc)."""

    def _submit_sync(self, submission: Submission) -> str:
        record = submission.record
        # A plain submit reads nothing: its create is atomic alone (a rename), as create_run's.
        reads = record.dedupe is not None or submission.max_queued is not None
        with self._queue_locked(record.queue, record.run_id) if reads else contextlib.nullcontext():
            runs = [r for r in self._list_sync() if r.queue == record.queue] if reads else []
            depth = None
            if submission.max_queued is not None:
                depth = sum(1 for r in runs if pending(r))
            with self._oldest_live(runs, record) as (live, folder):
                exists = self._run_dir(record.run_id) is not None
                decision = decide_submit(submission, live=live, exists=exists, depth=depth)
                if decision.replace is not None:
                    assert folder is not None, "a run is replaced only when one is live"
                    self._replace_run(folder, decision.replace)
                elif decision.create is not None:
                    self._create_sync(decision.create)
        return decision.run_id

    @contextlib.contextmanager
    def _oldest_live(
        self, runs: list[RunRecord], record: RunRecord
    ) -> Iterator[tuple[RunRecord | None, Path | None]]:
        """The oldest of *runs* that holds *record*'s dedupe id (:func:`live_dedupe`),
        read again under its run's lock, and its folder, the lock held in the block;
        ``(None, None)`` if none still does, or *record* has no dedupe id.

        Raises:
            CheckpointCorruptError: the run's record cannot be read.
            StoreError: another process held the run's lock for too long, or the
                store is closing.
        """
        dedupe = record.dedupe
        if dedupe is not None:
            for listed in runs:
                if not live_dedupe(listed, record.queue, dedupe):
                    continue
                with self._locked_or_none(listed.run_id) as folder:
                    if folder is None:
                        continue  # deleted since the scan
                    current = self._read_run(listed.run_id, folder)
                    if live_dedupe(current, record.queue, dedupe):  # else finished since
                        yield current, folder
                        return
        yield None, None
