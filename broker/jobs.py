"""Scheduled jobs of an owner: checked, saved with their grants, listed and removed.

A job's grants are rows of `grants` with scope `job` and the job's id as subject, so a call in
any run of the job sees them, including grants the owner added by answering "always".
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from broker.classify import RUN, SKILL_TOOLS
from broker.errors import UnknownTool
from broker.grants import HOST, JOB, add_grant, host_key, tool_key
from broker.registry import Registry
from broker.tiers import Tier
from broker.webtools import bare_host
from store import modelsources
from store.cron import check_cron, next_time, time_zone
from store.db import SessionFactory, transaction
from store.errors import (
    GrantInvalid,
    JobChanged,
    JobInvalid,
    JobNotFound,
    JobRunning,
    PinnedVersionUnknown,
    SkillNotFound,
    TooManyJobs,
)
from store.hashing import grant_key
from store.lifecycle import jobruns
from store.limits import (
    MAX_JOB_GRANTS,
    MAX_JOB_NAME_CHARS,
    MAX_JOB_STEPS,
    MAX_JOBS,
    MAX_PROMPT_CHARS,
    MAX_SKILLS,
)
from store.modelchoice import ModelChoice, check_context, check_effort, check_model
from store.models import Grant, Job, JobRun, Skill, utcnow
from store.skills import SkillStore
from store.versions import parse_pin, step_skill

EVERY_SKILL = "*"
GRANTABLE = (Tier.CHANGE, Tier.DESTRUCTIVE)
HASH = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class JobSpec:
    """A job as the owner sent it (already shaped by the API schema)."""

    name: str
    cron: str
    time_zone: str
    steps: list[dict[str, Any]]
    grant_tools: list[str]
    grant_skills: list[str]
    skills: Any
    enabled: bool
    grant_hosts: list[str] = field(default_factory=list)  # hosts read_web_page reads
    # The model its prompt steps run on; None fields: the owner's default (store/modelchoice.py).
    model: ModelChoice = field(default_factory=ModelChoice)


@dataclass
class Jobs:
    """Saves and reads jobs; every check that needs the tools or the skills is made here."""

    sessions: SessionFactory
    registry: Registry
    store: SkillStore

    def create(self, owner_id: int, spec: JobSpec) -> Job:
        keys = self._check(owner_id, spec)
        with transaction(self.sessions) as session:
            count = session.scalar(select(func.count()).where(Job.owner_id == owner_id))
            if (count or 0) >= MAX_JOBS:
                raise TooManyJobs(f"You already have {MAX_JOBS} jobs, the most allowed.")
            job = Job(id=str(uuid.uuid4()), owner_id=owner_id, created_at=utcnow())
            _fill(job, spec)
            session.add(job)
            session.flush()
            _replace_grants(session, job, keys)
        return job

    def update(
        self, owner_id: int, job_id: str, spec: JobSpec, read_at: datetime | None = None
    ) -> Job:
        """Replace the job with `spec`; with `read_at` (its `updated_at` as the caller read it),
        JobChanged if it changed since, so no change in between is undone unseen."""
        self.get(owner_id, job_id)  # another owner's job is not found, whatever the body says
        keys = self._check(owner_id, spec, kept=self._grant_keys(owner_id, job_id))
        with transaction(self.sessions) as session:
            job = _owned(session, owner_id, job_id, lock=True)
            if read_at is not None:
                _check_reading(job, read_at)
            _fill(job, spec)
            _replace_grants(session, job, keys)
        return job

    def delete(self, owner_id: int, job_id: str) -> None:
        with transaction(self.sessions) as session:
            job = _owned(session, owner_id, job_id, lock=True)
            session.execute(delete(JobRun).where(JobRun.job_id == job.id))
            session.execute(
                delete(Grant).where(
                    Grant.owner_id == owner_id, Grant.scope == JOB, Grant.subject == job.id
                )
            )
            session.delete(job)

    def get(self, owner_id: int, job_id: str) -> Job:
        with self.sessions() as session:
            return _owned(session, owner_id, job_id)

    def list_jobs(self, owner_id: int) -> list[Job]:
        query = (
            select(Job).where(Job.owner_id == owner_id).order_by(Job.name, Job.created_at, Job.id)
        )
        with self.sessions() as session:
            return list(session.scalars(query))

    def run_now(self, owner_id: int, job_id: str) -> JobRun:
        """Queue a run of the job now; refused while one is still queued, running or waiting."""
        with transaction(self.sessions) as session:
            job = _owned(session, owner_id, job_id, lock=True)
            active = jobruns.active_run(session, job.id)
            if active is not None:
                raise JobRunning(
                    f"The job is still {active.status} (run {active.id}); wait for it to end."
                )
            return jobruns.queue(session, job, jobruns.MANUAL)

    def runs(self, owner_id: int, job_id: str) -> list[JobRun]:
        """The job's runs, newest first (at most the newest 50 are kept)."""
        query = (
            select(JobRun)
            .where(JobRun.job_id == job_id)
            .order_by(JobRun.created_at.desc(), JobRun.id.desc())
        )
        with self.sessions() as session:
            _owned(session, owner_id, job_id)
            return list(session.scalars(query))

    # -- checks -------------------------------------------------------------------

    def _grant_keys(self, owner_id: int, job_id: str) -> set[str]:
        query = select(Grant.key).where(
            Grant.owner_id == owner_id, Grant.scope == JOB, Grant.subject == job_id
        )
        with self.sessions() as session:
            return set(session.scalars(query))

    def _check(self, owner_id: int, spec: JobSpec, kept: Collection[str] = ()) -> list[str]:
        """Every rule a job must keep; the grant keys to save. `kept` are the job's grants
        now: one sent back as it was read stays, whatever versions are recorded."""
        if not spec.name.strip() or len(spec.name) > MAX_JOB_NAME_CHARS:
            raise JobInvalid(f"'name' must be 1 to {MAX_JOB_NAME_CHARS} characters.")
        check_cron(spec.cron)
        time_zone(spec.time_zone)
        self._check_model(owner_id, spec.model)
        allowed = self._skills(owner_id, spec.skills)
        if not 1 <= len(spec.steps) <= MAX_JOB_STEPS:
            raise JobInvalid(f"A job has 1 to {MAX_JOB_STEPS} steps, not {len(spec.steps)}.")
        for number, step in enumerate(spec.steps, 1):
            self._check_step(owner_id, number, step, allowed)
        if len(spec.grant_tools) + len(spec.grant_skills) + len(spec.grant_hosts) > MAX_JOB_GRANTS:
            raise GrantInvalid(f"A job has at most {MAX_JOB_GRANTS} grants.")
        keys = [self._tool_grant(name) for name in spec.grant_tools]
        keys += [self._skill_grant(owner_id, entry, kept) for entry in spec.grant_skills]
        keys += [_host_grant(entry) for entry in spec.grant_hosts]
        return sorted(set(keys))

    def _check_model(self, owner_id: int, choice: ModelChoice) -> None:
        """A source the owner has, with a model on it (both or neither); effort and tier."""
        if (choice.source is None) != (choice.model is None):
            raise JobInvalid("'source' and 'model' go together: give both, or neither.")
        if choice.model is not None:
            check_model(choice.model)
        check_effort(choice.reasoning_effort)
        check_context(choice.context)
        if choice.source is not None:
            with self.sessions() as session:
                modelsources.named(session, owner_id, choice.source)

    def _skills(self, owner_id: int, skills: Any) -> set[str] | None:
        """The names a job may use (None: every enabled skill); unknown names are refused."""
        if skills == EVERY_SKILL:
            return None
        names = set(skills or [])
        if len(names) > MAX_SKILLS:
            raise JobInvalid(f"'skills' names at most {MAX_SKILLS} skills.")
        for name in sorted(names):
            try:
                self.store.get(owner_id, name)
            except SkillNotFound:
                raise JobInvalid(
                    f"'skills' names '{name}', which you have no skill called."
                ) from None
        return names

    def _check_step(
        self, owner_id: int, number: int, step: dict[str, Any], allowed: set[str] | None
    ) -> None:
        keys = set(step)
        if keys == {"prompt"}:
            prompt = step["prompt"]
            if not isinstance(prompt, str) or not prompt.strip():
                raise JobInvalid(f"Step {number}: 'prompt' must be non-empty text.")
            if len(prompt) > MAX_PROMPT_CHARS:
                raise JobInvalid(
                    f"Step {number}: a prompt has at most {MAX_PROMPT_CHARS:,} characters, "
                    f"not {len(prompt):,}."
                )
            return
        if keys not in ({"tool"}, {"tool", "arguments"}):
            raise JobInvalid(
                f'Step {number} must be {{"tool": name, "arguments": {{…}}}} or {{"prompt": text}}.'
            )
        if not isinstance(step.get("arguments", {}), dict):
            raise JobInvalid(f"Step {number}: 'arguments' must be a JSON object.")
        try:
            tool = self.registry.get(str(step["tool"]))
        except UnknownTool:
            raise JobInvalid(f"Step {number}: there is no tool named '{step['tool']}'.") from None
        if not tool.implemented:
            raise JobInvalid(f"Step {number}: {tool.name} is not available in this release yet.")
        skill = step.get("arguments", {}).get("skill_name")
        if tool.name == RUN and isinstance(skill, str) and "@" in skill:
            skill = self._check_pin(owner_id, number, skill)
        if (
            tool.name in SKILL_TOOLS
            and isinstance(skill, str)
            and not may_use(allowed, self._shared_builtin(owner_id, skill), skill)
        ):
            raise JobInvalid(
                f"Step {number} uses the skill '{skill}', which the job's 'skills' don't include."
            )

    def _check_pin(self, owner_id: int, number: int, entry: str) -> str:
        """The name of a skill a step pins (`name@<64-hex hash>`): a version the skill has or
        had and still records (store/versions.py keeps pinned ones)."""
        name, skill_hash = parse_pin(entry)
        if name is None or skill_hash is None:
            raise JobInvalid(
                f"Step {number}: a skill is named 'name' or 'name@<64-hex hash>', "
                f"not {entry[:100]!r}."
            )
        try:
            skill = self.store.get(owner_id, name)
        except SkillNotFound:
            raise JobInvalid(
                f"Step {number} names '{name}', which you have no skill called."
            ) from None
        if not self.store.had(skill, skill_hash):
            raise PinnedVersionUnknown(
                f"Step {number} pins {name}@{skill_hash[:8]}, which is no version '{name}' has "
                f"(any more); it is {name}@{skill.hash} now."
            )
        return name

    def _shared_builtin(self, owner_id: int, name: str) -> bool:
        try:
            return self.store.get(owner_id, name).source == "builtin"
        except SkillNotFound:
            return False

    def _tool_grant(self, name: str) -> str:
        try:
            tool = self.registry.get(name)
        except UnknownTool:
            raise GrantInvalid(f"'grants.tools' names '{name}', which is not a tool.") from None
        if tool.name == RUN:
            raise GrantInvalid(
                "run_skill_script takes each skill's tier: grant the skill in 'grants.skills'."
            )
        if tool.tier not in GRANTABLE:
            raise GrantInvalid(
                f"'{tool.name}' is a {tool.tier} tool; only change and destructive tools are "
                "granted to a job."
            )
        return tool_key(tool.name)

    def _skill_grant(self, owner_id: int, entry: str, kept: Collection[str]) -> str:
        """`name` (its current version) or `name@<full hash>` (exactly that version, one the
        skill has or had)."""
        name, at, skill_hash = entry.partition("@")
        if at and not HASH.match(skill_hash):
            raise GrantInvalid(f"'{entry}': a skill grant is 'name' or 'name@<64-hex hash>'.")
        try:
            skill = self.store.get(owner_id, name)
        except SkillNotFound:
            raise GrantInvalid(
                f"'grants.skills' names '{name}', which you have no skill called."
            ) from None
        if skill.tier not in GRANTABLE:
            raise GrantInvalid(
                f"The skill '{name}' is a {skill.tier} skill; only change and destructive skills "
                "are granted to a job."
            )
        if not at:
            return grant_key(name, skill.hash)
        key = grant_key(name, skill_hash)
        if key not in kept and not self.store.had(skill, skill_hash):
            raise GrantInvalid(
                f"'grants.skills' names {name}@{skill_hash[:8]}…, which is no version the skill "
                f"'{name}' has or had; it is {name}@{skill.hash} now (or give the name alone "
                "for its current version)."
            )
        return key


def _host_grant(entry: str) -> str:
    host = bare_host(entry)
    if host is None:
        raise GrantInvalid(f"'grants.hosts' holds {entry[:300]!r}, which is not a bare host name.")
    return host_key(host)


def may_use(allowed: set[str] | None, builtin: bool, name: str) -> bool:
    """Whether a job whose skills are `allowed` (None: all) may use the skill `name`."""
    return allowed is None or builtin or name in allowed


def skill_allowed(job: Job, skill: Skill) -> bool:
    """Whether a call in a run of `job` may use `skill` (built-ins always)."""
    allowed = None if job.skills == EVERY_SKILL else set(job.skills or [])
    return may_use(allowed, skill.source == "builtin", skill.name)


def grants_of(session: Session, job: Job) -> dict[str, list[str]]:
    """The job's grants as the owner writes them: tool names, `name@<full hash>`, and `hosts`
    (read_web_page's, given only when the job has some)."""
    query = select(Grant.key).where(
        Grant.owner_id == job.owner_id, Grant.scope == JOB, Grant.subject == job.id
    )
    found: dict[str, list[str]] = {"tools": [], "skills": []}
    for key in sorted(session.scalars(query)):
        kind, _, rest = key.partition(":")
        listed = {"tool": "tools", HOST[:-1]: "hosts"}.get(kind, "skills")
        found.setdefault(listed, []).append(rest)
    return found


def pins_of(store: SkillStore, job: Job) -> list[dict[str, Any]]:
    """Each skill version the job's steps pin, with the skill's version now: a pin lags when
    the skill moved on (the step then fails until the owner rolls back or moves the pin)."""
    pins = []
    for number, step in enumerate(job.steps or [], 1):
        name, skill_hash = parse_pin(step_skill(step))
        if name is None or skill_hash is None:
            continue
        try:
            current: str | None = store.get(job.owner_id, name).hash
        except SkillNotFound:
            current = None
        pins.append(
            {"step": number, "skill": name, "hash": skill_hash, "current_hash": current,
             "lagging": current != skill_hash}
        )  # fmt: skip
    return pins


def schedule(job: Job) -> None:
    """Set the job's next cron time from now (none while it is disabled)."""
    job.next_run_at = next_time(job.cron, job.time_zone, utcnow()) if job.enabled else None


def _check_reading(job: Job, read_at: datetime) -> None:
    """JobChanged unless the locked job is still as the caller read it (its `updated_at`): of
    two changes made from one reading, the second finds the first's time."""
    read = read_at.replace(tzinfo=UTC) if read_at.tzinfo is None else read_at.astimezone(UTC)
    if job.updated_at != read:
        raise JobChanged(
            f"The job changed at {job.updated_at.isoformat()}, after you read it "
            f"({read.isoformat()}); read it again and make your change on top."
        )


def _fill(job: Job, spec: JobSpec) -> None:
    job.name = spec.name.strip()
    job.cron = check_cron(spec.cron)
    job.time_zone = spec.time_zone
    job.steps = [dict(step) for step in spec.steps]
    job.skills = EVERY_SKILL if spec.skills == EVERY_SKILL else sorted(set(spec.skills or []))
    job.enabled = spec.enabled
    job.model_source, job.model = spec.model.source, spec.model.model
    job.reasoning_effort = spec.model.reasoning_effort
    job.context = check_context(spec.model.context)
    job.updated_at = utcnow()
    schedule(job)


def _replace_grants(session: Session, job: Job, keys: list[str]) -> None:
    session.execute(
        delete(Grant).where(
            Grant.owner_id == job.owner_id, Grant.scope == JOB, Grant.subject == job.id
        )
    )
    for key in keys:
        add_grant(session, job.owner_id, JOB, job.id, key)


def _owned(session: Session, owner_id: int, job_id: str, lock: bool = False) -> Job:
    """The owner's job; with `lock`, no other transaction changes it or runs it until this one
    ends. A locking read does not lock on SQLite, so an UPDATE that changes nothing comes
    first: it takes SQLite's write lock (and the row's lock on PostgreSQL)."""
    query = select(Job).where(Job.id == job_id)
    if lock:
        session.execute(
            update(Job).where(Job.id == job_id).values(name=Job.name),
            execution_options={"synchronize_session": False},
        )
        query = query.with_for_update()
    job = session.scalar(query)
    if job is None or job.owner_id != owner_id:
        raise JobNotFound(f"You have no job '{job_id}'.")
    return job
