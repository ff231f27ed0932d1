"""What each event of skillfleet records in the audit trail (store/audit.py): one function per
event, so every path that makes the event records the same facts, and only names, hashes, ids
and outcomes (never a call's arguments, a run's output, an answer's text or a secret's value).

Each appends in the caller's transaction, as its last statement.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from store import audit
from store.audit import AuditKind, Connection, Fact
from store.models import Approval, Question, RunFacts, ToolCall

POLICY = "policy"
ALLOW = "allow"  # the policy action that lets a call run (broker/policy.py)


def audit_decision(connection: Connection, call: ToolCall, outcome: str) -> None:
    """The policy's decision on a new call: allow, deny or require_approval, by which rule."""
    audit.append(
        connection,
        call.owner_id,
        AuditKind.POLICY_DECISION,
        POLICY,
        call.id,
        {
            "tool": call.tool,
            "tier": call.tier,
            "rule": call.rule,
            "outcome": outcome,
            "mode": call.mode,
            "skill": call.skill_name,
            "skill_hash": call.skill_hash,
            "node": call.node,
            "job_run_id": call.job_run_id,
        },
    )


def audit_answer(
    connection: Connection,
    approval: Approval,
    decision: str,
    actor: str,
    stale: str | None = None,
) -> None:
    """The owner's answer to an approval; `stale` says why an approval was void instead."""
    audit.append(
        connection,
        approval.owner_id,
        AuditKind.APPROVAL_DECIDED,
        actor,
        approval.id,
        {
            "decision": decision,
            "status": approval.status,
            "reason": stale,
            "call_id": approval.call_id,
            "tool": approval.tool,
            "tier": approval.tier,
            "rule": approval.rule,
            "skill": approval.skill_name,
            "skill_hash": approval.skill_hash,
            "node": approval.node,
        },
    )


def audit_question(connection: Connection, question: Question, actor: str) -> None:
    """The owner's answer to a question: which one, of what kind; a secret by its name only,
    and an answer's text never (it is the owner's words; a choice is shown as chosen)."""
    audit.append(
        connection,
        question.owner_id,
        AuditKind.QUESTION_ANSWERED,
        actor,
        question.id,
        {
            "kind": question.kind,
            "status": question.status,
            "call_id": question.call_id,
            "skill": question.skill_name,
            "skill_hash": question.skill_hash,
            "secret_name": question.secret_name,
            "choice": question.answer if question.choices else None,
        },
    )


def audit_run_started(connection: Connection, run: RunFacts) -> None:
    if run.owner_id is not None:
        audit.append(
            connection,
            run.owner_id,
            AuditKind.RUN_STARTED,
            f"worker:{_worker(run)}",
            run.id,
            _run_facts(run),
        )


def audit_run_ended(connection: Connection, run: RunFacts) -> None:
    if run.owner_id is not None:
        facts: dict[str, Any] = {
            **_run_facts(run),
            "status": run.status,
            "exit_code": run.exit_code,
            "isolation": run.isolation,
        }
        audit.append(
            connection, run.owner_id, AuditKind.RUN_ENDED, f"worker:{_worker(run)}", run.id, facts
        )


def audit_secrets_released(
    connection: Connection, owner_id: int, run_id: str, node: str, names: Iterable[str]
) -> None:
    """Secrets given to a run's script: their names, never their values."""
    facts: dict[str, Fact] = {"names": sorted(names), "node": node}
    audit.append(connection, owner_id, AuditKind.SECRET_RELEASED, f"node:{node}", run_id, facts)


def audit_skill_changed(
    connection: Connection,
    owner_id: int,
    actor: str,
    name: str,
    change: str,
    before: str | None,
    after: str | None,
    source: str | None = None,
) -> None:
    """A skill of the owner's made, replaced, edited, promoted from a draft or deleted: the
    content hash before and after (None: it had none, or has none now)."""
    facts = {"change": change, "before": before, "after": after, "source": source}
    audit.append(connection, owner_id, AuditKind.SKILL_CHANGED, actor, name, facts)


def audit_token(
    connection: Connection,
    owner_id: int,
    actor: str,
    token_id: int,
    change: str,
    role: str | None = None,
) -> None:
    """A token of the owner's `created` (with its role) or `deleted`: by its id, never itself."""
    facts: dict[str, Fact] = {"change": change, "role": role}
    audit.append(connection, owner_id, AuditKind.TOKEN_CHANGED, actor, str(token_id), facts)


def audit_rollback(
    connection: Connection,
    owner_id: int,
    actor: str,
    name: str,
    before: str,
    after: str,
) -> None:
    """A skill of the owner's made its earlier version `after` current again (from `before`)."""
    facts: dict[str, Fact] = {"before": before, "after": after}
    audit.append(connection, owner_id, AuditKind.SKILL_ROLLED_BACK, actor, name, facts)


def audit_trust(
    connection: Connection,
    owner_id: int,
    actor: str,
    key_name: str,
    change: str,
    fingerprint: str | None = None,
) -> None:
    """A key the owner trusts to sign skills `added` or `removed`: its name and fingerprint
    (`SHA256:…`, as ssh-keygen -l shows it), never more of the key."""
    facts: dict[str, Fact] = {"change": change, "fingerprint": fingerprint}
    audit.append(connection, owner_id, AuditKind.TRUST_CHANGED, actor, key_name, facts)


def audit_enabled_override(
    connection: Connection,
    owner_id: int,
    actor: str,
    name: str,
    skill_hash: str,
    reason: str,
) -> None:
    """The owner enabled a skill its signature did not clear (`reason`: `unsigned`,
    `untrusted`), by an explicit override."""
    facts: dict[str, Fact] = {"skill_hash": skill_hash, "reason": reason}
    audit.append(connection, owner_id, AuditKind.SKILL_ENABLED_OVERRIDE, actor, name, facts)


def _run_facts(run: RunFacts) -> dict[str, Any]:
    return {
        "call_id": run.call_id,
        "skill": run.skill_name,
        "skill_hash": run.skill_hash,
        "script": run.script,
        "command": run.command is not None,
        "execution": run.execution,
        "node": run.node,
    }


def _worker(run: RunFacts) -> str:
    return str(getattr(run, "worker", None) or run.node or run.execution)
