"""The content hash of a skill and the grant key derived from it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

# An author's SSH signature over the content hash (store/trust.py): at a skill's root, it is
# never part of the content it signs, so adding one leaves the hash as it was.
SIGNATURE_FILE = "skillfleet.sig"


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_entries(entries: Iterable[tuple[str, bytes]]) -> str:
    """Hash (POSIX relative path, bytes) pairs: `path NUL sha256(bytes) LF` in path order."""
    outer = hashlib.sha256()
    for path, data in sorted(entries, key=lambda entry: entry[0]):
        if path == SIGNATURE_FILE:
            continue
        outer.update(f"{path}\0{file_digest(data)}\n".encode())
    return outer.hexdigest()


def regular_files(root: Path) -> list[str]:
    """Every regular file under `root` as a sorted POSIX relative path; links are not followed,
    and a signature at the root is not one of the skill's files."""
    found: list[str] = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            found.append(path.relative_to(root).as_posix())
    return sorted(rel for rel in found if rel != SIGNATURE_FILE)


def content_hash(root: Path) -> str:
    """The content hash of the skill folder at `root` (DESIGN.md section 3), its signature
    (`skillfleet.sig` at the root) left out."""
    outer = hashlib.sha256()
    for rel in regular_files(root):
        digest = file_digest((root / rel).read_bytes())
        outer.update(f"{rel}\0{digest}\n".encode())
    return outer.hexdigest()


def grant_key(name: str, skill_hash: str) -> str:
    """The grant key of a skill's scripts, bound to the full content hash: any edit changes it.

    Grants match this key exactly; people are shown it shortened (`shown_key`).
    """
    return f"skill:{name}@{skill_hash}"


def shown_key(key: str) -> str:
    """A grant key as people read it: `skill:<name>@<hash8>`; other keys unchanged."""
    if key.startswith("skill:"):
        name, at, skill_hash = key.partition("@")
        if at:
            return f"{name}@{skill_hash[:8]}"
    return key
