"""Store URLs: the one parser (:class:`StoreURL`), and what counts as a URL where a path is due.

Layer: stores (``tether.stores``).

The forms (the scheme is read case-insensitively):

- ``sqlite:PATH``: a :class:`~tether.SQLiteStore` file. *PATH* is taken as
  written, relative (to the current directory) or absolute
  (``sqlite:/var/lib/shop/runs.db``), never %-decoded. The URL form with an
  empty host, ``sqlite:///var/lib/shop/runs.db``, is the absolute path
  ``/var/lib/shop/runs.db`` (as tether's command line always read it; note
  that SQLAlchemy reads ``sqlite:///runs.db`` as a *relative* path). A host
  (``sqlite://HOST/...``) is refused.
- ``file:DIR``: a :class:`~tether.FileStore` directory, by the same rules
  (``file:///srv/runs`` is ``/srv/runs``).
- ``memory:``: a new, empty :class:`~tether.MemoryStore` (nothing follows the colon).
- ``postgresql://...`` or ``postgres://...``: a :class:`~tether.PostgresStore`
  on that libpq URL.

Anything else (another scheme, a bare path, an empty path) is refused with
:class:`~tether.UsageError`, in one line that names the text (its password
hidden) and the accepted forms.

A string is *a URL* where a store constructor wants a path when its text
before the first ``:`` is one of the schemes above (``sqlite``, ``file``,
``memory``, ``postgresql``, ``postgres``, in any case): one letter (a Windows
drive, ``C:\\runs.db``) or any other word is a path. The constructors refuse
such a string (:func:`refuse_url`), naming ``tether.stores.from_url``; a
:class:`pathlib.Path` is always a path, so ``SQLiteStore(Path("sqlite:x.db"))``
names a file called that.

Making the store a URL names is :mod:`._from_url`'s (this module imports no
store, so the stores can import it).
"""

from __future__ import annotations

import re
from typing import Final, Literal, final

import attrs

from .._errors import UsageError

__all__ = ("FORMS", "SCHEMES", "StoreURL", "hide_password", "path_url", "refuse_url")

Kind = Literal["sqlite", "file", "memory", "postgres"]

#: Each scheme a store URL may have (lowercase), and the kind of store it names.
SCHEMES: Final[dict[str, Kind]] = {
    "sqlite": "sqlite",
    "file": "file",
    "memory": "memory",
    "postgresql": "postgres",
    "postgres": "postgres",
}

#: The accepted forms, as every refusal lists them.
FORMS: Final = (
    "sqlite:PATH (an SQLite file), file:DIR (a FileStore directory), memory: (a MemoryStore) "
    "or postgresql://USER@HOST:PORT/DBNAME"
)

# Up to the last "@" of the URL: a password may hold "/" or "@" written as they are.
_PASSWORD_IN_AUTHORITY = re.compile(r"(://[^/@:\s]*):\S*@")
# A conninfo's value may be quoted ('a b'), with backslash escapes.
_PASSWORD_PARAMETER = re.compile(r"(password\s*=\s*)('(?:\\.|[^'\\])*'|[^&\s]*)", re.IGNORECASE)


def hide_password(text: str) -> str:
    """*text* with the password of a URL's ``user:password@``, or of a ``password=``
    parameter, replaced by ``***``: what messages may show."""
    return _PASSWORD_PARAMETER.sub(r"\1***", _PASSWORD_IN_AUTHORITY.sub(r"\1:***@", text))


def _scheme(text: str) -> tuple[Kind | None, str, str]:
    """The kind *text*'s scheme names (``None``: none of ours), its scheme as written,
    and what follows the colon."""
    scheme, sep, rest = text.partition(":")
    if not sep:
        return None, "", text
    return SCHEMES.get(scheme.lower()), scheme, rest


def _refused(text: str, hint: str = "") -> UsageError:
    why = f" ({hint})" if hint else ""
    return UsageError(f"{hide_password(text)!r} is not a store: use {FORMS}{why}")


def _path(text: str, scheme: str, rest: str) -> str:
    """The path of ``sqlite:`` or ``file:`` *text* (``rest`` follows the colon)."""
    if rest.startswith("//"):  # the URL form: //HOST/PATH, the host empty
        host, slash, path = rest[2:].partition("/")
        if host:
            raise _refused(
                text,
                f"{scheme}://HOST/... names a host: write {scheme}:PATH, or "
                f"{scheme}:///ABSOLUTE/PATH",
            )
        rest = "/" + path.lstrip("/")
        if not slash or rest == "/":
            raise _refused(text, f"no path after {scheme}://")
    if not rest:
        raise _refused(text)
    return rest


@final
@attrs.frozen(kw_only=True)
class StoreURL:
    """A store URL, parsed: the kind of store and where it is."""

    kind: Kind
    #: the path (``sqlite``, ``file``), ``""`` (``memory``), or the libpq URL as
    #: given, its scheme in lowercase (``postgres``; it may hold a password: never
    #: show it, show :meth:`__str__`)
    location: str = attrs.field(repr=False)

    @classmethod
    def parse(cls, url: str) -> StoreURL:
        """The store *url* names (see the module doc for the forms).

        Raises:
            UsageError: *url* is not a string, or not one of the forms: one line
                naming it (its password hidden) and the accepted forms.
        """
        if not isinstance(url, str):
            raise UsageError(
                f"a store URL is a string such as 'sqlite:runs.db', not {url!r} "
                "(to name a file by its path, use tether.SQLiteStore(path) or "
                "tether.FileStore(path))"
            )
        kind, scheme, rest = _scheme(url)
        if kind == "postgres":
            if not rest.startswith("//"):
                raise _refused(url)
            return cls(kind=kind, location=f"{scheme.lower()}:{rest}")
        if kind == "memory":
            if rest:
                raise _refused(url, "nothing follows memory:")
            return cls(kind=kind, location="")
        if kind is None:
            bare = url and len(scheme) <= 1  # no colon, or a Windows drive's
            raise _refused(url, f"a path? sqlite:{url} or file:{url}" if bare else "")
        return cls(kind=kind, location=_path(url, scheme, rest))

    def __str__(self) -> str:
        """The URL, shown: ``sqlite:PATH``, ``file:DIR``, ``memory:``, or a
        PostgreSQL URL with its password hidden."""
        if self.kind == "postgres":
            return hide_password(self.location)
        return path_url(self.kind, self.location)


def path_url(kind: Literal["sqlite", "file", "memory"], path: str) -> str:
    """The URL of a store of *kind* at *path*, as :meth:`StoreURL.parse` reads it back."""
    if kind == "memory":
        return "memory:"
    if path.startswith("//"):  # not a host: the absolute path, written as a URL's
        return f"{kind}:///{path.lstrip('/')}"
    return f"{kind}:{path}"


def refuse_url(what: str, value: object, *, paths: bool = True) -> None:
    """Refuse *value*, given to *what* (``"SQLiteStore"``, which takes a path), if it
    is a string that is a store URL (see the module doc). For a store that takes a
    PostgreSQL URL (*paths* false), ``postgresql://`` and ``postgres://`` are no
    store URL here, only the others.

    Raises:
        UsageError: naming ``tether.stores.from_url``.
    """
    if not isinstance(value, str):
        return
    kind, _, _ = _scheme(value)
    if kind is None or (kind == "postgres" and not paths):
        return
    shown = hide_password(value)
    instead = " (to name a file or directory called that, pass a pathlib.Path)" if paths else ""
    raise UsageError(
        f"{what} was given the store URL {shown!r}: make the store with "
        f"tether.stores.from_url({shown!r}){instead}"
    )
