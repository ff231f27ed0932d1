"""edit_skill's handler: write the edit plan the owner approved (or, with no approval asked,
the one classify built) and record how it ended."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from broker.context import ToolContext
from store.edits import install_edit
from store.errors import SkillChanged
from store.lifecycle import editplans as plans
from store.models import EditPlan
from store.states import EditPlanStatus


def apply_plan(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """edit_skill's handler: write the held plan (or, with no approval asked, the one built)."""
    with context.sessions() as session:
        row = session.scalar(select(EditPlan).where(EditPlan.call_id == context.call_id))
    if row is not None:
        name, base, files = row.skill_name, row.base_hash, dict(row.changes["files"])
    else:
        draft = context.plan.edit
        assert draft is not None, "classify builds an edit plan for every edit_skill call"
        name, base, files = draft.skill_name, draft.base_hash, draft.files
    try:
        skill = install_edit(context.store, context.owner_id, name, base, files, by_owner=False)
    except SkillChanged as e:
        _finish(context, row, EditPlanStatus.FAILED, None)
        raise SkillChanged(f"HOST: {e.message} Nothing was written.") from e
    _finish(context, row, EditPlanStatus.APPLIED, skill.hash)
    return {
        "skill_name": name,
        "hash": skill.hash,
        "previous_hash": base,
        "enabled": skill.enabled,
        "files_changed": sorted(files),
        "lint_warnings": skill.lint_warnings or [],
    }


def _finish(
    context: ToolContext, row: EditPlan | None, status: EditPlanStatus, new_hash: str | None
) -> None:
    if row is None:
        return
    with context.sessions() as session, session.begin():
        plans.finish(session, row.id, status, new_hash)
