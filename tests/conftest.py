"""What this repository's tests add to tether's own pytest plugin.

The store fixtures are the plugin's (``tether_store``, ``tether_store_factory``,
``tether_raw_store_factory``, ``tether_store_kind``): this conftest gives its
``postgres`` kind the session's throwaway server (``tests/_postgres.py``),
started when the first test of that kind runs; without server binaries those
tests are skipped, and fail under ``CI=true``. ``--tether-postgres=URL`` runs
them on another database instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.testing.pytest_plugin import make_store as make_store
from tether.testing.pytest_plugin import reopen_store as reopen_store

from . import _fleet, _postgres

pytest_plugins = ["pytester"]


@pytest.hookimpl(optionalhook=True)
def pytest_tether_postgres_url(config: pytest.Config) -> str:
    """The plugin's ``postgres`` kind runs on the session's throwaway server."""
    return _postgres.session_server().conninfo()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[_postgres.PostgresServer]:
    """The session's PostgreSQL server, started once; stopped when the session ends."""
    server = _postgres.session_server()
    try:
        yield server
    finally:
        _postgres.stop()


@pytest.fixture
def fleet_database(postgres_server: _postgres.PostgresServer) -> Iterator[str]:
    """A ``postgresql://`` URL of a fresh database, dropped after the test (for processes
    that open their store from a URL, as ``tether worker`` does)."""
    name = _fleet.new_database(postgres_server)
    try:
        yield postgres_server.conninfo(dbname=name)
    finally:
        postgres_server.cont()  # whatever happened, the server runs for the next test
        _fleet.drop_database(postgres_server, name)


@pytest.fixture(params=["sqlite", "postgres"])
def process_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that processes share: an SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'runs.db'}"
    url: str = request.getfixturevalue("fleet_database")
    return url


@pytest.fixture(autouse=True)
def _shared_empties_stay_empty() -> Iterator[None]:
    """Fail a test after which one of the empty containers runs share until their first
    write (``own()``) was written to: a missed ``own()`` would leak state between runs."""
    yield
    from tether._core import _run, _saver, _shields

    shared: dict[str, dict[Any, Any] | list[Any]] = {
        "_run._NO_DICT": _run._NO_DICT,
        "_run._NO_LIST": _run._NO_LIST,
        "_saver._NO_QUEUE": _saver._NO_QUEUE,
        "_shields._NONE_YET": _shields._NONE_YET,
    }
    written = {name: repr(value)[:200] for name, value in shared.items() if value}
    for value in shared.values():
        value.clear()
    assert not written, f"a shared empty container was written to: {written}"
