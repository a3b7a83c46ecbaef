"""Put the workflow registry back after a test that defines workflows of its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tether import _workflow


@contextmanager
def saved_registry() -> Iterator[None]:
    """The registry as it was on entry, restored on exit (copied by name, then by version)."""
    saved = {name: dict(versions) for name, versions in _workflow._registry.items()}
    try:
        yield
    finally:
        _workflow._registry.clear()
        _workflow._registry.update(saved)
