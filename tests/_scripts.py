"""What the test scripts that run in a process of their own share.

``tests/_crash_workflow.py``, ``tests/_child_crash_workflow.py`` and
``tests/_messages_process.py`` are started as scripts (``python tests/X.py
...``) with :func:`tests._cli.tether_env`, which makes this module
importable as ``tests._scripts`` (the tests import the same scripts as
modules of the ``tests`` package). Their steps log each execution with
:func:`append_synced`, so that a test can count executions across a SIGKILL.
"""

from __future__ import annotations

import os
from pathlib import Path

import tether
from tether._cli._main import StoreSpec
from tether.stores import Store


def append_synced(path: Path, line: str) -> None:
    """Append *line* to the log *path*, fsynced before this returns: once a step goes on,
    its line is on disk, whatever kills the process next."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def open_store(kind: str, location: str, schema: str = "tether") -> Store:
    """The store a script's command line names: ``sqlite`` or ``file`` and a path, as
    ``--store`` takes them, or ``postgres`` and a URL (its tables in *schema*)."""
    if kind == "postgres":
        return tether.PostgresStore(location, schema=schema, pool_size=2)
    return StoreSpec.parse(f"{kind}:{location}").open_for_writing()
