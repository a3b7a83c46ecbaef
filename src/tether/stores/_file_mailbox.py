"""A FileStore's mailboxes: a run's messages, one file each, in ``<run>/messages``.

Layer: stores (``tether.stores``).

A message is sent under the run's lock (:mod:`._file_lock`): its seq is the
highest stored plus one, and its file is published like an append's
(fsynced, linked under its seq's name, the folder fsynced). When the send
wakes a waiting run, its ``run.json`` is replaced first: a crash between the
two writes leaves a run due with no new message (the worker that claims it
parks it again), never a message that wakes nothing. A run folder of an
older tether has no ``messages`` folder: its first message makes it. The
synchronous halves of :class:`~._file.FileStore`'s calls, run in a worker
thread.
"""

from __future__ import annotations

import os
from datetime import datetime

from ._file_disk import MESSAGES, check_folder, corrupt, fsync_dir, numbered, write_temp
from ._file_lock import FileLocking
from ._mailbox import Message, decide_send, load_message, message_gap
from ._record_json import RecordDecodeError, dumps_record

__all__ = ("FileMailbox",)


class FileMailbox(FileLocking):
    """Sending a message to a run and reading its messages (see the module doc)."""

    def _send_sync(self, run_id: str, name: str, value: str, sent_at: datetime) -> Message:
        with self._locked(run_id, "cannot send a message to") as folder:
            record = decide_send(
                self._read_run(run_id, folder, lease=False), run_id=run_id, now=sent_at
            )
            box = folder / MESSAGES
            if not os.path.lexists(box):
                box.mkdir()
                fsync_dir(folder)
            check_folder(run_id, box)  # never write through a link
            found = numbered(run_id, box, "a mailbox folder")
            seq = found[-1][0] + 1 if found else 1
            message = Message(run_id=run_id, seq=seq, name=name, value=value, sent_at=sent_at)
            if record is not None:
                self._replace_run(folder, record)  # first: see the module doc
            temp = write_temp(box, dumps_record(message.to_json()).encode("utf-8"))
            path = box / f"{seq:012d}.json"
            try:
                os.link(temp, path, follow_symlinks=False)
            except FileExistsError:
                raise corrupt(
                    run_id, path, "exists, though it was not listed under the run's lock"
                ) from None
            finally:
                temp.unlink()
            fsync_dir(box)
        return message

    def _messages_sync(self, run_id: str, after: int) -> list[Message]:
        folder = self._run_dir(run_id)
        if folder is None:
            return []
        box = folder / MESSAGES
        if not os.path.lexists(box):
            return []  # no message yet (or a run folder of an older tether)
        check_folder(run_id, box)
        wanted = [(s, p) for s, p in numbered(run_id, box, "a mailbox folder") if s > after]
        gap = message_gap([seq for seq, _ in wanted], after=after)
        if gap is not None:
            raise corrupt(run_id, box / f"{gap:012d}.json", f"message seq {gap} is missing")
        messages = []
        for seq, path in wanted:
            try:
                messages.append(load_message(self._read_file(run_id, path), run_id, seq))
            except RecordDecodeError as exc:
                raise corrupt(run_id, path, str(exc)) from None
        return messages
