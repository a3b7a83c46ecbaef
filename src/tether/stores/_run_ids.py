"""The rule of run ids, one for every store: :func:`check_run_id`.

Layer: stores (``tether.stores``).

A run id is a ``str`` of 1 to :data:`MAX_RUN_ID_BYTES` UTF-8 bytes, valid
Unicode (no lone surrogate: it must encode to UTF-8), without NUL. Anything
else a str can hold is allowed, control characters included: run ids often
come from outside (order ids, webhooks), so the CLI and the dashboard escape
them when they show them, and a store keeps them exactly (a FileStore
writes an id that is not safe as a folder name under a folder named by its
digest; see :mod:`._file_disk`).

Every built-in store checks the run id of each call that takes one, before
it touches its storage, and the engine checks the ids it is given before
anything is stored, so a refusal is always this :class:`~tether.UsageError`,
never a store's own error. A store of your own should call it too
(:func:`tether.testing.check_store` holds every store to the rule).
"""

from __future__ import annotations

from typing import Final

from .._errors import UsageError

__all__ = ("MAX_RUN_ID_BYTES", "RUN_ID_RULE", "check_identifier", "check_run_id", "shown_run_id")

#: The longest run id, in UTF-8 bytes (a FileStore folder name may take 255).
MAX_RUN_ID_BYTES: Final = 200

#: The rule, as errors state it.
RUN_ID_RULE: Final = (
    f"a run id is a str of 1 to {MAX_RUN_ID_BYTES} UTF-8 bytes, valid Unicode (no lone "
    "surrogates), without NUL"
)

#: How many characters of a refused id an error shows.
_SHOWN: Final = 60


def shown_run_id(run_id: str) -> str:
    """*run_id* as an error shows it: its ``repr`` (control characters and lone
    surrogates escaped), cut after a few dozen characters."""
    if len(run_id) <= _SHOWN:
        return repr(run_id)
    return f"{run_id[:_SHOWN]!r}... ({len(run_id)} characters)"


def check_run_id(run_id: object) -> str:
    """*run_id*, if it is a valid run id (see the module doc); else raise.

    Not a checkpoint; cheap enough for every store call.

    Raises:
        UsageError: not a str, empty, longer than :data:`MAX_RUN_ID_BYTES`
            in UTF-8, holding a lone surrogate, or holding NUL; the message
            names the id (escaped, cut) and the rule.
    """
    return check_identifier(run_id, "run id")


def check_identifier(value: object, what: str) -> str:
    """*value*, if it keeps the rule of run ids (see the module doc); else raise,
    calling it *what*: the one rule of the names a caller gives a store to keep
    and match exactly (run ids, queue names, keys, dedupe ids).

    Raises:
        UsageError: as :func:`check_run_id`, naming *what*.
    """
    rule = RUN_ID_RULE if what == "run id" else RUN_ID_RULE.replace("a run id", f"a {what}", 1)
    if not isinstance(value, str):
        raise UsageError(
            f"{what} {value!r:.100} is a {type(value).__qualname__}, not a str: {rule}"
        )
    if value.isascii():
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise UsageError(
                f"{what} {shown_run_id(value)} holds a lone surrogate, which no store can "
                f"keep: {rule}"
            ) from None
    if not 0 < size <= MAX_RUN_ID_BYTES:
        length = "is empty" if not size else f"is {size} UTF-8 bytes long"
        raise UsageError(f"{what} {shown_run_id(value)} {length}: {rule}")
    if "\x00" in value:
        raise UsageError(f"{what} {shown_run_id(value)} holds a NUL character: {rule}")
    return value
