"""tether's pytest plugin: store and engine fixtures, seeded schedules, the explorer.

Installed with tether (the ``pytest11`` entry point ``tether``), so any
project that has tether and pytest gets it; ``-p no:tether`` turns it off.
The async fixture (``tether_engine``) needs ``pytest-trio``.

Fixtures
    ``tether_store_kind``
        ``"memory"``, ``"sqlite"`` or ``"file"``: a test that uses any store
        fixture runs once per kind (``--tether-stores`` or the
        ``tether_stores`` marker choose which).
    ``tether_store_factory``
        makes fresh, unopened stores of that kind in the test's ``tmp_path``
        (thread-backed stores wrapped in :class:`ClockHoldingStore`, so that
        trio's ``autojump_clock`` waits for them).
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

Markers
    ``@pytest.mark.tether_seeds(n)`` or ``tether_seeds([3, 17])``
        run the test once per seed, each under the seeded schedule
        (``--tether-seeds N`` overrides the count everywhere).
    ``@pytest.mark.tether_stores("memory", "sqlite")``
        the store kinds this test runs on.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Final

import pytest

from .._engine._engine import Engine, open_engine
from .._errors import UsageError
from ..stores._file import FileStore
from ..stores._memory import MemoryStore
from ..stores._sqlite import SQLiteStore
from ..stores._store import Store
from ._clock import hold_clock
from ._deterministic import seeded_schedule
from ._explore import explore
from ._explore_plan import Exploration

__all__ = ("STORE_KINDS", "make_store")

#: The built-in stores the store fixtures run over.
STORE_KINDS: Final = ("memory", "sqlite", "file")

_fresh = itertools.count()


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
        help=f"comma-separated store kinds for tether's store fixtures ({','.join(STORE_KINDS)})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tether_seeds(n_or_seeds): run the test once per seed under a seeded trio schedule",
    )
    config.addinivalue_line(
        "markers", "tether_stores(*kinds): the store kinds tether's store fixtures run over"
    )


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
        kinds = list(STORE_KINDS)
    unknown = [k for k in kinds if k not in STORE_KINDS]
    if unknown or not kinds:
        raise UsageError(
            f"{metafunc.definition.nodeid}: unknown store kinds {unknown or kinds!r}; "
            f"choose from {', '.join(STORE_KINDS)}"
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


@pytest.fixture
def tether_store_factory(tether_store_kind: str, tmp_path: Path) -> Callable[[], Store]:
    """Makes fresh, unopened stores of the test's kind."""
    return lambda: hold_clock(make_store(tether_store_kind, tmp_path))


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
