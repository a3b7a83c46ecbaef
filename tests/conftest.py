from __future__ import annotations

from collections.abc import Callable

import pytest

import tether
from tether.stores import Store

STORE_KINDS = ["memory"]


def make_store(kind: str) -> Store:
    if kind == "memory":
        return tether.MemoryStore()
    raise AssertionError(kind)


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest) -> Callable[[], Store]:
    """Makes fresh stores of one kind; engine tests run once per kind."""
    kind: str = request.param
    return lambda: make_store(kind)


@pytest.fixture
def store(store_factory: Callable[[], Store]) -> Store:
    return store_factory()
