"""The package's layout: every module says what it is for and its layer, and imports stay acyclic.

Read from the source with :mod:`ast`, never by importing it: each module's docstring
names its layer in its first paragraph, after the summary line (``Layer: ...``); a
long module, or one with a long function (argument parsers aside), says why it stays
whole (``Whole because``); no module imports another's private name; and the import
graph has no cycle.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "tether"

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
TREES: dict[str, ast.Module] = {
    name: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for name, path in MODULES.items()
}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _relative(name: str) -> str:
    return MODULES[name].relative_to(SRC.parent).as_posix()


def _docstring(name: str) -> str:
    return ast.get_docstring(TREES[name]) or ""


def _resolve_from(name: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` in module *name* imports from, relative ones resolved."""
    if node.level == 0:
        return node.module or ""
    package = name if _is_package(name) else name.rpartition(".")[0]
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    if node.module:
        base.append(node.module)
    return ".".join(base)


def _long_functions(name: str) -> list[str]:
    """The functions (methods, nested functions) of *name* longer than the limit."""
    exempt_parsers = name.startswith("tether._cli")
    long: list[str] = []
    for node in ast.walk(TREES[name]):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if exempt_parsers and node.name.startswith(("add_", "_add_")):
            continue
        end = node.end_lineno or node.lineno
        if end - node.lineno + 1 > MAX_FUNCTION_LINES:
            long.append(f"{node.name} ({end - node.lineno + 1} lines)")
    return long


def _line_count(name: str) -> int:
    return len(MODULES[name].read_text(encoding="utf-8").splitlines())


LONG_MODULES = sorted(
    name for name in MODULES if _line_count(name) > MAX_MODULE_LINES or _long_functions(name)
)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_docstring_names_layer(name: str) -> None:
    doc = _docstring(name)
    assert doc, f"{_relative(name)} has no module docstring"
    # The summary line, and the paragraph that follows it.
    first = "\n\n".join(inspect.cleandoc(doc).split("\n\n", 2)[:2])
    assert "Layer:" in first, (
        f"{_relative(name)}: the docstring's first paragraph names no layer "
        f"('Layer: ...'):\n{first}"
    )


@pytest.mark.parametrize("name", LONG_MODULES)
def test_long_module_says_why_whole(name: str) -> None:
    reasons = []
    lines = _line_count(name)
    if lines > MAX_MODULE_LINES:
        reasons.append(f"{lines} lines")
    reasons.extend(_long_functions(name))
    assert "Whole because" in _docstring(name), (
        f"{_relative(name)} is long ({', '.join(reasons)}): its docstring must "
        f"say why it stays whole ('Whole because ...')"
    )


def _private_imports() -> Iterator[str]:
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _resolve_from(name, node)
            if source != "tether" and not source.startswith("tether."):
                continue
            for alias in node.names:
                imported = alias.name
                if not imported.startswith("_") or imported.startswith("__"):
                    continue
                if f"{source}.{imported}" in MODULES:
                    continue  # a private submodule, not a private name
                yield f"{_relative(name)}:{node.lineno}: from {source} import {imported}"


def test_no_private_names_imported() -> None:
    found = sorted(_private_imports())
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def _imports(name: str) -> set[str]:
    """The tether modules *name* imports, wherever the import statement is."""
    targets: set[str] = set()
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module = alias.name
                while module and module not in MODULES:
                    module = module.rpartition(".")[0]
                if module:
                    targets.add(module)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(name, node)
            if source not in MODULES:
                continue
            targets.add(source)
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:
                    targets.add(f"{source}.{alias.name}")
    targets.discard(name)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_import_graph_has_no_cycle() -> None:
    graph = {name: _imports(name) for name in MODULES}
    cycles = _cycles(graph)
    message = "\n".join(
        " <-> ".join(component)
        + "\n    "
        + "\n    ".join(f"{a} -> {b}" for a in component for b in sorted(graph[a] & set(component)))
        for component in cycles
    )
    assert not cycles, f"import cycles among tether's modules:\n{message}"


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
