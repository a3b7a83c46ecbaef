"""Small helpers for the nurseries tether opens on its users' behalf: their errors unwrapped.

Layer: the kernel (``_core``).
"""

from __future__ import annotations

from typing import Any

__all__ = ("exit_nursery", "unwrap_single")


def unwrap_single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception inside nested single-exception groups (else the group)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def exit_nursery(manager: Any) -> None:
    """Exit the nursery opened by *manager*, whose tasks have nothing to report.

    The error the block was left with is not passed in, so it propagates as
    itself rather than inside a group. What the tasks could not turn into an
    outcome (``KeyboardInterrupt``, an engine bug) is raised as itself.
    """
    try:
        await manager.__aexit__(None, None, None)
    except BaseExceptionGroup as group:
        raise unwrap_single(group) from None
