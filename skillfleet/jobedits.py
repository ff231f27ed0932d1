"""What `skillfleet jobs edit` makes of a job: the fields of a FILE, then each option's change.

The API replaces a whole job (PUT), so an edit starts from the job as the API shows it and
sends every field back; whatever the owner did not change stays as it was, grants included.
"""

from __future__ import annotations

import json
from typing import IO, Any

import click

# A job's fields, as PUT takes them; and the fields `jobs show` adds, which a FILE copied
# from it may hold.
JOB_FIELDS = (
    "name", "cron", "time_zone", "steps", "grants", "skills", "enabled",
    "source", "model", "reasoning_effort", "context",
)  # fmt: skip
SHOWN_ONLY = ("id", "next_run_at", "created_at", "updated_at", "pins")
# The API names a job's fields in its refusals; `jobs edit` speaks of its options. No tool is
# granted to a job today (run_skill_script takes each skill's tier), so only skills have one.
OPTION_WORDS = {"'grants.skills'": "--grant-skill"}


def json_of(file: IO[str]) -> Any:
    """FILE's JSON; a ClickException naming the file when it is not JSON."""
    try:
        return json.load(file)
    except json.JSONDecodeError as e:
        raise click.ClickException(f"{file.name} is not valid JSON: {e.msg}.") from e


def body_of(job: dict[str, Any]) -> dict[str, Any]:
    """The job as shown, as the body that saves it unchanged; with its `updated_at`, so the
    API refuses it (job_changed) if the job changed after it was read."""
    return {**{field: job[field] for field in JOB_FIELDS}, "updated_at": job["updated_at"]}


def fields_of(file: IO[str], job_id: str) -> dict[str, Any]:
    """The fields FILE replaces; what `jobs show` adds is read past, another job's is refused."""
    fields = json_of(file)
    if not isinstance(fields, dict):
        raise click.ClickException(
            f"{file.name} must hold a JSON object of the fields to change: {', '.join(JOB_FIELDS)}."
        )
    if fields.get("id", job_id) != job_id:
        raise click.ClickException(
            f"{file.name} is job {fields['id']}'s, not job {job_id}'s; nothing was changed."
        )
    unknown = sorted(set(fields) - set(JOB_FIELDS) - set(SHOWN_ONLY))
    if unknown:
        raise click.ClickException(
            f"{file.name} holds {', '.join(unknown)}, which a job does not have; "
            f"its fields are {', '.join(JOB_FIELDS)}."
        )
    return {key: value for key, value in fields.items() if key in JOB_FIELDS}


def apply(body: dict[str, Any], options: dict[str, Any]) -> None:
    """Apply `jobs edit`'s options to the job's fields."""
    for option in ("name", "cron", "time_zone"):
        if options[option] is not None:
            body[option] = options[option]
    if options["steps"]:
        body["steps"] = [_step(number, text) for number, text in enumerate(options["steps"], 1)]
    if options["grant_skill"] or options["revoke_skill"]:
        body["grants"] = _granted(body["grants"], options)


def in_option_words(message: str) -> str:
    """An API refusal of a job, with the options' names for the fields it names."""
    for field, option in OPTION_WORDS.items():
        message = message.replace(field, option)
    return message


def _step(number: int, text: str) -> dict[str, Any]:
    try:
        step = json.loads(text)
    except json.JSONDecodeError as e:
        raise click.ClickException(f"--step {number} is not valid JSON: {e.msg}.") from e
    if not isinstance(step, dict):
        raise click.ClickException(
            f'--step {number} must be a JSON object: {{"tool": …, "arguments": {{…}}}} or '
            '{"prompt": …}.'
        )
    return step


def _granted(grants: Any, options: dict[str, Any]) -> dict[str, list[str]]:
    """The job's grants with the options' revokes, then grants, applied to its skills."""
    skills = _names(grants, "skills")
    for skill in options["revoke_skill"]:
        skills = _revoked(skills, skill)
    skills += [skill for skill in options["grant_skill"] if skill not in skills]
    return {"tools": _names(grants, "tools"), "skills": skills}


def _names(grants: Any, kind: str) -> list[str]:
    names = grants.get(kind, []) if isinstance(grants, dict) else None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise click.ClickException(
            'The job\'s grants must be {"tools": [names], "skills": [names]}; nothing was changed.'
        )
    return list(names)


def _revoked(entries: list[str], name: str) -> list[str]:
    """`entries` without the grants of `name`: a skill (every version) or `skill@hash`."""
    kept = [entry for entry in entries if name not in (entry, entry.partition("@")[0])]
    if len(kept) == len(entries):
        held = ", ".join(entries) or "none"
        raise click.ClickException(
            f"The job has no grant of the skill '{name}' to revoke (its skill grants: {held}); "
            "nothing was changed."
        )
    return kept
