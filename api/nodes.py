"""Managed nodes: the fleet view, and each node agent's signed manifest and package downloads."""

from __future__ import annotations

from typing import Any

import redis
import structlog
from flask import Response

from api import secrets
from api.auth import node_or_owner, owner_only
from api.blueprint import Blueprint
from api.errors import ApiError
from api.paging import paginate
from api.roles import owner_route
from api.schemas import NodeSchema, SignedManifestSchema, SyncRequestSchema, file_response
from api.secrets import RunSecretsSchema
from api.services import services
from broker import fleet
from relay import naming
from store.errors import PackageNotFound
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
    return fleet.node_views(services().sessions, services().redis)


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
