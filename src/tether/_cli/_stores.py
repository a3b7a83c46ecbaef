"""Stores named on the command line: ``sqlite:PATH``, ``file:DIR``, ``memory:``, ``postgresql://…``.

Layer: the command line (``_cli``).

The text is parsed by the one parser of store URLs
(:class:`tether.stores._url.StoreURL`, which :func:`tether.stores.from_url`
uses too) and the store made by :func:`tether.stores._from_url.store_at`;
this module adds what only commands need: whether the store must exist
already, and how to say that it does not.

A spec is shown (in messages, hints and listings) without credentials: a
PostgreSQL URL as ``postgresql://user@host:port/dbname``, never its password,
which stays in the spec the user typed (or ``$TETHER_STORE``) and in
``PGPASSWORD``/``.pgpass``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, TextIO, final

import attrs

from ..stores import PostgresStore, Store
from ..stores._from_url import missing_extra, store_at
from ..stores._url import StoreURL

__all__ = (
    "DEFAULT_STORE",
    "READ_RETRY_TIMEOUT",
    "STORE_ENV",
    "STORE_HELP",
    "Missing",
    "StoreSpec",
    "store_help",
)

#: The environment variable that names the store of every command.
STORE_ENV = "TETHER_STORE"
#: The store when neither ``--store`` nor the variable is set.
DEFAULT_STORE = "sqlite:tether.db"
#: How long the ``runs`` commands keep retrying a PostgreSQL server that does
#: not answer: through a restart, but a wrong host or port fails in seconds,
#: not after the store's default minute (which is for the commands that
#: execute runs, and must ride out an outage).
READ_RETRY_TIMEOUT: Final = 10.0


_KINDS = f"""\
stores:
  sqlite:PATH         a tether.SQLiteStore database file
  file:DIR            a tether.FileStore directory
  memory:             a tether.MemoryStore, gone when the command ends (for
                      run and bench; submit, worker and a command that
                      reads runs refuse it)
  postgresql://...    a tether.PostgresStore (needs tether[postgres]); the
                      password is never printed: prefer PGPASSWORD or ~/.pgpass
  sqlite:///ABS/PATH and file:///ABS/DIR are absolute paths; the forms are
  tether.stores.from_url's. The store is --store, else the environment
  variable {STORE_ENV}, else {DEFAULT_STORE} (tether.db in the current
  directory)."""


def store_help(*, creates: bool) -> str:
    """The ``stores:`` section of a command's help; *creates*: the command creates a
    store that does not exist yet (``run``, ``submit``, ``worker``); the others never do."""
    if creates:
        return f"{_KINDS}\n  This command creates the store if it does not exist yet."
    return (
        f"{_KINDS}\n  This command never creates a store: a missing one is an error\n"
        "  (exit status 1), and nothing is created."
    )


#: The ``stores:`` section of the help of ``tether`` itself.
STORE_HELP: Final = f"""\
{_KINDS}
  `run`, `submit`, `worker` and `bench` create the store if it does not exist;
  the other commands never create one (a missing one is an error, exit status 1)."""


class Missing(Exception):
    """The named store does not exist."""


@final
@attrs.frozen
class StoreSpec:
    """A store named on the command line."""

    url: StoreURL

    @classmethod
    def parse(cls, text: str) -> StoreSpec:
        """Raises: UsageError: *text* is not a store URL (see :func:`tether.stores.from_url`)."""
        return cls(StoreURL.parse(text))

    @property
    def kind(self) -> str:
        """``sqlite``, ``file``, ``memory`` or ``postgres``."""
        return self.url.kind

    @property
    def path(self) -> Path:
        """The file or directory of a ``sqlite:`` or ``file:`` spec."""
        return Path(self.url.location)

    def __str__(self) -> str:
        if self.kind == "postgres":  # as the store shows itself: user@host:port/dbname
            store = self._made(None)
            assert isinstance(store, PostgresStore)
            return store.url
        return str(self.url)

    def missing(self) -> str | None:
        """Why this process cannot make the store (an extra to install), or ``None``."""
        return missing_extra(self.url)

    def _made(self, retry_timeout: float | None) -> Store:
        """The store; *retry_timeout* for a ``PostgresStore`` (``None``: its own)."""
        if self.kind == "postgres" and retry_timeout is not None:
            return store_at(self.url, retry_timeout=retry_timeout)
        return store_at(self.url)

    def open_for_writing(self) -> Store:
        """The store, created if it does not exist yet (for ``run``, ``resume``, ``worker``)."""
        return self._made(None)

    def open_existing(self, *, retry_timeout: float | None = READ_RETRY_TIMEOUT) -> Store:
        """The store, if it exists; a command that reads runs must not create a file or a
        directory (``runs``, and ``resume``: a run to resume is in an existing store).

        (A PostgreSQL database exists or the connection fails, after
        *retry_timeout* seconds of retries at most (``None``: the store's own
        minute, for ``resume``, which must ride out an outage); tether's
        tables in it are created on open, as for every command.)

        Raises:
            Missing: there is no such file or directory.
        """
        if self.kind == "memory":
            raise Missing("memory: is a new, empty MemoryStore in every process")
        if self.kind == "sqlite":
            if not self.path.is_file():
                what = "is a directory" if self.path.is_dir() else "does not exist"
                raise Missing(f"the SQLite file {self.path} {what}")
            if self.path.stat().st_size == 0:
                # Opening it would write tether's schema into it: not for a reader.
                raise Missing(f"the SQLite file {self.path} is empty: it is not a tether store")
        elif self.kind == "file" and not self.path.is_dir():
            what = "is not a directory" if self.path.exists() else "does not exist"
            raise Missing(f"the FileStore directory {self.path} {what}")
        return self._made(retry_timeout)

    def open_existing_or_say(
        self, err: TextIO, why: str, *, retry_timeout: float | None = READ_RETRY_TIMEOUT
    ) -> Store | None:
        """:meth:`open_existing`, or ``None`` once *err* was told why not.

        The message is the missing store, then *why* the command needs an
        existing one, then how to name it; the command exits with status 1.
        """
        try:
            return self.open_existing(retry_timeout=retry_timeout)
        except Missing as exc:
            print(f"tether: {exc} ({why}; name it with --store or ${STORE_ENV})", file=err)
            return None
