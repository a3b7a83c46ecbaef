"""Workflow and step definitions (``@tether.workflow``, ``@tether.step``,
``@tether.stream_step``), and the registry of workflow names.
Layer: the API of workflow code (``_api``).
"""

from __future__ import annotations

import collections.abc as abc
import inspect
import math
import re
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, ClassVar, Final, Generic, NoReturn, ParamSpec, TypeVar, final, overload

import attrs

from .._codec._values import Signature, codec
from .._core import _frame
from .._errors import UsageError, WorkflowNotFoundError
from ._messages import check_messages
from ._retry import Retry
from ._steps import call_step as _call_step

__all__ = (
    "Step",
    "StreamStep",
    "Workflow",
    "encode_args",
    "lookup_workflow",
    "step",
    "stream_step",
    "workflow",
)

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

#: Every workflow defined in this process, by name, then by version (``None``:
#: unversioned). Several versions of one name are registered side by side.
registry: dict[str, dict[str | None, Workflow[..., Any]]] = {}

#: A workflow version: 1 to 100 letters, digits, ``.``, ``_``, ``+`` or ``-``.
_VERSION: Final = re.compile(r"[A-Za-z0-9._+-]{1,100}")


def _check_async(fn: object, decorator: str) -> None:
    if not callable(fn):
        raise UsageError(f"@{decorator} decorates an async function, not {fn!r}")
    if not inspect.iscoroutinefunction(fn):
        kind = (
            "an async generator (decorate it with @tether.stream_step)"
            if inspect.isasyncgenfunction(fn)
            else "not an async function"
        )
        raise UsageError(f"@{decorator} needs an `async def` function; {fn!r} is {kind}")


@final
@attrs.frozen(eq=False)
class Step(Generic[P, R_co]):
    """A journaled unit of work; made by :func:`tether.step`.

    Awaiting ``step(*args)`` inside a run executes it once: its result is
    encoded, stored, and returned; on resume a stored result is returned
    without executing the function again.
    """

    fn: Callable[P, Awaitable[R_co]]
    name: str
    signature: Signature = attrs.field(repr=False)
    retries: int = 0
    #: marks steps for ``parallel().start_soon`` (see ``_parallel.STEP_MARKER``)
    _tether_is_step: ClassVar[bool] = True
    timeout: float | None = None
    key: str | None = None  #: a fixed key set by :meth:`with_key`
    #: the retry policy (``@tether.step(retry=...)``); ``None`` with ``retries`` alone
    retry: Retry | None = None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R_co]:
        return _call_step(self, args, kwargs, self.key)

    def with_key(self, key: str) -> Step[P, R_co]:
        """This step with an explicit journal key instead of ``name#n``.

        ``await charge.with_key("charge-main")(order)``. The key is used as it
        is under the parent's path; it must be unique within the parent.
        """
        return attrs.evolve(self, key=_frame.check_key(key))


@final
@attrs.frozen(eq=False)
class StreamStep(Generic[P, R_co]):
    """A journaled async generator; made by :func:`tether.stream_step`.

    Consume it with ``async with tether.open_stream(stream, *args) as items:``.
    Its items are encoded as they are produced; once it is exhausted they are
    stored together, and on resume they are replayed without running the
    generator again.
    """

    fn: Callable[P, AsyncIterator[R_co]]
    name: str
    signature: Signature = attrs.field(repr=False)
    key: str | None = None  #: a fixed key set by :meth:`with_key`

    @property
    def item_type(self) -> Any:
        """The type items are decoded into: ``T`` of the ``AsyncIterator[T]`` annotation.

        ``AsyncGenerator[T, None]`` and ``AsyncIterable[T]`` work the same way;
        without an annotation items may be only JSON primitives.
        """
        tp = self.signature.return_type
        if typing.get_origin(tp) in (abc.AsyncIterator, abc.AsyncGenerator, abc.AsyncIterable):
            args = typing.get_args(tp)
            return args[0] if args else Any
        return Any

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> NoReturn:
        raise UsageError(
            f"stream step {self.name!r} is consumed with "
            f"`async with tether.open_stream({self.name}, ...) as items:`, not called"
        )

    def with_key(self, key: str) -> StreamStep[P, R_co]:
        """This stream step with an explicit journal key instead of ``name#n``."""
        return attrs.evolve(self, key=_frame.check_key(key))


@final
@attrs.frozen(eq=False)
class Workflow(Generic[P, R_co]):
    """A durable async function; made by :func:`tether.workflow`.

    Run it with :meth:`Engine.run <tether.Engine.run>`. Awaiting it directly
    inside another workflow runs it inline: its steps journal into the calling
    run.
    """

    fn: Callable[P, Awaitable[R_co]]
    name: str
    signature: Signature = attrs.field(repr=False)
    #: the version stored with each run it starts (``None``: unversioned); a
    #: run resumes only where its workflow's name *and* version are registered
    version: str | None = None
    #: the messages its runs take (``engine.send``, ``tether.receive``): name -> type
    #: (read-only)
    messages: Mapping[str, Any] = attrs.field(default=check_messages(None), kw_only=True)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R_co]:
        return self.fn(*args, **kwargs)


def _make_step(
    fn: Callable[P, Awaitable[R]],
    name: str | None,
    retries: int,
    timeout: float | None,
    retry: Retry | None = None,
) -> Step[P, R]:
    _check_async(fn, "tether.step")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise UsageError(f"retries must be a non-negative int, not {retries!r}")
    if retry is not None and not isinstance(retry, Retry):
        raise UsageError(f"retry= takes a tether.Retry(...) policy, not {retry!r}")
    if retry is not None and retries:
        raise UsageError(
            f"@tether.step takes retries= (immediate retries) or retry= (a policy), not "
            f"both; for {retries} immediate retries with a policy, use "
            f"retry=tether.Retry(attempts={retries + 1}, initial=0)"
        )
    if timeout is not None and not (
        isinstance(timeout, int | float) and timeout > 0 and not math.isnan(timeout)
    ):
        raise UsageError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    name = fn.__name__ if name is None else name
    if not isinstance(name, str) or not name or "/" in name or "#" in name:
        raise UsageError(f"a step name is a non-empty string without '/' or '#', not {name!r}")
    return Step(fn, name, Signature(fn), retries, timeout, retry=retry)


@overload
def step(fn: Callable[P, Awaitable[R]], /) -> Step[P, R]: ...
@overload
def step(
    *,
    name: str | None = None,
    retries: int = 0,
    timeout: float | None = None,
    retry: Retry | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Step[P, R]]: ...
def step(
    fn: Callable[P, Awaitable[R]] | None = None,
    /,
    *,
    name: str | None = None,
    retries: int = 0,
    timeout: float | None = None,
    retry: Retry | None = None,
) -> Step[P, R] | Callable[[Callable[P, Awaitable[R]]], Step[P, R]]:
    """Mark an ``async def`` as a journaled step.

    Args:
        name: the name used in journal keys (default: the function's name).
        retries: how many times to re-run the step at once after it raises
            an ``Exception`` (cancellation is never retried). Default 0.
            Failed attempts are not journaled.
        timeout: seconds each attempt may take; an attempt that overruns is
            cancelled and fails with :exc:`trio.TooSlowError` (retried if
            ``retries`` or ``retry`` allows). Default: no limit.
        retry: a :class:`tether.Retry` policy instead of ``retries``:
            attempts, backoff, jitter, which errors. Each failed attempt is
            journaled with its error and when the next one is due, and the
            backoff is a durable timer: a crash or a restart neither resets
            it nor retries early, and under a worker a long one parks the run.

    Raises:
        UsageError: an invalid option, or both ``retries`` and ``retry``.

    The return annotation is the type the result is decoded into on replay;
    an unannotated step may return only JSON primitives (dict, list, str,
    int, float, bool, None).
    """
    if fn is not None:
        return _make_step(fn, name, retries, timeout, retry)
    return lambda f: _make_step(f, name, retries, timeout, retry)


def _make_stream_step(fn: Callable[P, AsyncIterator[R]], name: str | None) -> StreamStep[P, R]:
    if not inspect.isasyncgenfunction(fn):
        raise UsageError(
            f"@tether.stream_step needs an async generator function (`async def` with "
            f"`yield`), not {fn!r}"
        )
    name = fn.__name__ if name is None else name
    if not isinstance(name, str) or not name or "/" in name or "#" in name:
        raise UsageError(f"a step name is a non-empty string without '/' or '#', not {name!r}")
    return StreamStep(fn, name, Signature(fn))


@overload
def stream_step(fn: Callable[P, AsyncIterator[R]], /) -> StreamStep[P, R]: ...
@overload
def stream_step(
    *, name: str | None = None
) -> Callable[[Callable[P, AsyncIterator[R]]], StreamStep[P, R]]: ...
def stream_step(
    fn: Callable[P, AsyncIterator[R]] | None = None, /, *, name: str | None = None
) -> StreamStep[P, R] | Callable[[Callable[P, AsyncIterator[R]]], StreamStep[P, R]]:
    """Mark an async generator function as a journaled streaming step.

    Args:
        name: the name used in journal keys (default: the function's name).

    Consume it inside a run with ``async with tether.open_stream(s, *args) as
    items: async for item in items: ...``. The return annotation,
    ``AsyncIterator[T]`` (or ``AsyncGenerator[T, None]``), gives the type
    items are decoded into on replay.
    """
    if fn is not None:
        return _make_stream_step(fn, name)
    return lambda f: _make_stream_step(f, name)


def _make_workflow(
    fn: Callable[P, Awaitable[R]],
    name: str | None,
    version: str | None,
    messages: Mapping[str, Any] | None = None,
) -> Workflow[P, R]:
    _check_async(fn, "tether.workflow")
    name = f"{fn.__module__}.{fn.__qualname__}" if name is None else name
    if not isinstance(name, str) or not name:
        raise UsageError(f"a workflow name is a non-empty string, not {name!r}")
    if version is not None and (not isinstance(version, str) or not _VERSION.fullmatch(version)):
        raise UsageError(
            f"a workflow version is a string of 1 to 100 letters, digits, '.', '_', '+' or "
            f"'-' (or None), not {version!r:.100}"
        )
    wf = Workflow(fn, name, Signature(fn), version, messages=check_messages(messages))
    registry.setdefault(name, {})[version] = wf
    return wf


@overload
def workflow(fn: Callable[P, Awaitable[R]], /) -> Workflow[P, R]: ...
@overload
def workflow(
    *,
    name: str | None = None,
    version: str | None = None,
    messages: Mapping[str, Any] | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]: ...
def workflow(
    fn: Callable[P, Awaitable[R]] | None = None,
    /,
    *,
    name: str | None = None,
    version: str | None = None,
    messages: Mapping[str, Any] | None = None,
) -> Workflow[P, R] | Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]:
    """Mark an ``async def`` as a workflow and register it by name (and version).

    Args:
        name: the name stored with each run, used by ``engine.resume`` to find
            the code again (default: ``"module.qualname"``). Give long-lived
            workflows an explicit name so that moving the code does not strand
            stored runs. A later definition with the same name and version
            replaces the earlier one in the registry.
        version: a version stored with each run this definition starts, such
            as ``"2"`` (1 to 100 letters, digits, ``.``, ``_``, ``+``, ``-``).
            Default ``None``: unversioned, as every run was before versions
            existed. A run resumes only where its name *and* version are
            registered, so several versions of one name can be registered
            side by side, each resuming its own runs, and workers claim only
            runs of the versions they serve.
        messages: the messages its runs take, by name and type, such as
            ``{"approve": bool, "item": Item}``: ``engine.send(run_id, name,
            value)`` refuses any other name, and any value that does not
            encode and decode back strictly as the type; ``tether.receive(name,
            type)`` takes them in the run. Names are 1 to 100 letters, digits,
            ``_``, ``-`` or ``.``; types, anything the codec decodes.

    Arguments are stored with the run and decoded by the parameter
    annotations when the run is resumed; the return annotation decodes the
    stored result.

    Raises:
        UsageError: *fn* is not an ``async def``, or *name*, *version* or
            *messages* is invalid.
    """
    if fn is not None:
        return _make_workflow(fn, name, version, messages)
    return lambda f: _make_workflow(f, name, version, messages)


def _version_text(version: str | None) -> str:
    return "unversioned" if version is None else f"version {version!r}"


def lookup_workflow(name: str, version: str | None = None) -> Workflow[..., Any]:
    """The registered workflow called *name*, of *version* (``None``: the unversioned one).

    Raises:
        WorkflowNotFoundError: nothing is registered under that name and
            version (the message names the versions that are registered).
    """
    versions = registry.get(name, {})
    try:
        return versions[version]
    except KeyError:
        pass
    if not versions:
        raise WorkflowNotFoundError(
            f"no workflow named {name!r} is registered in this process; import the module "
            "that defines it (with @tether.workflow) before resuming"
        ) from None
    registered = ", ".join(_version_text(v) for v in _sorted_versions(versions))
    wanted = "" if version is None else f", version={version!r}"
    raise WorkflowNotFoundError(
        f"workflow {name!r} is registered in this process, but not {_version_text(version)} "
        f"(registered: {registered}); define it with @tether.workflow(name={name!r}{wanted}) "
        "beside the others to resume runs started under it"
    ) from None


def _sorted_versions(versions: Iterable[str | None]) -> list[str | None]:
    """*versions* in a stable order for messages: unversioned first, then by text."""
    return sorted(versions, key=lambda v: (v is not None, v or ""))


def registered_names() -> frozenset[str]:
    """The names of every workflow defined in this process."""
    return frozenset(name for name, versions in registry.items() if versions)


def registered_keys() -> frozenset[tuple[str, str | None]]:
    """``(name, version)`` of every workflow defined in this process."""
    return frozenset((name, v) for name, versions in registry.items() for v in versions)


def encode_args(wf: Workflow[..., Any], args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """``wf(*args)``'s arguments as stored (JSON text), and decoded back from it (a copy).

    :func:`tether.schedule` checks a schedule's arguments with it, at definition.

    Raises:
        UsageError: the arguments do not fit *wf*'s parameters.
        CodecError: an argument cannot be encoded, or decoded back.
    """
    try:
        wf.signature.bind(args, {})
    except TypeError as exc:
        raise UsageError(f"workflow {wf.name}: {exc}") from None
    text, decoded = codec.snapshot(
        args, wf.signature.args_type(len(args)), what=f"arguments of workflow {wf.name}"
    )
    return text, tuple(decoded)
