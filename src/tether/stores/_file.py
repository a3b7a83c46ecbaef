"""A durable store made of plain JSON files, one folder per run.

Layout::

    <directory>/
        <run_id>/
            run.json                  RunRecord.to_json()
            .lock                     flock()ed by every write about the run
            entries/
                000000000001.json     Entry.to_json(), one file per journal entry
                000000000002.json
        .owners/<owner>.json          a lease holder's expiry (one file per owner)
        .tmp-<random>/                a run being created (ignored by reads)

Every file is written atomically: to a unique temporary name in the same
folder (names starting with ``.`` are never read), fsynced, then published
(``os.link`` for an entry, ``os.replace`` for ``run.json``, ``os.rename`` of a
whole prepared folder for a new run), and the folder is fsynced. An entry's
``seq`` is claimed by publishing its file with ``os.link``, which fails when
another writer (another process) took that number first: the writer then
tries the next one, so processes sharing the folder never overwrite each
other.

Every write about a run (an append, a record update, a claim, a cancel)
holds an exclusive ``flock`` on the run's ``.lock`` file while it reads the
run's token and writes, so the fencing check and the write are one atomic
step for every process (a lock dies with its process). Leases are per owner:
renewing an engine's leases rewrites one small file, however many runs it
holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar, final

import attrs
import trio

from .._errors import (
    CheckpointCorruptError,
    RunConflictError,
    RunNotFoundError,
    StoreError,
    TetherError,
    UsageError,
)
from ._leases import (
    check_append,
    check_owner,
    check_ttl,
    decide_cancel,
    decide_claim,
    fenced_update,
    renewal,
)
from ._protocol import (
    Entry,
    RecordDecodeError,
    Renewal,
    RunRecord,
    RunStatus,
    dumps_record,
    first_gap,
    load_entry,
    load_run_record,
)
from ._queue import check_max_dispatches, check_run_filter, decide_dispatch, dispatchable

__all__ = ("FileStore",)

T = TypeVar("T")

#: Longest run id accepted, in UTF-8 bytes (file systems allow 255 per name).
MAX_RUN_ID_BYTES: Final = 200

_RUN_FILE = "run.json"
_ENTRIES = "entries"
_TEMP = ".tmp-"
_LOCK = ".lock"
_OWNERS = ".owners"
#: How long a write waits for another process's lock on a run, in seconds.
_LOCK_TIMEOUT: Final = 10.0
_LOCK_POLL: Final = 0.002
_ENTRY_NAME = re.compile(r"([0-9]{12})\.json")
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_LOCKS = 64


def check_run_id(run_id: object) -> str:
    """*run_id* if it is safe as one folder name inside the store, else raise.

    Raises:
        UsageError: not a string; empty; starts with ``.``; contains ``/``,
            ``\\``, NUL or another control character; longer than
            :data:`MAX_RUN_ID_BYTES` in UTF-8.
    """
    if not isinstance(run_id, str):
        raise UsageError(f"a FileStore run id must be a string, not {run_id!r}")
    problem = None
    if not run_id:
        problem = "it is empty"
    elif run_id.startswith("."):
        problem = "it starts with '.'"
    elif any(c in run_id for c in "/\\") or any(ord(c) < 32 or ord(c) == 127 for c in run_id):
        problem = "it contains '/', '\\' or a control character"
    elif len(run_id.encode("utf-8", "surrogatepass")) > MAX_RUN_ID_BYTES:
        problem = f"it is longer than {MAX_RUN_ID_BYTES} bytes"
    if problem is not None:
        raise UsageError(
            f"run id {run_id[:80]!r} cannot be stored in a FileStore: {problem} "
            "(run ids become folder names and must stay inside the store's directory)"
        )
    return run_id


def _time_of(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_name(folder: Path) -> Path:
    """A new unique temporary file name in *folder* (never read: it starts with ``.``)."""
    return folder / f"{_TEMP}{uuid.uuid4().hex}.json"


def _write_temp(folder: Path, data: bytes) -> Path:
    """Write *data* to a new unique temporary file in *folder*, fsynced."""
    temp = _temp_name(folder)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return temp


def _write_torn(folder: Path, data: bytes) -> None:
    """What :func:`_write_temp` leaves when the process dies in its middle.

    The first half of *data* in a new temporary file, neither fsynced nor
    published. For :meth:`FileStore._simulate_torn_append` and
    :meth:`FileStore._simulate_torn_update`.
    """
    fd = os.open(
        _temp_name(folder), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o644
    )
    try:
        view = memoryview(data)[: len(data) // 2]
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


@final
class FileStore:
    """Runs and journals as JSON files under *directory*, safe for several processes.

    Args:
        directory: the store's folder; created (with its parents) on :meth:`open`.

    Layout: ``<directory>/<run_id>/run.json`` and one file per journal entry,
    ``<directory>/<run_id>/entries/<seq, 12 digits>.json``. Each file is
    written atomically (temporary file, fsync, publish, fsync of the folder);
    names starting with ``.`` are temporary and never read.

    Run ids are folder names: one that could leave the directory (``..``,
    ``/``, ``\\``, NUL, a leading ``.``, too long, empty) raises
    :class:`~tether.UsageError`. Step keys are stored inside files only.
    Symbolic links inside the store are refused (files are opened with
    ``O_NOFOLLOW``; a run folder that is a link is an error), so nothing
    outside the directory is ever read or written through one.

    Every method is a Trio checkpoint and does its file work in a worker
    thread. Cancellation takes effect before the work starts; once started,
    the call finishes (a file write is short) and returns, so a cancelled
    call wrote whole or not at all. :meth:`append` is idempotent (see
    :attr:`~tether.stores.Entry.idempotency_key`): duplicates are detected
    against what this process read or wrote, and against the whole journal
    the first time a process appends to a run (that cache is dropped when
    the run is stored as completed, and on :meth:`close`).

    Reads are strict: a file that cannot be read or decoded, a folder where a
    file should be, a file name that disagrees with its content, or a
    missing ``seq`` raise :class:`~tether.CheckpointCorruptError` naming the
    run and the path. ``list_runs`` orders runs by ``created_at`` (then id).
    An ``OSError`` becomes :class:`~tether.StoreError` naming the path.

    The file system must support hard links (``os.link``), as local POSIX
    file systems do.

    A multi-entry :meth:`append` publishes its entries one file at a time:
    each entry is atomic, but a crash in the middle keeps a prefix of them
    (the engine appends one entry per call).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        if not isinstance(directory, str | os.PathLike) or not os.fspath(directory):
            raise UsageError(f"FileStore takes a directory path, not {directory!r}")
        self.directory = Path(directory).absolute()
        self._root = self.directory
        self._open = False
        self._lock = threading.Lock()
        # Appends to one run are serialized in this process (other processes
        # are kept apart by os.link); a fixed set of locks, picked by run id.
        self._run_locks = tuple(threading.Lock() for _ in range(_LOCKS))
        self._ids: dict[str, dict[str, Entry]] = {}  # run -> idempotency key -> stored
        self._next: dict[str, int] = {}  # run -> the seq to try next

    def __repr__(self) -> str:
        return f"FileStore({str(self.directory)!r})"

    # -- lifetime ------------------------------------------------------------------

    async def open(self) -> None:
        """Create the directory if needed. A checkpoint.

        Raises:
            StoreError: the directory cannot be created or is not a folder.
        """
        self._root = await self._call("opening the store", self._open_sync)
        self._open = True

    def _open_sync(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        root = self.directory.resolve(strict=True)
        if not root.is_dir():
            raise StoreError(f"{self.directory} is not a directory")
        return root

    async def close(self) -> None:
        """Forget cached state. A checkpoint; nothing is left running."""
        self._open = False
        with self._lock:
            self._ids.clear()
            self._next.clear()
        await trio.lowlevel.checkpoint()

    # -- the protocol ----------------------------------------------------------------

    async def create_run(self, record: RunRecord) -> None:
        """Store a new run: its folder is prepared aside and renamed into place.

        Raises:
            RunConflictError: a run (or anything else) with this id exists.
            UsageError: the run id is not safe as a folder name.
            StoreError: the file system failed.
        """
        run_id = check_run_id(record.run_id)
        await self._call(f"creating run {run_id!r}", self._create_sync, record)

    def _create_sync(self, record: RunRecord) -> None:
        """Publish the run's folder whole, or raise RunConflictError if it exists."""
        run_id = record.run_id
        data = dumps_record(record.to_json()).encode("utf-8")
        final = self._root / run_id
        if os.path.lexists(final):
            raise RunConflictError(f"run {run_id!r} already exists in {self!r}")
        temp = self._root / f"{_TEMP}{uuid.uuid4().hex}"
        temp.mkdir()
        try:
            (temp / _ENTRIES).mkdir()
            _write_temp(temp, data).rename(temp / _RUN_FILE)
            _fsync_dir(temp / _ENTRIES)
            _fsync_dir(temp)
            try:
                os.rename(temp, final)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise RunConflictError(f"run {run_id!r} already exists in {self!r}") from None
                raise
        except BaseException:
            for leftover in (temp / _RUN_FILE, *temp.glob(f"{_TEMP}*")):
                leftover.unlink(missing_ok=True)
            for folder in (temp / _ENTRIES, temp):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        _fsync_dir(self._root)

    async def update_run(self, record: RunRecord) -> RunRecord:
        """Replace ``run.json`` atomically (``os.replace``).

        Raises:
            RunNotFoundError: no run with this id.
            UsageError: the run id is not safe as a folder name.
            CheckpointCorruptError: the run's folder is a link or not a folder.
            StoreError: the file system failed.
        """
        run_id = check_run_id(record.run_id)
        result: RunRecord = await self._call(f"updating run {run_id!r}", self._update_sync, record)
        return result

    def _update_sync(self, record: RunRecord) -> RunRecord:
        run_id = record.run_id
        with self._locked(run_id) as folder:
            stored = fenced_update(self._read_run(run_id, folder), record)
            self._replace_run(folder, stored)
        return stored

    def _replace_run(self, folder: Path, record: RunRecord) -> None:
        """Write *record* as the run's ``run.json`` (under the run's lock)."""
        if record.status is not RunStatus.RUNNING:
            # A run that is not executing takes no more entries now: drop what
            # was cached for its appends (read back from disk if needed).
            with self._run_lock(record.run_id):
                self._ids.pop(record.run_id, None)
                self._next.pop(record.run_id, None)
        temp = _write_temp(folder, dumps_record(record.to_json()).encode("utf-8"))
        try:
            os.replace(temp, folder / _RUN_FILE)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_dir(folder)

    async def claim(
        self,
        run_id: str,
        owner: str,
        *,
        ttl: float,
        create: RunRecord | None = None,
        takeover: int | None = None,
    ) -> RunRecord:
        """Take the run's lease, under the run's lock (see :meth:`Store.claim`).

        A run created by the claim is published whole (with its first lease),
        as :meth:`create_run` publishes one.

        Raises:
            RunConflictError, RunCancelledError, RunNotFoundError: see the protocol.
            StoreError: the file system failed, or another process held the
                run's lock for too long.
        """
        check_run_id(run_id)
        check_owner(owner)
        ttl = check_ttl(ttl)
        result: RunRecord = await self._call(
            f"claiming run {run_id!r}", self._claim_sync, run_id, owner, ttl, create, takeover
        )
        return result

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
                return attrs.evolve(decision.store, lease_expires_at=_time_of(expires))
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
        return decision.outcome(_time_of(expires))

    async def renew(self, owner: str, *, ttl: float, held: Mapping[str, int]) -> Renewal:
        """Rewrite *owner*'s lease file (one write), and read the held runs' tokens.

        Raises:
            StoreError: the file system failed.
            CheckpointCorruptError: a held run's record cannot be read.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        result: Renewal = await self._call(
            f"renewing the leases of {owner}", self._renew_sync, owner, ttl, dict(held)
        )
        return result

    def _renew_sync(self, owner: str, ttl: float, held: dict[str, int]) -> Renewal:
        if ttl:
            self._write_owner(owner, time.time() + ttl)
        else:
            (self._root / _OWNERS / f"{owner}.json").unlink(missing_ok=True)
        mine: dict[str, tuple[int, bool]] = {}
        for run_id in held:
            folder = self._run_dir(run_id)
            if folder is None:
                continue
            record = self._read_run(run_id, folder, lease=False)
            if record.owner == owner:
                mine[run_id] = (record.token, record.cancel_requested)
        return renewal(mine, held)

    async def cancel_run(self, run_id: str, *, takeover: int | None = None) -> RunRecord:
        """Record a cancel, under the run's lock (see :meth:`Store.cancel_run`).

        Raises:
            RunNotFoundError, RunConflictError: see the protocol.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        result: RunRecord = await self._call(
            f"cancelling run {run_id!r}", self._cancel_sync, run_id, takeover
        )
        return result

    def _cancel_sync(self, run_id: str, takeover: int | None) -> RunRecord:
        with self._locked(run_id, "cannot cancel") as folder:
            current = self._read_run(run_id, folder)
            record = decide_cancel(current, run_id=run_id, takeover=takeover)
            if record is None:
                return current
            self._replace_run(folder, record)
            return record

    # -- leases ------------------------------------------------------------------------

    def _write_owner(self, owner: str, expires: float) -> None:
        """Publish *owner*'s lease expiry (not fsynced: a lease does not outlive a crash)."""
        folder = self._root / _OWNERS
        folder.mkdir(exist_ok=True)
        data = json.dumps({"owner": owner, "expires": expires}).encode("utf-8")
        temp = folder / f"{_TEMP}{uuid.uuid4().hex}.json"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(temp, folder / f"{owner}.json")

    def _owner_expiry(self, owner: str) -> float | None:
        """When *owner*'s leases expire (Unix time), or ``None`` if it has no lease file."""
        path = self._root / _OWNERS / f"{owner}.json"
        try:
            data = json.loads(self._read_file(owner, path))
            expires = data["expires"]
            if data["owner"] != owner or not isinstance(expires, float | int):
                raise ValueError(f"not the lease of {owner}")
        except CheckpointCorruptError as exc:
            if not path.exists():
                return None
            raise CheckpointCorruptError(f"lease of owner {owner}: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorruptError(f"lease file {path} cannot be read: {exc}") from None
        return float(expires)

    @contextlib.contextmanager
    def _locked(self, run_id: str, doing: str = "cannot write") -> Iterator[Path]:
        """Hold the run's ``flock`` (every process respects it); yield its folder.

        Raises:
            RunNotFoundError: no such run (the message starts with *doing*).
            StoreError: another process held the lock for :data:`_LOCK_TIMEOUT`.
        """
        folder = self._run_dir(run_id)
        if folder is None:
            raise RunNotFoundError(f"{doing} run {run_id!r}: it is not stored in {self!r}")
        fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, 0o644)
        try:
            deadline = time.monotonic() + _LOCK_TIMEOUT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise StoreError(
                            f"run {run_id!r}: {folder / _LOCK} was held by another process "
                            f"for {_LOCK_TIMEOUT:.0f} s (is one stopped?)"
                        ) from None
                    time.sleep(_LOCK_POLL)
            yield folder
        finally:
            os.close(fd)  # releases the lock

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None`` for an unknown id. A checkpoint.

        Raises:
            CheckpointCorruptError: ``run.json`` cannot be read or decoded.
            UsageError: the run id is not safe as a folder name.
        """
        check_run_id(run_id)
        result: RunRecord | None = await self._call(
            f"reading run {run_id!r}", self._get_sync, run_id
        )
        return result

    def _get_sync(self, run_id: str) -> RunRecord | None:
        folder = self._run_dir(run_id)
        return None if folder is None else self._read_run(run_id, folder)

    async def list_runs(
        self,
        *,
        status: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> Sequence[RunRecord]:
        """Run records by ``created_at`` then id, filtered (see :meth:`Store.list_runs`).

        A checkpoint. The directory is the index: every run record is read
        and the filters applied to them, so a listing costs O(all runs).

        Raises:
            UsageError: invalid arguments.
            RunNotFoundError: *after* names no stored run.
            CheckpointCorruptError: any run cannot be read (none is skipped),
                or the directory holds something that is not a run.
        """
        selected = check_run_filter(status, workflow, after, limit)
        records: list[RunRecord] = await self._call("listing runs", self._list_sync)
        return selected.page(records)

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[str],
        max_dispatches: int,
        gone: Collection[str] = (),
    ) -> RunRecord | None:
        """A worker's claim of the oldest dispatchable run (see the protocol).

        Candidates are found by a listing, then each is decided again under
        its run's lock (which every process respects), so two workers never
        claim the same run.

        Raises:
            StoreError: the file system failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        max_dispatches = check_max_dispatches(max_dispatches)
        result: RunRecord | None = await self._call(
            "claiming a queued run",
            self._claim_next_sync,
            owner,
            ttl,
            frozenset(workflows),
            max_dispatches,
            frozenset(gone),
        )
        return result

    def _claim_next_sync(
        self,
        owner: str,
        ttl: float,
        workflows: frozenset[str],
        max_dispatches: int,
        gone: frozenset[str],
    ) -> RunRecord | None:
        for listed in self._list_sync():
            if not dispatchable(listed, workflows=workflows, gone=gone):
                continue
            with self._locked(listed.run_id) as folder:
                current = self._read_run(listed.run_id, folder)
                if not dispatchable(current, workflows=workflows, gone=gone):
                    continue  # claimed or changed since it was listed
                decision = decide_dispatch(current, owner=owner, max_dispatches=max_dispatches)
                expires = time.time() + ttl
                if decision.claimed:
                    self._write_owner(owner, expires)
                self._replace_run(folder, decision.store)
                if decision.claimed:
                    return attrs.evolve(decision.store, lease_expires_at=_time_of(expires))
        return None

    def _list_sync(self) -> list[RunRecord]:
        records = []
        with os.scandir(self._root) as it:
            names = sorted(d.name for d in it if not d.name.startswith("."))
        for name in names:
            try:
                check_run_id(name)
            except UsageError:
                raise self._corrupt(name, self._root / name, "not a run folder name") from None
            folder = self._run_dir(name)
            if folder is None:  # removed while listing
                continue
            records.append(self._read_run(name, folder))
        records.sort(key=lambda r: (r.created_at, r.run_id))
        return records

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Publish one file per entry, each claiming the run's next ``seq``.

        A checkpoint; see the class doc on cancellation and idempotency.

        Raises:
            RunNotFoundError: no run with this id.
            UsageError: the run id is not safe, or an entry names another run.
            CheckpointCorruptError: the journal read to find duplicates is corrupt.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        for e in entries:
            if e.run_id != run_id:
                raise UsageError(f"entry {e.key} of run {e.run_id!r} appended to run {run_id!r}")
        result: list[Entry] = await self._call(
            f"appending to run {run_id!r}", self._append_sync, run_id, list(entries)
        )
        return result

    def _append_sync(self, run_id: str, entries: list[Entry]) -> list[Entry]:
        with self._locked(run_id, "cannot append to") as folder, self._run_lock(run_id):
            run = self._read_run(run_id, folder, lease=False)
            check_append(run_id, entries, token=run.token, owner=run.owner)
            ids = self._ids.get(run_id)
            if ids is None:
                journal = self._load_sync(run_id)
                ids = {e.idempotency_key: e for e in journal}
                self._ids[run_id] = ids
                self._next[run_id] = len(journal) + 1
            folder = folder / _ENTRIES
            self._check_folder(run_id, folder)  # never write through a link
            stored: list[Entry] = []
            for entry in entries:
                ikey = entry.idempotency_key
                existing = ids.get(ikey)
                if existing is None:
                    existing = self._publish(run_id, folder, entry)
                    ids[ikey] = existing
                stored.append(existing)
            return stored

    def _publish(self, run_id: str, folder: Path, entry: Entry) -> Entry:
        seq = self._next.get(run_id, 1)
        while True:
            done = entry.stored_as(seq)
            temp = _write_temp(folder, dumps_record(done.to_json()).encode("utf-8"))
            try:
                os.link(temp, folder / f"{seq:012d}.json", follow_symlinks=False)
            except FileExistsError:
                # Another process took this seq: go past everything stored now.
                seq = max(seq + 1, self._max_seq(folder) + 1)
                continue
            finally:
                temp.unlink()
            _fsync_dir(folder)
            self._next[run_id] = seq + 1
            return done

    def _max_seq(self, folder: Path) -> int:
        with os.scandir(folder) as it:
            seqs = [int(m[1]) for d in it if (m := _ENTRY_NAME.fullmatch(d.name))]
        return max(seqs, default=0)

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (empty for an unknown run). A checkpoint.

        Raises:
            CheckpointCorruptError: any entry file cannot be read or decoded,
                disagrees with its name, or a ``seq`` is missing (none is skipped).
            UsageError: the run id is not safe as a folder name.
        """
        check_run_id(run_id)
        result: list[Entry] = await self._call(
            f"loading the journal of run {run_id!r}", self._load_sync, run_id
        )
        return result

    def _load_sync(self, run_id: str) -> list[Entry]:
        folder = self._run_dir(run_id)
        if folder is None:
            return []
        entries_dir = folder / _ENTRIES
        self._check_folder(run_id, entries_dir)
        found: list[tuple[int, Path]] = []
        try:
            with os.scandir(entries_dir) as it:
                for d in it:
                    if d.name.startswith("."):
                        continue  # a temporary file of a write in progress
                    m = _ENTRY_NAME.fullmatch(d.name)
                    if m is None:
                        raise self._corrupt(
                            run_id, entries_dir / d.name, "unexpected name in a journal folder"
                        )
                    found.append((int(m[1]), entries_dir / d.name))
        except OSError as exc:
            raise self._corrupt(run_id, entries_dir, f"cannot be listed: {exc}") from None
        found.sort()
        gap = first_gap([seq for seq, _ in found])
        if gap is not None:
            missing = entries_dir / f"{gap:012d}.json"
            raise self._corrupt(run_id, missing, f"entry seq {gap} is missing")
        journal: list[Entry] = []
        for seq, path in found:
            try:
                journal.append(load_entry(self._read_file(run_id, path), run_id, seq))
            except RecordDecodeError as exc:
                raise self._corrupt(run_id, path, str(exc)) from None
        return journal

    # -- crash simulation (tether.testing.FaultyStore's Crash(torn=True)) ---------------

    def _simulate_torn_append(self, run_id: str, entries: Sequence[Entry]) -> None:
        """Leave what a crash in the middle of ``append(run_id, entries)`` leaves.

        The first entry the append would publish is half-written to the
        temporary name :meth:`_publish` uses (``entries/.tmp-<random>.json``),
        without the fsync, the link and the folder's fsync that would follow:
        the process died inside :func:`_write_temp`. Readers ignore the file.
        Nothing cached changes. Where the real call would fail before writing
        (the store is closed, the run is not stored, an invalid id, every
        entry stored already), nothing is written.

        Synchronous, in the caller's thread (a few unsynced bytes): no other
        task runs between the torn write and the simulated crash.

        Raises:
            StoreError: the file system failed.
            CheckpointCorruptError: the journal read to find the seq is corrupt.
        """
        try:
            check_run_id(run_id)
        except UsageError:
            return
        if not self._open or any(e.run_id != run_id for e in entries):
            return
        try:
            with self._run_lock(run_id):
                folder = self._run_dir(run_id)
                if folder is None:
                    return
                ids = self._ids.get(run_id)
                seq = self._next.get(run_id)
                if ids is None or seq is None:
                    journal = self._load_sync(run_id)
                    ids = {e.idempotency_key: e for e in journal}
                    seq = len(journal) + 1
                new = [e for e in entries if e.idempotency_key not in ids]
                if new:
                    data = dumps_record(new[0].stored_as(seq).to_json()).encode("utf-8")
                    _write_torn(folder / _ENTRIES, data)
        except OSError as exc:
            raise StoreError(
                f"simulating a torn append to run {run_id!r} in {self!r} failed: {exc}"
            ) from exc

    def _simulate_torn_update(self, record: RunRecord) -> None:
        """Leave what a crash in the middle of ``update_run(record)`` leaves.

        The new ``run.json`` is half-written to the temporary name
        :meth:`_update_sync` uses (``<run>/.tmp-<random>.json``), without the
        fsync and the ``os.replace`` that would follow: the stored record is
        the old one. Where the real call would fail before writing (the store
        is closed, no such run, an invalid id), nothing is written.
        Synchronous, like :meth:`_simulate_torn_append`.

        Raises:
            StoreError: the file system failed.
        """
        try:
            run_id = check_run_id(record.run_id)
        except UsageError:
            return
        if not self._open:
            return
        data = dumps_record(record.to_json()).encode("utf-8")
        try:
            folder = self._run_dir(run_id)
            if folder is not None:
                _write_torn(folder, data)
        except OSError as exc:
            raise StoreError(
                f"simulating a torn update of run {run_id!r} in {self!r} failed: {exc}"
            ) from exc

    # -- helpers -----------------------------------------------------------------------

    async def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._open and fn != self._open_sync:
            await trio.lowlevel.checkpoint()
            raise UsageError(f"{what}: {self!r} is not open")
        try:
            return await trio.to_thread.run_sync(fn, *args)
        except TetherError:
            raise
        except OSError as exc:
            raise StoreError(f"{what} in {self!r} failed: {exc}") from exc

    def _corrupt(self, run_id: str, path: Path, problem: str) -> CheckpointCorruptError:
        return CheckpointCorruptError(f"run {run_id!r}: {path}: {problem}")

    def _check_folder(self, run_id: str, path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise self._corrupt(run_id, path, "missing") from None
        except OSError as exc:
            raise self._corrupt(run_id, path, f"cannot be read: {exc}") from None
        if stat.S_ISLNK(st.st_mode):
            raise self._corrupt(
                run_id, path, "is a symbolic link; a FileStore refuses links (they may lead out)"
            )
        if not stat.S_ISDIR(st.st_mode):
            raise self._corrupt(run_id, path, "is not a folder")

    def _run_lock(self, run_id: str) -> threading.Lock:
        return self._run_locks[hash(run_id) % _LOCKS]

    def _run_dir(self, run_id: str) -> Path | None:
        """The run's folder, or ``None`` if nothing by that name exists."""
        path = self._root / run_id
        if not os.path.lexists(path):
            return None
        self._check_folder(run_id, path)
        if path.resolve().parent != self._root:  # defence in depth: never leave the root
            raise self._corrupt(run_id, path, "resolves outside the store's directory")
        return path

    def _read_file(self, run_id: str, path: Path) -> bytes:
        try:
            fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError:
            raise self._corrupt(run_id, path, "missing") from None
        except OSError as exc:  # ELOOP: a symbolic link; EACCES; ...
            raise self._corrupt(run_id, path, f"cannot be read: {exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise self._corrupt(run_id, path, "is not a regular file")
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise self._corrupt(run_id, path, f"cannot be read: {exc}") from None
        finally:
            os.close(fd)

    def _read_run(self, run_id: str, folder: Path, *, lease: bool = True) -> RunRecord:
        """The run's record; with *lease*, its lease expiry filled while live."""
        path = folder / _RUN_FILE
        try:
            record = load_run_record(self._read_file(run_id, path), run_id)
        except RecordDecodeError as exc:
            raise self._corrupt(run_id, path, str(exc)) from None
        if lease and record.owner is not None:
            expires = self._owner_expiry(record.owner)
            if expires is not None and expires > time.time():
                record = attrs.evolve(record, lease_expires_at=_time_of(expires))
        return record
