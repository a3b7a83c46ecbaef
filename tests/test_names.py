"""One name per concept: the retired names stay out of the docs, the CLI and the dashboard.

- **messages**, not signals: no ``signals=`` / ``@workflow(signals``, and no
  "signal" or "signals" for a run's messages. A POSIX signal keeps its name
  (SIGTERM, SIGINT, SIGKILL, SIGSTOP, ...; a "signal handler",
  ``trio.open_signal_receiver``, "POSIX signal"), and in code blocks only
  the retired API is looked for, so ``signal.SIGTERM`` stays;
- **requests and responses**: ``tether.ask`` makes a request and you
  *respond*: the dashboard's button says "Respond", never "Answer", and the
  CLI's help never says "answer";
- ``tether.receive(name, response_type)``, as ``tether.ask``: no ``tp=``.

The docs are ``docs/**/*.md`` and ``README.md``; the CLI help is every
``tether`` command's ``--help``, from the parser ``tether`` itself uses.
"""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

import tether
from tether._cli._main import _parser
from tether._ui._app import dashboard_app, open_dashboard

from . import _dashboard_flows as flows

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: the retired API, looked for everywhere, code blocks included
_RETIRED_API = re.compile(
    r"\bsignals\s*="  # @tether.workflow(signals=...)
    r"|@(?:tether\.)?workflow\(\s*signals"
    r"|\.signals\b"  # Workflow.signals (case-sensitive: signal.Signals is POSIX)
    r"|\btether\.signals?\b"
    r"|\b(?:how-to|examples)/signals\.(?:md|py)\b"
    r"|\breceive\([^)]*\btp\s*="  # receive(..., tp=...)
)
#: the word itself, looked for in prose
_SIGNAL_WORD = re.compile(r"\bsignals?\b", re.IGNORECASE)
#: where a line's "signal" is a POSIX signal
_POSIX = re.compile(
    r"\bSIG[A-Z]{2,}\b"  # SIGTERM, SIGINT, SIGKILL, SIGSTOP, SIGCONT, ... (upper case)
    r"|(?i:\bsignal handlers?\b)"
    r"|\bopen_signal_receiver\b"
    r"|(?i:\bPOSIX signals?\b)"
)
#: the dashboard's old button, or the CLI's old verb for responding
_ANSWER_BUTTON = re.compile(r"\bAnswer\b|\banswer button\b|\*\*answer\*\*", re.IGNORECASE)
_ANSWER_BUTTON_CASED = re.compile(r"\bAnswer\b")
_ANSWER_WORD = re.compile(r"\banswer(?:s|ed|ing)?\b", re.IGNORECASE)

_FENCE = re.compile(r"^```")
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def doc_files() -> list[Path]:
    found = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
    assert len(found) > 10, found
    return found


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """The lines outside code fences, code spans removed, with their numbers."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield number, _CODE_SPAN.sub("", line)


def retired_in_docs(text: str) -> list[str]:
    """What *text* (Markdown) says with a retired name: ``line: what``."""
    found = [
        f"{text.count(chr(10), 0, m.start()) + 1}: {m.group()!r}"
        for m in _RETIRED_API.finditer(text)
    ]
    for number, line in _prose_lines(text):
        if _SIGNAL_WORD.search(line) and not _POSIX.search(line):
            found.append(f"{number}: 'signal' for a message: {line.strip()!r}")
        if _ANSWER_BUTTON_CASED.search(line) or re.search(r"\banswer button\b", line, re.I):
            found.append(f"{number}: 'Answer' for responding: {line.strip()!r}")
    return found


def retired_in_help(text: str) -> list[str]:
    """What a command's help says with a retired name."""
    found = [m.group() for m in _RETIRED_API.finditer(text)]
    for line in text.splitlines():
        if _SIGNAL_WORD.search(line) and not _POSIX.search(line):
            found.append(f"'signal' for a message: {line.strip()!r}")
        if _ANSWER_WORD.search(line) or _ANSWER_BUTTON.search(line):
            found.append(f"'answer' for responding: {line.strip()!r}")
    return found


# -- the patterns themselves ----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "@tether.workflow(signals={'scan': Scan})",
        "@workflow(signals={'scan': Scan})",
        "Declare them with `signals=`.",
        "wf.signals is a mapping",
        "See [signals](../how-to/signals.md).",
        "### Signals",
        "Send a running workflow signals from any process.",
        "A signal wakes the waiting receive.",
        "scan = await tether.receive('scan', tp=Scan)",
        "Click **Answer** to resume the run.",
        "## Answer a request",
    ],
)
def test_the_patterns_find_each_retired_name(text: str) -> None:
    assert retired_in_docs(text), text


@pytest.mark.parametrize(
    "text",
    [
        "SIGTERM to `tether worker` drains it.",
        "a.send_signal(signal.SIGKILL)",
        "with trio.open_signal_receiver(signal.SIGTERM) as signals:",
        "```python\nasync for _ in signals:\n    break\n```",
        "Python's signal handler runs in the main thread.",
        "A POSIX signal stops the process.",
        "```python\nname = signal.Signals(signum).name\n```",
        "@tether.workflow(messages={'scan': Scan})",
        "scan = await tether.receive('scan', response_type=Scan)",
        "The right answer is that A's body ran once.",
        "Respond to the request; a response that does not decode is refused.",
    ],
)
def test_the_patterns_leave_other_meanings_alone(text: str) -> None:
    assert not retired_in_docs(text), text


# -- docs ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", doc_files(), ids=_name)
def test_the_docs_use_the_current_names(path: Path) -> None:
    found = retired_in_docs(path.read_text(encoding="utf-8"))
    assert not found, f"{_name(path)} uses retired names:\n" + "\n".join(found)


def test_the_messages_pages_have_their_name() -> None:
    assert (DOCS / "how-to" / "messages.md").is_file()
    assert (ROOT / "examples" / "messages.py").is_file()
    assert not (DOCS / "how-to" / "signals.md").exists()
    assert not (ROOT / "examples" / "signals.py").exists()
    assert "how-to/messages.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


# -- the API ---------------------------------------------------------------------------


def test_receive_takes_response_type_where_ask_does() -> None:
    receive = list(inspect.signature(tether.receive).parameters.values())
    ask = list(inspect.signature(tether.ask).parameters.values())
    assert [p.name for p in receive[:2]] == ["name", "response_type"]
    assert ask[1].name == "response_type"
    assert receive[1].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert "messages" in inspect.signature(tether.workflow).parameters
    assert "signals" not in inspect.signature(tether.workflow).parameters


# -- the command line -----------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> Iterator[Any]:
    """*parser* and every (sub)command parser below it, with the words that name it."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                yield from _commands(sub, (*words, word))


def command_helps() -> dict[str, str]:
    parser, _ = _parser()
    helps = {" ".join(words): sub.format_help() for words, sub in _commands(parser, ("tether",))}
    assert {"tether resume", "tether worker", "tether send", "tether ui"} <= set(helps)
    assert "tether runs show" in helps and "tether bench steps" in helps
    return helps


@pytest.mark.parametrize(
    ("command", "text"), [pytest.param(c, t, id=c) for c, t in sorted(command_helps().items())]
)
def test_the_cli_help_uses_the_current_names(command: str, text: str) -> None:
    found = retired_in_help(text)
    assert not found, f"`{command} --help` uses retired names:\n" + "\n".join(found)


def test_the_cli_help_says_respond() -> None:
    helps = command_helps()
    assert "respond to the request KEY" in " ".join(helps["tether resume"].split())
    assert "respon" in helps["tether ui"]


def test_one_grace_default() -> None:
    worker = _parser()[1]["worker"]
    cli = worker.get_default("grace")
    assert cli == inspect.signature(tether.open_worker).parameters["grace"].default


# -- the dashboard --------------------------------------------------------------------


class _Visible(HTMLParser):
    """The text a page shows (not its style or script), and the text of its buttons."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.buttons: list[str] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in {"button", "style", "script"}:
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if "style" in self._open or "script" in self._open:
            return
        self.text.append(data)
        if "button" in self._open and data.strip():
            self.buttons.append(data.strip())


async def test_the_run_page_of_a_paused_run_says_respond(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    await flows.seed(tether.SQLiteStore(db))
    token = "test-token-0123456789"
    async with open_dashboard(
        tether.SQLiteStore(db), shown=f"sqlite:{db}", token=token, modules=[flows]
    ) as dash:
        transport = httpx.ASGITransport(app=dashboard_app(dash))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8700") as http:
            await http.get("/", params={"token": token})  # the cookie: forms are offered
            page = await http.get("/run", params={"id": flows.RUNS["paused"]})
            svg = await http.get("/run/timeline.svg", params={"id": flows.RUNS["paused"]})
    assert page.status_code == 200
    shown = _Visible()
    shown.feed(page.text)
    assert "Respond" in shown.buttons, shown.buttons
    assert "Answer" not in shown.buttons, shown.buttons
    visible = " ".join(shown.text)
    assert not _ANSWER_WORD.search(visible), visible
    assert svg.status_code == 200
    legend = re.findall(r"<text[^>]*>([^<]*)</text>", svg.text)
    assert "answer" not in legend, legend
