"""Put the workflow registry back after a test that defines workflows of its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tether._api import _workflow


@contextmanager
def saved_registry() -> Iterator[None]:
    """The registry as it was on entry, restored on exit (copied by name, then by version)."""
    saved = {name: dict(versions) for name, versions in _workflow.registry.items()}
    try:
        yield
    finally:
        _workflow.registry.clear()
        _workflow.registry.update(saved)
