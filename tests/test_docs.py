"""The docs are true: their examples run, their code is real, their links resolve.

- ``examples/tutorial.py``, ``examples/deadlines.py`` and ``examples/streams.py``
  run (in virtual time; ``examples/processes.py``, which starts other
  processes, in real time), and every ```text block of their page is a piece
  of what they print;
- every ```python block of a page with an example appears in it verbatim;
- the ```python blocks of ``how-to/test-a-workflow.md``, together, are a test
  module: they are executed here and their tests collected into this module;
- every other ```python block in ``docs/``, and in ``README.md``, appears verbatim
  in some example (README's first, ``examples/readme.py``, runs here as a user runs
  it);
- every relative link (and its #anchor) in ``docs/`` and ``README.md`` points to
  something in the repository;
- ``docs/index.md`` and README's documentation list link to every page of the
  site's nav (``mkdocs.yml``);
- ``examples/shop``, a project of its own, knows the markers tether's
  commands use (``pytest -m "not slow"`` works there).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
import trio
import trio.testing

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"

#: pages told by a runnable example: every ```python block is part of it
PAIRED = {
    "tutorial.md": "tutorial.py",
    "how-to/deadlines-and-cancellation.md": "deadlines.py",
    "how-to/human-input.md": "approval.py",
    "how-to/streams.md": "streams.py",
    "how-to/several-processes.md": "processes.py",
    "how-to/scale-out.md": "scale_out.py",
    "how-to/schedules.md": "schedules.py",
    "how-to/change-a-workflow.md": "change_workflow.py",
    "how-to/store-your-own-types.md": "money.py",
    "how-to/tracing.md": "tracing.py",
    "how-to/child-runs.md": "children.py",
    "how-to/timers-and-retries.md": "timers.py",
    "how-to/benchmark-your-workflow.md": "bench.py",
    "how-to/messages.md": "messages.py",
    "how-to/tenants.md": "tenants.py",
}
#: examples that wait for other processes, so run on the real clock
REAL_TIME = frozenset({"processes.py", "scale_out.py", "messages.py"})
#: pages whose ```python blocks, in order, are a pytest module run from here
EXECUTED = "how-to/test-a-workflow.md"

PYTHON = frozenset({"python", "py", "python3"})


@attrs.frozen
class Block:
    page: Path
    lang: str
    line: int  # the line of the block's first code line in the page
    text: str


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, in order."""
    found: list[Block] = []
    lang: str | None = None
    start = 0
    body: list[str] = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if lang is None:
            if line.startswith("```"):
                lang, start, body = line[3:].strip(), number + 1, []
        elif line.startswith("```"):
            found.append(Block(page, lang, start, "".join(f"{b}\n" for b in body)))
            lang = None
        else:
            body.append(line)
    assert lang is None, f"{page}: a code fence opened at line {start - 1} is never closed"
    return found


def python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in PYTHON]


def pages() -> list[Path]:
    found = sorted(DOCS.rglob("*.md"))
    assert found, f"no pages under {DOCS}"
    return found


def page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def load_example(name: str) -> Iterator[ModuleType]:
    """Import ``examples/<name>`` afresh (its module state starts clean)."""
    path = EXAMPLES / name
    module_name = f"_tether_example_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and type hints look it up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[module_name]


# -- the examples run and print what their pages show -----------------------------------


async def _within(seconds: float, afn: Callable[[], Awaitable[object]]) -> None:
    """``await afn()``; a hang fails after *seconds* (the processes it started are killed)."""
    with trio.fail_after(seconds):
        await afn()


@pytest.mark.parametrize(("page", "example"), sorted(PAIRED.items()))
def test_example_prints_what_its_page_shows(
    page: str, example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for module in load_example(example):
        if example in REAL_TIME:
            trio.run(_within, 60.0, module.main)
        else:
            # Virtual time: the example's sleeps and timeouts take no real time.
            trio.run(module.main, clock=trio.testing.MockClock(autojump_threshold=0))
    printed = capsys.readouterr().out
    shown = [b for b in blocks(DOCS / page) if b.lang == "text"]
    assert shown, f"{page} shows no output (```text blocks)"
    for block in shown:
        assert block.text in printed, (
            f"{page}:{block.line}: this output is not what {example} prints:\n"
            f"{block.text}\n--- it prints:\n{printed}"
        )


def test_tutorial_charges_once() -> None:
    for module in load_example("tutorial.py"):
        trio.run(module.main, clock=trio.testing.MockClock(autojump_threshold=0))
        assert module.charges == ["order-1"]
        assert module.stock == {"lamp": 8}


def test_deadlines_example_is_prompt() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)
    for module in load_example("deadlines.py"):
        trio.run(module.main, clock=clock)
    # Each wait is a deadline, a sleep or save_timeout, never a hang or the
    # default save_timeout: 0.3 + 0.5, 0.3 + 0.5, 0.2, 0.3 + 0.1 + 0.5, 0.5.
    assert clock.current_time() == pytest.approx(3.2)


# -- code blocks are real ----------------------------------------------------------------


@pytest.mark.parametrize(("page", "example"), sorted(PAIRED.items()))
def test_page_code_is_verbatim_in_its_example(page: str, example: str) -> None:
    source = (EXAMPLES / example).read_text(encoding="utf-8")
    code = python_blocks(DOCS / page)
    assert code, f"{page} has no ```python blocks"
    for block in code:
        assert block.text in source, (
            f"{page}:{block.line}: this block is not verbatim in examples/{example}:\n{block.text}"
        )


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_python_block_is_checked(page: Path) -> None:
    name = page_id(page)
    if name in PAIRED or name == EXECUTED:
        return  # checked by their own tests
    sources = [p.read_text(encoding="utf-8") for p in sorted(EXAMPLES.rglob("*.py"))]
    for block in python_blocks(page):
        assert any(block.text in s for s in sources), (
            f"{name}:{block.line}: this block is in no file under examples/:\n{block.text}"
        )


def test_readme_python_blocks_are_examples() -> None:
    readme = ROOT / "README.md"
    code = python_blocks(readme)
    assert code, "README.md has no ```python block"
    sources = [p.read_text(encoding="utf-8") for p in sorted(EXAMPLES.rglob("*.py"))]
    for block in code:
        assert any(block.text in s for s in sources), (
            f"README.md:{block.line}: this block is in no file under examples/:\n{block.text}"
        )
    assert code[0].text in (EXAMPLES / "readme.py").read_text(encoding="utf-8")


def test_readme_first_example_runs_as_is(tmp_path: Path) -> None:
    # As a user runs it, twice, in a directory of their own: the second run finds the
    # finished run in runs.db and returns its stored result.
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "readme.py")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stdout) == (0, "(1250, 'shelf-o-1')\n"), done.stderr
    assert (tmp_path / "runs.db").exists()


def test_code_fences_are_labelled() -> None:
    for page in pages():
        for block in blocks(page):
            assert block.lang, f"{page_id(page)}:{block.line - 1}: label the code fence"


# -- the testing how-to is a test module ------------------------------------------------


def _executed_page_module() -> ModuleType:
    """Execute the page's ```python blocks as one module.

    Lines keep their numbers in the page, so a traceback points into the page.
    """
    page = DOCS / EXECUTED
    lines = [""] * len(page.read_text(encoding="utf-8").splitlines())
    code = python_blocks(page)
    assert code, f"{EXECUTED} has no ```python blocks"
    for block in code:
        for offset, text in enumerate(block.text.splitlines()):
            lines[block.line - 1 + offset] = text
    module = ModuleType("_tether_docs_test_a_workflow")
    module.__file__ = str(page)
    sys.modules[module.__name__] = module
    exec(compile("\n".join(lines) + "\n", str(page), "exec"), module.__dict__)
    return module


def _collect(module: ModuleType) -> dict[str, Any]:
    """The page's public names (its tests and fixtures among them) for this module."""
    here = globals()
    found: dict[str, Any] = {}
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        assert here.get(name, obj) is obj, f"{EXECUTED} defines {name!r}, which test_docs uses"
        found[name] = obj
    return found


_PAGE_TESTS = _collect(_executed_page_module())
globals().update(_PAGE_TESTS)


def test_testing_page_defines_tests() -> None:
    tests = sorted(n for n in _PAGE_TESTS if n.startswith("test_"))
    assert len(tests) >= 5, tests
    assert {"engine", "fresh_world"} <= set(_PAGE_TESTS)


# -- links -------------------------------------------------------------------------------

_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def _outside_fences(page: Path) -> list[str]:
    out: list[str] = []
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def _prose(page: Path) -> str:
    """The page without code blocks and code spans (links there are not links)."""
    return "\n".join(_CODE_SPAN.sub("", line) for line in _outside_fences(page))


def _anchors(page: Path) -> set[str]:
    """GitHub-style anchors of the page's headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _outside_fences(page):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def _check_relative_links(page: Path) -> int:
    """Check that the page's relative links resolve inside the repository; count them."""
    name = page.relative_to(ROOT).as_posix()
    text = _prose(page)
    checked = 0
    for target in _LINK.findall(text) + _REF_LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            assert not target.startswith("file:"), f"{name}: link {target!r} is a local file"
            continue
        path, _, anchor = target.partition("#")
        assert not path.startswith("/"), f"{name}: link {target!r} is an absolute path"
        dest = (page.parent / path).resolve() if path else page
        assert dest.is_relative_to(ROOT), f"{name}: link {target!r} leaves the repository"
        assert dest.exists(), f"{name}: link {target!r}: {dest} does not exist"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), (
                f"{name}: link {target!r}: no heading #{anchor} in {dest.name}"
            )
        checked += 1
    return checked


def test_relative_links_resolve() -> None:
    checked = sum(_check_relative_links(page) for page in pages())
    assert checked >= 10, f"only {checked} relative links found in docs/"


def nav_pages() -> list[str]:
    """The pages of the site's nav (``mkdocs.yml``), in order, as paths under ``docs/``."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config.split("\nnav:\n", 1)[1]
    return re.findall(r"^\s+-\s+(?:[^:\n]+:\s+)?([\w./-]+\.md)\s*$", nav, re.M)


def _links_from(page: Path, text: str) -> set[Path]:
    """Where the relative links of *text* (on *page*) point, resolved."""
    targets = (t.partition("#")[0] for t in _LINK.findall(text))
    return {(page.parent / t).resolve() for t in targets if t and not re.match(r"[a-z]+:", t)}


def _nav_target(page: str) -> Path:
    """The file a nav page is made from: under ``docs/``, or (a page the example hook
    generates, ``examples/index.md``) the folder of examples it lists."""
    source = DOCS / page
    return source if source.exists() else (ROOT / page).parent


def test_the_home_page_and_readme_list_every_page_of_the_nav() -> None:
    pages = [p for p in nav_pages() if p != "index.md"]
    assert {"how-to/messages.md", "reference/cli.md", "examples/index.md"} <= set(pages)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = readme.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    for name, linked in (
        ("docs/index.md", _links_from(DOCS / "index.md", _prose(DOCS / "index.md"))),
        ("README.md's documentation list", _links_from(ROOT / "README.md", listed)),
    ):
        missing = [p for p in pages if _nav_target(p) not in linked]
        assert not missing, f"{name} does not link to these pages of mkdocs.yml's nav: {missing}"


def test_readme_links_stay_in_the_repository() -> None:
    readme = ROOT / "README.md"
    assert _check_relative_links(readme) >= 2, "README.md should link to the docs"
    # Nothing outside the repository is named either, linked or not.
    assert "../" not in readme.read_text(encoding="utf-8"), "README.md names a path above it"


# -- the example project -----------------------------------------------------------------


def test_the_example_project_knows_the_slow_marker() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "not slow", "--collect-only", "-q"],
        cwd=EXAMPLES / "shop",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "nknown marker" not in output, output
    collected = re.search(r"(\d+) tests? collected", output)
    assert collected and int(collected.group(1)) >= 20, output
