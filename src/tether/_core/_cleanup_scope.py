"""``cleanup_scope``: a bounded shield for a generator's (or any) cleanup that must await.

Layer: the kernel (``_core``).

Separate from the streams themselves: it is public on its own, and works
outside a run too; inside one, it is a tracked shield of the run's saver, so
the caller's cancellation still cuts it short.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import trio

from .._errors import UsageError
from ._frame import frame_var

__all__ = ("cleanup_scope",)


@contextlib.contextmanager
def cleanup_scope(timeout: float) -> Iterator[trio.CancelScope]:
    """A bounded shield for cleanup that must await: ``with tether.cleanup_scope(2.0):``.

    A generator's cleanup runs under the cancellation that closed it, so an
    unshielded ``await`` in its ``finally`` raises ``trio.Cancelled`` at once.
    Awaits inside this block are shielded from that, for at most *timeout*
    seconds (then they are cancelled and the block is left, like
    ``trio.move_on_after``). Inside a run, the caller's cancellation (an
    enclosing deadline, ``timeout=``, Ctrl-C) still cuts it short, as it does
    a shielded save: the caller is never held.

    Raises:
        UsageError: *timeout* is not a positive number of seconds.
    """
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or math.isnan(timeout)
        or timeout <= 0
    ):
        raise UsageError(f"cleanup_scope() takes a positive number of seconds, not {timeout!r}")
    frame = frame_var.get()
    run = frame.run if frame is not None else None
    if run is None:
        scope = trio.CancelScope(shield=True, deadline=trio.current_time() + timeout)
    else:
        scope = run.saver.tracked_scope(timeout)
    try:
        with scope:
            yield scope
    finally:
        if run is not None:
            run.saver.untrack(scope)
