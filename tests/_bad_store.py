"""A deliberately bad third-party store, for ``tether bench`` to catch.

:class:`SlowDiskStore` is the :class:`~tests._json_store.JsonStore` with one
mistake, the one the write-a-store guide used to recommend: its ``append``
writes to a slow disk (:data:`WRITE_SECONDS` of blocking I/O, here a
``time.sleep``) in ``trio.to_thread.run_sync`` **without**
``abandon_on_cancel`` (the record itself is then kept as the JsonStore keeps
it). The event loop never blocks, but a caller whose
deadline strikes during a write waits for the disk: trio cannot abandon the
thread, so the cancellation is delivered only once the write is done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

import trio

from tether.stores import Entry

from ._json_store import JsonStore

#: How long one append's write takes on the slow disk (real seconds).
WRITE_SECONDS: Final = 0.3


class SlowDiskStore(JsonStore):
    """A store whose appends block in a worker thread that is not abandoned on cancel."""

    def __repr__(self) -> str:
        return "SlowDiskStore()"

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        # The mistake: no abandon_on_cancel=True, so a cancelled caller waits for the disk.
        await trio.to_thread.run_sync(self._sync_to_disk)
        return await super().append(run_id, entries)

    def _sync_to_disk(self) -> None:
        time.sleep(WRITE_SECONDS)  # the slow disk's fsync
