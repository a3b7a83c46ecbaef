"""The explorer's vocabulary: fault kinds, where each applies, plans, and what a caller passes.

Layer: testing (``tether.testing``).

:func:`~._explore.explore` injects a fault (an :class:`Injection`, ``kind@point``)
at a named interleaving point (see :mod:`._explore` for the names); a
:class:`FaultPlan` says which fault each execution of one trial gets, and an
:class:`Exploration` sums up a clean exploration. These are plain values,
separate from the machinery that injects them (:mod:`._explore_trial`), so
the worker explorer (:mod:`._explore_workers`) shares the summary and the
checks of what a caller passes (:func:`check_target`, :func:`check_seeds`,
:func:`answer_requests`, :func:`encode_messages`) without the single-run
explorer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from .._api._workflow import Workflow
from .._engine._send import encode_message
from .._errors import MessageRejectedError, Request, UsageError
from ._explore_leases import OWNERSHIP_KINDS

__all__ = (
    "FAULT_KINDS",
    "Exploration",
    "FaultPlan",
    "InjectedFailure",
    "Injection",
    "answer_requests",
    "check_applies",
    "check_seeds",
    "check_target",
    "encode_messages",
    "kinds_at",
)

#: Every kind of fault the explorer injects (the ownership faults last).
FAULT_KINDS: Final = ("cancel", "fail", "store_error", "hang", "crash", *OWNERSHIP_KINDS)

#: Which kinds apply at which kind of point ("claim": record:created and
#: record:running, the claims of a run's lease; "record": its other writes).
_KINDS_AT: Final = {
    "start": ("cancel", "fail", "crash"),
    "timer": ("cancel", "fail", "crash"),
    "due": ("cancel", "fail", "crash"),
    "receive": ("cancel", "fail", "crash"),
    "save": ("cancel", "fail", "store_error", "hang", "crash", "lease_lost", "pause", "race"),
    "stored": ("cancel", "fail", "store_error", "crash"),
    "record": ("cancel", "store_error", "hang", "crash", "lease_lost", "pause", "race"),
    "child": ("cancel", "fail", "store_error", "hang", "crash"),
    "claim": ("cancel", "store_error", "hang", "crash", "race"),
}


class InjectedFailure(Exception):
    """The failure the explorer injects (``fail`` faults)."""


@final
@attrs.frozen
class Injection:
    """One fault at one point: ``kind@point``, e.g. ``crash@save:charge#0``."""

    kind: str = attrs.field()
    at: str

    @kind.validator
    def _check_kind(self, _: object, kind: str) -> None:
        if kind not in FAULT_KINDS:
            raise UsageError(f"unknown fault kind {kind!r}; one of {', '.join(FAULT_KINDS)}")

    def __str__(self) -> str:
        return f"{self.kind}@{self.at}"

    @classmethod
    def parse(cls, text: str) -> Injection:
        """``"crash@save:charge#0"`` → ``Injection("crash", "save:charge#0")``."""
        kind, sep, at = text.partition("@")
        if not sep or not at:
            raise UsageError(
                f"a fault is written kind@point, like 'crash@save:charge#0', not {text!r}"
            )
        return cls(kind, at)


@final
@attrs.frozen
class FaultPlan:
    """What one trial does: a seed, and at most one fault per execution.

    ``injections[0]`` applies to the first ``engine.run``, ``injections[1]``
    to the first resume, and so on (``None``: no fault in that execution);
    after the last, the run is resumed without faults until it finishes.
    """

    seed: int
    injections: tuple[Injection | None, ...]

    def __str__(self) -> str:
        faults = " then ".join("-" if i is None else str(i) for i in self.injections)
        return f"seed {self.seed}: {faults or 'no fault'}"

    @property
    def faults(self) -> str:
        """The plan's faults as ``explore(faults=[...])`` takes them."""
        return " then ".join("-" if i is None else str(i) for i in self.injections)

    @classmethod
    def parse(cls, seed: int, text: str) -> FaultPlan:
        """``FaultPlan.parse(3, "crash@save:a#0 then cancel@start:b#0")``; ``-`` skips one."""
        injections = tuple(
            None if part.strip() == "-" else Injection.parse(part.strip())
            for part in text.split(" then ")
        )
        return cls(seed, injections)


@final
@attrs.frozen
class Exploration:
    """What :func:`explore` did: no invariant was broken in any of these trials."""

    trials: int  #: trials run
    points: Mapping[int, tuple[str, ...]]  #: per seed, the points of the uninterrupted run
    outcome: str  #: the uninterrupted run's outcome, described

    def __str__(self) -> str:
        n = max((len(p) for p in self.points.values()), default=0)
        return (
            f"{self.trials} trials over {len(self.points)} seeds and up to {n} points: "
            f"no invariant broken; outcome {self.outcome}"
        )


# -- what a caller passes ------------------------------------------------------------------


def check_target(caller: str, workflow: object, store_factory: object) -> None:
    """An explorer's workflow and store factory, validated.

    Raises:
        UsageError: *workflow* is not a workflow, or *store_factory* not callable.
    """
    if not isinstance(workflow, Workflow):
        raise UsageError(f"{caller} takes a @tether.workflow, not {workflow!r}")
    if not callable(store_factory):
        raise UsageError(
            f"store_factory must be a callable returning a new store, not {store_factory!r}"
        )


def answer_requests(
    given: Mapping[str, Any] | Callable[[Request], Any] | None,
    requests: Sequence[Request],
    caller: str,
) -> dict[str, Any]:
    """The responses an explorer gives to *requests*, from its ``responses=``.

    Raises:
        UsageError: a request that *given* has no answer for.
    """
    answers: dict[str, Any] = {}
    for request in requests:
        if callable(given):
            answers[request.key] = given(request)
        elif given is not None and request.key in given:
            answers[request.key] = given[request.key]
        else:
            raise UsageError(
                f"the workflow asks {request.key} ({request.payload!r}, expecting "
                f"{request.response_type}); pass responses={{{request.key!r}: ...}} or a "
                f"function of the request to {caller}"
            )
    return answers


def encode_messages(
    workflow: Workflow[..., Any], messages: Iterable[tuple[str, Any]], caller: str, run_id: str
) -> tuple[tuple[str, str], ...]:
    """The messages an explorer sends to its run *run_id* (``messages=``), each checked
    against what *workflow* declares and encoded as ``engine.send`` encodes it:
    ``(name, JSON text)``.

    Raises:
        UsageError: an item that is not a ``(name, value)`` pair, or a message the
            workflow does not declare or whose value does not fit its type.
    """
    if isinstance(messages, str | bytes | Mapping):
        raise UsageError(
            f"{caller} takes messages=[(name, value), ...] (a list of pairs), not {messages!r:.100}"
        )
    try:
        items = list(messages)
    except TypeError:
        raise UsageError(
            f"{caller} takes messages=[(name, value), ...] (a list of pairs), not {messages!r:.100}"
        ) from None
    encoded: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2 or not isinstance(item[0], str):
            raise UsageError(
                f"{caller}: each of messages= is a (name, value) pair, not {item!r:.100}"
            )
        name, value = item
        try:
            text = encode_message(run_id, workflow.name, workflow.messages, name, value)
        except MessageRejectedError as exc:
            raise UsageError(f"{caller}, messages=: {exc}") from exc
        encoded.append((name, text))
    return tuple(encoded)


def check_applies(injection: Injection) -> None:
    """Check that *injection*'s kind applies at its point.

    Raises:
        UsageError: it does not (naming the kinds that do).
    """
    if injection.kind not in kinds_at(injection.at):
        raise UsageError(
            f"a {injection.kind!r} fault does not apply at {injection.at!r}; there: "
            f"{', '.join(kinds_at(injection.at)) or 'none'}"
        )


def kinds_at(point: str) -> tuple[str, ...]:
    """The fault kinds that apply at *point*."""
    kind, _, what = point.partition(":")
    if kind == "record" and what.partition("~")[0] in ("created", "running"):
        kind = "claim"
    return _KINDS_AT.get(kind, ())


def check_seeds(seeds: int | Iterable[int]) -> list[int]:
    """The seeds an explorer's ``seeds=`` names: a count (``0..n-1``) or the seeds.

    Raises:
        UsageError: not a positive count or a non-empty iterable of ints.
    """
    if isinstance(seeds, bool):
        raise UsageError(f"seeds must be a count or an iterable of ints, not {seeds!r}")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list or not all(isinstance(s, int) and not isinstance(s, bool) for s in seed_list):
        raise UsageError(
            f"seeds must be a positive count or a non-empty list of ints, not {seeds!r}"
        )
    return seed_list
