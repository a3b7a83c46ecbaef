"""Owners of runs: an engine's name ``host:pid:engine-id``, and whether an owner is gone.

Layer: the kernel (``_core``).

Each :func:`tether.open_engine` is one owner. Whether an owner still exists is
a fact about this machine's processes, not about leases, so the engine
(claims, takeovers), workers, ``tether.child`` and the command line all ask
:func:`owner_is_gone` here.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from .._errors import storable_text

__all__ = ("engine_closed", "engine_opened", "new_owner", "owner_is_gone")

# Stored in every claim and advertisement: a host name that is not UTF-8 is escaped.
_HOST = storable_text(socket.gethostname())
#: The engine ids of the engines open in this process.
_open_engines: set[str] = set()


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time in clock ticks)`` of process *pid*, from ``/proc``; else ``None``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces: split after it.
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def new_owner() -> tuple[str, str]:
    """A new owner name ``host:pid:engine-id`` and its engine id.

    The engine id starts with this process's start time (in clock ticks, where
    ``/proc`` tells it), so that a later process that reuses the pid is not
    taken for this one.
    """
    stat = _proc_stat(os.getpid())
    engine_id = f"{stat[1] if stat else 'x'}-{uuid.uuid4().hex[:8]}"
    return f"{_HOST}:{os.getpid()}:{engine_id}", engine_id


def engine_opened(engine_id: str) -> None:
    _open_engines.add(engine_id)


def engine_closed(engine_id: str) -> None:
    _open_engines.discard(engine_id)


def owner_is_gone(owner: str) -> bool:
    """Whether *owner* certainly no longer exists: it ran on this machine and has ended.

    That is: an engine of this process that was closed; or a process that no
    longer exists, is a zombie, or whose pid now belongs to a process started
    at another time. An owner on another machine, or a live process (even a
    stopped one), is never gone: its lease is waited for until it expires.
    """
    host, sep, rest = owner.partition(":")
    pid_text, sep2, engine_id = rest.partition(":")
    if not (sep and sep2) or host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return engine_id not in _open_engines
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, as another user's process
    stat = _proc_stat(pid)
    if stat is None:
        return False
    state, started = stat
    if state in ("Z", "X"):  # exited, not yet reaped
        return True
    ticks = engine_id.partition("-")[0]
    return ticks.isdigit() and ticks != started
