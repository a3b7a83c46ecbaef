"""The command line's exit statuses, and how its help lists them.

Layer: the command line (``_cli``).

One table for every command, so ``--help``, the messages and the docs say
the same: each command's help lists the statuses it can exit with.
"""

from __future__ import annotations

import textwrap
from typing import Final

__all__ = (
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PAUSED",
    "EXIT_TIMED_OUT",
    "EXIT_USAGE",
    "BadUsage",
    "exit_help",
)

#: The command did what it was asked (a run completed, a listing was printed, ...).
EXIT_OK: Final = 0
#: The run failed, or what the command needs is not there or cannot be read:
#: no such run or store, a corrupt record, a run another owner executes, a
#: cancelled run, a completed run to cancel.
EXIT_FAILED: Final = 1
#: A usage error: the command line is wrong (fix it and try again); nothing
#: was executed or changed.
EXIT_USAGE: Final = 2
#: ``run``/``resume``: the run paused, waiting for responses (``tether resume --respond``).
EXIT_PAUSED: Final = 3
#: ``run``/``resume``: ``--timeout`` expired; the run is interrupted, not failed,
#: and resumable.
EXIT_TIMED_OUT: Final = 4
#: Ctrl-C (SIGINT; 128 + 2, as shells report it); a run is left interrupted and resumable.
EXIT_INTERRUPTED: Final = 130

_MEANINGS: Final = {
    EXIT_OK: "success",
    EXIT_FAILED: "the run failed, or the run or store does not exist or cannot be read, "
    "or the run cannot be executed, cancelled or sent a message now (another owner holds it, "
    "it is cancelled, it has finished)",
    EXIT_USAGE: "usage error: the command line is wrong; nothing was executed or changed",
    EXIT_PAUSED: "the run paused, waiting for responses (respond with `tether resume --respond`)",
    EXIT_TIMED_OUT: "--timeout expired: the run is interrupted, not failed; resume it",
    EXIT_INTERRUPTED: "interrupted by Ctrl-C: a run is left interrupted; resume it",
}


class BadUsage(Exception):
    """The command line is wrong: ``main`` reports it as a usage error (exit status 2).

    Raised before anything was executed or changed (the workflow named, its
    arguments, the responses, the options' values), or by a resume that
    journaled nothing (a response that does not decode, an unknown key).
    """


def exit_help(*statuses: int) -> str:
    """The ``exit status:`` section of a command's help, listing *statuses* (all by default)."""
    lines = ["exit status:"]
    for status in statuses or tuple(_MEANINGS):
        lines += textwrap.wrap(
            _MEANINGS[status],
            width=78,
            initial_indent=f"  {status:<5}",
            subsequent_indent=" " * 7,
        )
    return "\n".join(lines)
