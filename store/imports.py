"""What a skill's Python files import, as the review warnings read it: the packages a script
needs from outside the skill, and which of the skill's own files are modules its other files
import (a package's `__init__.py`, a helper) rather than scripts an agent runs."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import PurePosixPath

INIT = "__init__.py"
# Handlers that make an import optional: the script copes without it.
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError", "Exception")


def parsed(text: str) -> ast.Module | None:
    """The script's syntax tree; None when it does not parse (the syntax check reports it)."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def needed_modules(tree: ast.AST) -> list[str]:
    """The top-level modules the script imports by absolute name, sorted; an import inside a
    `try` that handles ImportError is optional and left out."""
    optional = _guarded_imports(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if node in optional:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return sorted(found)


def library_modules(trees: Mapping[str, ast.AST]) -> frozenset[str]:
    """The paths among `trees` (POSIX path -> tree of each Python file) that are modules rather
    than scripts: every `__init__.py`, and each file another one imports (by any part of a
    dotted name, absolute or relative). Such a file may still run as a script (many guard a
    `__main__` block only to refuse it), but what the agent runs is the file that imports it."""
    imported: dict[str, set[str]] = {path: _imported_parts(tree) for path, tree in trees.items()}
    modules = set()
    for path in trees:
        pure = PurePosixPath(path)
        if pure.name == INIT:
            modules.add(path)
            continue
        if any(pure.stem in parts for other, parts in imported.items() if other != path):
            modules.add(path)
    return frozenset(modules)


def _imported_parts(tree: ast.AST) -> set[str]:
    """Every part of every name the file imports: `from .helpers.merge import run` gives
    helpers, merge and run."""
    parts: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts.update(alias.name.split("."))
        elif isinstance(node, ast.ImportFrom):
            parts.update((node.module or "").split("."))
            parts.update(alias.name for alias in node.names)
    parts.discard("")
    return parts


def _guarded_imports(tree: ast.AST) -> set[ast.AST]:
    """Imports inside a `try` that handles ImportError: the script copes without them."""
    guarded: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for statement in node.body:
                guarded.update(ast.walk(statement))
    return guarded


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type
    if kinds is None:
        return True
    names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    return any(isinstance(name, ast.Name) and name.id in _IMPORT_ERRORS for name in names)
