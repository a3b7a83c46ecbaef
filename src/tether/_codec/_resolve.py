"""A type found again by its name: what a stored request's ``response_type`` names.

Layer: the codec (``_codec``).

A stored request names its response type as :func:`describe` wrote it
(``bool``, ``Decision``, ``list[int]``, ``shop.Decision | None``), not the
type itself, so that any process can show it. A process that must decode a
response without executing the run (``engine.respond``, the dashboard's form)
finds the type again with :func:`resolve_type`: builtins and ``typing``'s
names by name, anything else by its qualified name as an attribute of the
modules the caller names (the run's workflow module, ``--import`` modules)
or, dotted, of a module already imported. Generic forms are read by walking
the name's syntax tree (subscripts, ``|``, constants for ``Literal``); the
name is never evaluated and nothing is imported. A resolution counts only
when the type found describes itself exactly as the name.
"""

from __future__ import annotations

import ast
import builtins
import sys
import typing
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Final

from ._converter import describe
from ._types import BUILT_IN

__all__ = ("resolve_type",)

#: Names a type may use without a module: builtins and typing's forms.
_KNOWN: Final[dict[str, Any]] = {
    **{n: getattr(builtins, n) for n in ("bool", "int", "float", "str", "bytes", "list")},
    **{n: getattr(builtins, n) for n in ("dict", "tuple", "set", "frozenset", "object")},
    **{n: getattr(typing, n) for n in ("Any", "Optional", "Union", "Literal")},
    "None": None,
    # The classes the codec encodes itself, by their own names (``date``, ``Decimal``).
    **{cls.__qualname__: cls for cls in BUILT_IN if cls is not type(None)},
}
_NOT_FOUND: Final = object()


def resolve_type(name: str, modules: Sequence[ModuleType]) -> Any:
    """The type *name* describes, or ``None`` when it is not found here (or is ambiguous).

    Never evaluates *name* and never imports (see the module doc).
    """
    if len(name) > 1000:
        return None
    try:
        tree = ast.parse(name, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    try:
        found = _walk(tree, modules)
    except (TypeError, RecursionError):  # a subscript its origin refuses
        return None
    if found is _NOT_FOUND or found is None:
        return None
    return found if describe(found) == name else None


def _walk(node: ast.expr, modules: Sequence[ModuleType]) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        return (
            value if value is None or value is ... or isinstance(value, str | int) else _NOT_FOUND
        )
    if isinstance(node, ast.Name | ast.Attribute):
        return _lookup(_dotted(node), modules)
    if isinstance(node, ast.Subscript):
        origin = _walk(node.value, modules)
        inner = node.slice
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        args = [_walk(item, modules) for item in items]
        if origin is _NOT_FOUND or any(a is _NOT_FOUND for a in args):
            return _NOT_FOUND
        return origin[tuple(args) if len(args) > 1 else args[0]]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _walk(node.left, modules), _walk(node.right, modules)
        if left is _NOT_FOUND or right is _NOT_FOUND:
            return _NOT_FOUND
        return left | right
    return _NOT_FOUND


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _lookup(parts: list[str] | None, modules: Sequence[ModuleType]) -> Any:
    """The object a dotted name names: known, in *modules*, or in an imported module."""
    if not parts:
        return _NOT_FOUND
    if len(parts) == 1 and parts[0] in _KNOWN:
        return _KNOWN[parts[0]]
    found: list[Any] = []
    for module in modules:
        target = _attribute(module, parts)
        if target is not _NOT_FOUND and not any(target is f for f in found):
            found.append(target)
    if not found:
        # A module's own name first (``datetime.date``, ``shop.orders.Order``):
        # the longest prefix that names a module already imported.
        for cut in range(len(parts) - 1, 0, -1):
            named = sys.modules.get(".".join(parts[:cut]))
            if named is not None:
                target = _attribute(named, parts[cut:])
                if target is not _NOT_FOUND:
                    found.append(target)
                break
    return found[0] if len(found) == 1 and isinstance(found[0], type) else _NOT_FOUND


def _attribute(target: Any, parts: Sequence[str]) -> Any:
    for part in parts:
        target = getattr(target, part, _NOT_FOUND)
        if target is _NOT_FOUND:
            return _NOT_FOUND
    return target
