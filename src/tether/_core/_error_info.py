"""How a failure is stored: the step key noted on an exception, and its :class:`ErrorInfo`.

Layer: the kernel (``_core``).

An exception that leaves a step (or a stream, a child run, a failed
attempt) has that step's key noted on it (:func:`note_key`), so the record
of the run it fails names where it came from (:func:`error_info`). Separate
from the run's state: everything that stores a failure uses it, and it
needs nothing of a run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .._errors import ErrorInfo

__all__ = ("error_info", "note_key")

_KEY_ATTR = "_tether_step_key"


def note_key(exc: BaseException, key: str, *, replace: bool = False) -> None:
    """Remember on *exc* the step it came out of (the innermost one is worth naming).

    With *replace*, *key* replaces a key noted before (a child run's error
    names the parent's call, not a step of the child's journal).
    """
    if isinstance(exc, Exception) and (replace or getattr(exc, _KEY_ATTR, None) is None):
        with contextlib.suppress(AttributeError):  # exotic exception types
            setattr(exc, _KEY_ATTR, key)


def _step_key_of(exc: BaseException) -> str | None:
    key = getattr(exc, _KEY_ATTR, None)
    if key is None and isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            key = _step_key_of(sub)
            if key is not None:
                break
    return key


def _type_name(cls: type[BaseException]) -> str:
    if cls.__module__ == "builtins":
        return cls.__qualname__
    if cls.__module__ == "tether._errors":
        return f"tether.{cls.__qualname__}"  # the public name
    return f"{cls.__module__}.{cls.__qualname__}"


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            yield from _leaves(sub)
    else:
        yield exc


def error_info(exc: BaseException) -> ErrorInfo:
    """The stored description of *exc*, naming the step it came out of.

    For an exception group the message lists the errors inside it, so the
    stored record says what actually failed.
    """
    message = str(exc)
    if isinstance(exc, BaseExceptionGroup):
        leaves = [f"{_type_name(type(e))}: {e}" for e in _leaves(exc)]
        message = f"{exc.message}: {'; '.join(leaves)}"
    return ErrorInfo(type=_type_name(type(exc)), message=message, key=_step_key_of(exc))
