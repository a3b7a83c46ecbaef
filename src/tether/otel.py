"""OpenTelemetry tracing: a span per run execution and per step.

Layer: tracing (``tether.otel``).

``tether.open_engine(store, hooks=[tether.otel.TracingHooks()])`` records,
through the OpenTelemetry API, one span for each *execution* of a run (the
first one, each resume, each takeover) and one for each step (and stream
step) that executes in it. Steps replayed from the journal execute nothing
and get no span. Needs the ``otel`` extra: ``pip install -e '.[otel]'``.

Where the spans go:

- An execution's span is a child of the span that is current where
  ``engine.run``/``engine.resume`` was called, if there is one. Otherwise it
  belongs to the run's own trace, whose id is derived from the run id, so
  that every execution of one run (in any process, days apart) shows in one
  trace. Either way it carries a link to :func:`run_span_context`, which is
  the same for every execution of the run: that is how a resume is linked to
  the executions before it.
- A step's span is a child of the span current where the step was called:
  the execution's, or the enclosing step's for a nested step. A
  ``parallel()`` block has no span of its own, so its children are children
  of the span around the block.
- Each span is current while its step (or the workflow) runs, so spans that
  your own code or instrumented libraries open inside a step are children of
  the step's span. A stream step's span is current in its ``open_stream``
  block (and its producer's task), so steps called there are its children.

Attributes, events and status are listed in ``docs/how-to/tracing.md``.
Every span started ends exactly once, whatever ends the step or the run: a
result, an error, a sibling's failure, a pause, a cancel, the caller's
cancellation. Only an execution cut short by what ends the process
(``KeyboardInterrupt``, ``SystemExit``) leaves its own span open: the
engine calls no ``on_run_end`` then.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from contextvars import Token
from typing import final

import trio

from ._api._timers import Waiting
from ._core._hooks import HookEvent
from ._errors import Paused, RunCancelledError, StreamClosed
from ._version import __version__

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
except ImportError as exc:  # pragma: no cover - the test imports it in a process without it
    raise ImportError(
        "tether.otel needs the OpenTelemetry API, which is not installed: "
        "pip install -e '.[otel]' in tether's clone"
    ) from exc

__all__ = ("TracingHooks", "run_span_context")

log = logging.getLogger("tether")


def run_span_context(run_id: str) -> trace.SpanContext:
    """The span context every execution span of run *run_id* links to.

    Derived from the run id alone (a hash), so any process computes the same
    one. Its ``trace_id`` is the trace the run's executions belong to when
    nothing else is current where they are called; to find a run's trace in
    a backend, search for ``trace.format_trace_id(run_span_context(run_id).trace_id)``.
    No span with this span id is ever recorded: it stands for the run itself.
    """
    digest = hashlib.sha256(b"tether run\0" + run_id.encode()).digest()
    # A zero id is invalid in OpenTelemetry; one in 2**64 runs gets a 1 instead.
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace.SpanContext(
        trace_id,
        span_id,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )


def _is_cancellation(exc: BaseException) -> bool:
    """Whether *exc* is trio's ``Cancelled``, or a group of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cancellation(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def _run_outcome(exc: BaseException | None) -> str:
    # As the run is stored afterwards; "interrupted": nothing was stored (the
    # caller cancelled, the lease was lost) and the run stays resumable.
    if exc is None:
        return "completed"
    if isinstance(exc, Paused):
        return "paused"
    if isinstance(exc, Waiting):
        return "waiting"  # parked by a worker on its timers
    if isinstance(exc, RunCancelledError):
        return "cancelled"
    if isinstance(exc, Exception):
        return "failed"
    return "interrupted"


def _step_outcome(exc: BaseException | None) -> str:
    if exc is None:
        return "completed"
    if isinstance(exc, StreamClosed):
        return "closed"  # the consumer left the stream early, without an error
    if isinstance(exc, Exception):
        return "failed"
    if _is_cancellation(exc):
        return "cancelled"  # a sibling failed, the run paused or was cancelled, the caller left
    return "interrupted"


@final
class _Open:
    """A started span and the context token that made it current."""

    __slots__ = ("span", "token")

    def __init__(self, span: trace.Span, token: Token[Context]) -> None:
        self.span = span
        self.token = token


@final
class _Execution:
    __slots__ = ("run", "steps")

    def __init__(self, run: _Open | None) -> None:
        self.run = run  # None: steps whose execution span could not be started
        self.steps: dict[str, _Open] = {}


@final
class TracingHooks:
    """Hooks that trace runs with OpenTelemetry: ``open_engine(store, hooks=[TracingHooks()])``.

    One object can serve several engines. Its methods never raise into the
    engine and never wait: an error inside them (a broken exporter, say) is
    logged on the ``tether`` logger and the run goes on.

    Args:
        tracer_provider: where the spans go; by default the global one
            (``opentelemetry.trace.set_tracer_provider``), looked up when a
            span starts, so the hooks can be made before it is set.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("tether", __version__, tracer_provider=tracer_provider)
        # Open spans by (run id, fencing token): two executions of one run
        # (a takeover while the old one unwinds) never share an entry.
        self._executions: dict[tuple[str, int | None], _Execution] = {}

    def __repr__(self) -> str:
        return f"<tether.otel.TracingHooks open_executions={len(self._executions)}>"

    # -- runs ---------------------------------------------------------------------------

    async def on_run_start(self, event: HookEvent) -> None:
        """Start the execution's span and make it current for the workflow."""
        try:
            self._start_run(event)
        except Exception:
            log.exception("tether.otel: on_run_start failed for run %s", event.run_id)

    async def on_run_end(self, event: HookEvent) -> None:
        """End the execution's span with the run's outcome."""
        try:
            self._end_run(event)
        except Exception:
            log.exception("tether.otel: on_run_end failed for run %s", event.run_id)

    def _start_run(self, event: HookEvent) -> None:
        key = (event.run_id, event.token)
        stale = self._executions.pop(key, None)
        if stale is not None:  # never expected: a start without its end
            self._end_all(stale, "the execution started again")
        run_ctx = run_span_context(event.run_id)
        parent = otel_context.get_current()
        if not trace.get_current_span(parent).get_span_context().is_valid:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(run_ctx), parent)
        attributes: dict[str, str | int] = {
            "tether.run.id": event.run_id,
            "tether.workflow": event.workflow,
        }
        if event.owner is not None:
            attributes["tether.run.owner"] = event.owner
        if event.token is not None:
            attributes["tether.run.token"] = event.token
        span = self._tracer.start_span(
            f"run {event.workflow}",
            context=parent,
            attributes=attributes,
            links=[trace.Link(run_ctx)],
            record_exception=False,
            set_status_on_exception=False,
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        self._executions[key] = _Execution(_Open(span, token))

    def _end_run(self, event: HookEvent) -> None:
        execution = self._executions.pop((event.run_id, event.token), None)
        if execution is None:
            return  # ended already (an end hook called again after a cancellation)
        # Every step ended before its run does; a step span left open means a
        # hook was missed: end it rather than leak it.
        self._end_all(execution, "the run ended first")
        opened = execution.run
        if opened is None:
            return
        span = opened.span
        try:
            otel_context.detach(opened.token)
            exc = event.exception
            outcome = _run_outcome(exc)
            span.set_attribute("tether.run.outcome", outcome)
            if isinstance(exc, Paused):
                keys: Sequence[str] = [r.key for r in exc.requests]
                span.set_attribute("tether.run.requests", keys)
            if outcome == "failed" and exc is not None:
                _record_error(span, exc)
        finally:
            span.end()  # whatever failed above: a span is never left open

    def _end_all(self, execution: _Execution, why: str) -> None:
        for opened in execution.steps.values():
            # (their context tokens belong to tasks that are gone: not detached)
            opened.span.set_attribute("tether.step.outcome", "unknown")
            opened.span.add_event("tether.unended", {"tether.reason": why})
            opened.span.end()
        execution.steps.clear()

    # -- steps --------------------------------------------------------------------------

    async def on_step_start(self, event: HookEvent) -> None:
        """Start the step's span under the current one and make it current for the step."""
        try:
            self._start_step(event)
        except Exception:
            log.exception(
                "tether.otel: on_step_start failed for %s in run %s", event.key, event.run_id
            )

    async def on_checkpoint(self, event: HookEvent) -> None:
        """Add a ``tether.checkpoint`` event, with the stored entry's seq, to the step's span."""
        try:
            self._checkpoint(event)
        except Exception:
            log.exception(
                "tether.otel: on_checkpoint failed for %s in run %s", event.key, event.run_id
            )

    async def on_step_end(self, event: HookEvent) -> None:
        """End the step's span with its outcome."""
        try:
            self._end_step(event)
        except Exception:
            log.exception(
                "tether.otel: on_step_end failed for %s in run %s", event.key, event.run_id
            )

    def _start_step(self, event: HookEvent) -> None:
        assert event.key is not None
        execution = self._executions.get((event.run_id, event.token))
        if execution is None:
            execution = self._executions[(event.run_id, event.token)] = _Execution(None)
        stale = execution.steps.pop(event.key, None)
        if stale is not None:  # never expected: a start without its end
            stale.span.end()
        parent = otel_context.get_current()
        if not trace.get_current_span(parent).get_span_context().is_valid and execution.run:
            parent = trace.set_span_in_context(execution.run.span, parent)
        span = self._tracer.start_span(
            f"step {event.name}",
            context=parent,
            attributes={
                "tether.run.id": event.run_id,
                "tether.workflow": event.workflow,
                "tether.step.key": event.key,
                "tether.step.name": event.name,
            },
            record_exception=False,
            set_status_on_exception=False,
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        execution.steps[event.key] = _Open(span, token)

    def _checkpoint(self, event: HookEvent) -> None:
        execution = self._executions.get((event.run_id, event.token))
        opened = None if execution is None or event.key is None else execution.steps.get(event.key)
        entry = event.entry
        if opened is None or entry is None:
            return
        attributes: dict[str, str | int] = {
            "tether.entry.kind": entry.kind.value,
            "tether.entry.status": entry.status.value,
            "tether.entry.attempt": entry.attempt,
        }
        if entry.seq is not None:
            attributes["tether.entry.seq"] = entry.seq
            opened.span.set_attribute("tether.step.seq", entry.seq)
        opened.span.add_event("tether.checkpoint", attributes)

    def _end_step(self, event: HookEvent) -> None:
        execution = self._executions.get((event.run_id, event.token))
        if execution is None or event.key is None:
            return
        opened = execution.steps.pop(event.key, None)
        if opened is None:
            return
        if execution.run is None and not execution.steps:
            del self._executions[(event.run_id, event.token)]
        span = opened.span
        try:
            otel_context.detach(opened.token)
            exc = event.exception
            outcome = _step_outcome(exc)
            span.set_attribute("tether.step.outcome", outcome)
            if event.attempt is not None:
                span.set_attribute("tether.step.attempt", event.attempt)
            if outcome == "failed" and exc is not None:
                _record_error(span, exc)
        finally:
            span.end()


def _record_error(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc, escaped=True)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__qualname__}: {exc}"))
