"""``tether.fencing_token()``: this execution's fencing token, for the systems a step writes to.

Layer: the API of workflow code (``_api``).

Every execution of a run claims the run's lease and gets a fencing token
(1 for a run's first execution; each later claim, a takeover after a crash
or a lost lease included, gets a greater one). The store refuses the writes
of an execution whose token is no longer the run's. A step that writes to
another system can pass the token along, so that the system can refuse, in
the same way, the late write of an owner that lost the run (a zombie: a
process that was paused past its lease and still finishes its step).
"""

from __future__ import annotations

from .._core._frame import frame_var
from .._errors import NotInRunError

__all__ = ("fencing_token",)


def fencing_token() -> int:
    """The fencing token of the execution the caller belongs to.

    Call it in a workflow, a step, a ``parallel()`` branch, or any task or
    thread started from them (it reads the run's context, and journals
    nothing: it is not a checkpoint and takes no key). In a child run it is
    the child run's own token. It is the same for the whole execution, and
    greater in every later one: a system that keeps, for each thing it
    holds, the greatest token it has accepted, and refuses a smaller one,
    never takes a write from an owner that has lost the run after it took
    one from the owner that replaced it. (Equal tokens come from one
    execution: a retried step, which may be accepted again.)

    Raises:
        NotInRunError: outside a run (a step's function called directly,
            ``step.fn``, has none).
    """
    frame = frame_var.get()
    if frame is None:
        raise NotInRunError(
            "tether.fencing_token() was used outside a tether run; call it in a step or "
            "a workflow run by an engine"
        )
    return frame.run.token
