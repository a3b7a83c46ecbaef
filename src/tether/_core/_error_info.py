"""How a failure is stored: the step key noted on an exception, and its :class:`ErrorInfo`.

Layer: the kernel (``_core``).

An exception that leaves a step (or a stream, a child run, a failed
attempt) has that step's key noted on it (:func:`note_key`), so the record
of the run it fails names where it came from (:func:`error_info`), with its
traceback, every text of it storable. Separate from the run's state:
everything that stores a failure uses it, and it needs nothing of a run.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

from .._errors import MAX_MEMBERS, MAX_MESSAGE, MAX_TRACEBACK, ErrorInfo, storable_text

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
        name = cls.__qualname__
    elif cls.__module__ == "tether._errors":
        name = f"tether.{cls.__qualname__}"  # the public name
    else:
        name = f"{cls.__module__}.{cls.__qualname__}"
    return storable_text(name, MAX_MESSAGE)


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            yield from _leaves(sub)
    else:
        yield exc


def _text(exc: BaseException) -> str:
    """``str(exc)``, or what says it failed (an exception's ``__str__`` may raise)."""
    try:
        return str(exc)
    except Exception as failed:
        return f"<str() of the {type(exc).__name__} failed: {failed!r}>"


def _traceback(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(exc))
    except Exception as failed:  # a broken __str__ or __notes__ it could not hide
        return f"<formatting the traceback failed: {failed!r}>"


def error_info(exc: BaseException) -> ErrorInfo:
    """The stored description of *exc*, naming the step it came out of.

    With its formatted traceback (chained causes and group members
    included). For an exception group, the message lists the errors inside
    it and :attr:`~ErrorInfo.members` names each (type, message, step), so
    the stored record says what actually failed. Every text is made
    storable and bounded (:func:`storable_text`), so that storing it cannot
    fail on its content.
    """
    message = _text(exc)
    members: tuple[ErrorInfo, ...] = ()
    if isinstance(exc, BaseExceptionGroup):
        leaves = list(_leaves(exc))
        parts = [f"{_type_name(type(e))}: {_text(e)}" for e in leaves]
        message = f"{exc.message}: {'; '.join(parts)}"
        members = tuple(
            ErrorInfo(
                type=_type_name(type(e)),
                message=storable_text(_text(e), MAX_MESSAGE),
                key=_step_key_of(e),
            )
            for e in leaves[:MAX_MEMBERS]
        )
    return ErrorInfo(
        type=_type_name(type(exc)),
        message=storable_text(message, MAX_MESSAGE),
        key=_step_key_of(exc),
        traceback=storable_text(_traceback(exc), MAX_TRACEBACK),
        members=members,
    )
