"""One list of store operations, applied to a durable store and to MemoryStore, to compare.

A property draws the operations (hypothesis), applies them to both stores,
each in a ``trio.run`` of its own (:func:`on_both`), with :func:`apply_ops`
doing the part every such property shares, and asserts that the two lists
of outcomes are equal: every value read, and every error by its type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import trio
from hypothesis import HealthCheck, settings

import tether
from tether.stores import Store

from .conftest import make_store, reopen_store

#: one drawn operation: its name, then its arguments
Op: TypeAlias = tuple[Any, ...]
#: ``do(store, i, name, args)``: apply the *i*-th operation; what it read (none, one or more)
Do: TypeAlias = Callable[[Store, int, str, list[Any]], Awaitable[list[object]]]

#: hypothesis settings of these properties: each example opens real stores (slow), all under
#: the test's one ``tmp_path`` (each in a fresh location there, so nothing leaks between examples)
PROPERTY_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


async def apply_ops(
    store: Store,
    ops: Sequence[Op],
    do: Do,
    last: Callable[[Store], Awaitable[list[object]]],
) -> list[object]:
    """Open *store*, apply each of *ops* by *do*, then read what *last* reads; every outcome.

    An operation's :class:`~tether.TetherError` is an outcome (its type). The
    operation ``("reopen",)`` is this function's: it closes the store and opens
    a new store object on the same location. The store is closed at the end.
    """
    outcomes: list[object] = []
    await store.open()
    try:
        for i, (name, *args) in enumerate(ops):
            try:
                if name == "reopen":
                    await store.close()
                    store = reopen_store(store)
                    await store.open()
                else:
                    outcomes += await do(store, i, name, args)
            except tether.TetherError as exc:
                outcomes.append(type(exc))
        outcomes += await last(store)
    finally:
        await store.close()
    return outcomes


def on_both(
    apply: Callable[[Store, list[Op]], Awaitable[list[object]]],
    kind: str,
    tmp_path: Path,
    ops: list[Op],
) -> tuple[list[object], list[object]]:
    """What ``apply(store, ops)`` returns on a MemoryStore, and on a fresh store of *kind*."""
    expected = trio.run(apply, tether.MemoryStore(), ops)
    return expected, trio.run(apply, make_store(kind, tmp_path), ops)
