"""Workflows that store whatever strings a test gives them, for the rendering tests.

:func:`hostile` journals its argument, a step result, a failed attempt's
error, a response and a message (each a string the test chooses: control
characters, lone surrogates, markup); :func:`failing` fails with the error
it is given; :func:`timed` sleeps 5 s, then retries a step twice with a
backoff of 5 s each time; :func:`quick` retries a step once, at once;
:func:`one_step` journals one entry.
"""

from __future__ import annotations

import tether

#: the tokens of the :func:`fail_once` calls that failed already
_failed: set[str] = set()
#: the attempts :func:`flaky` made, by token
_attempts: dict[str, int] = {}


@tether.step
async def echo(value: str) -> str:
    return value


@tether.step(retry=tether.Retry(attempts=2, initial=0.0, jitter=False))
async def fail_once(token: str, message: str) -> None:
    """Fails with *message* the first time it is called with *token*."""
    if token not in _failed:
        _failed.add(token)
        raise RuntimeError(message)


@tether.workflow(messages={"note": str})
async def hostile(arg: str, result: str, error: str, token: str) -> list[str]:
    """Pauses, asking with *arg*; resumed with a response, takes the message ``note``."""
    echoed = await echo(result)
    await fail_once(token, error)
    response = await tether.ask(arg, str)
    note = await tether.receive("note", str)
    return [arg, echoed, response, note]


@tether.workflow
async def failing(error: str) -> None:
    raise RuntimeError(error)


@tether.step(retry=tether.Retry(attempts=3, initial=5.0, backoff=1.0, jitter=False))
async def flaky(token: str) -> int:
    """Fails on its first two attempts (for *token*); the third returns 3."""
    _attempts[token] = _attempts.get(token, 0) + 1
    if _attempts[token] < 3:
        raise ConnectionError(f"attempt {_attempts[token]} failed")
    return _attempts[token]


@tether.workflow
async def timed(token: str) -> int:
    await tether.sleep(5)
    return await flaky(token)


@tether.step(retries=1)
async def hasty(token: str) -> int:
    """Fails on its first attempt (for *token*); retried at once, the second returns 2."""
    _attempts[token] = _attempts.get(token, 0) + 1
    if _attempts[token] < 2:
        raise ConnectionError("first attempt failed")
    return _attempts[token]


@tether.workflow
async def quick(token: str) -> int:
    return await hasty(token)


@tether.workflow
async def one_step(value: str) -> str:
    return await echo(value)
