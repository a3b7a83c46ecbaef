"""Retry policies: ``@tether.step(retry=tether.Retry(...))``.

Layer: the API of workflow code (``_api``).

A policy says how many attempts a step gets, which errors are worth another
attempt, and how long to wait before each: ``initial`` seconds after the
first failure, ``backoff`` times longer after each next one, never more than
``maximum``, with random *jitter* so that many runs failing together do not
retry together. The step's execution (``_step_attempts``) journals each failed
attempt with its error and the moment the next attempt is due, and waits
for that moment as a durable timer: a crash or a restart neither resets the
backoff nor retries early, and under a worker a long backoff parks the run.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, final

import attrs

from .._codec._json import dumps, loads
from .._core._error_info import error_info, note_key
from .._core._run import RunState, own
from .._errors import CheckpointCorruptError, CodecError, UsageError
from ..stores._records import Entry, EntryStatus

__all__ = ("Retry", "journal_failure", "next_attempt_at")


def _seconds(
    name: str, *, at_least: float = 0.0, optional: bool = False
) -> Callable[[object, Any, object], None]:
    def check(_: object, __: Any, value: object) -> None:
        if value is None and optional:
            return
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value < at_least
        ):
            raise UsageError(
                f"Retry({name}=) must be a finite number, at least {at_least:g}, not {value!r}"
            )

    return check


def _check_attempts(_: object, __: Any, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"Retry(attempts=) must be a positive integer, not {value!r}")


def _check_jitter(_: object, __: Any, value: object) -> None:
    if not isinstance(value, bool):
        raise UsageError(f"Retry(jitter=) must be True or False, not {value!r}")


def _errors(value: object) -> tuple[type[Exception], ...]:
    """``on=``: one exception class or several, as a tuple."""
    classes = (value,) if isinstance(value, type) else value
    if (
        isinstance(classes, str | bytes)
        or not isinstance(classes, tuple | list | frozenset | set)
        or not classes
        or not all(isinstance(c, type) and issubclass(c, Exception) for c in classes)
    ):
        raise UsageError(
            "Retry(on=) takes Exception classes (one, or a tuple of them; never "
            f"BaseException ones such as trio.Cancelled), not {value!r}"
        )
    return tuple(classes)


@final
@attrs.frozen(kw_only=True)
class Retry:
    """How a step is retried: attempts, backoff and which errors; see ``@tether.step(retry=)``.

    The delay before attempt *n* + 1 is ``initial * backoff ** (n - 1)``
    seconds, at most ``maximum`` (when given); with ``jitter`` it is drawn once,
    uniformly between half of that and all of it, and journaled with the
    failed attempt (a replay never draws again).

    Attributes:
        attempts: how many times the step runs at most, the first included.
        initial: seconds before the second attempt.
        backoff: how much longer each next delay is (1: always ``initial``).
        maximum: the longest delay, in seconds (``None``: no limit).
        jitter: draw each delay at random between half of it and all of it.
        on: the exceptions worth another attempt; any other fails the step at
            once. Cancellation is never retried.

    Raises:
        UsageError: a value out of range (a negative or infinite number of
            seconds, ``maximum`` below ``initial``, a ``backoff`` below 1,
            ``attempts`` below 1, classes that are not ``Exception`` ones).
    """

    attempts: int = attrs.field(default=3, validator=_check_attempts)
    initial: float = attrs.field(default=1.0, validator=_seconds("initial"))
    backoff: float = attrs.field(default=2.0, validator=_seconds("backoff", at_least=1.0))
    maximum: float | None = attrs.field(default=None, validator=_seconds("maximum", optional=True))
    jitter: bool = attrs.field(default=True, validator=_check_jitter)
    on: tuple[type[Exception], ...] = attrs.field(default=(Exception,), converter=_errors)

    def __attrs_post_init__(self) -> None:
        if self.maximum is not None and self.maximum < self.initial:
            raise UsageError(
                f"Retry(maximum={self.maximum!r}) is below initial={self.initial!r}: "
                "the longest delay cannot be shorter than the first"
            )

    def retries(self, error: BaseException, attempt: int) -> bool:
        """Whether *error*, raised by attempt number *attempt*, gets another attempt."""
        return attempt < self.attempts and isinstance(error, self.on)

    def delay(self, attempt: int, draw: Callable[[], float] = random.random) -> float:
        """Seconds from the failure of attempt *attempt* to the next attempt.

        *draw* returns a number in ``[0, 1)`` (the jitter); it is called
        once, and only with ``jitter``.
        """
        limit = math.inf if self.maximum is None else self.maximum
        try:
            seconds = min(limit, self.initial * self.backoff ** (attempt - 1))
        except OverflowError:
            seconds = limit
        if math.isinf(seconds):  # (no maximum, and a backoff past any datetime)
            seconds = float(10**9)
        if self.jitter:
            seconds *= 0.5 + 0.5 * draw()
        return seconds


# -- the journal of failed attempts (for the retry loop in _step_attempts) -----------------


def next_attempt_at(run_id: str, entry: Entry) -> datetime | None:
    """When the attempt after the failed one *entry* journals is due (``None``: none follows).

    Raises:
        CheckpointCorruptError: its value is not ``{"next_at": ISO 8601 or null}``.
    """
    try:
        data = loads(entry.value or "null")
        if isinstance(data, dict) and set(data) == {"next_at"}:
            text = data["next_at"]
            if text is None:
                return None
            if isinstance(text, str):
                when = datetime.fromisoformat(text)
                if when.utcoffset() is not None:
                    return when
    except (ValueError, CodecError):
        pass
    raise CheckpointCorruptError(
        f"run {run_id!r}: failed attempt {entry.attempt} of step {entry.key} (seq "
        f"{entry.seq}): the journaled value {entry.value!r:.100} is not "
        "{'next_at': ISO 8601 with a timezone, or null}"
    )


async def journal_failure(
    run: RunState,
    key: str,
    position: int,
    args_digest: str,
    attempt: int,
    failure: Exception,
    started: datetime,
    next_at: datetime | None,
) -> bool:
    """Journal a failed attempt of the step *key*; whether it was stored.

    The entry: status ``failed``, the attempt number, the error, and as its
    value ``{"next_at": ...}``, when the next attempt is due (``null``: none
    follows). A failure that cannot be journaled is not retried (a crash
    then could retry before its backoff ended): the step fails with its own
    error, noted. A checkpoint; cancellation as for any save.
    """
    note_key(failure, key)
    entry = Entry(
        run_id=run.run_id,
        key=key,
        status=EntryStatus.FAILED,
        value=dumps({"next_at": None if next_at is None else next_at.astimezone(UTC).isoformat()}),
        error=error_info(failure),
        args_digest=args_digest,
        started_at=started,
        finished_at=run.clock.now(),
        attempt=attempt,
        token=run.token,
        position=position,
    )
    try:
        (stored,) = await run.save([entry])
    except Exception as exc:
        failure.add_note(
            f"tether: journaling attempt {attempt} of step {key} as failed failed too: {exc!r}"
        )
        return False
    run.failures = own(run.failures)
    run.failures[key] = stored
    return True
