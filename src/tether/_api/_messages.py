"""The messages a workflow declares: ``@tether.workflow(messages={"approve": bool})``.

Layer: the API of workflow code (``_api``).

A workflow declares the messages it takes, by name and type, checked when it
is defined; ``engine.send`` checks each message against the declaration before
storing it, and ``tether.receive`` takes it (see :mod:`._receive`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from .._codec._values import codec
from .._errors import UsageError
from ..stores._mailbox import check_message_name

__all__ = ("check_messages",)

_NONE: Final[Mapping[str, Any]] = MappingProxyType({})


def check_messages(messages: object) -> Mapping[str, Any]:
    """``@tether.workflow(messages=...)``, validated: a read-only mapping of names to types.

    Raises:
        UsageError: not a mapping, a name that is not 1 to 100 letters,
            digits, ``_``, ``-`` or ``.``, or a type the codec cannot decode into.
    """
    if messages is None:
        return _NONE
    if not isinstance(messages, Mapping):
        raise UsageError(
            "messages= takes a mapping of message names to types, such as "
            f'{{"approve": bool}}, not {messages!r:.100}'
        )
    for name, tp in messages.items():
        check_message_name(name)
        reason = codec.unsupported(tp)
        if reason is not None:
            raise UsageError(f"messages=: message {name!r} cannot be decoded as {tp!r}: {reason}")
    return MappingProxyType(dict(messages))
