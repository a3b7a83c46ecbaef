from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import tether
from tether.stores import Store
from tether.testing._clock import hold_clock
from tether.testing.pytest_plugin import STORE_KINDS as PLUGIN_KINDS
from tether.testing.pytest_plugin import make_store as make_store

pytest_plugins = ["pytester"]

#: Every built-in store; engine tests taking ``store`` run once per kind.
STORE_KINDS = list(PLUGIN_KINDS)


def reopen_store(store: Store) -> Store:
    """A new store object on the same location as *store* (memory: itself)."""
    if isinstance(store, tether.SQLiteStore):
        return tether.SQLiteStore(store.path, synchronous=store.synchronous)
    if isinstance(store, tether.FileStore):
        return tether.FileStore(store.directory)
    return store


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def raw_store_factory(store_kind: str, tmp_path: Path) -> Callable[[], Store]:
    """Makes fresh, unopened stores of one kind, unwrapped (for store tests)."""
    return lambda: make_store(store_kind, tmp_path)


@pytest.fixture
def store_factory(raw_store_factory: Callable[[], Store]) -> Callable[[], Store]:
    """Makes fresh stores of one kind; engine tests run once per kind.

    Thread-backed stores come wrapped in :class:`ClockHoldingStore`, so tests
    on an autojumping ``MockClock`` see virtual time stand still while the
    store's threads work.
    """

    return lambda: hold_clock(raw_store_factory())


@pytest.fixture
def store(store_factory: Callable[[], Store]) -> Store:
    return store_factory()
