"""The store a URL names: :func:`from_url`, for users, the command line, the dashboard, bench.

Layer: stores (``tether.stores``).

The URL is parsed by :class:`._url.StoreURL` (its module lists the forms);
this module makes the store, which it can because it imports them (the
stores import :mod:`._url`, never this module).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._errors import UsageError
from ._file import FileStore
from ._memory import MemoryStore
from ._postgres import PostgresStore
from ._postgres_conn import psycopg_module
from ._sqlite import SQLiteStore
from ._store import Store
from ._url import StoreURL

__all__ = ("from_url", "missing_extra", "store_at")


def from_url(url: str) -> Store:
    """A new, unopened store, where *url* says.

    - ``sqlite:PATH`` (also ``sqlite:///ABSOLUTE/PATH``): ``SQLiteStore(PATH)``;
    - ``file:DIR`` (also ``file:///ABSOLUTE/DIR``): ``FileStore(DIR)``;
    - ``memory:``: a new ``MemoryStore()``;
    - ``postgresql://...`` or ``postgres://...``: ``PostgresStore(url)``.

    Each store's ``url`` is a URL this takes back, for a store of the same
    kind at the same place (a PostgreSQL one without its password).

    Raises:
        UsageError: *url* is not one of the forms (one line naming it, its
            password hidden, and the forms), or it names a ``PostgresStore``
            and psycopg is not installed (one line naming the extra to install,
            ``tether[postgres]``).
    """
    return store_at(StoreURL.parse(url))


def store_at(url: StoreURL, **options: Any) -> Store:
    """A new, unopened store where the parsed *url* says; *options* go to its
    constructor (``retry_timeout=`` for the command line's ``PostgresStore``).

    Raises:
        UsageError: as :func:`from_url`, or from the constructor.
    """
    # A Path: the location is a path, whatever it looks like (file:sqlite:x names
    # a directory called "sqlite:x").
    if url.kind == "sqlite":
        return SQLiteStore(Path(url.location), **options)
    if url.kind == "file":
        return FileStore(Path(url.location), **options)
    if url.kind == "memory":
        return MemoryStore(**options)
    return PostgresStore(url.location, **options)


def missing_extra(url: StoreURL) -> str | None:
    """Why the store *url* names cannot be made in this process: an optional
    dependency it needs is not installed (the message names the extra to
    install); ``None`` when nothing is missing."""
    if url.kind != "postgres":
        return None
    try:
        psycopg_module()
    except UsageError as exc:
        return str(exc)
    return None
