"""docs/architecture.md names only what exists: every repository path it writes in backticks
(`broker/dispatcher.py`, `store/lifecycle/`) is in the tree, and every dotted name of a
skillfleet package (`broker.runs.claim`) imports, so a moved file or a renamed function fails
here instead of leaving the doc behind."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGES = ("skillfleet", "api", "workers", "broker", "relay", "store")

CODE = re.compile(r"`([^`\n]+)`")
# A repository path: a folder or file with a slash in it, or a file of the repository's root
# (`pyproject.toml`). Routes start with "/", placeholders hold "<", neither is a path.
PATH = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?")
ROOT_FILE = re.compile(r"[A-Za-z0-9_-]+\.(?:py|md|toml|yml|yaml|lock|c|sh)")
# `broker.runs.claim`, `api.asgi:create_asgi_app()`: a module of ours and a name in it.
DOTTED = re.compile(rf"(?:{'|'.join(PACKAGES)})(?:\.\w+)+(?::\w+)?(?:\(\))?")


def named_paths(text: str) -> list[str]:
    """The repository paths written in backticks in `text`."""
    found = []
    for code in CODE.findall(text):
        if PATH.fullmatch(code) and ("/" in code or ROOT_FILE.fullmatch(code)):
            found.append(code)
    return found


def named_objects(text: str) -> list[str]:
    """The dotted names of skillfleet's modules, classes and functions written in backticks."""
    return [code for code in CODE.findall(text) if DOTTED.fullmatch(code)]


def missing_paths(text: str, root: Path = ROOT) -> list[str]:
    return [path for path in named_paths(text) if not (root / path).exists()]


def resolves(name: str) -> bool:
    """Whether `name` (`package.module.attribute…`, or `module:attribute`) can be found."""
    parts = name.removesuffix("()").replace(":", ".").split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found: object = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is None or not f"{module}.".startswith(f"{e.name}."):
                raise  # the module is there, and lacks one of its own imports
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def unresolved_names(text: str) -> list[str]:
    return [name for name in named_objects(text) if not resolves(name)]


def test_every_path_the_architecture_doc_names_exists() -> None:
    text = ARCHITECTURE.read_text("utf-8")

    assert len(named_paths(text)) > 40  # the doc names its modules by path
    assert missing_paths(text) == []


def test_every_module_and_function_the_architecture_doc_names_imports() -> None:
    text = ARCHITECTURE.read_text("utf-8")

    assert named_objects(text)
    assert unresolved_names(text) == []


def test_a_made_up_path_or_name_is_caught_and_routes_and_placeholders_are_not_paths() -> None:
    text = (
        "The dispatcher is `broker/dispatcher.py`, the writers `store/lifecycle/`, the lock "
        "`requirements.lock`; messages were built in `relay/taskmessage.py` and `relay/nowhere/`, "
        "sent by `relay.dispatch.send_run` or `relay.dispatch.send_by_hand`, served by "
        "`api.asgi:create_asgi_app()`, at `/api/runs/<id>/events` on `node.<name>` with "
        "`skillfleet worker node`, read from `gone.toml`."
    )

    assert missing_paths(text) == ["relay/taskmessage.py", "relay/nowhere/", "gone.toml"]
    assert unresolved_names(text) == ["relay.dispatch.send_by_hand"]
