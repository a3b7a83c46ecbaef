"""Which calls of a :class:`~tether.testing.FaultyStore` a fault applies to: its rules.

Layer: testing (``tether.testing``).

One rule per :meth:`~tether.testing.FaultyStore.inject`: the method, the call
(or save) numbers, the predicate, how many times, before or after the inner
call. Here are the checks of ``inject``'s arguments and the matching of a
call against a rule (an append is matched save by save); the store keeps the
list of rules and applies the first that matches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import attrs

from .._errors import UsageError
from ..stores._mailbox import MAILBOX_METHODS
from ..stores._respond import RESPOND_METHODS
from ..stores._store import (
    ADVERTISE_METHODS,
    BATCH_METHODS,
    DELETE_METHODS,
    QUEUE_METHODS,
    STORE_METHODS,
    WORKER_METHODS,
    Store,
)
from ._faults import TORN_AFTER, Crash, Fault, torn_writer

METHODS: Final = (
    *STORE_METHODS,
    *WORKER_METHODS,
    *BATCH_METHODS,
    *ADVERTISE_METHODS,
    *DELETE_METHODS,
    *MAILBOX_METHODS,
    *RESPOND_METHODS,
    *QUEUE_METHODS,
)


@attrs.define
class Rule:
    method: str
    fault: Fault
    at: frozenset[int] | None
    when: Callable[..., bool] | None
    times: float
    after: bool


def matches(rule: Rule, method: str, n: int, args: tuple[Any, ...]) -> bool:
    """Whether *rule* applies to call *n* of *method* (for an append, to one of its saves)."""
    if method == "append" and args[1]:
        run_id, entries = args[0], args[1]
        return any(
            (rule.at is None or n + i in rule.at) and (rule.when is None or rule.when(run_id, [e]))
            for i, e in enumerate(entries)
        )
    return (rule.at is None or n in rule.at) and (rule.when is None or rule.when(*args))


def _check_count(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"inject(): {name} must be an int, not {value!r}")
    return value


def new_rule(
    inner: Store,
    method: str,
    fault: Fault,
    *,
    at: int | Sequence[int] | None,
    when: Callable[..., bool] | None,
    times: int | None,
    after: bool,
) -> Rule:
    """The rule for ``FaultyStore(inner).inject(method, fault, ...)``, its arguments checked.

    Raises:
        ValueError, TypeError, UsageError: as :meth:`~tether.testing.FaultyStore.inject`.
    """
    if method not in METHODS:
        raise ValueError(f"unknown store method {method!r}; one of {', '.join(METHODS)}")
    if not callable(getattr(fault, "apply", None)):
        raise TypeError(
            f"inject(): {fault!r} is not a fault; pass Delay, Hang, Raise, Crash, Do, "
            "or an object with `async def apply(self, call)`"
        )
    if at is None:
        calls = None
    else:
        numbers = list(at) if isinstance(at, Iterable) and not isinstance(at, str) else [at]
        calls = frozenset(_check_count(a, "at") for a in numbers)
        if not calls or min(calls) < 1:
            raise ValueError(f"inject(): at must be call numbers counted from 1, not {at!r}")
    if when is not None and not callable(when):
        raise TypeError(f"inject(): when must be a predicate (a callable), not {when!r}")
    if times is not None and _check_count(times, "times") < 0:
        raise ValueError(f"inject(): times must be 0 or more, not {times!r}")
    if not isinstance(after, bool):
        raise TypeError(f"inject(): after must be True or False, not {after!r}")
    if isinstance(fault, Crash) and fault.torn:
        if after:
            raise UsageError(TORN_AFTER)
        torn_writer(inner, method)
    return Rule(method, fault, calls, when, math.inf if times is None else times, after)
