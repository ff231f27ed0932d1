"""Edit plans: an edit_skill call read once, shown to the owner as a diff, applied on approval.

    built (classify: validated as the edited skill would be, diffed, linted)
      -> pending (held with its approval, 2 hours, at most 200 per owner)
      -> applied | denied | stale | failed | expired

The plan is what gets written: on approval its files are installed in one go, and only while
the skill still has the hash the diff was made against.
"""

from __future__ import annotations

import difflib
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.editargs import EditArguments
from broker.errors import DiffTooLarge, EditPlanExpired, InvalidCall
from store.archive import SKILL_FILE, size_text
from store.drafts import encoded, skill_md_text, with_schema
from store.edits import apply_changes, copy_of
from store.errors import SkillBuiltin, SkillInvalid, SkillTooLarge
from store.frontmatter import read_loose
from store.hashing import regular_files
from store.leniency import read_skill_dir
from store.lifecycle import approvals, calls
from store.lifecycle import editplans as plans
from store.limits import MAX_DIFF_BYTES, MAX_DIFF_FILE_BYTES, MAX_EDIT_PLANS, MAX_EDITABLE_BYTES
from store.lint import lint
from store.models import Approval, EditPlan, Skill, ToolCall
from store.skillmd import decode_skill_md, has_front_matter, split_front_matter
from store.skills import SkillStore
from store.states import ApprovalStatus, CallStatus, EditPlanStatus
from store.validation import format_problems

EDIT_PLAN_LIFE = timedelta(hours=2)
PENDING = EditPlanStatus.PENDING
DENIED = EditPlanStatus.DENIED
STALE = EditPlanStatus.STALE
EXPIRED = EditPlanStatus.EXPIRED


@dataclass(frozen=True)
class EditDraft:
    """A checked edit: the files it writes (None deletes), its diff and review warnings."""

    skill_name: str
    base_hash: str
    files: dict[str, str | None]
    diff: str
    lint_warnings: list[str]
    rationale: str


def plan_edit(store: SkillStore, skill: Skill, edit: EditArguments) -> EditDraft:
    """Build the plan the owner will see; fails (before anyone is asked) if it can't apply."""
    if skill.read_only:
        raise SkillBuiltin(
            f"HOST: '{skill.name}' is a read-only {skill.source} skill; it can't be edited."
        )
    for path, text in edit.files.items():
        if text is not None and len(encoded(text, path)) > MAX_EDITABLE_BYTES:
            raise SkillTooLarge(
                f"HOST: changes.files['{path[:200]}'] is over {size_text(MAX_EDITABLE_BYTES)}, "
                "the most an edit may write to one file."
            )
    with store.staging() as stage:
        root = copy_of(store, skill, stage)
        files = _resolved(root, skill, edit)
        old = {path: _read(root / path) for path in files}
        files = {path: text for path, text in files.items() if _changes(old[path], text)}
        if not files:
            raise InvalidCall("HOST: these changes leave the skill exactly as it is.")
        diff = _diff(old, files)
        try:
            apply_changes(root, files)
            # Read as its install will read it: a skill imported with warnings stays editable.
            info = read_skill_dir(root, skill.name, skill.name)
        except (SkillInvalid, SkillTooLarge) as e:
            problems = " ".join(format_problems(e))
            raise type(e)(f"HOST: the edited skill would be refused: {problems}", e.errors) from e
        warnings = lint({rel: (root / rel).read_bytes() for rel in regular_files(root)}, info)
    return EditDraft(skill.name, skill.hash, files, diff, warnings, edit.rationale)


def _resolved(root: Path, skill: Skill, edit: EditArguments) -> dict[str, str | None]:
    """The file changes, with description, body and parameters_schema folded into SKILL.md."""
    files = dict(edit.files)
    if edit.description is None and edit.body is None and not edit.schema_given:
        return files
    if SKILL_FILE in files:
        raise InvalidCall(
            "HOST: change SKILL.md either in changes.files or through description, body and "
            "parameters_schema, not both."
        )
    data = (root / SKILL_FILE).read_bytes()
    loose = read_loose(data)  # as the import read it: no front matter, unquoted colons
    header, body = loose.header, loose.body
    new_body = body if edit.body is None else edit.body
    text = decode_skill_md(data)
    if edit.description is None and not edit.schema_given and has_front_matter(text):
        front, _old = split_front_matter(text)
        files[SKILL_FILE] = f"---\n{front}\n---\n\n{new_body.strip()}\n"  # header kept verbatim
        return files
    metadata = header.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    if edit.schema_given:
        metadata = with_schema(metadata, edit.parameters_schema)
    description = edit.description
    if description is None:  # a header without one had it derived at import
        description = header.get("description") or skill.description
    files[SKILL_FILE] = skill_md_text(
        skill.name, str(description), new_body, metadata, header=header
    )
    return files


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() and not path.is_symlink() else None


def _changes(old: bytes | None, new: str | None) -> bool:
    return old != (None if new is None else encoded(new, "The new text"))


def _diff(old: dict[str, bytes | None], files: dict[str, str | None]) -> str:
    parts: list[str] = []
    total = 0
    for path in sorted(files):
        text = file_diff(path, old[path], files[path])
        size = len(text.encode("utf-8"))
        if size > MAX_DIFF_FILE_BYTES:
            raise DiffTooLarge(
                f"HOST: the diff of {path} is {size:,} bytes, over "
                f"{size_text(MAX_DIFF_FILE_BYTES)} per file; change it in smaller steps."
            )
        total += size
        if total > MAX_DIFF_BYTES:
            raise DiffTooLarge(
                f"HOST: the whole diff is over {size_text(MAX_DIFF_BYTES)}; split the edit "
                "into smaller ones."
            )
        parts.append(text)
    return "".join(parts)


def file_diff(path: str, old: bytes | None, new: str | None) -> str:
    """A unified diff of one file; a file that isn't UTF-8 text is named, not shown."""
    try:
        old_text = None if old is None else old.decode("utf-8")
    except UnicodeDecodeError:
        return f"Binary file {path} {'deleted' if new is None else 'replaced'}\n"
    lines = difflib.unified_diff(
        [] if old_text is None else old_text.splitlines(keepends=True),
        [] if new is None else new.splitlines(keepends=True),
        "/dev/null" if old is None else f"a/{path}",
        "/dev/null" if new is None else f"b/{path}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


# -- holding plans ------------------------------------------------------------------------


def hold(session: Session, call: ToolCall, approval: Approval, draft: EditDraft) -> EditPlan:
    """Keep the plan with its approval for 2 hours; the oldest pending one goes past 200."""
    sweep(session, call.owner_id)
    pending = list(
        session.scalars(
            select(EditPlan)
            .where(EditPlan.owner_id == call.owner_id, EditPlan.status == PENDING)
            .order_by(EditPlan.created_at, EditPlan.id)
            .with_for_update()
        )
    )
    for old in pending[: max(0, len(pending) - MAX_EDIT_PLANS + 1)]:
        _expire(session, old, f"At most {MAX_EDIT_PLANS} edit plans are held; a newer one came.")
    now = approval.created_at  # the plan and its approval share their time
    plan = plans.new(
        id=str(uuid.uuid4()),
        owner_id=call.owner_id,
        call_id=call.id,
        approval_id=approval.id,
        skill_name=draft.skill_name,
        base_hash=draft.base_hash,
        changes={"files": draft.files},
        diff=draft.diff,
        lint_warnings=draft.lint_warnings,
        rationale=draft.rationale,
        created_at=now,
        expires_at=now + EDIT_PLAN_LIFE,
    )
    approval.expires_at = plan.expires_at  # the approval lives as long as its plan
    session.add(plan)
    return plan


def _expire(session: Session, plan: EditPlan, reason: str) -> None:
    plans.expire(plan)
    if plan.approval_id is None:
        return
    assert plan.answered_at is not None
    if approvals.expire_pending(session, plan.approval_id, plan.answered_at):
        calls.answer(session, plan.call_id, CallStatus.EXPIRED, error=("edit_plan_expired", reason))


def sweep(session: Session, owner_id: int) -> None:
    """Plans past their 2 hours are expired (their approvals expire by the same time)."""
    plans.sweep(session, owner_id)


def settle(session: Session, approval_id: str, status: EditPlanStatus) -> None:
    """End the pending plan of an approval (no-op for approvals of other tools)."""
    plans.settle(session, approval_id, status)


def refuse_expired(approval: Approval) -> None:
    """An edit plan's approval that expired answers 410, not "already answered"."""
    if approval.tool == "edit_skill" and approval.status == ApprovalStatus.EXPIRED:
        raise EditPlanExpired(
            "This edit plan expired (plans are kept 2 hours, at most 200 at once); "
            "nothing was changed. Ask for the edit again."
        )


def for_approvals(session: Session, approval_ids: list[str]) -> dict[str, EditPlan]:
    if not approval_ids:
        return {}
    rows = session.scalars(select(EditPlan).where(EditPlan.approval_id.in_(approval_ids)))
    return {row.approval_id: row for row in rows if row.approval_id is not None}
