"""MkDocs hooks: the runnable examples, published as pages of the site.

The pages link to the examples as files of the repository
(``../examples/tutorial.py``), so the links work on a checkout and on a code
host. The site has no such files: this hook adds a page per example (and
one per example project, such as ``examples/shop/``) showing its source, and
points those links at the pages. An index, ``examples/index.md``, lists them.
"""

from __future__ import annotations

import ast
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
#: files of an example project shown on its page, in this order
PROJECT_FILES = ("*.toml", "*.py", "**/*.py")
#: the same links test_docs.py checks: ``[text](target)``, maybe ``<target>``
_LINK = re.compile(r"(\[[^\]]*\]\(\s*<?)([^)\s>]+)(>?(?:\s+\"[^\"]*\")?\s*\))")


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in *text*."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _code(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    lang = {".py": "python", ".toml": "toml"}.get(path.suffix, "text")
    fence = _fence(text)
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def _summary(path: Path) -> str:
    """The first paragraph of a module's docstring, or nothing."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.split("\n\n")[0].strip()


def _visible(path: Path) -> bool:
    parts = path.relative_to(EXAMPLES).parts
    return not any(p.startswith((".", "_")) for p in parts)


def _pages() -> dict[Path, tuple[str, str]]:
    """Each example (a file, or a project folder): its page's src_uri and Markdown."""
    pages: dict[Path, tuple[str, str]] = {}
    for path in sorted(EXAMPLES.glob("*.py")):
        body = f"# `examples/{path.name}`\n\n{_summary(path)}\n\n{_code(path)}"
        pages[path] = (f"examples/{path.stem}.md", body)
    for folder in sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and _visible(p)):
        seen: list[Path] = []
        for pattern in PROJECT_FILES:
            for path in sorted(folder.glob(pattern)):
                if _visible(path) and path not in seen:
                    seen.append(path)
        parts = [f"# `examples/{folder.name}/`\n"]
        for path in seen:
            rel = path.relative_to(EXAMPLES).as_posix()
            parts.append(f"## `examples/{rel}`\n\n{_code(path)}")
        pages[folder] = (f"examples/{folder.name}/index.md", "\n".join(parts))
    return pages


def _index(pages: dict[Path, tuple[str, str]]) -> str:
    lines = [
        "# Examples\n",
        "Runnable programs from the `examples/` folder of the repository; the",
        "tutorial and the how-to guides are built from them, and the test suite",
        "runs them.\n",
    ]
    for path, (uri, _) in pages.items():
        name = f"examples/{path.name}" + ("/" if path.is_dir() else "")
        lines.append(f"- [`{name}`]({posixpath.relpath(uri, 'examples')})")
    return "\n".join(lines) + "\n"


_generated: dict[Path, str] = {}


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    pages = _pages()
    _generated.clear()
    for path, (uri, body) in pages.items():
        _generated[path] = uri
        # Reached by links and from the index, not listed in the nav one by one.
        files.append(File.generated(config, uri, content=body, inclusion=InclusionLevel.NOT_IN_NAV))
    files.append(File.generated(config, "examples/index.md", content=_index(pages)))
    _generated[EXAMPLES] = "examples/index.md"  # a link to the folder: its index
    return files


def on_page_markdown(markdown: str, *, page: Page, **_: Any) -> str:
    """Point links to ``examples/...`` in the repository at their pages."""
    if page.file.abs_src_path is None:
        return markdown  # a generated page
    here = Path(page.file.abs_src_path).parent

    def relink(match: re.Match[str]) -> str:
        target = match.group(2)
        path, _, anchor = target.partition("#")
        if re.match(r"[a-z][a-z0-9+.-]*:", path) or not path:
            return match.group(0)
        uri = _generated.get((here / path).resolve())
        if uri is None:
            return match.group(0)
        new = posixpath.relpath(uri, posixpath.dirname(page.file.src_uri))
        return match.group(1) + new + (f"#{anchor}" if anchor else "") + match.group(3)

    return _LINK.sub(relink, markdown)
