"""Benchmark: how many real public skills import, and why the others are refused.

Run with `python bench/corpus.py FOLDER [FOLDER ...]`, each FOLDER the checkout of one
repository of skills. Every skill folder in it (a folder holding SKILL.md as a regular file,
not inside another skill folder; a SKILL.md that is a symbolic link mirrors a skill kept
elsewhere and is skipped) is zipped as a user would upload it (`zip -ry`: its top folder,
links stored as links) and imported through the real API in process, each into a fresh owner
so that two skills of the same name never collide and no owner reaches the skill limit.

The report says, per repository and in total: skill folders found, within the size limits or
over them, imported (and how many with warnings), refused by error code, the share imported
among those within the limits, and the most frequent reasons of each refusal (problem
sentences with their quoted parts and numbers blanked, so like problems group together).
`--json FILE` keeps every skill's outcome for comparing two runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import stat
import sys
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flask import Flask  # noqa: E402

from api import create_app  # noqa: E402
from store.archive import SKILL_FILE  # noqa: E402
from store.bundles import skill_folders  # noqa: E402
from store.db import transaction  # noqa: E402
from store.errors import SkillInvalid, SkillTooLarge  # noqa: E402
from store.migrate import upgrade  # noqa: E402
from store.settings import Settings  # noqa: E402
from store.tokens import create_owner_token  # noqa: E402
from store.validation import check_limits  # noqa: E402

WITHIN, OVER = "within", "over"
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'')
_NUMBER = re.compile(r"\d[\d,.]*")


@dataclass
class Outcome:
    """What importing one skill folder gave."""

    repository: str
    folder: str
    limits: str  # WITHIN or OVER
    status: int = 0
    code: str = "imported"
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def find_skill_folders(root: Path) -> tuple[list[Path], int]:
    """The skill folders under `root`, and how many SKILL.md links were skipped."""
    found: list[tuple[str, ...]] = []
    links = 0
    for directory, _dirs, files in os.walk(root):  # folder links are not followed
        if SKILL_FILE in files:
            path = Path(directory, SKILL_FILE)
            if path.is_symlink():
                links += 1
            else:
                found.append(Path(directory).relative_to(root).parts)
    folders = skill_folders((*parts, SKILL_FILE) for parts in found)
    return [root.joinpath(*parts) for parts in folders], links


def zip_folder(folder: Path) -> bytes:
    """The folder zipped under its own name, links stored as links, as `zip -ry` does."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(_walk(folder)):
            name = (Path(folder.name) / path.relative_to(folder)).as_posix()
            if path.is_symlink():
                info = zipfile.ZipInfo(name)
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                archive.writestr(info, os.readlink(path))
            else:
                archive.write(path, name)
    return buffer.getvalue()


def _walk(folder: Path) -> Iterator[Path]:
    for directory, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if Path(directory, d).is_symlink()]:
            yield Path(directory, name)


def within_limits(folder: Path) -> bool:
    """Whether the folder keeps to the file count and the bytes per file and per skill."""
    try:
        check_limits(folder)
    except SkillTooLarge:
        return False
    except SkillInvalid:
        return True  # a link or a device: the sizes were within the limits
    return True


class Importer:
    """The API on a fresh data dir; each import goes to a new owner."""

    def __init__(self, root: Path) -> None:
        redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
        settings = Settings(data_dir=root / "var", redis_url=redis_url, dry_run=True)
        settings.data_dir.mkdir(parents=True)
        upgrade(settings.database)
        self.app: Flask = create_app(settings)
        self.client = self.app.test_client()
        self.owners = 0

    def _owner_header(self) -> dict[str, str]:
        self.owners += 1
        with transaction(self.app.extensions["skillfleet"].sessions) as session:
            token = create_owner_token(session, f"corpus-{self.owners}")
        return {"Authorization": f"Bearer {token}"}

    def run(self, repository: str, folder: Path) -> Outcome:
        outcome = Outcome(repository, "", WITHIN if within_limits(folder) else OVER)
        body = {"file": (io.BytesIO(zip_folder(folder)), f"{folder.name}.zip")}
        response = self.client.post("/api/skills", headers=self._owner_header(), data=body)
        answer: dict[str, Any] = response.get_json() or {}
        outcome.status = response.status_code
        if response.status_code == 201:
            outcome.warnings = list(answer.get("warnings", []))
        else:
            outcome.code = str(answer.get("code", f"http_{response.status_code}"))
            outcome.problems = list(answer.get("errors") or [answer.get("message", "")])
        return outcome


def run(roots: list[Path]) -> tuple[list[Outcome], dict[str, int]]:
    """Import every skill folder under each root; the outcomes and the links skipped."""
    outcomes: list[Outcome] = []
    skipped: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        importer = Importer(Path(scratch))
        for root in roots:
            folders, skipped[root.name] = find_skill_folders(root)
            for folder in folders:
                outcome = importer.run(root.name, folder)
                outcome.folder = folder.relative_to(root).as_posix()
                outcomes.append(outcome)
    return outcomes, skipped


def reason(problem: str) -> str:
    """A problem sentence with its quoted parts and numbers blanked, to group like ones."""
    return _NUMBER.sub("N", _QUOTED.sub("…", problem))


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """The counts the report shows for a set of outcomes."""
    within = [o for o in outcomes if o.limits == WITHIN]
    imported = [o for o in outcomes if o.code == "imported"]
    imported_within = [o for o in within if o.code == "imported"]
    return {
        "found": len(outcomes),
        "within": len(within),
        "over": len(outcomes) - len(within),
        "imported": len(imported),
        "with_warnings": sum(1 for o in imported if o.warnings),
        "imported_within": len(imported_within),
        "share_within": len(imported_within) / len(within) if within else 0.0,
        "refused": dict(Counter(o.code for o in outcomes if o.code != "imported")),
    }


def report(outcomes: list[Outcome], skipped: dict[str, int], top: int) -> str:
    """The report as Markdown: a table per repository and in total, then refusal reasons."""
    lines = [
        "| repository | skill folders | within limits | over | imported | with warnings "
        "| imported within limits | refused |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    groups = {name: [o for o in outcomes if o.repository == name] for name in skipped}
    for name, group in [*groups.items(), ("total", outcomes)]:
        s = summary(group)
        codes = ", ".join(f"{code} {n}" for code, n in sorted(s["refused"].items())) or "-"
        lines.append(
            f"| {name} | {s['found']} | {s['within']} | {s['over']} | {s['imported']} "
            f"| {s['with_warnings']} | {s['imported_within']} ({s['share_within']:.1%}) "
            f"| {codes} |"
        )
    links = sum(skipped.values())
    if links:
        lines.append(f"\nSKILL.md links skipped (mirrors of a skill kept elsewhere): {links}.")
    for side in (WITHIN, OVER):
        refused = [o for o in outcomes if o.code != "imported" and o.limits == side]
        for code, count in Counter(o.code for o in refused).most_common():
            lines.append(f"\n{code}, {side} the limits: {count} skill folders")
            reasons = Counter(
                reason(problem) for o in refused if o.code == code for problem in o.problems
            )
            for text, n in reasons.most_common(top):
                lines.append(f"- {n} × {text}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="one checkout per repository")
    parser.add_argument("--json", type=Path, help="write every skill's outcome to this file")
    parser.add_argument("--top", type=int, default=5, help="reasons shown per refusal code")
    args = parser.parse_args()
    outcomes, skipped = run([folder.resolve() for folder in args.folders])
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    print(report(outcomes, skipped, args.top))


if __name__ == "__main__":
    main()
