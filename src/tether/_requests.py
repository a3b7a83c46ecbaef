"""Human input: pending requests and the ``Paused`` outcome."""

from __future__ import annotations

from typing import Any, final

import attrs

from ._codec_json import dumps, loads

__all__ = ("Paused", "Request", "request_from_json", "request_to_json")


@final
@attrs.frozen(kw_only=True)
class Request:
    """A question a paused run is waiting on, made by :func:`tether.ask`.

    Answer it with ``engine.resume(run_id, responses={request.key: value})``.
    """

    key: str  #: the ask's key, fixed at call time like a step key: ``path/ask#n``
    payload: Any  #: what was asked, as JSON values (dicts, lists, str, numbers, ...)
    response_type: str  #: the name of the type the response must decode into, e.g. ``bool``


def request_to_json(request: Request) -> str:
    """The stored form of *request*: canonical JSON text."""
    return dumps(
        {"key": request.key, "payload": request.payload, "response_type": request.response_type}
    )


def request_from_json(text: str) -> Request:
    """Parse a stored request strictly.

    Raises:
        ValueError: the text is not a request record (the caller names the run).
    """
    data = loads(text)
    if not isinstance(data, dict) or set(data) != {"key", "payload", "response_type"}:
        raise ValueError(f"not a request record: {text:.120}")
    key, type_name = data["key"], data["response_type"]
    if not isinstance(key, str) or not key or not isinstance(type_name, str):
        raise ValueError(f"request record has a bad key or response_type: {text:.120}")
    return Request(key=key, payload=data["payload"], response_type=type_name)


class Paused(Exception):
    """The run is waiting for human input; raised by ``engine.run``/``engine.resume``.

    Every live task of the run was finished or waiting in :func:`tether.ask`,
    so the run *settled*: completed steps' saves drained, the pending
    requests were stored with the run (status ``paused``), and nothing is
    left running. Resume it with
    ``engine.resume(paused.run_id, responses={request.key: value, ...})``;
    answering only some requests pauses it again on the rest.

    Not a :class:`tether.TetherError`: a pause is an outcome, not a failure.
    """

    def __init__(self, run_id: str, requests: tuple[Request, ...]) -> None:
        keys = ", ".join(r.key for r in requests)
        super().__init__(f"run {run_id!r} is paused, waiting for responses to: {keys}")
        self.run_id = run_id
        self.requests = requests

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.requests))
