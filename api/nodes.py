"""Managed nodes: the fleet view, and each node agent's signed manifest and package downloads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis
import structlog
from flask import Response
from sqlalchemy import select

from api import secrets
from api.auth import node_or_owner, owner_only
from api.blueprint import Blueprint
from api.errors import ApiError
from api.paging import paginate
from api.roles import owner_route
from api.schemas import NodeSchema, SignedManifestSchema, SyncRequestSchema, file_response
from api.secrets import RunSecretsSchema
from api.services import services
from relay import heartbeat, naming
from store.errors import PackageNotFound
from store.models import Node
from store.signing import sign_manifest

log = structlog.get_logger(__name__)

blp = Blueprint("nodes", __name__, url_prefix="/api/nodes", description="Managed nodes")


@blp.route("")
@owner_route
@blp.response(200, NodeSchema(many=True))
@paginate(blp, in_memory=True)
def list_nodes() -> list[dict[str, Any]]:
    """List registered nodes and live workers: features, hashes held, last heartbeat"""
    owner_only()
    with services().sessions() as session:
        registered = list(session.scalars(select(Node.name).order_by(Node.name)))
    by_node: dict[str, list[dict[str, Any]]] = {name: [] for name in registered}
    for worker in heartbeat.workers(services().redis):
        if worker.get("name"):
            by_node.setdefault(worker["name"], []).append(worker)
    return [_node_view(name, name in registered, by_node[name]) for name in sorted(by_node)]


def _node_view(name: str, registered: bool, workers: list[dict[str, Any]]) -> dict[str, Any]:
    features = sorted({feature for worker in workers for feature in worker["features"]})
    hashes: dict[str, set[str]] = {}
    for worker in workers:
        for skill, held in worker["hashes"].items():
            hashes.setdefault(skill, set()).update(held)
    beats = [float(worker["beat"]) for worker in workers]
    return {
        "name": name,
        "registered": registered,
        "alive": any(worker["alive"] for worker in workers),
        "workers": [_worker_view(worker) for worker in workers],
        "features": features,
        "hashes": {skill: sorted(held) for skill, held in sorted(hashes.items())},
        "last_heartbeat": _iso(max(beats)) if beats else None,
    }


def _worker_view(worker: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": worker["id"],
        "role": worker["role"],
        "queue": worker["queue"],
        "host": worker["host"],
        "serving": worker["serving"] == "1",
        "alive": worker["alive"],
        "last_heartbeat": _iso(float(worker["beat"])),
        "features": worker["features"],
        "reason": worker["reason"] or None,
    }


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat()


@blp.route("/<node>/manifest")
@blp.response(200, SignedManifestSchema)
def manifest(node: str) -> dict[str, Any]:
    """The node's signed manifest: every package it should hold, with its SHA-256"""
    _check_node(node)
    found = services().packages.manifest_for(node, services().sessions)
    return sign_manifest(services().signing_key, found)


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


@blp.route("/<node>/sync", methods=["POST"])
@blp.response(202, SyncRequestSchema)
def sync(node: str) -> dict[str, Any]:
    """Ask the node's agent to sync its packages now"""
    owner_only()
    _check_name(node)
    receivers = services().redis.publish(naming.node_sync(node), "sync")
    return {"node": node, "receivers": int(receivers)}


def _check_node(node: str) -> None:
    node_or_owner(node)
    _check_name(node)


def _check_name(node: str) -> None:
    if not naming.is_node_name(node):
        raise ApiError(404, "node_not_found", f"No node is named '{node}'.")


def broadcast_sync() -> None:
    """Ask every node agent to sync now; a store change never fails because Redis is away."""
    try:
        services().redis.publish(naming.nodes_sync(), "sync")
    except redis.RedisError as e:
        log.warning("could not ask nodes to sync", error=str(e))
