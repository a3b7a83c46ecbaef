"""What executing a step needs of its definition: the :class:`StepDef` protocol.

Layer: the API of workflow code (``_api``), its lowest module.

A step is defined by :class:`~._workflow.Step` and executed by :mod:`._steps`
and :mod:`._step_attempts`; they read the definition through this protocol, so
that the definition imports its executor and never the other way round.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from .._codec._values import Signature
from ._retry import Retry

__all__ = ("StepDef",)

R_co = TypeVar("R_co", covariant=True)


class StepDef(Protocol[R_co]):
    """A step as its executor reads it (``@tether.step`` makes one)."""

    @property
    def fn(self) -> Callable[..., Awaitable[R_co]]:
        """The step's own async function."""
        ...

    @property
    def name(self) -> str:
        """Its name, the stem of its keys."""
        ...

    @property
    def signature(self) -> Signature:
        """Its parameters and return annotation, for the codec."""
        ...

    @property
    def retries(self) -> int:
        """Immediate retries after a failure (without a ``retry`` policy)."""
        ...

    @property
    def retry(self) -> Retry | None:
        """Its retry policy, or ``None``."""
        ...

    @property
    def timeout(self) -> float | None:
        """Seconds each attempt may take, or ``None``."""
        ...
