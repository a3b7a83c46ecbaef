"""The engine executing a run, as the run's own code sees it: the :class:`Host` protocol.

Layer: the kernel (``_core``).

A run's state (:class:`~._run.RunState`) holds its host so that the calls
workflow code makes which start or wait for other runs (``tether.child``) or
wait for messages (``tether.receive``) can reach the engine without this
layer, or the one above it, importing the engine: the engine implements this
protocol, and hands it down when it starts a run.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._changes import Changes

__all__ = ("Host",)


class Host(Protocol):
    """What a run's own code may ask of the engine that executes it."""

    @property
    def owner(self) -> str:
        """The engine's owner name, ``host:pid:engine-id``, as leases show it."""
        ...

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts without renewal."""
        ...

    @property
    def changes(self) -> Changes:
        """What wakes the engine's waiters when a run changes."""
        ...

    def define(self, workflow: Any, /) -> None:
        """Execute runs of *workflow*'s name and version as *workflow* in this engine."""
        ...

    async def run(self, workflow: Any, /, *args: Any, run_id: str | None = None) -> Any:
        """``engine.run``: start (or continue) a run in the calling task."""
        ...

    async def resume(self, run_id: str, /) -> Any:
        """``engine.resume``: continue a stored run in the calling task."""
        ...

    async def wait(self, run_id: str, /) -> Any:
        """``engine.wait``: the outcome of a run executing anywhere."""
        ...

    async def cancel(self, run_id: str, /) -> None:
        """``engine.cancel``: record a cancel of a run."""
        ...
