"""Hook events and their dispatch: what an engine's ``hooks=`` objects are told, and when.

Layer: the kernel (``_core``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, final

import attrs
import trio

from .._errors import UsageError
from ..stores._records import Entry

__all__ = ("HOOK_METHODS", "HookEvent", "Hooks")

log = logging.getLogger("tether")

HOOK_METHODS = ("on_run_start", "on_run_end", "on_step_start", "on_step_end", "on_checkpoint")


@final
@attrs.frozen(kw_only=True)
class HookEvent:
    """What a hook is told. One frozen object per call.

    Run events (``on_run_start``, ``on_run_end``) have ``key=None`` and the
    workflow's name as ``name``; step events carry the step's key and name.
    """

    run_id: str
    workflow: str  #: the workflow's registered name
    name: str  #: the step's name, or the workflow's for run events
    key: str | None = None  #: the step's journal key; ``None`` for run events
    exception: BaseException | None = None  #: for ``on_*_end``: what ended it, or ``None``
    entry: Entry | None = None  #: for ``on_checkpoint``: the stored journal entry
    #: the fencing token of this execution of the run: each execution (the
    #: first, a resume, a takeover) claims a greater one; 1 for the first
    token: int | None = None
    #: for run events: the engine executing the run (``host:pid:engine-id``)
    owner: str | None = None
    #: for ``on_step_end``: the attempt the step ended on (1 for the first try);
    #: ``None`` for a stream, or a step with retries that was cancelled
    attempt: int | None = None


@final
class Hooks:
    """The hook methods of an engine, grouped by event, checked once."""

    def __init__(self, hooks: Iterable[object]) -> None:
        self._by_method: dict[str, list[Callable[[HookEvent], Awaitable[Any]]]] = {
            m: [] for m in HOOK_METHODS
        }
        for hook in hooks:
            found = False
            for method in HOOK_METHODS:
                fn = getattr(hook, method, None)
                if fn is None:
                    continue
                if not inspect.iscoroutinefunction(fn):
                    raise UsageError(f"hook {hook!r}: {method} must be an `async def` method")
                self._by_method[method].append(fn)
                found = True
            if not found:
                raise UsageError(
                    f"hook {hook!r} defines none of {', '.join(HOOK_METHODS)}; check the names"
                )
        self.any_step = bool(
            self._by_method["on_step_start"]
            or self._by_method["on_step_end"]
            or self._by_method["on_checkpoint"]
        )

    def has(self, method: str) -> bool:
        return bool(self._by_method[method])

    async def call(self, method: str, event: HookEvent) -> None:
        """Call every hook's *method* in order, even after one raised.

        Every hook sees every event (so each hook's starts and ends match);
        the first error is raised once all were called, later ones are logged.
        """
        first: BaseException | None = None
        for fn in self._by_method[method]:
            try:
                await fn(event)
            except BaseException as exc:
                if first is None:
                    first = exc
                elif not isinstance(exc, trio.Cancelled):
                    log.error(
                        "tether: %s hook error after an earlier one: %r", method, exc, exc_info=exc
                    )
        if first is not None:
            try:
                raise first
            finally:
                first = None
