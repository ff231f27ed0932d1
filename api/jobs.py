"""Scheduled jobs: cron in the owner's time zone, steps, grants, runs and their history.

All of it is the owner's alone: an agent token gets 403 `owner_only`, reads included.
"""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest.pagination import PaginationParameters

from api.auth import owner_only
from api.blueprint import Blueprint
from api.paging import list_page, paginate
from api.roles import owner_route
from api.schemas import JobBodySchema, JobRunSchema, JobRunStartedSchema, JobSchema
from api.services import services
from broker.jobs import Jobs, JobSpec, grants_of
from relay.dispatch import start_job_run
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
    )


def _shown(job: Job) -> dict[str, Any]:
    with services().sessions() as session:
        grants = grants_of(session, job)
    fields = ("id", "name", "cron", "time_zone", "steps", "skills", "enabled")
    shown: dict[str, Any] = {name: getattr(job, name) for name in fields}
    shown.update(
        grants=grants,
        next_run_at=job.next_run_at,
        created_at=job.created_at,
        updated_at=job.updated_at,
    )
    return shown


@blp.route("")
class JobList(MethodView):
    @owner_route
    @blp.response(200, JobSchema(many=True))
    @paginate(blp)
    def get(self, pagination_parameters: PaginationParameters) -> list[dict[str, Any]]:
        """List your jobs, by name"""
        jobs = _jobs().list_jobs(owner_only())
        return [_shown(job) for job in list_page(jobs, pagination_parameters)]

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
@paginate(blp, in_memory=True)
def list_runs(job_id: str) -> list[JobRun]:
    """The job's runs, newest first (the newest 50 are kept)"""
    return _jobs().runs(owner_only(), job_id)
