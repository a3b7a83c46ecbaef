"""A FileStore's files on disk: their names, atomic writes, and strict checks.

Layer: stores (``tether.stores``).

Layout::

    <directory>/
        <run_id>/                     a run whose id is safe as a folder name (see run_folder)
        .r-<sha256 of the id>/        a run whose id is not: the same inside
            run.json                  RunRecord.to_json()
            .lock                     flock()ed by every write about the run
            entries/                  one file per append, named by its first seq:
                000000000001.json     Entry.to_json() of an append of one entry
                000000000002.json     [Entry.to_json(), ...]: seqs 2, 3, 4 (one append)
                000000000005.json
            messages/                 the run's mailbox (made by its first message):
                000000000001.json     Message.to_json(), one file per message, by seq
        .owners/<owner>.json          a lease holder's expiry (one file per owner)
        .queues/<queue>               flock()ed by submits by the queues' rules (named as a
                                      run folder is, see run_folder; empty, never removed)
        .trash/<random>/              a deleted run's folder, being removed (ignored by reads)
        .workers/<owner>.json         what a worker serves, until when (one file per worker)
        .tmp-<random>/                a run being created (ignored by reads)

A run's folder is named by its id when the id is safe as a folder name (as
every id a FileStore accepted before run ids had one rule for every store),
else by the id's digest (:func:`run_folder`); the id itself is in
``run.json``, which a read checks against the id it was asked for.

Every file is written atomically: to a unique temporary name in the same
folder (names starting with ``.``, but a digest-named run's folder, are
never read), fsynced, then published
(``os.link`` for an append's entries, ``os.replace`` for ``run.json``,
``os.rename`` of a whole prepared folder for a new run), and the folder is
fsynced. An append's seqs are claimed by publishing its file, named by its
first seq, with ``os.link``, which fails when another writer (another
process) took that number first: the writer then goes past the highest seq
stored, so processes sharing the folder never overwrite each other. (Every
append starts at the seq after the highest stored, so a writer whose idea of
it is stale always collides with the file of the append it missed.)

These are plain functions of paths, with no store state: the names of the
layout, a run's folder name (always inside the directory), the atomic
write of one file, the JSON of an append's file, and the strict checks a
read makes of a folder. The store's operations (:mod:`._file`) are built on
them.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from .._errors import CheckpointCorruptError
from ._record_json import RecordDecodeError, dumps_record
from ._records import Entry

RUN_FILE = "run.json"
ENTRIES = "entries"
MESSAGES = "messages"
TEMP = ".tmp-"
LOCK = ".lock"
OWNERS = ".owners"
QUEUES = ".queues"  # the queues' lock files (see _file_lock)
TRASH = ".trash"  # deleted runs' folders, renamed here whole, then removed
WORKERS = ".workers"
#: The start of the folder name of a run whose id is not safe as a folder name.
DIGESTED = ".r-"
_DIGESTED_NAME = re.compile(r"\.r-[0-9a-f]{64}")
#: How long a write waits for another process's lock on a run, in seconds.
LOCK_TIMEOUT: Final = 10.0
LOCK_POLL: Final = 0.002
ENTRY_NAME = re.compile(r"([0-9]{12})\.json")
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def run_folder(run_id: str) -> str:
    """The name of the folder of run *run_id* (a valid run id) in the store's directory.

    The id itself when it is safe as one folder name: not starting with
    ``.``, without ``/``, ``\\`` or a control character (the ids a FileStore
    took before every store had one rule, in the same folders as then).
    Otherwise ``.r-`` and the SHA-256 of its UTF-8 in hex: a name no id
    gives as itself, which the reads of the directory know.
    """
    if (
        run_id.startswith(".")
        or "/" in run_id
        or "\\" in run_id
        or (not run_id.isprintable() and any(ord(c) < 32 or ord(c) == 127 for c in run_id))
    ):
        return DIGESTED + hashlib.sha256(run_id.encode("utf-8")).hexdigest()
    return run_id


def is_digest_folder(name: str) -> bool:
    """Whether *name*, in the store's directory, is the folder of a run named by digest."""
    return _DIGESTED_NAME.fullmatch(name) is not None


def time_of(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(folder: Path) -> Path:
    """A new unique temporary file name in *folder* (never read: it starts with ``.``)."""
    return folder / f"{TEMP}{uuid.uuid4().hex}.json"


def write_temp(folder: Path, data: bytes) -> Path:
    """Write *data* to a new unique temporary file in *folder*, fsynced."""
    temp = temp_name(folder)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
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


def batch_bytes(entries: Sequence[Entry]) -> bytes:
    """The journal file of one append: its entry's JSON object, or an array of several."""
    texts = [dumps_record(entry.to_json()) for entry in entries]
    return (texts[0] if len(texts) == 1 else "[" + ",".join(texts) + "]").encode("utf-8")


def decode_batch(data: object) -> list[Entry]:
    """The entries of a journal file's JSON (see :func:`batch_bytes`), strictly."""
    if not isinstance(data, list):
        return [Entry.from_json(data)]
    if len(data) < 2:  # never written: one entry is stored as an object
        raise RecordDecodeError(f"a file of entries holds two or more, not {len(data)}")
    return [Entry.from_json(item) for item in data]


def replace_small(folder: Path, name: str, data: bytes) -> None:
    """Publish *data* as *folder*/*name* atomically, not fsynced (leases, advertisements:
    neither outlives a crash), creating *folder* if needed."""
    folder.mkdir(exist_ok=True)
    temp = temp_name(folder)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temp, folder / name)


def write_torn(folder: Path, data: bytes) -> None:
    """What :func:`write_temp` leaves when the process dies in its middle.

    The first half of *data* in a new temporary file, neither fsynced nor
    published. For the FileStore's ``_simulate_torn_append`` and
    ``_simulate_torn_update``.
    """
    fd = os.open(
        temp_name(folder), os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644
    )
    try:
        view = memoryview(data)[: len(data) // 2]
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def corrupt(run_id: str, path: Path, problem: str) -> CheckpointCorruptError:
    return CheckpointCorruptError(f"run {run_id!r}: {path}: {problem}")


def check_folder(run_id: str, path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise corrupt(run_id, path, "missing") from None
    except OSError as exc:
        raise corrupt(run_id, path, f"cannot be read: {exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise corrupt(
            run_id, path, "is a symbolic link; a FileStore refuses links (they may lead out)"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise corrupt(run_id, path, "is not a folder")


def numbered(run_id: str, folder: Path, what: str) -> list[tuple[int, Path]]:
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
                m = ENTRY_NAME.fullmatch(d.name)
                if m is None:
                    raise corrupt(run_id, folder / d.name, f"unexpected name in {what}")
                found.append((int(m[1]), folder / d.name))
    except OSError as exc:
        raise corrupt(run_id, folder, f"cannot be listed: {exc}") from None
    found.sort()
    return found
