"""tether's pytest plugin: store and engine fixtures, seeded schedules, the explorer.

Layer: testing (``tether.testing``).

Installed with tether (the ``pytest11`` entry point ``tether``), so any
project that has tether and pytest gets it; ``-p no:tether`` turns it off.
The async fixture (``tether_engine``) needs ``pytest-trio``.

Fixtures
    ``tether_store_kind``
        ``"memory"``, ``"sqlite"`` or ``"file"`` (and ``"postgres"`` when a
        PostgreSQL database is given, below): a test that uses any store
        fixture runs once per kind (``--tether-stores`` or the
        ``tether_stores`` marker choose which).
    ``tether_raw_store_factory``
        makes fresh, unopened stores of that kind in the test's ``tmp_path``
        (a PostgreSQL store in a new schema of the database), unwrapped.
    ``tether_store_factory``
        the same, thread-backed stores wrapped in :class:`ClockHoldingStore`,
        so that trio's ``autojump_clock`` waits for them.
    ``tether_store``
        one such store, unopened.
    ``tether_engine``
        an engine opened on ``tether_store`` for the test (async).
    ``tether_seed`` / ``tether_scheduler``
        the seed of a ``tether_seeds`` test (0 otherwise); requesting
        ``tether_scheduler`` makes the test's trio run follow the seeded
        schedule (:func:`seeded_schedule`).
    ``tether_explore``
        :func:`explore` with ``store_factory=tether_store_factory``.
    ``tether_registry``
        the registry of workflows defined in this process, put back as it was
        after the test (for tests that define workflows of their own).
    ``tether_postgres_url``
        the URL of the PostgreSQL database of the ``postgres`` kind (session).

PostgreSQL
    ``--tether-postgres=URL`` (or ``$TETHER_POSTGRES_URL``) adds the
    ``postgres`` kind: each store is a :class:`~tether.PostgresStore` on that
    database in a schema of its own, dropped after the test. A conftest may
    instead implement the hook ``pytest_tether_postgres_url(config)``, called
    once, when the first test of that kind runs (to start a server only when
    one is needed; it may ``pytest.skip``).

Markers
    ``@pytest.mark.tether_seeds(n)`` or ``tether_seeds([3, 17])``
        run the test once per seed, each under the seeded schedule
        (``--tether-seeds N`` overrides the count everywhere).
    ``@pytest.mark.tether_stores("memory", "sqlite")``
        the store kinds this test runs on (``"postgres"`` without a database:
        that case is skipped).

Warnings
    :class:`~tether.UnjournaledAwaitWarning` is an error in every test (the
    filter ``error::tether.UnjournaledAwaitWarning``): a run whose workflow
    awaits what tether does not journal fails with it. A test's own
    ``filterwarnings`` mark, or ``pytest.warns``, overrides it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Final

import pytest

from .._api import _workflow
from .._engine._engine import Engine, open_engine
from .._errors import UsageError
from ..stores._file import FileStore
from ..stores._memory import MemoryStore
from ..stores._postgres import PostgresStore
from ..stores._sqlite import SQLiteStore
from ..stores._store import Store
from ._clock import hold_clock
from ._deterministic import seeded_schedule
from ._explore import explore
from ._explore_plan import Exploration

__all__ = (
    "POSTGRES",
    "POSTGRES_ENV",
    "STORE_KINDS",
    "make_postgres_store",
    "make_store",
    "reopen_store",
    "saved_registry",
)

#: The built-in stores the store fixtures run over.
STORE_KINDS: Final = ("memory", "sqlite", "file")
#: The kind added when a PostgreSQL database is given.
POSTGRES: Final = "postgres"
#: The environment variable ``--tether-postgres`` defaults to.
POSTGRES_ENV: Final = "TETHER_POSTGRES_URL"

_fresh = itertools.count()
#: This session's prefix of the PostgreSQL schemas it makes (unique across sessions).
_SESSION: Final = secrets.token_hex(4)
#: schema -> connection string, of every PostgreSQL store the fixtures made
_postgres_made: dict[str, str] = {}


def make_store(kind: str, directory: Path) -> Store:
    """A fresh, unopened, unwrapped store of *kind* at a new place under *directory*.

    SQLite runs with ``synchronous="normal"``: durable against a crash of
    the process, not of the machine, which is what tests need, faster.
    """
    n = next(_fresh)
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore(directory / f"tether-{n}.db", synchronous="normal")
    if kind == "file":
        return FileStore(directory / f"tether-{n}")
    raise UsageError(f"unknown store kind {kind!r}; one of {', '.join(STORE_KINDS)}")


def make_postgres_store(url: str) -> PostgresStore:
    """A fresh, unopened store on the PostgreSQL database at *url*, in a new schema."""
    schema = f"tether_test_{_SESSION}_{next(_fresh)}"
    _postgres_made[schema] = url
    return PostgresStore(url, schema=schema, pool_size=4)


def reopen_store(store: Store) -> Store:
    """A new, unopened store object on the same place as *store*, unwrapped.

    A :class:`MemoryStore` (whose runs live in the object), or any store these
    functions did not make, is returned as it is.
    """
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path, synchronous=store.synchronous)
    if isinstance(store, FileStore):
        return FileStore(store.directory)
    if isinstance(store, PostgresStore) and store.schema in _postgres_made:
        url = _postgres_made[store.schema]
        return PostgresStore(url, schema=store.schema, pool_size=store.pool_size)
    return store


def _drop_schemas(url: str, schemas: list[str]) -> None:
    """Drop *schemas* (best effort: a store still open or a server away keeps them)."""
    import psycopg

    with (
        contextlib.suppress(psycopg.Error),
        psycopg.connect(url, autocommit=True, connect_timeout=5) as conn,
    ):
        conn.execute(b"SET lock_timeout = '2s'")
        for schema in schemas:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())
            _postgres_made.pop(schema, None)


class _HookSpecs:
    @pytest.hookspec(firstresult=True)
    def pytest_tether_postgres_url(self, config: pytest.Config) -> str | None:
        """The URL of the PostgreSQL database of the ``postgres`` store kind.

        Implemented (in a conftest), it adds the kind even without
        ``--tether-postgres``; it is called once, when the first test of that
        kind needs a store, and may ``pytest.skip`` or ``pytest.fail``.
        """


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(_HookSpecs)


def _postgres_option(config: pytest.Config) -> str | None:
    url: str | None = config.getoption("tether_postgres") or os.environ.get(POSTGRES_ENV)
    return url or None


def _has_postgres(config: pytest.Config) -> bool:
    """Whether the ``postgres`` kind is on: a URL given, or a conftest hook to make one."""
    return _postgres_option(config) is not None or bool(
        config.hook.pytest_tether_postgres_url.get_hookimpls()
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tether", "tether workflow testing")
    group.addoption(
        "--tether-seeds",
        type=int,
        default=None,
        metavar="N",
        help="run tests marked tether_seeds under seeds 0..N-1 instead of their own",
    )
    group.addoption(
        "--tether-stores",
        default=None,
        metavar="KINDS",
        help=f"comma-separated store kinds for tether's store fixtures ({','.join(STORE_KINDS)}"
        f",{POSTGRES})",
    )
    group.addoption(
        "--tether-postgres",
        default=None,
        metavar="URL",
        help=f"a PostgreSQL database for the '{POSTGRES}' store kind, each store in a new "
        f"schema (default: ${POSTGRES_ENV})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tether_seeds(n_or_seeds): run the test once per seed under a seeded trio schedule",
    )
    config.addinivalue_line(
        "markers", "tether_stores(*kinds): the store kinds tether's store fixtures run over"
    )
    # A workflow awaiting what tether does not journal fails its test: it is
    # cancelled at that await and the run fails with the warning. First in the
    # list, so that a project's own filterwarnings (later ones win) can ignore it.
    config.getini("filterwarnings").insert(0, "error::tether.UnjournaledAwaitWarning")


def _seeds(metafunc: pytest.Metafunc, marker: pytest.Mark) -> list[int]:
    override = metafunc.config.getoption("tether_seeds")
    if override is not None:
        return list(range(override))
    if len(marker.args) != 1 or marker.kwargs:
        raise UsageError(
            f"{metafunc.definition.nodeid}: write @pytest.mark.tether_seeds(n) or "
            "tether_seeds([seed, ...])"
        )
    (value,) = marker.args
    seeds = list(range(value)) if isinstance(value, int) else list(value)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise UsageError(
            f"{metafunc.definition.nodeid}: tether_seeds takes a positive count or a list of "
            f"ints, not {value!r}"
        )
    return seeds


def _kinds(metafunc: pytest.Metafunc) -> list[str]:
    marker = metafunc.definition.get_closest_marker("tether_stores")
    option = metafunc.config.getoption("tether_stores")
    if marker is not None:
        kinds = list(marker.args)
    elif option:
        kinds = [k.strip() for k in option.split(",") if k.strip()]
    else:
        kinds = None
    known = [*STORE_KINDS, POSTGRES] if _has_postgres(metafunc.config) else list(STORE_KINDS)
    if kinds is None:
        return known
    if marker is not None and POSTGRES not in known:
        known.append(POSTGRES)  # the test is skipped, having no database to run on
    unknown = [k for k in kinds if k not in known]
    if unknown or not kinds:
        hint = (
            f" ('{POSTGRES}' needs --tether-postgres=URL or ${POSTGRES_ENV})"
            if POSTGRES in unknown
            else ""
        )
        raise UsageError(
            f"{metafunc.definition.nodeid}: unknown store kinds {unknown or kinds!r}; "
            f"choose from {', '.join(known)}{hint}"
        )
    return kinds


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tether_store_kind" in metafunc.fixturenames:
        metafunc.parametrize("tether_store_kind", _kinds(metafunc), indirect=True)
    marker = metafunc.definition.get_closest_marker("tether_seeds")
    if marker is not None:
        for name in ("tether_seed", "tether_scheduler"):
            if name not in metafunc.fixturenames:
                metafunc.fixturenames.append(name)
        seeds = _seeds(metafunc, marker)
        metafunc.parametrize("tether_seed", seeds, indirect=True, ids=[f"seed{s}" for s in seeds])


@pytest.fixture
def tether_store_kind(request: pytest.FixtureRequest) -> str:
    """The kind of store this test runs on."""
    kind: str = request.param
    return kind


@pytest.fixture(scope="session")
def tether_postgres_url(pytestconfig: pytest.Config) -> str:
    """The PostgreSQL database of the ``postgres`` kind: ``--tether-postgres``,
    ``$TETHER_POSTGRES_URL`` or the ``pytest_tether_postgres_url`` hook."""
    url = _postgres_option(pytestconfig)
    if url is None:
        url = pytestconfig.hook.pytest_tether_postgres_url(config=pytestconfig)
    if not url:
        pytest.skip(f"no PostgreSQL database: give --tether-postgres=URL or ${POSTGRES_ENV}")
    return url


@pytest.fixture
def tether_raw_store_factory(
    tether_store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[], Store]]:
    """Makes fresh, unopened, unwrapped stores of the test's kind (for store tests)."""
    if tether_store_kind != POSTGRES:
        yield lambda: make_store(tether_store_kind, tmp_path)
        return
    url: str = request.getfixturevalue("tether_postgres_url")
    made: list[str] = []

    def factory() -> Store:
        store = make_postgres_store(url)
        made.append(store.schema)
        return store

    yield factory
    if made:
        _drop_schemas(url, made)


@pytest.fixture
def tether_store_factory(
    tether_raw_store_factory: Callable[[], Store],
) -> Callable[[], Store]:
    """Makes fresh, unopened stores of the test's kind, wrapped for ``autojump_clock``."""
    return lambda: hold_clock(tether_raw_store_factory())


@pytest.fixture
def tether_store(tether_store_factory: Callable[[], Store]) -> Store:
    """A fresh, unopened store of the test's kind."""
    return tether_store_factory()


@pytest.fixture
async def tether_engine(tether_store: Store) -> AsyncIterator[Engine]:
    """An engine on ``tether_store``, open for the test."""
    async with open_engine(tether_store) as engine:
        yield engine


@pytest.fixture
def tether_seed(request: pytest.FixtureRequest) -> int:
    """The seed of this test (from ``tether_seeds``; 0 when it has none)."""
    seed: int = getattr(request, "param", 0)
    return seed


@pytest.fixture
def tether_scheduler(tether_seed: int) -> Iterator[int]:
    """Make this test's trio run follow the schedule of ``tether_seed``; yields the seed."""
    with seeded_schedule(tether_seed):
        yield tether_seed


@pytest.fixture
def tether_explore(
    tether_store_factory: Callable[[], Store],
) -> Callable[..., Exploration]:
    """:func:`tether.testing.explore` on the test's store kind."""
    return functools.partial(explore, store_factory=tether_store_factory)


@contextlib.contextmanager
def saved_registry() -> Iterator[None]:
    """The registry of workflows defined in this process, put back as it was on exit.

    Workflows defined (or versions added) inside the block are forgotten
    after it; the ones it removed come back.
    """
    saved = {name: dict(versions) for name, versions in _workflow.registry.items()}
    try:
        yield
    finally:
        _workflow.registry.clear()
        _workflow.registry.update(saved)


@pytest.fixture
def tether_registry() -> Iterator[None]:
    """The test in :func:`saved_registry`: the workflows it defines are forgotten after it.

    For tests that define workflows (or new versions of them) of their own.
    """
    with saved_registry():
        yield
