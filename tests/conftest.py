from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tether
from tether.stores import Store
from tether.testing._clock import hold_clock
from tether.testing.pytest_plugin import STORE_KINDS as PLUGIN_KINDS
from tether.testing.pytest_plugin import make_store as make_store

from . import _postgres

pytest_plugins = ["pytester"]

#: Every built-in store; engine tests taking ``store`` run once per kind.
#: ``postgres`` runs on the session's throwaway server (``tests/_postgres.py``;
#: skipped without server binaries, failing under ``CI=true``).
STORE_KINDS = [*PLUGIN_KINDS, "postgres"]


def reopen_store(store: Store) -> Store:
    """A new store object on the same location as *store* (memory: itself)."""
    if isinstance(store, tether.SQLiteStore):
        return tether.SQLiteStore(store.path, synchronous=store.synchronous)
    if isinstance(store, tether.FileStore):
        return tether.FileStore(store.directory)
    if isinstance(store, tether.PostgresStore):
        return _postgres.start_once().reopen(store)
    return store


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[_postgres.PostgresServer]:
    """The session's PostgreSQL server, started once; stopped when the session ends."""
    server = _postgres.session_server()
    try:
        yield server
    finally:
        _postgres.stop()


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def raw_store_factory(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Callable[[], Store]:
    """Makes fresh, unopened stores of one kind, unwrapped (for store tests).

    Postgres stores each get a new schema on the session's server.
    """
    if store_kind == "postgres":
        server: _postgres.PostgresServer = request.getfixturevalue("postgres_server")
        return server.store
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
