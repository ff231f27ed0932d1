"""Managed nodes: the fleet view, and each node agent's signed manifest and package downloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis
import structlog
from flask import Response, request
from sqlalchemy import Select, Table, and_, bindparam, func, select

from api import files, secrets
from api.auth import node_or_owner, owner_only
from api.blueprint import Blueprint
from api.errors import ApiError
from api.paging import Page, invalid_cursor, keyset
from api.roles import owner_route
from api.schemas import (
    NodeSchema,
    SignedManifestSchema,
    StoredFileSchema,
    SyncRequestSchema,
    file_response,
)
from api.secrets import RunSecretsSchema
from api.services import services
from broker import fleet
from broker.errors import InvalidCall
from broker.runinputs import work_path
from relay import naming
from relay.connections import database_number
from store import nodes
from store.db import core_connection
from store.errors import PackageNotFound
from store.files import FileInfo, clean_name, still_kept
from store.limits import MAX_OUTPUT_FILE_BYTES, MAX_OUTPUT_FILES
from store.models import Run, StoredFile
from store.signing import manifest_tag, sign_manifest
from store.states import RunStatus

log = structlog.get_logger(__name__)

ETAG_HEADER = {
    "description": "The manifest's tag, the same while its packages are (not its issued_at)",
    "schema": {"type": "string"},
}

blp = Blueprint("nodes", __name__, url_prefix="/api/nodes", description="Managed nodes")


@blp.route("")
@owner_route
@blp.response(200, NodeSchema(many=True))
@keyset(blp)
def list_nodes(page: Page) -> list[dict[str, Any]]:
    """List your nodes and the shared runners, by name: features, hashes held, last heartbeat"""
    caller = owner_only()
    after = page.after(caller)
    if after is not None and (len(after) != 1 or not isinstance(after[0], str)):
        raise invalid_cursor()
    found = fleet.node_page(
        services().sessions,
        services().redis,
        caller,
        after=after[0] if after is not None else None,
        size=page.size,
    )
    if page.cursor is None:
        page.total = str(found.total)
    if found.more:
        page.next_key = (found.views[-1]["name"],)
    return found.views


@blp.route("/<node>/manifest")
@blp.response(200, SignedManifestSchema, headers={"ETag": ETAG_HEADER})
@blp.doc(
    parameters=[{"in": "header", "name": "If-None-Match", "schema": {"type": "string"},
                 "description": "The ETag of the manifest the node holds"}],
    responses={"304": {"description": "The node's manifest is the one it holds (If-None-Match)",
                       "headers": {"ETag": ETAG_HEADER}}},
)  # fmt: skip
def manifest(node: str) -> Any:
    """The node's signed manifest: every package it should hold, with its SHA-256; answered
    304 without a body when `If-None-Match` names the one the node holds"""
    _check_node(node)
    found = services().packages.manifest_for(node, services().sessions)
    tag = manifest_tag(services().signing_key, found)
    headers = {"ETag": f'"{tag}"'}
    if request.if_none_match.contains(tag):
        return Response(status=304, headers=headers)
    return sign_manifest(services().signing_key, found), 200, headers


@blp.route("/<node>/packages/<package>")
@blp.response(200, content_type="application/gzip")
@blp.doc(responses={"200": file_response("The package, a .tar.gz", "application/gzip")})
def package(node: str, package: str) -> Response:
    """Download one package, named `name@hash`, while that node may hold it"""
    _check_node(node)
    ref = package.removesuffix(".tar.gz")
    name, _, skill_hash = ref.partition("@")
    try:
        info = services().packages.find(name, skill_hash, services().sessions, node=node)
        data = info.path.read_bytes()
    except FileNotFoundError as e:  # retired between the lookup and the read
        raise PackageNotFound(f"No package {ref} is served.") from e
    response = Response(data, mimetype="application/gzip")
    response.headers["Content-Disposition"] = f'attachment; filename="{ref}.tar.gz"'
    return response


@blp.route("/<node>/runs/<run_id>/secrets")
@blp.response(200, RunSecretsSchema)
def run_secrets(node: str, run_id: str) -> Response:
    """The secrets of a run this node's agent is running (its node token only)"""
    _check_node(node)
    return secrets.run_secrets(node, run_id)


@blp.route("/<node>/runs/<run_id>/files/<file_id>")
@blp.response(200, content_type=files.BINARY)
@blp.doc(responses={"200": file_response("The input file's bytes", files.BINARY)})
def run_file(node: str, run_id: str, file_id: str) -> Response:
    """An input file of a run this node's agent is running (its node token only)"""
    run = _running_here(node, run_id, _FETCHING, file_id=file_id)
    if not is_input(run, file_id):
        raise ApiError(404, "file_not_found", f"The run '{run_id}' has no input file '{file_id}'.")
    return files.download(still_kept(file_id, run.file))


@blp.route("/<node>/runs/<run_id>/files", methods=["POST"])
@blp.doc(
    parameters=[{"in": "query", "name": "path", "required": True, "schema": {"type": "string"},
                 "description": "Its path in the run's working directory, such as out/a.pdf"}],
    requestBody={"required": True, "content": {files.BINARY: {
        "schema": {"type": "string", "format": "binary"}}}},
)  # fmt: skip
@blp.response(201, StoredFileSchema)
def run_files(node: str, run_id: str) -> Any:
    """Keep a file a running run made, as its owner's (this node's agent, with its node token):
    its bytes are the body, its path in the run's working directory the query's `path`"""
    run = _running_here(node, run_id, _SENDING)  # before anything of the request is read
    path = work_path_or_422(request.args.get("path"))
    if run.sent_all:
        raise ApiError(
            409, "run_files_full", f"The run '{run_id}' has sent back all the files it may."
        )
    if request.mimetype != files.BINARY:
        message = f"Send the file's bytes as the body, with Content-Type {files.BINARY}."
        raise ApiError(415, "unsupported_media_type", message)
    name = clean_name(path.rsplit("/", 1)[-1])
    return services().files.save(run.owner_id, name, request.stream, run_id=run.id, path=path)


def _running_here(
    node: str, run_id: str, query: Select[Any] | None = None, **parameters: str
) -> RunningRun:
    """The run `node`'s agent is running now, to that node's token only (an agent is refused
    as on every node route; anyone else, the run's owner included, finds nothing)."""
    found = node_or_owner(node)
    _check_name(node)
    run = running_on(node, run_id, _RUNNING if query is None else query, **parameters)
    if found.kind != "node" or found.node_name != node or run is None:
        raise ApiError(404, "run_not_found", f"No run '{run_id}' is running on '{node}'.")
    return run


@dataclass(frozen=True)
class RunningRun:
    """What the node file routes need of a running run."""

    id: str
    owner_id: int
    input_files: dict[str, Any]
    sent_all: bool = False  # it sent back all the files it may (read by _SENDING only)
    file: FileInfo | None = None  # the owner's file asked for, while kept (_FETCHING only)


# The run while it runs on a queue, with an owner: its few columns only (every run with files
# asks twice); statements built once.
_RUNNING = select(Run.id, Run.owner_id, Run.input_files).where(
    Run.id == bindparam("run_id"),
    Run.queue == bindparam("queue"),
    Run.status == RunStatus.RUNNING,
    Run.owner_id.is_not(None),
)
# The same with the owner's stored file `file_id` (none when the owner has no such file), for a
# node fetching a run's input: one round trip for the run and the file.
_KEPT = cast(Table, StoredFile.__table__).alias("kept")
_FETCHING = _RUNNING.add_columns(
    *(column.label(f"file_{column.key}") for column in _KEPT.c if column.key != "owner_id")
).outerjoin(_KEPT, and_(_KEPT.c.id == bindparam("file_id"), _KEPT.c.owner_id == Run.owner_id))
# The same with what it sent back so far, in the same round trip, for a file it sends.
_SENDING = _RUNNING.add_columns(
    select(func.count()).where(StoredFile.run_id == Run.id).scalar_subquery().label("sent"),
    select(func.coalesce(func.sum(StoredFile.size), 0))
    .where(StoredFile.run_id == Run.id)
    .scalar_subquery()
    .label("sent_bytes"),
)


def running_on(
    node: str, run_id: str, query: Select[Any] = _RUNNING, **parameters: str
) -> RunningRun | None:
    """The run `run_id` while it runs on `node` and has an owner; None otherwise. Who asks is
    the caller's to check."""
    queue = node if node in (naming.SPARK, naming.SANDBOX) else naming.node_queue(node)
    with core_connection(services().sessions) as connection:
        row = connection.execute(query, {"run_id": run_id, "queue": queue, **parameters}).first()
    if row is None:
        return None
    sent = "sent" in row._fields and (
        row.sent >= MAX_OUTPUT_FILES or row.sent_bytes >= MAX_OUTPUT_FILE_BYTES
    )
    file = None
    if "file_id" in row._fields and row.file_id is not None:
        file = FileInfo.of(row, prefix="file_")
    return RunningRun(row.id, row.owner_id, row.input_files or {}, sent, file)


def is_input(run: RunningRun, file_id: str) -> bool:
    """Whether the run's call placed the file `file_id` in its working directory."""
    return file_id in {entry.get("id") for entry in run.input_files.values()}


def work_path_or_422(path: str | None) -> str:
    try:
        return work_path(path)
    except InvalidCall as e:
        raise ApiError(422, "invalid_path", e.message.removeprefix("HOST: ")) from e


@blp.route("/<node>/sync", methods=["POST"])
@blp.response(202, SyncRequestSchema)
def sync(node: str) -> dict[str, Any]:
    """Ask the node's agent to sync its packages now"""
    _check_name(node)
    _check_offered(node, owner_only())
    client = services().redis
    receivers = client.publish(naming.node_sync(node, database_number(client)), "sync")
    return {"node": node, "receivers": int(receivers)}


def _check_node(node: str) -> None:
    found = node_or_owner(node)
    _check_name(node)
    if found.owner_id is not None:
        _check_offered(node, found.owner_id)


def _check_offered(node: str, owner_id: int) -> None:
    """An owner reaches only the nodes offered to it: another's holds others' skills."""
    with services().sessions() as session:
        if owner_id not in nodes.owners_of(session, node):
            raise ApiError(404, "node_not_found", f"No node is named '{node}'.")


def _check_name(node: str) -> None:
    if not naming.is_node_name(node):
        raise ApiError(404, "node_not_found", f"No node is named '{node}'.")


def broadcast_sync() -> None:
    """Ask every node agent to sync now; a store change never fails because Redis is away."""
    try:
        client = services().redis
        client.publish(naming.nodes_sync(database_number(client)), "sync")
    except redis.RedisError as e:
        log.warning("could not ask nodes to sync", error=str(e))
