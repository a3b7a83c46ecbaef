"""tether.otel: a span per run execution and per step, each ended exactly once."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import tether
from tether.otel import TracingHooks, run_span_context
from tether.testing import FaultyStore, Hang

# -- recording spans ---------------------------------------------------------------------


class Ends(SpanProcessor):
    """Counts the starts and ends of every span, by span id."""

    def __init__(self) -> None:
        self.starts: Counter[int] = Counter()
        self.ends: Counter[int] = Counter()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.starts[span.context.span_id] += 1

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.ends[span.context.span_id] += 1


class Tracing:
    """A tracer provider recording into memory, and the hooks that use it."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.ends = Ends()
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.ends)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.hooks = TracingHooks(tracer_provider=self.provider)

    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def runs(self) -> list[ReadableSpan]:
        """The execution spans, in the order they ended."""
        return [s for s in self.spans() if s.name.startswith("run ")]

    def step(self, key: str) -> ReadableSpan:
        """The one span of the step with journal key *key*."""
        found = [s for s in self.spans() if attr(s, "tether.step.key") == key]
        assert len(found) == 1, f"{len(found)} spans for step {key}"
        return found[0]

    def steps(self) -> list[str]:
        return sorted(str(attr(s, "tether.step.key")) for s in self.spans() if is_step(s))

    def check_ended_once(self) -> None:
        assert self.ends.starts, "no span was started"
        assert all(n == 1 for n in self.ends.starts.values())
        assert self.ends.ends == self.ends.starts, "a span was left open, or ended twice"
        assert len(self.spans()) == sum(self.ends.ends.values())


@pytest.fixture
def tracing(caplog: pytest.LogCaptureFixture) -> Iterator[Tracing]:
    """Spans recorded in memory; afterwards, every span started was ended exactly once."""
    recorded = Tracing()
    with caplog.at_level(logging.WARNING):
        yield recorded
    recorded.check_ended_once()
    logged = caplog.get_records("call")
    # The SDK logs a second end() of a span instead of passing it on.
    assert not [r for r in logged if "ended span" in r.getMessage()], "a span ended twice"
    assert not [r for r in logged if r.name == "tether"], "a hook logged an error"


def attr(span: ReadableSpan, name: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(name)


def is_step(span: ReadableSpan) -> bool:
    return span.name.startswith("step ")


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def event_names(span: ReadableSpan) -> list[str]:
    return [e.name for e in span.events]


def checkpoint_seqs(span: ReadableSpan) -> list[int]:
    return [
        int(e.attributes["tether.entry.seq"])  # type: ignore[arg-type]
        for e in span.events
        if e.name == "tether.checkpoint" and e.attributes is not None
    ]


def linked(span: ReadableSpan) -> list[trace.SpanContext]:
    return [link.context for link in span.links]


def hung_store() -> FaultyStore:
    store = FaultyStore(tether.MemoryStore())
    store.inject("append", Hang())
    return store


# -- workflows ---------------------------------------------------------------------------


@tether.step
async def inner(x: int) -> int:
    return x + 1


@tether.step
async def outer(x: int) -> int:
    return 2 * await inner(x)


@tether.step
async def quick(i: int) -> int:
    return i


@tether.workflow
async def nested(x: int) -> int:
    y = await outer(x)
    async with tether.parallel() as p:
        handles = [p.start_soon(quick, i) for i in range(2)]
    return y + sum(h.result for h in handles)


@tether.step(retries=2)
async def always_fails() -> None:
    raise ValueError("card declined")


@tether.workflow
async def failing() -> None:
    await quick(1)
    await always_fails()


@tether.step
async def hangs() -> None:
    await trio.sleep_forever()


@tether.step
async def fails_soon() -> None:
    await trio.sleep(0.1)
    raise ValueError("sibling failed")


@tether.workflow
async def siblings() -> None:
    async with tether.parallel() as p:
        p.start_soon(quick, 1)
        p.start_soon(hangs)
        p.start_soon(fails_soon)


@tether.workflow
async def stuck() -> None:
    await quick(1)
    await hangs()


@tether.step
async def review(n: int) -> bool:
    return await tether.ask({"order": n}, bool)


@tether.step
async def ship(n: int) -> str:
    return f"shipped {n}"


@tether.workflow
async def approval(n: int) -> str:
    await quick(n)
    if await review(n):
        return await ship(n)
    return "rejected"


@tether.workflow
async def fan_out(n: int) -> int:
    async with tether.parallel() as p:
        handles = [p.start_soon(quick, i) for i in range(n)]
    return sum(h.result for h in handles)


# -- one span per execution and per step, nested -------------------------------------------


async def test_success_nests_steps_under_the_execution(tracing: Tracing) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine:
        assert await engine.run(nested, 1, run_id="r") == 5
        info = await engine.get_run("r")
    assert info is not None
    [run] = tracing.runs()
    assert tracing.steps() == ["outer#0", "outer#0/inner#0", "quick#0", "quick#1"]
    # The execution is in the run's own trace, under the context that stands for the run.
    context = run_span_context("r")
    assert trace_id(run) == context.trace_id
    assert parent_id(run) == context.span_id
    assert linked(run) == [context]
    assert {trace_id(s) for s in tracing.spans()} == {context.trace_id}
    # Steps under the execution (parallel() children too), a nested step under its step.
    assert parent_id(tracing.step("outer#0")) == span_id(run)
    assert parent_id(tracing.step("outer#0/inner#0")) == span_id(tracing.step("outer#0"))
    assert parent_id(tracing.step("quick#0")) == span_id(run)
    assert parent_id(tracing.step("quick#1")) == span_id(run)
    assert attr(run, "tether.run.id") == "r"
    assert attr(run, "tether.workflow") == nested.name
    assert attr(run, "tether.run.owner") == engine.owner
    assert attr(run, "tether.run.token") == 1
    assert attr(run, "tether.run.outcome") == "completed"
    assert run.status.status_code is StatusCode.UNSET
    # One checkpoint event per stored entry, with its seq.
    seqs = {e.key: e.seq for e in info.entries}
    for key, seq in seqs.items():
        span = tracing.step(key)
        assert checkpoint_seqs(span) == [seq]
        assert attr(span, "tether.step.seq") == seq
        assert attr(span, "tether.step.outcome") == "completed"
        assert attr(span, "tether.step.attempt") == 1
        assert attr(span, "tether.run.id") == "r"
        assert span.status.status_code is StatusCode.UNSET
    assert sorted(seqs) == tracing.steps()


async def test_a_replayed_step_gets_no_span(tracing: Tracing) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine:
        with pytest.raises(ValueError, match="card declined"):
            await engine.run(failing, run_id="r")
        with pytest.raises(ValueError, match="card declined"):
            await engine.resume("r")
    first, second = tracing.runs()
    # quick#0 was stored by the first execution: the resume replays it, no span
    assert tracing.steps() == ["always_fails#0", "always_fails#0", "quick#0"]
    assert (attr(first, "tether.run.token"), attr(second, "tether.run.token")) == (1, 2)


async def test_failure_is_an_error_on_the_step_and_the_execution(tracing: Tracing) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine:
        with pytest.raises(ValueError, match="card declined"):
            await engine.run(failing, run_id="r")
    [run] = tracing.runs()
    step = tracing.step("always_fails#0")
    assert parent_id(step) == span_id(run)
    assert attr(step, "tether.step.outcome") == "failed"
    assert attr(step, "tether.step.attempt") == 3  # retries=2: three attempts
    assert step.status.status_code is StatusCode.ERROR
    assert step.status.description == "ValueError: card declined"
    assert event_names(step) == ["exception"]
    [exception] = step.events
    assert exception.attributes is not None
    assert exception.attributes["exception.type"] == "ValueError"
    assert attr(run, "tether.run.outcome") == "failed"
    assert run.status.status_code is StatusCode.ERROR
    assert "exception" in event_names(run)
    assert tracing.step("quick#0").status.status_code is StatusCode.UNSET


async def test_sibling_failure_cancels_without_an_error(
    tracing: Tracing, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine:
        with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="sibling failed")):
            await engine.run(siblings, run_id="r")
    assert trio.current_time() == pytest.approx(0.1)
    [run] = tracing.runs()
    assert tracing.steps() == ["fails_soon#0", "hangs#0", "quick#0"]
    for key in tracing.steps():
        assert parent_id(tracing.step(key)) == span_id(run)
    done, hung, failed = (tracing.step(k) for k in ("quick#0", "hangs#0", "fails_soon#0"))
    assert attr(done, "tether.step.outcome") == "completed"
    assert len(checkpoint_seqs(done)) == 1
    assert attr(hung, "tether.step.outcome") == "cancelled"
    assert hung.status.status_code is StatusCode.UNSET
    assert event_names(hung) == []  # a cancellation is not recorded as an exception
    assert attr(failed, "tether.step.outcome") == "failed"
    assert failed.status.status_code is StatusCode.ERROR
    assert attr(run, "tether.run.outcome") == "failed"
    assert run.status.status_code is StatusCode.ERROR


# -- pauses and resumes ---------------------------------------------------------------------


async def test_pause_then_resume_elsewhere_is_linked(tracing: Tracing, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    async with tether.open_engine(tether.SQLiteStore(db), hooks=[tracing.hooks]) as engine:
        with pytest.raises(tether.Paused) as paused:
            await engine.run(approval, 7, run_id="order-7")
        first_owner = engine.owner
    [request] = paused.value.requests
    [first] = tracing.runs()
    assert attr(first, "tether.run.outcome") == "paused"
    assert attr(first, "tether.run.requests") == (request.key,)
    assert first.status.status_code is StatusCode.UNSET  # a pause is not an error
    asked = tracing.step("review#0")
    assert attr(asked, "tether.step.outcome") == "cancelled"  # the pause settled it
    assert parent_id(asked) == span_id(first)
    assert attr(tracing.step("quick#0"), "tether.step.outcome") == "completed"

    # Another engine (another owner) resumes it: a second execution of the same run.
    async with tether.open_engine(tether.SQLiteStore(db), hooks=[tracing.hooks]) as engine:
        assert await engine.resume("order-7", responses={request.key: True}) == "shipped 7"
        second_owner = engine.owner
    [_, second] = tracing.runs()
    context = run_span_context("order-7")
    # Both executions: in one trace, the run's, linked to the same context.
    assert trace_id(first) == trace_id(second) == context.trace_id
    assert parent_id(first) == parent_id(second) == context.span_id
    assert linked(first) == linked(second) == [context]
    assert attr(second, "tether.run.token") == 2
    assert attr(first, "tether.run.owner") == first_owner
    assert attr(second, "tether.run.owner") == second_owner != first_owner
    assert attr(second, "tether.run.outcome") == "completed"
    # quick#0 replayed (no second span); review ran again and ship ran, under the resume.
    steps = [s for s in tracing.spans() if is_step(s)]
    assert [attr(s, "tether.step.key") for s in steps] == [
        "quick#0",
        "review#0",
        "review#0",
        "ship#0",
    ]
    for span in steps[2:]:
        assert parent_id(span) == span_id(second)
        assert attr(span, "tether.step.outcome") == "completed"


# -- the caller's cancellation, with a hung store --------------------------------------------


async def test_caller_cancellation_with_a_hung_store_ends_every_span(
    tracing: Tracing, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(hung_store(), hooks=[tracing.hooks]) as engine:
        with trio.move_on_after(0.2) as scope:
            await engine.run(fan_out, 3, run_id="r")
        assert scope.cancelled_caught
        assert trio.current_time() == 0.2  # prompt
    [run] = tracing.runs()
    assert attr(run, "tether.run.outcome") == "interrupted"
    assert run.status.status_code is StatusCode.UNSET
    assert tracing.steps() == ["quick#0", "quick#1", "quick#2"]
    for key in tracing.steps():
        step = tracing.step(key)
        assert parent_id(step) == span_id(run)
        assert attr(step, "tether.step.outcome") == "cancelled"  # its save never finished
        assert checkpoint_seqs(step) == []


async def test_caller_cancellation_of_a_sequential_run(
    tracing: Tracing, autojump_clock: trio.abc.Clock
) -> None:
    async with tether.open_engine(hung_store(), hooks=[tracing.hooks]) as engine:
        with pytest.raises(trio.TooSlowError):
            await engine.run(nested, 1, run_id="r", timeout=0.5)
    [run] = tracing.runs()
    assert attr(run, "tether.run.outcome") == "interrupted"
    # inner's save hung; inner and outer both end, cancelled, nested as before.
    assert tracing.steps() == ["outer#0", "outer#0/inner#0"]
    assert parent_id(tracing.step("outer#0/inner#0")) == span_id(tracing.step("outer#0"))
    assert {attr(s, "tether.step.outcome") for s in tracing.spans() if is_step(s)} == {"cancelled"}


async def test_engine_cancel_is_an_outcome_not_an_error(
    tracing: Tracing, autojump_clock: trio.abc.Clock
) -> None:
    async with (
        tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine,
        trio.open_nursery() as nursery,
    ):

        async def cancel_soon() -> None:
            await trio.sleep(1.0)
            await engine.cancel("r")

        nursery.start_soon(cancel_soon)
        with pytest.raises(tether.RunCancelledError):
            await engine.run(stuck, run_id="r")
    [run] = tracing.runs()
    assert attr(run, "tether.run.outcome") == "cancelled"
    assert run.status.status_code is StatusCode.UNSET
    assert attr(tracing.step("quick#0"), "tether.step.outcome") == "completed"
    assert attr(tracing.step("hangs#0"), "tether.step.outcome") == "cancelled"


# -- context ---------------------------------------------------------------------------------


async def test_an_execution_joins_the_callers_span(tracing: Tracing) -> None:
    tracer = tracing.provider.get_tracer("app")
    async with tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine:
        with tracer.start_as_current_span("POST /orders") as request:
            await engine.run(nested, 1, run_id="r")
        # Nothing current any more: the hooks restored the caller's context.
        assert not trace.get_current_span().get_span_context().is_valid
    [run] = tracing.runs()
    assert parent_id(run) == request.get_span_context().span_id
    assert trace_id(run) == request.get_span_context().trace_id
    assert linked(run) == [run_span_context("r")]  # still linked to the run


async def test_spans_opened_inside_a_step_are_its_children(tracing: Tracing) -> None:
    tracer = tracing.provider.get_tracer("app")

    @tether.step
    async def fetch() -> int:
        with tracer.start_as_current_span("GET /stock"):
            await trio.lowlevel.checkpoint()
        return 3

    @tether.workflow
    async def uses_fetch() -> int:
        async with tether.parallel() as p:
            h = p.start_soon(fetch)
        with tracer.start_as_current_span("compute"):
            return h.result + await quick(1)

    async with tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine:
        assert await engine.run(uses_fetch, run_id="r") == 4
    [run] = tracing.runs()
    by_name = {s.name: s for s in tracing.spans()}
    assert parent_id(by_name["GET /stock"]) == span_id(by_name["step fetch"])
    assert parent_id(by_name["step fetch"]) == span_id(run)
    assert parent_id(by_name["compute"]) == span_id(run)
    assert parent_id(by_name["step quick"]) == span_id(by_name["compute"])


# -- streams ---------------------------------------------------------------------------------


@tether.stream_step
async def numbers(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await trio.sleep(0.1)
        yield i


@tether.workflow
async def reads(limit: int) -> int:
    total = 0
    async with tether.open_stream(numbers, 3) as items:
        async for i in items:
            total += i
    async with tether.open_stream(numbers, 10) as items:
        async for i in items:
            if i >= limit:
                break
            await quick(i)  # inside the block: the stream's span is current
    return total


async def test_stream_steps(tracing: Tracing, autojump_clock: trio.abc.Clock) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine:
        assert await engine.run(reads, 2, run_id="r") == 3
    [run] = tracing.runs()
    exhausted, closed = tracing.step("numbers#0"), tracing.step("numbers#1")
    assert parent_id(exhausted) == parent_id(closed) == span_id(run)
    assert attr(exhausted, "tether.step.outcome") == "completed"
    assert len(checkpoint_seqs(exhausted)) == 1
    assert attr(closed, "tether.step.outcome") == "closed"  # left early: not an error
    assert closed.status.status_code is StatusCode.UNSET
    assert attr(exhausted, "tether.step.attempt") is None  # streams have no attempts
    for key in ("quick#0", "quick#1"):
        assert parent_id(tracing.step(key)) == span_id(closed)


# -- the hooks never break a run ----------------------------------------------------------------


class BrokenTracer(trace.Tracer):
    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError("tracing backend broke")

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("tracing backend broke")


class BrokenProvider(trace.TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return BrokenTracer()


async def test_a_broken_tracer_never_fails_a_run(caplog: pytest.LogCaptureFixture) -> None:
    hooks = TracingHooks(tracer_provider=BrokenProvider())
    with caplog.at_level(logging.ERROR, logger="tether"):
        async with tether.open_engine(tether.MemoryStore(), hooks=[hooks]) as engine:
            assert await engine.run(nested, 1, run_id="r") == 5
    messages = [r.getMessage() for r in caplog.records if r.name == "tether"]
    assert "tether.otel: on_run_start failed for run r" in messages
    assert "tether.otel: on_step_start failed for outer#0 in run r" in messages
    assert "open_executions=0" in repr(hooks)


# -- the run's span context, and the optional dependency ----------------------------------------


def test_run_span_context_is_derived_from_the_run_id() -> None:
    a, again, b = run_span_context("order-1"), run_span_context("order-1"), run_span_context("x")
    assert a == again
    assert a.trace_id != b.trace_id and a.span_id != b.span_id
    assert a.is_valid and a.is_remote and a.trace_flags.sampled


def test_import_without_opentelemetry() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"  # as if it were not installed
        "import tether\n"
        "print('tether imported')\n"
        "import tether.otel\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout == "tether imported\n"
    assert done.returncode == 1
    assert "ImportError: tether.otel needs the OpenTelemetry API" in done.stderr
    assert "pip install -e '.[otel]'" in done.stderr


@tether.workflow(name="tests.otel.kid")
async def kid(n: int) -> int:
    return await quick(n)


@tether.workflow(name="tests.otel.parent")
async def parent(n: int) -> int:
    return await tether.child(kid, n) + 1


async def test_a_child_run_is_traced_under_its_parent(tracing: Tracing) -> None:
    async with tether.open_engine(tether.MemoryStore(), hooks=[tracing.hooks]) as engine:
        assert await engine.run(parent, 1, run_id="p") == 2
    by_run = {attr(s, "tether.run.id"): s for s in tracing.runs()}
    assert set(by_run) == {"p", "p:child#0"}
    outer, inner = by_run["p"], by_run["p:child#0"]
    # The child's execution nests under its parent's, in the parent's trace, and
    # links to its own run context (so its later executions join it).
    assert parent_id(inner) == span_id(outer)
    assert trace_id(inner) == trace_id(outer)
    assert linked(inner) == [run_span_context("p:child#0")]
