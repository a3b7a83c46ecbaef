"""A step's attempts: its ``retries``, or its ``retry`` policy with a durable backoff.

Layer: the API of workflow code (``_api``).

What :func:`~._steps.execute_step` runs in place of the step function when
the step may be tried more than once (or has a ``timeout``): each attempt
in a frame of its own, so its nested steps key under the step and a retry
replays those an earlier attempt stored. Separate from the step call itself
because only steps with these options take this path, and a policy's
failed attempts are journaled here (:func:`._retry.journal_failure`).

Whole because :func:`attempts` is one loop whose state carries from attempt to
attempt (the attempt number, its frame, its failure, when the next one is due,
what its nested steps reached): resuming mid-backoff, running an attempt,
journaling its failure and waiting for the next are one state machine, read
best in one place.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import trio

from .._core._events import StepRetrying
from .._core._frame import Frame, frame_var
from .._core._run import RunState
from ._retry import journal_failure, next_attempt_at
from ._step_def import StepDef

__all__ = ("Tries", "attempts")


class Tries:
    """A step call's attempts as they go: the one running now, and the one it returned from.

    The step's end hook reports the attempt a step ended on, also when it
    raised out of one.
    """

    __slots__ = ("current", "ended", "started")

    def __init__(self) -> None:
        self.current = 0  #: the attempt running now (0: none started yet)
        self.ended: int | None = None  #: the attempt the step returned from
        #: when the attempt running now started, on the engine's clock
        self.started: datetime | None = None


log = logging.getLogger("tether")


async def attempts(
    run: RunState,
    step: StepDef[Any],
    key: str,
    position: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    args_digest: str,
    tries: Tries,
) -> Any:
    """Run the step's attempts (``retries``, or its ``retry`` policy); its value and attempt.

    With ``retries``, a failed attempt is retried at once, and nothing of it
    is journaled. With a policy, each failed attempt is journaled (a
    ``failed`` entry with its attempt number, its error, and ``{"next_at":
    ...}``, the moment the next attempt is due, ``null`` when none follows),
    and the next attempt waits for that moment as a durable timer (it may
    park the run). An execution that finds the step's last failed attempt
    in the journal with a ``next_at`` (a crash or a restart mid-backoff, a
    run parked on its backoff) waits until then and goes on with the next
    attempt; one whose last failed attempt has none (the step gave up, and
    the run failed) starts a new round from attempt 1. *tries* is told the
    attempt running now, and the one the step returned from.
    """
    policy = step.retry
    total = step.retries + 1 if policy is None else policy.attempts
    attempt = 1
    if policy is not None:
        last = run.failures.get(key)
        next_at = None if last is None else next_attempt_at(run.run_id, last)
        if last is not None and next_at is not None:
            attempt = last.attempt + 1
            await run.sleep_until(next_at)
    while True:
        tries.current = attempt
        started = tries.started = run.clock.now()
        failure: Exception | None = None
        # A fresh frame per attempt: nested steps get keys under this step,
        # and a retry replays the nested steps an earlier attempt stored.
        token = frame_var.set(Frame(run, key, trio.lowlevel.current_task()))
        try:
            if step.timeout is None:
                value = await step.fn(*args, **kwargs)
            else:
                with trio.fail_after(step.timeout):
                    value = await step.fn(*args, **kwargs)
            tries.ended = attempt
            return value
        except Exception as exc:
            failure = exc
        finally:
            frame_var.reset(token)
        assert failure is not None
        next_at = None
        if policy is None:
            if attempt >= total:
                raise failure
        else:
            retried = policy.retries(failure, attempt)
            if retried:
                next_at = run.clock.now() + timedelta(seconds=policy.delay(attempt))
            if not await journal_failure(
                run, key, position, args_digest, attempt, failure, started, next_at
            ):
                retried = False
            if not retried:
                raise failure
        if run.observer is not None:
            retrying = StepRetrying(
                run_id=run.run_id,
                key=key,
                name=step.name,
                attempt=attempt,
                error=failure,
                next_at=next_at,
            )
            run.observer(retrying)
        log.info(
            "tether: step %s of run %s failed (attempt %d of %d), retrying%s: %r",
            key,
            run.run_id,
            attempt,
            total,
            "" if next_at is None else f" at {next_at.isoformat()}",
            failure,
        )
        failure = None
        attempt += 1
        # The retry calls the nested steps again: those the failed attempt
        # stored replay from the journal, the rest run.
        prefix = key + "/"
        run.seen = {k: None for k in run.seen if not k.startswith(prefix)}
        if next_at is not None:
            await run.sleep_until(next_at)
