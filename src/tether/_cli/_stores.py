"""Stores named on the command line: ``sqlite:PATH``, ``file:DIR``, ``postgresql://…``.

Layer: the command line (``_cli``).

A spec is shown (in messages, hints and listings) without credentials: a
PostgreSQL URL as ``postgresql://user@host:port/dbname``, never its password,
which stays in the spec the user typed (or ``$TETHER_STORE``) and in
``PGPASSWORD``/``.pgpass``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TextIO, final

import attrs

from ..stores import FileStore, SQLiteStore, Store

if TYPE_CHECKING:
    from ..stores import PostgresStore

__all__ = (
    "DEFAULT_STORE",
    "READ_RETRY_TIMEOUT",
    "STORE_ENV",
    "STORE_HELP",
    "Missing",
    "SpecError",
    "StoreSpec",
    "store_help",
)

#: The environment variable that names the store of every command.
STORE_ENV = "TETHER_STORE"
#: The store when neither ``--store`` nor the variable is set.
DEFAULT_STORE = "sqlite:tether.db"
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
#: How long the ``runs`` commands keep retrying a PostgreSQL server that does
#: not answer: through a restart, but a wrong host or port fails in seconds,
#: not after the store's default minute (which is for the commands that
#: execute runs, and must ride out an outage).
READ_RETRY_TIMEOUT: Final = 10.0


_KINDS = f"""\
stores:
  sqlite:PATH         a tether.SQLiteStore database file
  file:DIR            a tether.FileStore directory
  postgresql://...    a tether.PostgresStore (needs tether[postgres]); the
                      password is never printed: prefer PGPASSWORD or ~/.pgpass
  The store is --store, else the environment variable {STORE_ENV}, else
  {DEFAULT_STORE} (tether.db in the current directory)."""


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


class SpecError(ValueError):
    """A store spec that names no kind of store."""


class Missing(Exception):
    """The named store does not exist."""


@final
@attrs.frozen(kw_only=True)
class StoreSpec:
    """A store named on the command line."""

    kind: Literal["sqlite", "file", "postgres"]
    #: the path (sqlite, file) or the connection URL as given (postgres; it may
    #: hold a password: never print it, print :meth:`__str__`)
    location: str = attrs.field(repr=False)

    @classmethod
    def parse(cls, text: str) -> StoreSpec:
        """Raises: SpecError: *text* is not a store spec."""
        if text.startswith(_POSTGRES_SCHEMES):
            return cls(kind="postgres", location=text)
        kind, sep, path = text.partition(":")
        if not sep or kind not in ("sqlite", "file") or not path:
            raise SpecError(
                f"{text!r} is not a store: use sqlite:PATH (an SQLite file), file:DIR "
                "(a FileStore directory) or postgresql://USER@HOST:PORT/DBNAME"
            )
        return cls(kind="sqlite" if kind == "sqlite" else "file", location=path)

    @property
    def path(self) -> Path:
        """The file or directory of a ``sqlite:`` or ``file:`` spec."""
        return Path(self.location)

    def __str__(self) -> str:
        if self.kind == "postgres":
            return self._postgres().url
        return f"{self.kind}:{self.location}"

    def _postgres(self, *, retry_timeout: float | None = None) -> PostgresStore:
        from ..stores import PostgresStore

        if retry_timeout is None:  # the store's own default
            return PostgresStore(self.location)
        return PostgresStore(self.location, retry_timeout=retry_timeout)

    def open_for_writing(self) -> Store:
        """The store, created if it does not exist yet (for ``run``, ``resume``, ``worker``)."""
        if self.kind == "postgres":
            return self._postgres()
        if self.kind == "sqlite":
            return SQLiteStore(self.path)
        return FileStore(self.path)

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
        if self.kind == "postgres":
            return self._postgres(retry_timeout=retry_timeout)
        if self.kind == "sqlite":
            if not self.path.is_file():
                what = "is a directory" if self.path.is_dir() else "does not exist"
                raise Missing(f"the SQLite file {self.path} {what}")
            if self.path.stat().st_size == 0:
                # Opening it would write tether's schema into it: not for a reader.
                raise Missing(f"the SQLite file {self.path} is empty: it is not a tether store")
            return SQLiteStore(self.path)
        if not self.path.is_dir():
            what = "is not a directory" if self.path.exists() else "does not exist"
            raise Missing(f"the FileStore directory {self.path} {what}")
        return FileStore(self.path)

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
