"""A store's optional capabilities: found by its methods, narrowed by what it declares."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import tether
from tether.stores import CAPABILITY_METHODS, Capability, capabilities_of, has, mailbox_of
from tether.testing import ClockHoldingStore, FaultyStore

from ._json_store import JsonStore

EVERYTHING = frozenset(Capability)


class Declaring(JsonStore):
    """A JsonStore with every optional method, which declares only some of them."""

    def __init__(self, declared: Sequence[Capability]) -> None:
        super().__init__()
        self.capabilities = frozenset(declared)

    async def send_message(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("never called")

    async def load_messages(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("never called")

    async def watch(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("never called")


def test_each_capability_names_its_methods() -> None:
    assert set(CAPABILITY_METHODS) == EVERYTHING
    assert CAPABILITY_METHODS[Capability.MESSAGES] == ("send_message", "load_messages")
    assert CAPABILITY_METHODS[Capability.DELETE] == ("delete_run",)


def test_built_in_stores_have_what_their_methods_offer(tmp_path: Path) -> None:
    assert capabilities_of(tether.MemoryStore()) == EVERYTHING
    for store in (tether.SQLiteStore(tmp_path / "runs.db"), tether.FileStore(tmp_path / "f")):
        # They keep everything but watch (waiters poll them).
        assert capabilities_of(store) == EVERYTHING - {Capability.WATCH}
    assert Capability.MESSAGES not in capabilities_of(JsonStore())


def test_a_declaration_narrows_and_never_adds() -> None:
    narrowed = Declaring([Capability.WORKERS, Capability.MESSAGES])
    assert capabilities_of(narrowed) == {Capability.WORKERS, Capability.MESSAGES}
    assert mailbox_of(narrowed) is not None
    assert not has(narrowed, Capability.WATCH)  # it has watch(), and does not declare it
    # Declaring what a store has no method for gives it nothing.
    lacking = JsonStore()
    lacking.capabilities = frozenset(EVERYTHING)  # type: ignore[attr-defined]
    assert Capability.MESSAGES not in capabilities_of(lacking)
    assert not has(lacking, Capability.MESSAGES)


@pytest.mark.parametrize("inner", [tether.MemoryStore, JsonStore], ids=["memory", "json"])
def test_wrappers_are_taken_for_what_they_wrap(inner: type[tether.stores.Store]) -> None:
    for wrapper in (FaultyStore(inner()), ClockHoldingStore(inner())):
        found = capabilities_of(wrapper)
        assert found <= capabilities_of(inner())
        for capability in Capability:
            assert has(wrapper, capability) == (capability in found)
    assert capabilities_of(FaultyStore(inner())) == capabilities_of(inner())
