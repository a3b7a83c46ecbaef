"""How the engine calls a store: its errors as :class:`StoreError`, its optional fast append.

Layer: the kernel (``_core``).

Every module that writes or reads a store wraps the call in :class:`StoreErrors`;
:func:`nowait_append` decides whether the save path may call a store's
synchronous ``append_nowait``. Both are about the store's side of a call, not
about the save path itself, so they live below it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType

from .._errors import StoreError, TetherError, UsageError
from ..stores._capabilities import mailbox_of
from ..stores._mailbox import MailboxStore
from ..stores._records import Entry
from ..stores._store import Store

__all__ = ("NowaitAppend", "StoreErrors", "mailbox", "nowait_append")

#: A store's non-blocking append: ``append_nowait(run_id, entries) -> stored entries``.
NowaitAppend = Callable[[str, Sequence[Entry]], Sequence[Entry]]


class StoreErrors:
    """Turns a store's own exceptions (``OSError``, a driver's) into :class:`StoreError`.

    tether's errors and ``BaseException``s (``Cancelled``) pass through as they are.
    """

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, etype: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, TetherError):
            raise StoreError(f"{self.what} failed: {exc!r}") from exc


def nowait_append(store: Store) -> NowaitAppend | None:
    """The store's ``append_nowait``, when the engine may call it in place of ``append``.

    An optional store method: ``append_nowait(run_id, entries)`` does what
    ``append`` does, synchronously and without a checkpoint, and returns the
    stored entries. The engine may hand it entries whose ``seq`` is already
    set, to the seq it expects them to get (see :meth:`Saver.start_numbering`):
    the store still numbers them itself, and may keep such an entry as it is
    when the guess is right. It is used only while ``store.append`` is the
    very method of the class that defines ``append_nowait``: a subclass that
    overrides ``append``, or an ``append`` patched on the instance, keeps its
    effect (``append`` is the pinned fault-injection point).
    """
    fn = getattr(store, "append_nowait", None)
    if not callable(fn) or "append" in getattr(store, "__dict__", ()):
        return None
    cls = type(store)
    owner = next((k for k in cls.__mro__ if "append_nowait" in vars(k)), None)
    if owner is None or getattr(cls, "append", None) is not vars(owner).get("append"):
        return None
    return fn  # type: ignore[no-any-return]


def mailbox(store: object) -> MailboxStore:
    """*store* as a :class:`MailboxStore`.

    Raises:
        UsageError: it keeps no messages (it lacks ``send_message`` or ``load_messages``).
    """
    found = mailbox_of(store)
    if found is None:
        raise UsageError(
            f"{store!r} keeps no messages: messages (engine.send, tether.receive) need a store "
            "with send_message and load_messages (see tether.stores.MailboxStore); every "
            "built-in store has them, and a wrapper must forward them"
        )
    return found
