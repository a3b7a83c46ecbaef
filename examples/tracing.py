"""Tracing runs with OpenTelemetry: a span per execution and per step.

The runnable companion of docs/how-to/tracing.md. Run it with
``python examples/tracing.py`` (it needs ``pip install -e '.[otel]' opentelemetry-sdk``
and takes under a second). It records spans in memory and prints them as a tree.
"""

from collections import defaultdict
from collections.abc import Sequence

import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import tether
import tether.otel

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))

tracer = provider.get_tracer("shop")
attempts = {"reserve": 0}


@tether.step
async def charge(order: str) -> str:
    if order == "order-2":
        raise ValueError("card declined")
    return f"receipt for {order}"


@tether.step(retries=2)
async def reserve(item: str) -> int:
    attempts["reserve"] += 1
    await trio.sleep(0.2)
    if attempts["reserve"] == 1:
        raise ConnectionError("warehouse busy")
    return 1


@tether.step
async def notify(order: str) -> None:
    with tracer.start_as_current_span("POST /mail"):  # your own span, inside the step's
        await trio.sleep(0.1)


@tether.step
async def ship(order: str) -> str:
    return f"{order} shipped"


@tether.workflow(name="shop.checkout")
async def checkout(order: str) -> str:
    receipt = await charge(order)
    async with tether.parallel() as p:
        p.start_soon(reserve, "lamp")
        p.start_soon(notify, order)
    if not await tether.ask({"receipt": receipt}, bool, key="approve"):
        return "not approved"
    return await ship(order)


async def checkout_with_tracing() -> None:
    hooks = tether.otel.TracingHooks(tracer_provider=provider)
    async with tether.open_engine(tether.MemoryStore(), hooks=[hooks]) as engine:
        try:
            await engine.run(checkout, "order-1", run_id="order-1")
        except tether.Paused as paused:
            print(f"paused, waiting for {paused.requests[0].key}")
        print(await engine.resume("order-1", responses={"approve": True}))
        try:
            await engine.run(checkout, "order-2", run_id="order-2")
        except ValueError as error:
            print(f"order-2 failed: {error}")


def value(span: ReadableSpan, name: str) -> object:
    return (span.attributes or {}).get(name)


def label(span: ReadableSpan) -> str:
    """A span's name, what its tether attributes say, and its error if any."""
    shown = []
    if value(span, "tether.run.outcome") is not None:
        token = f"token {value(span, 'tether.run.token')}"
        shown = [value(span, "tether.run.id"), token, value(span, "tether.run.outcome")]
    elif value(span, "tether.step.outcome") is not None:
        shown = [
            value(span, "tether.step.outcome"),
            f"attempt {value(span, 'tether.step.attempt')}",
        ]
        if value(span, "tether.step.seq") is not None:
            shown.append(f"seq {value(span, 'tether.step.seq')}")
    if span.status.status_code is StatusCode.ERROR:
        shown.append(f"ERROR {span.status.description}")
    return f"{span.name} ({', '.join(map(str, shown))})" if shown else span.name


def print_tree(spans: Sequence[ReadableSpan]) -> None:
    """Print each execution's span and the spans under it (steps in key order)."""
    children: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        if span.parent is not None:
            children[span.parent.span_id].append(span)

    def print_children(span: ReadableSpan, indent: str) -> None:
        assert span.context is not None
        below = sorted(
            children[span.context.span_id], key=lambda s: str(value(s, "tether.step.key"))
        )
        for n, child in enumerate(below):
            last = n == len(below) - 1
            print(f"{indent}{'└── ' if last else '├── '}{label(child)}")
            print_children(child, indent + ("    " if last else "│   "))

    executions = [s for s in spans if s.name.startswith("run ")]
    for execution in sorted(executions, key=lambda s: s.start_time or 0):
        print(label(execution))
        print_children(execution, "")


def print_links(spans: Sequence[ReadableSpan]) -> None:
    run = tether.otel.run_span_context("order-1")
    print(f"trace of run order-1: {trace.format_trace_id(run.trace_id)}")
    for span in spans:
        if span.name.startswith("run ") and value(span, "tether.run.id") == "order-1":
            assert span.context is not None
            same_trace = span.context.trace_id == run.trace_id
            linked = [link.context for link in span.links] == [run]
            token = value(span, "tether.run.token")
            print(f"  execution {token}: in that trace {same_trace}, linked to the run {linked}")


async def main() -> None:
    exporter.clear()
    attempts["reserve"] = 0
    await checkout_with_tracing()
    spans = exporter.get_finished_spans()
    print_tree(spans)
    print_links(spans)


if __name__ == "__main__":
    trio.run(main)
