"""A store's optional capabilities: one mechanism to declare them and to ask for them.

Layer: stores (``tether.stores``).

Layer: stores. The :class:`~._store.Store` protocol is what every store has;
the rest is optional, in groups of methods: serving workers (``claim_next``),
claiming many runs at once (``claim_batch``),
advertising workers, deleting runs, keeping messages, watching for changes,
taking responses for the workers, keeping queues' rules at submit.
A store has a capability when it has all of its methods; a store may instead
*declare* what it has, with a ``capabilities`` attribute (a set of
:class:`Capability`), and a store that wraps another (``FaultyStore``, a
tracing or caching wrapper) declares its inner store's, so that it can define
every method once, plainly, and still be taken for exactly what it wraps.
Everything that needs an optional part asks :func:`has` (or
:func:`capabilities_of`); nothing looks methods up by name elsewhere.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, cast

from ._mailbox import MAILBOX_METHODS, MailboxStore
from ._respond import RESPOND_METHODS, RespondingStore
from ._store import (
    ADVERTISE_METHODS,
    BATCH_METHODS,
    DELETE_METHODS,
    QUEUE_METHODS,
    WORKER_METHODS,
)

__all__ = ("Capability", "METHODS", "capabilities_of", "has", "mailbox_of", "responder_of")


class Capability(enum.StrEnum):
    """An optional part of the store protocol."""

    WORKERS = "workers"  #: ``claim_next``: the store serves ``tether.open_worker``
    CLAIM_BATCH = "claim_batch"  #: ``claim_batch``: workers take many runs per claim
    ADVERTISE = "advertise"  #: ``advertise``, ``list_workers``: workers say what they serve
    DELETE = "delete"  #: ``delete_run``: ``tether runs prune``
    MESSAGES = "messages"  #: ``send_message``, ``load_messages``: ``engine.send``, ``receive``
    WATCH = "watch"  #: ``watch``: the store notifies changes (``LISTEN``/``NOTIFY``)
    RESPOND = "respond"  #: ``respond``: ``engine.respond`` (responses queued for the workers)
    QUEUES = "queues"  #: ``submit_run``: dedupe ids, debounce and ``max_queued`` at submit


#: The methods of each capability.
METHODS: Final[Mapping[Capability, tuple[str, ...]]] = MappingProxyType(
    {
        Capability.WORKERS: WORKER_METHODS,
        Capability.CLAIM_BATCH: BATCH_METHODS,
        Capability.ADVERTISE: ADVERTISE_METHODS,
        Capability.DELETE: DELETE_METHODS,
        Capability.MESSAGES: MAILBOX_METHODS,
        Capability.WATCH: ("watch",),
        Capability.RESPOND: RESPOND_METHODS,
        Capability.QUEUES: QUEUE_METHODS,
    }
)


def capabilities_of(store: object) -> frozenset[Capability]:
    """The optional capabilities *store* has: by its methods, narrowed to those it declares.

    Raises:
        ValueError: its ``capabilities`` attribute names something that is not a capability.
    """
    return frozenset(c for c in Capability if has(store, c))


def has(store: object, capability: Capability) -> bool:
    """Whether *store* has *capability*: all of its methods, and declares it if it declares any.

    A declaration narrows what the methods offer; it never adds a missing method.

    Raises:
        ValueError: its ``capabilities`` attribute names something that is not a capability.
    """
    if not all(callable(getattr(store, name, None)) for name in METHODS[capability]):
        return False
    declared = getattr(store, "capabilities", None)
    return declared is None or capability in frozenset(Capability(c) for c in declared)


def mailbox_of(store: object) -> MailboxStore | None:
    """*store* as a :class:`MailboxStore` if it keeps messages, else ``None``."""
    return cast(MailboxStore, store) if has(store, Capability.MESSAGES) else None


def responder_of(store: object) -> RespondingStore | None:
    """*store* as a :class:`RespondingStore` if it takes responses, else ``None``."""
    return cast(RespondingStore, store) if has(store, Capability.RESPOND) else None
