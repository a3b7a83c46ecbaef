"""A durable store made of plain JSON files, one folder per run.

Layout::

    <directory>/
        <run_id>/
            run.json                  RunRecord.to_json()
            .lock                     flock()ed by every write about the run
            entries/                  one file per append, named by its first seq:
                000000000001.json     Entry.to_json() of an append of one entry
                000000000002.json     [Entry.to_json(), ...]: seqs 2, 3, 4 (one append)
                000000000005.json
            messages/                 the run's mailbox (made by its first message):
                000000000001.json     Message.to_json(), one file per message, by seq
        .owners/<owner>.json          a lease holder's expiry (one file per owner)
        .trash/<random>/              a deleted run's folder, being removed (ignored by reads)
        .workers/<owner>.json         what a worker serves, until when (one file per worker)
        .tmp-<random>/                a run being created (ignored by reads)

Every file is written atomically: to a unique temporary name in the same
folder (names starting with ``.`` are never read), fsynced, then published
(``os.link`` for an append's entries, ``os.replace`` for ``run.json``,
``os.rename`` of a whole prepared folder for a new run), and the folder is
fsynced. An append's seqs are claimed by publishing its file, named by its
first seq, with ``os.link``, which fails when another writer (another
process) took that number first: the writer then goes past the highest seq
stored, so processes sharing the folder never overwrite each other. (Every
append starts at the seq after the highest stored, so a writer whose idea of
it is stale always collides with the file of the append it missed.)

An append is one file, whatever its number of entries (group commit costs
two fsyncs per append, not two per entry), and a crash never leaves a gap
in the journal, which the strict reader would report as corruption:

* the file's content is fsynced *before* its name is linked, so a name that
  survives a crash names complete content (all the append's entries);
* the one link is the whole append: a crash keeps all its entries or none;
* appends to a run are serialized (the run's ``flock``), and one returns
  only after the folder's fsync made its link durable; the next append's
  link is made after that, so a crash can lose only the newest append, a
  suffix of the journal, never one below a later seq.

A lost newest append was not acknowledged (its ``append`` had not returned),
so its steps run again on resume. One file per *entry* with a single folder
fsync per append would not do: until that fsync, a crash may keep any subset
of the new names (a folder's entries are not written in order on every file
system), so a later seq could survive an earlier one.

Every write about a run (an append, a record update, a claim, a cancel)
holds an exclusive ``flock`` on the run's ``.lock`` file while it reads the
run's token and writes, so the fencing check and the write are one atomic
step for every process (a lock dies with its process). Leases are per owner:
renewing an engine's leases rewrites one small file, however many runs it
holds.

A message is sent under the run's lock too: its seq is the highest stored
plus one, and its file is published like an append's (fsynced, linked under
its seq's name, the folder fsynced). When the send wakes a waiting run, its
``run.json`` is replaced first: a crash between the two writes leaves a run
due with no new message (the worker that claims it parks it again), never a
message that wakes nothing. A run folder of an older tether has no
``messages`` folder: its first message makes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
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
    check_delete,
    check_owner,
    check_ttl,
    decide_cancel,
    decide_claim,
    fenced_update,
    renewal,
)
from ._mailbox import Message, check_after, check_send, decide_send, load_message, message_gap
from ._protocol import (
    Entry,
    RecordDecodeError,
    Renewal,
    RunRecord,
    RunStatus,
    Served,
    WorkerAd,
    dumps_record,
    load_run_record,
    loads_record,
    served_from_json,
    served_to_json,
)
from ._queue import (
    check_max_dispatches,
    check_now,
    check_run_filter,
    check_served,
    decide_dispatch,
    dispatchable,
)

__all__ = ("FileStore",)

T = TypeVar("T")

#: Longest run id accepted, in UTF-8 bytes (file systems allow 255 per name).
MAX_RUN_ID_BYTES: Final = 200

_RUN_FILE = "run.json"
_ENTRIES = "entries"
_MESSAGES = "messages"
_TEMP = ".tmp-"
_LOCK = ".lock"
_OWNERS = ".owners"
_TRASH = ".trash"  # deleted runs' folders, renamed here whole, then removed
_WORKERS = ".workers"
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


def _batch_bytes(entries: Sequence[Entry]) -> bytes:
    """The journal file of one append: its entry's JSON object, or an array of several."""
    texts = [dumps_record(entry.to_json()) for entry in entries]
    return (texts[0] if len(texts) == 1 else "[" + ",".join(texts) + "]").encode("utf-8")


def _decode_batch(data: object) -> list[Entry]:
    """The entries of a journal file's JSON (see :func:`_batch_bytes`), strictly."""
    if not isinstance(data, list):
        return [Entry.from_json(data)]
    if len(data) < 2:  # never written: one entry is stored as an object
        raise RecordDecodeError(f"a file of entries holds two or more, not {len(data)}")
    return [Entry.from_json(item) for item in data]


def _replace_small(folder: Path, name: str, data: bytes) -> None:
    """Publish *data* as *folder*/*name* atomically, not fsynced (leases, advertisements:
    neither outlives a crash), creating *folder* if needed."""
    folder.mkdir(exist_ok=True)
    temp = _temp_name(folder)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temp, folder / name)


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

    Layout: ``<directory>/<run_id>/run.json`` and one file per append,
    ``<directory>/<run_id>/entries/<first seq, 12 digits>.json``. Each file is
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

    An :meth:`append` is atomic: its new entries are published in one file
    (a crash keeps all of them or none, and never leaves a gap below a
    later seq; see the module doc).
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
        # run -> which folder of that id the two caches above are about (a
        # deleted run's id may be created again, by any process)
        self._marks: dict[str, tuple[int, int, int]] = {}

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
            record = self._unless_deleted(run_id, partial(self._read_held, run_id), None)
            if record is not None and record.owner == owner:
                mine[run_id] = (record.token, record.cancel_requested)
        return renewal(mine, held)

    def _read_held(self, run_id: str) -> RunRecord | None:
        folder = self._run_dir(run_id)
        return None if folder is None else self._read_run(run_id, folder, lease=False)

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
        data = json.dumps({"owner": owner, "expires": expires}).encode("utf-8")
        _replace_small(self._root / _OWNERS, f"{owner}.json", data)

    async def advertise(self, owner: str, *, serves: Collection[Served], ttl: float) -> None:
        """Rewrite worker *owner*'s file in ``.workers`` (``ttl=0``: remove it).

        Expired files of other workers are removed here. A checkpoint.

        Raises:
            StoreError: the file system failed.
        """
        check_owner(owner)
        ttl = check_ttl(ttl)
        served = check_served(serves)
        await self._call(f"advertising worker {owner}", self._advertise_sync, owner, served, ttl)

    def _advertise_sync(self, owner: str, serves: frozenset[Served], ttl: float) -> None:
        folder = self._root / _WORKERS
        path = folder / f"{owner}.json"
        now = time.time()
        for ad in self._workers_sync(now=-math.inf):
            if ad.expires_at.timestamp() <= now and ad.owner != owner:
                (folder / f"{ad.owner}.json").unlink(missing_ok=True)
        if not ttl:
            path.unlink(missing_ok=True)
            return
        data = {"owner": owner, "serves": served_to_json(serves), "expires": now + ttl}
        _replace_small(folder, f"{owner}.json", json.dumps(data).encode("utf-8"))

    async def list_workers(self) -> Sequence[WorkerAd]:
        """The live advertisements in ``.workers``, by owner. A checkpoint.

        Raises:
            CheckpointCorruptError: a file there cannot be read.
            StoreError: the file system failed.
        """
        result: list[WorkerAd] = await self._call(
            "listing workers", lambda: self._workers_sync(now=time.time())
        )
        return result

    def _workers_sync(self, *, now: float) -> list[WorkerAd]:
        """The advertisements expiring after *now*, by owner."""
        folder = self._root / _WORKERS
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
                ads.append(WorkerAd(owner=owner, serves=serves, expires_at=_time_of(expires)))
        return ads

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
        deadline = time.monotonic() + _LOCK_TIMEOUT
        while True:
            folder = self._run_dir(run_id)
            if folder is None:
                raise RunNotFoundError(f"{doing} run {run_id!r}: it is not stored in {self!r}")
            try:
                fd = os.open(
                    folder / _LOCK, os.O_RDWR | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, 0o644
                )
            except FileNotFoundError:
                continue  # deleted meanwhile (its folder renamed away): look again
            if self._lock_file(run_id, folder, fd, deadline):
                break
            os.close(fd)
        try:
            self._forget_if_new(run_id, fd)
            yield folder
        finally:
            os.close(fd)  # releases the lock

    def _lock_file(self, run_id: str, folder: Path, fd: int, deadline: float) -> bool:
        """``flock`` *fd*, the run's lock file; ``False`` if, once locked, it is no
        longer the run's (:meth:`delete_run` renamed the folder away meanwhile).

        Raises:
            StoreError: another process held the lock until *deadline*.
        """
        try:
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
            held = os.fstat(fd)
            try:
                now = os.stat(folder / _LOCK, follow_symlinks=False)
            except FileNotFoundError:
                return False
            return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
        except BaseException:
            os.close(fd)
            raise

    def _forget_if_new(self, run_id: str, fd: int) -> None:
        """Drop what is cached for appends to *run_id* if its folder is not the one
        they were cached for: the run was deleted and created again (by any process).

        *fd* is the run's locked lock file: created in its folder by the first
        write and never replaced, so its identity (device, inode, change time)
        stands for that folder.
        """
        st = os.fstat(fd)
        mark = (st.st_dev, st.st_ino, st.st_ctime_ns)
        with self._run_lock(run_id):
            if self._marks.get(run_id) != mark:
                self._ids.pop(run_id, None)
                self._next.pop(run_id, None)
                self._marks[run_id] = mark

    @contextlib.contextmanager
    def _locked_or_none(self, run_id: str) -> Iterator[Path | None]:
        """:meth:`_locked`, yielding ``None`` for a run that is not stored (deleted)."""
        with contextlib.ExitStack() as stack:
            try:
                folder: Path | None = stack.enter_context(self._locked(run_id))
            except RunNotFoundError:
                folder = None
            yield folder

    async def delete_run(self, run_id: str) -> bool:
        """Delete the run's folder, journal and all, atomically (see the protocol).

        Under the run's lock, the folder is renamed into ``.trash`` (one
        ``os.rename``: the run vanishes whole for every reader, and a write
        waiting for the lock finds no run), the store's folder is fsynced,
        and then the renamed folder is removed. A crash before the rename
        leaves the whole run; after it, a folder in ``.trash`` that no read
        looks at, removed by the next ``delete_run`` (of any process). A
        read that raced the rename reads the run as unknown, never as
        corrupt. A checkpoint.

        Raises:
            RunConflictError: an owner holds a live lease on the run.
            UsageError: the run id is not safe as a folder name.
            CheckpointCorruptError: the run's record cannot be read.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        result: bool = await self._call(f"deleting run {run_id!r}", self._delete_sync, run_id)
        return result

    def _delete_sync(self, run_id: str) -> bool:
        trash = self._root / _TRASH
        trash.mkdir(exist_ok=True)
        self._check_folder(run_id, trash)  # never move a run through a link
        with self._locked_or_none(run_id) as folder:
            if folder is None or not check_delete(self._read_run(run_id, folder), run_id=run_id):
                return False
            with self._run_lock(run_id):
                os.rename(folder, trash / uuid.uuid4().hex)
                self._ids.pop(run_id, None)
                self._next.pop(run_id, None)
            _fsync_dir(self._root)
        with os.scandir(trash) as it:
            leftovers = [d.name for d in it]
        for name in leftovers:  # this delete's folder, and any a crash left
            shutil.rmtree(trash / name, ignore_errors=True)
        return True

    def _unless_deleted(self, run_id: str, read: Callable[[], T], gone: T) -> T:
        """*read()*; *gone* if the run was deleted while it read.

        A delete renames the run's folder away whole, so a read that raced it
        finds a file or folder missing: that is an unknown run, not a corrupt
        one. Read again while the run's folder is there (a new run may have
        taken the id); what stays unreadable is corrupt.
        """
        for attempt in range(3):
            try:
                return read()
            except CheckpointCorruptError:
                if not os.path.lexists(self._root / run_id):
                    return gone
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or ``None`` for an unknown id. A checkpoint.

        Raises:
            CheckpointCorruptError: ``run.json`` cannot be read or decoded.
            UsageError: the run id is not safe as a folder name.
        """
        check_run_id(run_id)
        result: RunRecord | None = await self._call(
            f"reading run {run_id!r}", self._get_current, run_id
        )
        return result

    def _get_current(self, run_id: str) -> RunRecord | None:
        return self._unless_deleted(run_id, lambda: self._get_sync(run_id), None)

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
        version: str | None = None,
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
        selected = check_run_filter(status, workflow, after, limit, version)
        records: list[RunRecord] = await self._call("listing runs", self._list_sync)
        return selected.page(records)

    async def claim_next(
        self,
        owner: str,
        *,
        ttl: float,
        workflows: Collection[Served | str],
        max_dispatches: int,
        gone: Collection[str] = (),
        now: datetime | None = None,
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
            check_served(workflows),
            max_dispatches,
            frozenset(gone),
            check_now(now),
        )
        return result

    def _claim_next_sync(
        self,
        owner: str,
        ttl: float,
        workflows: frozenset[Served],
        max_dispatches: int,
        gone: frozenset[str],
        now: datetime,
    ) -> RunRecord | None:
        for listed in self._list_sync():
            if not dispatchable(listed, workflows=workflows, gone=gone, now=now):
                continue
            with self._locked_or_none(listed.run_id) as folder:
                if folder is None:
                    continue  # deleted since it was listed
                current = self._read_run(listed.run_id, folder)
                if not dispatchable(current, workflows=workflows, gone=gone, now=now):
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
            record = self._get_current(name)
            if record is not None:  # None: deleted while listing
                records.append(record)
        records.sort(key=lambda r: (r.created_at, r.run_id))
        return records

    async def append(self, run_id: str, entries: Sequence[Entry]) -> Sequence[Entry]:
        """Publish the new entries in one file, with the run's next seqs: all or none.

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
            # Each entry is a stored one (a duplicate) or the index of a new one
            # (an entry repeated within the call is stored once).
            placed: list[Entry | int] = []
            new: dict[str, int] = {}  # idempotency key -> index among the new entries
            fresh: list[Entry] = []
            for entry in entries:
                ikey = entry.idempotency_key
                existing = ids.get(ikey)
                if existing is not None:
                    placed.append(existing)
                    continue
                index = new.get(ikey)
                if index is None:
                    index = new[ikey] = len(fresh)
                    fresh.append(entry)
                placed.append(index)
            if not fresh:
                return [p for p in placed if isinstance(p, Entry)]
            published = self._publish(run_id, folder, fresh)
            for ikey, index in new.items():
                ids[ikey] = published[index]
            return [published[p] if isinstance(p, int) else p for p in placed]

    def _publish(self, run_id: str, folder: Path, entries: list[Entry]) -> list[Entry]:
        """Store *entries* as the run's next seqs, in one file: all of them, or none.

        See the module doc for why one file per append keeps a crash from
        leaving a gap. Under the run's locks.
        """
        seq = self._next.get(run_id, 1)
        while True:
            done = [entry.stored_as(seq + i) for i, entry in enumerate(entries)]
            temp = _write_temp(folder, _batch_bytes(done))
            try:
                os.link(temp, folder / f"{seq:012d}.json", follow_symlinks=False)
            except FileExistsError:
                # Another process appended since this one did: go past everything stored now.
                seq = max(seq + 1, self._last_seq(run_id, folder) + 1)
                continue
            finally:
                temp.unlink()
            _fsync_dir(folder)
            self._next[run_id] = seq + len(done)
            return done

    def _last_seq(self, run_id: str, folder: Path) -> int:
        """The highest seq stored in the journal folder *folder* (0: none)."""
        with os.scandir(folder) as it:
            firsts = [int(m[1]) for d in it if (m := _ENTRY_NAME.fullmatch(d.name))]
        if not firsts:
            return 0
        last = max(firsts)
        return last + len(self._load_file(run_id, folder / f"{last:012d}.json", last)) - 1

    async def load_entries(self, run_id: str) -> Sequence[Entry]:
        """The run's journal in ``seq`` order (empty for an unknown run). A checkpoint.

        Raises:
            CheckpointCorruptError: any journal file cannot be read or decoded,
                disagrees with its name, or a ``seq`` is missing or stored
                twice (none is skipped).
            UsageError: the run id is not safe as a folder name.
        """
        check_run_id(run_id)
        result: list[Entry] = await self._call(
            f"loading the journal of run {run_id!r}",
            lambda: self._unless_deleted(run_id, lambda: self._load_sync(run_id), []),
        )
        return result

    def _load_sync(self, run_id: str) -> list[Entry]:
        folder = self._run_dir(run_id)
        if folder is None:
            return []
        entries_dir = folder / _ENTRIES
        self._check_folder(run_id, entries_dir)
        journal: list[Entry] = []
        for seq, path in self._numbered(run_id, entries_dir, "a journal folder"):
            expected = len(journal) + 1  # files hold seqs 1, 2, 3, ... in order, no gaps
            if seq > expected:
                missing = entries_dir / f"{expected:012d}.json"
                raise self._corrupt(run_id, missing, f"entry seq {expected} is missing")
            if seq < expected:
                raise self._corrupt(
                    run_id, path, f"entry seq {seq} is stored twice (in an earlier file too)"
                )
            journal += self._load_file(run_id, path, seq)
        return journal

    def _numbered(self, run_id: str, folder: Path, what: str) -> list[tuple[int, Path]]:
        """The files of *folder* named by a seq (``000000000001.json``), in seq order.

        Temporary files (of a write in progress) are skipped; any other name
        is corrupt (*what* says which folder it is in).
        """
        found: list[tuple[int, Path]] = []
        try:
            with os.scandir(folder) as it:
                for d in it:
                    if d.name.startswith("."):
                        continue  # a temporary file of a write in progress
                    m = _ENTRY_NAME.fullmatch(d.name)
                    if m is None:
                        raise self._corrupt(run_id, folder / d.name, f"unexpected name in {what}")
                    found.append((int(m[1]), folder / d.name))
        except OSError as exc:
            raise self._corrupt(run_id, folder, f"cannot be listed: {exc}") from None
        found.sort()
        return found

    # -- mailboxes -----------------------------------------------------------------------

    async def send_message(self, run_id: str, name: str, value: str, *, now: datetime) -> Message:
        """Store a message with the run's next seq under the run's lock; wake it if waiting.

        See :meth:`MailboxStore.send_message
        <tether.stores.MailboxStore.send_message>` and the module doc. A
        checkpoint; cancelled, it stored the message whole or not at all (see
        the class doc).

        Raises:
            RunNotFoundError: no such run.
            RunConflictError: the run has finished.
            UsageError: invalid arguments, or a run id that is not safe.
            CheckpointCorruptError: the run's record or mailbox cannot be read.
            StoreError: the file system failed.
        """
        check_run_id(run_id)
        sent_at = check_send(run_id, name, value, now)
        message: Message = await self._call(
            f"sending a message to run {run_id!r}", self._send_sync, run_id, name, value, sent_at
        )
        return message

    def _send_sync(self, run_id: str, name: str, value: str, sent_at: datetime) -> Message:
        with self._locked(run_id, "cannot send a message to") as folder:
            record = decide_send(
                self._read_run(run_id, folder, lease=False), run_id=run_id, now=sent_at
            )
            box = folder / _MESSAGES
            if not os.path.lexists(box):
                box.mkdir()
                _fsync_dir(folder)
            self._check_folder(run_id, box)  # never write through a link
            found = self._numbered(run_id, box, "a mailbox folder")
            seq = found[-1][0] + 1 if found else 1
            message = Message(run_id=run_id, seq=seq, name=name, value=value, sent_at=sent_at)
            if record is not None:
                self._replace_run(folder, record)  # first: see the module doc
            temp = _write_temp(box, dumps_record(message.to_json()).encode("utf-8"))
            path = box / f"{seq:012d}.json"
            try:
                os.link(temp, path, follow_symlinks=False)
            except FileExistsError:
                raise self._corrupt(
                    run_id, path, "exists, though it was not listed under the run's lock"
                ) from None
            finally:
                temp.unlink()
            _fsync_dir(box)
        return message

    async def load_messages(self, run_id: str, *, after: int = 0) -> Sequence[Message]:
        """The run's messages with ``seq > after``, in order (empty for an unknown run).

        A checkpoint.

        Raises:
            UsageError: *after* is not a non-negative integer, or the run id is not safe.
            CheckpointCorruptError: a message file cannot be read or decoded,
                disagrees with its name, or a seq is missing (none is skipped).
        """
        check_run_id(run_id)
        after = check_after(after)
        result: list[Message] = await self._call(
            f"loading the messages of run {run_id!r}",
            lambda: self._unless_deleted(run_id, lambda: self._messages_sync(run_id, after), []),
        )
        return result

    def _messages_sync(self, run_id: str, after: int) -> list[Message]:
        folder = self._run_dir(run_id)
        if folder is None:
            return []
        box = folder / _MESSAGES
        if not os.path.lexists(box):
            return []  # no message yet (or a run folder of an older tether)
        self._check_folder(run_id, box)
        wanted = [(s, p) for s, p in self._numbered(run_id, box, "a mailbox folder") if s > after]
        gap = message_gap([seq for seq, _ in wanted], after=after)
        if gap is not None:
            raise self._corrupt(run_id, box / f"{gap:012d}.json", f"message seq {gap} is missing")
        messages = []
        for seq, path in wanted:
            try:
                messages.append(load_message(self._read_file(run_id, path), run_id, seq))
            except RecordDecodeError as exc:
                raise self._corrupt(run_id, path, str(exc)) from None
        return messages

    def _load_file(self, run_id: str, path: Path, first: int) -> list[Entry]:
        """The entries of journal file *path*, whose name says it starts at seq *first*."""
        try:
            batch: list[Entry] = loads_record(self._read_file(run_id, path), _decode_batch)
        except RecordDecodeError as exc:
            raise self._corrupt(run_id, path, str(exc)) from None
        for i, entry in enumerate(batch):
            where = "the entry" if len(batch) == 1 else f"entry {i + 1} of the file"
            if entry.run_id != run_id:
                raise self._corrupt(run_id, path, f"{where} names run {entry.run_id!r}")
            if entry.seq != first + i:
                raise self._corrupt(
                    run_id, path, f"{where} says seq {entry.seq!r}, where it is stored {first + i}"
                )
        return batch

    # -- crash simulation (tether.testing.FaultyStore's Crash(torn=True)) ---------------

    def _simulate_torn_append(self, run_id: str, entries: Sequence[Entry]) -> None:
        """Leave what a crash in the middle of ``append(run_id, entries)`` leaves.

        The file the append would publish (its new entries) is half-written to
        the temporary name :meth:`_publish` uses (``entries/.tmp-<random>.json``),
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
                new: dict[str, Entry] = {}
                for e in entries:
                    if e.idempotency_key not in ids:
                        new.setdefault(e.idempotency_key, e)
                if new:
                    done = [e.stored_as(seq + i) for i, e in enumerate(new.values())]
                    _write_torn(folder / _ENTRIES, _batch_bytes(done))
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
