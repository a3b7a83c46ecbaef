"""What the command line is given: modules, ``MODULE:WORKFLOW``, arguments, answers.

Layer: the command line (``_cli``).

Everything here is checked before anything executes or any store is opened;
what is wrong is a usage error (:class:`BadUsage`, exit status 2), naming
what and why: a module that does not import, an attribute that is missing
or not a workflow, an argument that does not decode into its parameter's
type (each is decoded by the workflow's annotations: JSON when it fits,
else the plain text), an answer given twice for one request.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import sys
import typing
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from .._api._workflow import Workflow
from .._codec._converter import describe
from .._codec._json import parse_value
from .._codec._values import codec
from .._errors import CodecError
from ..stores._flow import Queue
from ._exits import BadUsage

__all__ = ("decode_args", "import_modules", "parse_responses", "resolve_workflow")


def import_modules(names: Iterable[str]) -> None:
    """Import the modules that define workflows (the current directory first on the path).

    Raises:
        BadUsage: a module cannot be imported (names it and the reason).
    """
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise BadUsage(f"cannot import module {name!r}: {exc}") from exc


def resolve_workflow(target: str) -> Workflow[..., Any]:
    """``MODULE:NAME`` as a workflow object.

    Raises:
        BadUsage: not ``MODULE:NAME``, not importable, no such attribute, or
            not a ``@tether.workflow``.
    """
    wf: Workflow[..., Any] = _resolve(
        target, Workflow, "WORKFLOW", "workflow", "shop.flows:checkout"
    )
    return wf


def resolve_queue(target: str) -> Queue:
    """``MODULE:NAME`` as a :class:`tether.Queue` the module defines.

    Raises:
        BadUsage: as :func:`resolve_workflow`, for a ``tether.Queue``.
    """
    queue: Queue = _resolve(target, Queue, "QUEUE", "queue", "shop.flows:emails")
    return queue


def _resolve(target: str, kind: type[Any], placeholder: str, noun: str, example: str) -> Any:
    """``MODULE:NAME``, the module imported, as an object of *kind* (a *noun*).

    Raises:
        BadUsage: not ``MODULE:NAME``, not importable, no such attribute, or
            not of *kind*.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BadUsage(f"{target!r} is not MODULE:{placeholder} (for example {example})")
    import_modules([module_name])
    module = sys.modules[module_name]
    if not hasattr(module, attr):
        found = sorted(n for n, v in vars(module).items() if isinstance(v, kind))
        there = f"; its {noun}s: {', '.join(found)}" if found else f" (it defines no {noun})"
        raise BadUsage(f"module {module_name!r} has no attribute {attr!r}{there}")
    value = getattr(module, attr)
    if not isinstance(value, kind):
        wanted = "a @tether.workflow" if kind is Workflow else f"a tether.{kind.__name__}"
        raise BadUsage(f"{target} is {type(value).__name__} {value!r:.80}, not {wanted}")
    return value


def parse_aware_time(text: str) -> datetime:
    """``--not-before``: an ISO 8601 time with its UTC offset (``Z`` is UTC).

    Raises:
        argparse.ArgumentTypeError: not such a time, or without an offset.
    """
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (e.g. 2026-12-24T09:00:00+01:00)"
        ) from None
    if value.utcoffset() is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset: add one (e.g. +00:00 or Z), so every machine "
            "reads the same moment"
        )
    return value


def decode_args(wf: Workflow[..., Any], target: str, texts: Sequence[str]) -> tuple[Any, ...]:
    """The workflow's arguments from the command line, each decoded into its parameter's type.

    Each text is decoded strictly into the parameter's annotation, as JSON
    when it parses as JSON and fits (``42``, ``true``, ``{"a": 1}``), else
    as the plain text (so ``1001`` is a ``str`` for a ``str`` parameter).

    Raises:
        BadUsage: too many or too few arguments, or one that does not decode:
            names the parameter, its type and why.
    """
    try:
        wf.signature.bind(tuple(texts), {})
    except TypeError as exc:
        raise BadUsage(f"{target} takes ({_parameters(wf)}): {exc}") from None
    types = typing.get_args(wf.signature.args_type(len(texts)))
    names = _positional_names(wf, len(texts))
    return tuple(
        _decode_arg(target, i, name, tp, text)
        for i, (name, tp, text) in enumerate(zip(names, types, texts, strict=True), 1)
    )


def _parameters(wf: Workflow[..., Any]) -> str:
    """The workflow's parameters as ``name: type``, its types resolved."""
    try:
        hints = typing.get_type_hints(wf.fn)
    except Exception:  # unresolvable annotations: shown as written
        hints = {}
    shown = []
    for p in inspect.signature(wf.fn).parameters.values():
        star = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        tp = f": {describe(hints[p.name])}" if p.name in hints else ""
        shown.append(f"{star}{p.name}{tp}")
    return ", ".join(shown)


def _positional_names(wf: Workflow[..., Any], n: int) -> list[str]:
    names: list[str] = []
    for p in inspect.signature(wf.fn).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            names += [f"*{p.name}"] * (n - len(names))
    return names[:n]


def _decode_arg(target: str, i: int, name: str, tp: Any, text: str) -> Any:
    what = f"argument {i} of {target}, parameter {name!r}"
    candidates = [text]
    with contextlib.suppress(ValueError):
        candidates.insert(0, json.loads(text))
    first: CodecError | None = None
    for candidate in candidates:
        try:
            return codec.structure(candidate, tp, what=what)
        except CodecError as exc:
            first = first or exc
    # The JSON reading's error, when it is JSON (it says more than the text's).
    given = f" (given as {text!r})" if len(candidates) > 1 else ""
    raise BadUsage(f"{first}{given}")


def parse_responses(pairs: Sequence[str], given_as: str = "--respond") -> dict[str, Any]:
    """``KEY=VALUE`` responses by key (values JSON, or else plain text), as *given_as*
    (``--respond``, or ``tether respond``'s arguments) gives them.

    Raises:
        BadUsage: not ``KEY=VALUE``, or a key answered twice (the last one
            silently winning could turn an approval into a rejection).
    """
    responses: dict[str, Any] = {}
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadUsage(f"{given_as} takes KEY=VALUE, not {pair!r}")
        if key in given:
            raise BadUsage(
                f"{given_as} gives {key!r} twice ({given[key]!r} and {pair!r}); "
                "respond to each request once"
            )
        given[key] = pair
        responses[key] = parse_value(value)
    return responses
