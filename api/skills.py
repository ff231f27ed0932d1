"""The skills resource: list, import (zip or GitHub), read, duplicate, switch and delete."""

from __future__ import annotations

import mimetypes
from typing import Any

from flask import Response, request
from flask.views import MethodView
from flask_smorest import Blueprint

from api.auth import owner_id
from api.errors import ApiError
from api.nodes import broadcast_sync
from api.paging import paginate
from api.schemas import (
    DuplicateSchema,
    EnabledSchema,
    GitHubImportSchema,
    ImportedSkillSchema,
    ImportQuerySchema,
    SkillDetailSchema,
    SkillListQuerySchema,
    SkillSchema,
    ZipUploadSchema,
    file_response,
)
from api.services import services
from store.hashing import regular_files
from store.importing import import_github, import_zip
from store.limits import MAX_FILE_BYTES
from store.models import Skill

blp = Blueprint("skills", __name__, url_prefix="/api/skills", description="The skill store")

IMPORT_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {"schema": ZipUploadSchema},
        "application/json": {"schema": GitHubImportSchema},
    },
}


@blp.route("")
class Skills(MethodView):
    @blp.arguments(SkillListQuerySchema, location="query")
    @blp.response(200, SkillSchema(many=True))
    @paginate(blp, in_memory=True)
    def get(self, query: dict[str, Any]) -> list[Skill]:
        """List your skills and the shared ones (built-ins, configured paths)"""
        skills = services().store.installed(owner_id())
        if "enabled" in query:
            skills = [s for s in skills if s.enabled == query["enabled"]]
        return skills

    @blp.arguments(ImportQuerySchema, location="query")
    @blp.doc(requestBody=IMPORT_BODY)
    @blp.response(201, ImportedSkillSchema)
    def post(self, query: dict[str, Any]) -> dict[str, Any]:
        """Import a skill from a zip upload or a GitHub folder address"""
        caller = owner_id()
        store = services().store
        if request.mimetype == "multipart/form-data":
            skill = _import_upload(caller, query["replace"])
        elif request.is_json:
            body = GitHubImportSchema().load(_json_object())
            settings = services().settings
            skill = import_github(
                store,
                body["github"],
                owner_id=caller,
                api_base=settings.github_api_url,
                token=settings.github_token,
                enable=body["enable"],
                replace=query["replace"],
            )
        else:
            raise ApiError(
                415,
                "unsupported_media_type",
                "Send a multipart form with a zip in 'file', or JSON {\"github\": url}.",
            )
        broadcast_sync()
        return _imported(skill)


def _import_upload(owner_id: int, replace: bool) -> Skill:
    upload = request.files.get("file")
    if upload is None:
        raise ApiError(400, "file_missing", "The multipart form has no 'file' field.")
    enable = _form_bool(request.form.get("enable"), default=True)
    return import_zip(
        services().store,
        upload.stream,
        owner_id=owner_id,
        enable=enable,
        replace=replace,
        filename=upload.filename,
    )


def _form_bool(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ApiError(400, "invalid_request", "'enable' must be true or false.")


def _json_object() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "The request body must be a JSON object.")
    return body


def _imported(skill: Skill) -> dict[str, Any]:
    folder = services().store.folder(skill)
    return {
        "name": skill.name,
        "hash": skill.hash,
        "enabled": skill.enabled,
        "files": regular_files(folder),
    }


@blp.route("/<name>")
class SkillItem(MethodView):
    @blp.response(200, SkillDetailSchema)
    def get(self, name: str) -> dict[str, Any]:
        """Show one skill with its files"""
        store = services().store
        skill = store.get(owner_id(), name)
        detail = {key: getattr(skill, key) for key in SkillSchema().fields}
        detail["files"] = [{"path": f.path, "size": f.size} for f in store.files(skill)]
        return detail

    @blp.response(204)
    def delete(self, name: str) -> None:
        """Delete one of your skills (built-ins and configured skills are read-only)"""
        services().store.delete(owner_id(), name)
        broadcast_sync()


@blp.route("/<name>/files/<path:path>")
@blp.response(200, content_type="application/octet-stream")
@blp.doc(responses={"200": file_response("The file", "text/plain", "application/octet-stream")})
def skill_file(name: str, path: str) -> Response:
    """Download one file of a skill"""
    store = services().store
    clean, data = store.read_file(store.get(owner_id(), name), path, MAX_FILE_BYTES)
    mimetype = mimetypes.guess_type(clean)[0] or "application/octet-stream"
    if mimetype.startswith("text/") or clean.endswith((".md", ".py", ".sh", ".js", ".mjs")):
        mimetype = "text/plain; charset=utf-8"
    return Response(data, mimetype=mimetype)


@blp.route("/<name>/duplicate", methods=["POST"])
@blp.arguments(DuplicateSchema)
@blp.response(201, SkillSchema)
def duplicate(body: dict[str, Any], name: str) -> Skill:
    """Copy a skill (a built-in, say) into an owned skill under a new name"""
    copy = services().store.duplicate(owner_id(), name, body["name"])
    broadcast_sync()
    return copy


@blp.route("/<name>/enabled", methods=["PUT"])
@blp.arguments(EnabledSchema)
@blp.response(200, SkillSchema)
def set_enabled(body: dict[str, Any], name: str) -> Skill:
    """Enable or disable a skill; with `hash`, only if it is still the content you reviewed"""
    skill = services().store.set_enabled(owner_id(), name, body["enabled"], body["hash"])
    broadcast_sync()
    return skill
