"""Scheduled jobs: cron in the owner's time zone, steps, grants, runs and their history.

All of it is the owner's alone: an agent token gets 403 `owner_only`, reads included.
"""

from __future__ import annotations

from typing import Any

from flask.views import MethodView

from api.auth import owner_only
from api.blueprint import Blueprint
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.schemas import JobBodySchema, JobRunSchema, JobRunStartedSchema, JobSchema
from api.services import services
from broker.jobs import Jobs, JobSpec, grants_of, pins_of
from relay.dispatch import start_job_run
from store.modelchoice import ModelChoice, shown_context
from store.models import Job, JobRun

blp = Blueprint("jobs", __name__, url_prefix="/api/jobs", description="Scheduled jobs")


def _jobs() -> Jobs:
    found = services()
    return Jobs(found.sessions, found.broker.registry, found.store)


def _spec(body: dict[str, Any]) -> JobSpec:
    return JobSpec(
        name=body["name"],
        cron=body["cron"],
        time_zone=body["time_zone"],
        steps=body["steps"],
        grant_tools=body["grants"]["tools"],
        grant_skills=body["grants"]["skills"],
        grant_hosts=body["grants"].get("hosts", []),
        skills=body["skills"],
        enabled=body["enabled"],
        model=ModelChoice(body["source"], body["model"], body["reasoning_effort"], body["context"]),
    )


def _shown(job: Job) -> dict[str, Any]:
    with services().sessions() as session:
        grants = grants_of(session, job)
    fields = ("id", "name", "cron", "time_zone", "steps", "skills", "enabled", "model")
    shown: dict[str, Any] = {name: getattr(job, name) for name in fields}
    shown.update(
        source=job.model_source,
        reasoning_effort=job.reasoning_effort,
        context=shown_context(job.context),
        grants=grants,
        pins=pins_of(services().store, job),
        next_run_at=job.next_run_at,
        created_at=job.created_at,
        updated_at=job.updated_at,
    )
    return shown


@blp.route("")
class JobList(MethodView):
    @owner_route
    @blp.response(200, JobSchema(many=True))
    @keyset(blp)
    def get(self, page: Page) -> list[dict[str, Any]]:
        """List your jobs, by name"""
        caller = owner_only()
        jobs = _jobs().list_jobs(caller)
        by_name = memory_page(jobs, page, caller, lambda j: (j.name, j.created_at, j.id))
        return [_shown(job) for job in by_name]

    @owner_route
    @blp.arguments(JobBodySchema())
    @blp.response(201, JobSchema)
    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a job; the answer holds its id and next_run_at (UTC)"""
        return _shown(_jobs().create(owner_only(), _spec(body)))


@blp.route("/<job_id>")
class JobItem(MethodView):
    @blp.response(200, JobSchema)
    def get(self, job_id: str) -> dict[str, Any]:
        """Show a job with its grants and next run"""
        return _shown(_jobs().get(owner_only(), job_id))

    @owner_route
    @blp.arguments(JobBodySchema())
    @blp.response(200, JobSchema)
    def put(self, body: dict[str, Any], job_id: str) -> dict[str, Any]:
        """Replace a job: schedule, steps, grants and skills (send the updated_at you read)"""
        return _shown(_jobs().update(owner_only(), job_id, _spec(body), body["updated_at"]))

    @blp.response(204)
    def delete(self, job_id: str) -> None:
        """Delete a job, its grants and its run history"""
        _jobs().delete(owner_only(), job_id)


@blp.route("/<job_id>/run", methods=["POST"])
@blp.response(202, JobRunStartedSchema)
def run_job(job_id: str) -> dict[str, str]:
    """Run a job now; follow it in its runs"""
    run = _jobs().run_now(owner_only(), job_id)
    start_job_run(services().sessions, services().celery, run.id)
    return {"job_run_id": run.id}


@blp.route("/<job_id>/runs")
@owner_route
@blp.response(200, JobRunSchema(many=True))
@keyset(blp)
def list_runs(job_id: str, page: Page) -> list[JobRun]:
    """The job's runs, newest first (the newest 50 are kept)"""
    caller = owner_only()
    runs = _jobs().runs(caller, job_id)
    return memory_page(runs, page, caller, lambda r: (r.created_at, r.id), descending=True)
