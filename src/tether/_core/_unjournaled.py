"""Unjournaled awaits: the workflow task blocking outside any tether call warns.

Layer: the kernel (``_core``).

The engine awaits a workflow body (and each ``parallel()`` branch) through
:func:`watched`, a thin awaitable between the body's coroutine and trio that
forwards what the body yields and what trio sends. Trio's tasks block in one
way only: by yielding the object :func:`trio.lowlevel.wait_task_rescheduled`
yields (a bare checkpoint yields another, which is not looked at). When the
body yields that, the chain of suspended coroutines below it is looked at:
if a frame of tether's workflow API (``tether._api``: a step,
``parallel()``, ``ask``, ``tether.sleep``, ``receive``, ``child``, a
stream, ...) is on it, a tether call is in progress and the wait is
journaled. Otherwise the body awaits something tether does not journal (an
undecorated ``async def`` doing I/O, ``trio.sleep``, a socket, a plain trio
nursery, an engine or store call): its result would not be journaled and it
would run again on resume, so :class:`~tether.UnjournaledAwaitWarning` is
emitted, located at the innermost frame of the user's code on the chain
(not trio's, tether's, the standard library's or an installed package's).
A wait the task's cancellation ends at once (a cancelled checkpoint) is not
a block.

Nothing is marked by the tether calls themselves, and nothing is looked at
unless the task blocks: a step that does not block costs the forwarding of
its one checkpoint (``benchmarks/step_overhead.py`` measures it). To tools
that walk a task's awaits (``Task.iter_await_frames``, ``tether bench``) the
wrapper shows the body's own frame and awaits.

When the warnings filter turns the warning into an error, the body is
cancelled (by a cancel scope of the wrapper's own, so trio aborts the wait
as it does any cancelled wait, and saves in flight drain) and the warning is
raised where the body ended: the workflow (or branch) raises it, and the run
fails with it. The scope costs memory for as long as the body runs (trio's
cancel status and its sets: about 600 bytes per held run), so it is entered
only when a filter could make the warning an error as the body starts (tether's
pytest plugin sets one); should a filter make it an error later, the body
runs on, and the warning is raised once it has returned.

Nothing is allocated for a block inside a tether call either: the chain is
followed through the coroutines' code objects, and frames (which a coroutine
keeps once asked for one) are only looked at to word a warning.
"""

from __future__ import annotations

import gc
import math
import os
import sysconfig
import types
import warnings
from collections.abc import Awaitable, Generator
from typing import Any, Final, TypeVar, final

import trio

from .._errors import UnjournaledAwaitWarning

__all__ = ("enable", "watched")

T = TypeVar("T")


def _blocking_trap() -> type:
    """The type of what trio's tasks yield to block (``wait_task_rescheduled``'s trap)."""
    # Driven by hand, outside any task, for what it yields first: it never blocks here.
    coro = trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)  # noqa: ASYNC105
    try:
        return type(coro.send(None))
    finally:
        coro.close()


_BLOCKING: Final = _blocking_trap()

_enabled = True


def enable(on: bool) -> None:
    """Watch workflow tasks (the default), or not (to measure what watching costs)."""
    global _enabled
    _enabled = on


def watched(awaitable: Awaitable[T], what: str) -> Awaitable[T]:
    """*awaitable* (a workflow body's coroutine), watched for unjournaled awaits.

    *what* names the task in the warning (``workflow 'orders.place'``).
    Awaiting the result is awaiting *awaitable*, whose cancellation and
    exceptions it passes on unchanged. When the warnings filter makes
    :class:`~tether.UnjournaledAwaitWarning` an error, the body is cancelled
    at the unjournaled await and the warning raised once it has unwound
    (unless what ends it is not an ``Exception``: a cancellation from
    outside, a KeyboardInterrupt). That holds when the error filter is in
    place as the body starts; a filter added while it runs takes effect when
    it returns (it then fails with the warning). Anything but a coroutine is
    returned as it is, unwatched.
    """
    if not _enabled or type(awaitable) is not types.CoroutineType:
        return awaitable
    return _Watched(awaitable, what)


@final
class _Watched(Generator[Any, Any, T]):
    """Drives a body's coroutine for trio, looking at each block (see the module doc).

    Inside a cancel scope of its own, entered when it is awaited if the
    warning may be an error (:func:`_may_raise`): cancelled when it is one,
    so that trio aborts the wait; the error is raised instead of what the
    body ended with.
    """

    __slots__ = ("_coro", "_failure", "_scope", "_warned", "_what")

    def __init__(self, coro: types.CoroutineType[Any, Any, T], what: str) -> None:
        self._coro = coro  # (its send not kept bound: 72 bytes per held run)
        self._what = what
        #: entered by __await__ (when the warning may be an error), until left
        self._scope: trio.CancelScope | None = None
        self._failure: Exception | None = None  # the warning, raised as an error
        self._warned: set[tuple[str, int]] | None = None  # where it warned already

    def __await__(self) -> Generator[Any, Any, T]:
        if _may_raise():
            scope = trio.CancelScope()
            scope.__enter__()
            self._scope = scope
        return self

    # What tools that walk a task's awaits look at: the body's frame and awaits.
    @property
    def cr_frame(self) -> types.FrameType | None:
        return self._coro.cr_frame

    @property
    def cr_await(self) -> Any:
        return self._coro.cr_await

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        try:
            trap = self._coro.send(value)
        except BaseException as exc:
            value = None  # (an outcome that holds exc: no cycle through this frame)
            self._end(exc)
            raise
        if type(trap) is _BLOCKING and self._failure is None:
            self._check()
        return trap

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """What trio throws in (only what it cannot send): to the body."""
        try:
            trap = self._coro.throw(typ if val is None else val)
        except BaseException as exc:
            del typ, val, tb  # (no cycle through this frame)
            self._end(exc)
            raise
        if type(trap) is _BLOCKING and self._failure is None:
            self._check()
        return trap

    def close(self) -> None:
        """Close the body (as when whatever awaits this is closed), and leave the scope."""
        try:
            self._coro.close()
        finally:
            scope, self._scope = self._scope, None
            if scope is not None:
                scope.__exit__(None, None, None)

    def _check(self) -> None:
        frames = _chain(self._coro)
        if not frames or trio.current_effective_deadline() == -math.inf:
            return  # in a tether call; or cancelled: the wait ends at once
        if self._warned is None:
            self._warned = set()
        failure = _warn(frames, self._what, self._warned)
        if failure is not None:
            self._failure = failure
            if self._scope is not None:
                self._scope.cancel()  # trio aborts this wait when it sees it

    def _end(self, exc: BaseException) -> None:
        """The body ended with *exc* (``StopIteration``: it returned): leave the scope.

        Raises the warning instead, when it is an error and *exc* an
        ``Exception`` (its cause), ``StopIteration`` or the cancellation the
        warning caused; else returns, and *exc* is raised.
        """
        failure, self._failure = self._failure, None
        scope, self._scope = self._scope, None
        cause: BaseException | None = None
        try:
            if scope is None:  # not entered: nothing was cancelled
                if failure is None or not isinstance(exc, Exception):
                    return
                if not isinstance(exc, StopIteration):
                    cause = exc
            elif isinstance(exc, StopIteration):
                scope.__exit__(None, None, None)
            elif scope.__exit__(type(exc), exc, exc.__traceback__):
                pass  # the scope took its own Cancelled
            elif failure is None or not isinstance(exc, Exception):
                return
            else:
                cause = exc  # what the body raised while it unwound
        except Exception as remaining:  # a group, once the scope took its Cancelled out
            if failure is None:
                raise
            cause = remaining
        if failure is not None:
            try:
                raise failure from cause
            finally:
                del failure, cause


#: The warnings filters :func:`_may_raise` last looked at: the list, its length, its
#: first entry (a filter added goes first, or changes the length), and the answer.
_looked_at: tuple[object, int, object, bool] = (None, -1, None, True)


def _may_raise() -> bool:
    """Whether a warnings filter could make :class:`~tether.UnjournaledAwaitWarning` an error.

    Any filter with the action ``error`` for its class or a base of it counts,
    whatever filter comes first: a watched body that warns without one is not
    cancelled at the wait (see the module doc).
    """
    global _looked_at
    filters = warnings.filters
    first = filters[0] if filters else None
    seen, length, seen_first, answer = _looked_at
    if seen is filters and length == len(filters) and seen_first is first:
        return answer
    answer = any(f[0] == "error" and issubclass(UnjournaledAwaitWarning, f[2]) for f in filters)
    _looked_at = (filters, len(filters), first, answer)
    return answer


# -- where the task blocked -----------------------------------------------------------

#: Whose code a frame runs: the user's (tether's own command line, dashboard,
#: benchmarks and testing count as that: they hold workflows too), a
#: library's, tether's internals (engine, stores, kernel, codec, worker: an
#: await of those is not journaled), or tether's workflow API.
_USER, _LIBRARY, _INTERNAL, _API = range(4)

_PACKAGE: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORKFLOW_API: Final = os.path.join(_PACKAGE, "_api", "")
_INTERNALS: Final = tuple(
    os.path.join(_PACKAGE, name, "") for name in ("_core", "_engine", "_worker", "stores", "_codec")
)
_LIBRARIES: Final = tuple(
    sorted(
        {
            os.path.join(path, "")
            for name in ("stdlib", "platstdlib", "purelib", "platlib")
            if (path := sysconfig.get_paths().get(name))
        }
        | {os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(trio.__file__))), "")}
    )
)
_kinds: dict[str, int] = {}


def _kind(filename: str) -> int:
    """Whose code *filename* is (see :data:`_USER`)."""
    kind = _kinds.get(filename)
    if kind is None:
        if filename.startswith(_WORKFLOW_API):
            kind = _API
        elif filename.startswith(_INTERNALS):
            kind = _INTERNAL
        elif filename.startswith(_PACKAGE + os.sep):
            kind = _USER
        elif filename.startswith(_LIBRARIES) or filename.startswith("<"):
            kind = _LIBRARY
        else:
            kind = _USER
        _kinds[filename] = kind
    return kind


def _driven(obj: object) -> object | None:
    """What an awaitable that is not a coroutine or generator drives, if it shows it.

    An async generator's ``asend``/``athrow`` and a coroutine's ``__await__``
    hide what they drive; their referents show it.
    """
    found = [
        r
        for r in gc.get_referents(obj)
        if isinstance(r, types.CoroutineType | types.GeneratorType | types.AsyncGeneratorType)
    ]
    return found[0] if len(found) == 1 else None


def _chain(coro: object) -> list[types.FrameType] | None:
    """The frames of the suspended chain below *coro*, outermost first.

    ``None`` when a tether call is in progress (a code object of the
    workflow API is on it) or the chain cannot be followed. It ends at
    trio's trap, or at the first frame of tether's internals (an engine
    call, not journaled). The chain is followed by code objects: a frame is
    only asked for (a coroutine keeps the frame it was asked for) when the
    chain is the user's.
    """
    links: list[object] = []
    obj: object | None = coro
    while obj is not None:
        if isinstance(obj, types.CoroutineType):
            code, after = obj.cr_code, obj.cr_await
            done = not (obj.cr_suspended or obj.cr_running)
        elif isinstance(obj, types.GeneratorType):
            code, after = obj.gi_code, obj.gi_yieldfrom
            done = not (obj.gi_suspended or obj.gi_running)
        elif isinstance(obj, types.AsyncGeneratorType):
            code, after = obj.ag_code, obj.ag_await
            done = obj.ag_frame is None  # (rare: asked for only here)
        else:
            obj = _driven(obj)
            if obj is None:
                return None  # opaque: cannot tell
            continue
        if done:  # (its frame is gone)
            break
        kind = _kind(code.co_filename)
        if kind == _API:
            return None
        links.append(obj)
        if kind == _INTERNAL:
            break
        obj = after
    return [_frame_of(link) for link in links]


def _frame_of(obj: Any) -> types.FrameType:
    """The frame of the suspended coroutine, generator or async generator *obj*."""
    if isinstance(obj, types.CoroutineType):
        frame = obj.cr_frame
    elif isinstance(obj, types.GeneratorType):
        frame = obj.gi_frame
    else:
        frame = obj.ag_frame
    assert frame is not None
    return frame


def _warn(
    frames: list[types.FrameType], what: str, warned: set[tuple[str, int]]
) -> Exception | None:
    """Warn that a task blocked outside any tether call, in the chain *frames*; the warning,
    when it is an error.

    Once per location in *warned* (those of this execution of the body).
    """
    users = [i for i, f in enumerate(frames) if _kind(f.f_code.co_filename) == _USER]
    at = users[-1] if users else 0
    frame = frames[at]
    location = (frame.f_code.co_filename, frame.f_lineno)
    if location in warned:
        return None
    warned.add(location)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    if at:
        body = frames[0]
        where += (
            f" (in {frame.f_code.co_qualname}(), awaited at "
            f"{body.f_code.co_filename}:{body.f_lineno})"
        )
    instead = "use tether.sleep() instead of trio.sleep()"
    if at + 1 < len(frames):
        awaited = frames[at + 1]
        name = awaited.f_code.co_qualname
        package = str(awaited.f_globals.get("__name__", "")).partition(".")[0]
        where += f", awaiting {name}() of {package or 'a library'}"
        if package == "trio" and name.startswith("NurseryManager."):
            instead = "use tether.parallel() instead of a trio nursery"
    message = (
        f"{what} blocked outside any tether call, at {where}: what it awaits is not "
        "journaled and runs again when the run resumes; make it a @tether.step (an async "
        f"def doing I/O), or {instead}"
    )
    globals_ = frame.f_globals
    try:
        warnings.warn_explicit(
            message,
            UnjournaledAwaitWarning,
            frame.f_code.co_filename,
            frame.f_lineno,
            module=globals_.get("__name__"),
            registry=globals_.setdefault("__warningregistry__", {}),
            module_globals=globals_,
        )
    except Exception as exc:  # the filter made it an error
        return exc
    return None
