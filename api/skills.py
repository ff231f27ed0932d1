"""The skills resource: list, import (zip or GitHub), read, edit, duplicate, switch, delete."""

from __future__ import annotations

import mimetypes
from typing import Any

from flask import Response, jsonify, request
from flask.views import MethodView

from api.auth import owner_only, owner_or_agent
from api.blueprint import Blueprint
from api.errors import ApiError
from api.nodes import broadcast_sync
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.schemas import (
    BundleImportSchema,
    DuplicateSchema,
    EnabledSchema,
    ExecutionSchema,
    FileDeleteQuerySchema,
    FileEditSchema,
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
from store import ownersecrets
from store.dependencies import declared_for
from store.drafts import encoded
from store.edits import install_edit
from store.hashing import regular_files
from store.importing import BundleReport, import_github, import_zip
from store.limits import MAX_EDITABLE_BYTES, MAX_FILE_BYTES
from store.models import Skill

BUNDLE_OK = "A folder of skills: every skill folder was imported"
BUNDLE_PARTLY = "A folder of skills: some skill folders were refused, each with its reason"

blp = Blueprint("skills", __name__, url_prefix="/api/skills", description="The skill store")

TEXT = "text/plain; charset=utf-8"
BINARY = "application/octet-stream"
# Text whatever the platform's type table says of them: a skill's scripts and data files.
TEXT_SUFFIXES = (".md", ".py", ".sh", ".js", ".mjs", ".ts", ".cs", ".json", ".yaml", ".yml")

IMPORT_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {"schema": ZipUploadSchema},
        "application/json": {"schema": GitHubImportSchema},
    },
}


@blp.route("")
class Skills(MethodView):
    @blp.arguments(SkillListQuerySchema(), location="query")
    @blp.response(200, SkillSchema(many=True))
    @keyset(blp)
    def get(self, query: dict[str, Any], page: Page) -> list[Skill]:
        """List your skills and the shared ones (built-ins, configured paths), by name"""
        caller = owner_or_agent()
        skills = services().store.installed(caller)
        if "enabled" in query:
            skills = [s for s in skills if s.enabled == query["enabled"]]
        return memory_page(skills, page, caller, lambda s: (s.name,))

    @owner_route
    @blp.arguments(ImportQuerySchema(), location="query")
    @blp.doc(requestBody=IMPORT_BODY)
    @blp.response(201, ImportedSkillSchema)
    @blp.alt_response(200, schema=BundleImportSchema, description=BUNDLE_OK)
    @blp.alt_response(207, schema=BundleImportSchema, description=BUNDLE_PARTLY)
    def post(self, query: dict[str, Any]) -> dict[str, Any] | Response:
        """Import a skill, or a folder of skills, from a zip upload or a GitHub folder address"""
        caller = owner_only()
        store = services().store
        result: Skill | BundleReport
        if request.mimetype == "multipart/form-data":
            result = _import_upload(caller, query)
        elif request.is_json:
            body = GitHubImportSchema().load(_json_object())
            settings = services().settings
            result = import_github(
                store,
                body["github"],
                owner_id=caller,
                api_base=settings.github_api_url,
                token=settings.github_token,
                enable=body["enable"],
                replace=query["replace"],
                name=query["name"],
                execution=query["execution"],
            )
        else:
            raise ApiError(
                415,
                "unsupported_media_type",
                "Send a multipart form with a zip in 'file', or JSON {\"github\": url}.",
            )
        broadcast_sync()
        if isinstance(result, BundleReport):
            return _bundle_response(result)
        return _imported(result)


def _import_upload(owner_id: int, query: dict[str, Any]) -> Skill | BundleReport:
    upload = request.files.get("file")
    if upload is None:
        raise ApiError(400, "file_missing", "The multipart form has no 'file' field.")
    enable = _form_bool(request.form.get("enable"), default=True)
    return import_zip(
        services().store,
        upload.stream,
        owner_id=owner_id,
        enable=enable,
        replace=query["replace"],
        filename=upload.filename,
        name=query["name"],
        execution=query["execution"],
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
        "warnings": list(skill.warnings or []),
        "lint_warnings": list(skill.lint_warnings or []),
        "signed_by": skill.signed_by,
        "signature_status": skill.signature_status,
        "signer_fingerprint": skill.signer_fingerprint,
        "signature_hold": skill.signature_hold,
    }


def _bundle_response(report: BundleReport) -> Response:
    """200 when every skill folder was imported, 207 when any was refused."""
    body = {
        "imported": [{"folder": folder, **_imported(skill)} for folder, skill in report.imported],
        "refused": [vars(refusal) for refusal in report.refused],
    }
    response = jsonify(BundleImportSchema().dump(body))
    response.status_code = 207 if report.refused else 200
    return response


def _detail(owner_id: int, skill: Skill) -> dict[str, Any]:
    store = services().store
    detail = {key: getattr(skill, key) for key in SkillSchema().fields}
    detail["warnings"] = list(skill.warnings or [])
    detail["files"] = [{"path": f.path, "size": f.size} for f in store.files(skill)]
    detail["dependencies"] = declared_for(str(store.folder(skill)), skill.hash).as_dicts()
    info = store.info(skill)
    detail["declared_name"] = info.declared_name
    detail["allowed_tools"] = info.allowed_tools
    detail["unknown_keys"] = info.unknown_keys
    # What its runs would lack of the secrets it declares: names and whether each is set.
    with services().sessions() as session:
        lacking = ownersecrets.lack(session, owner_id, skill.name, skill.hash, info.secrets)
    detail["secrets"] = [{"name": n, "set": n not in lacking.missing} for n in info.secrets]
    detail["secrets_allowed"] = not lacking.not_allowed if info.secrets else None
    return detail


@blp.route("/<name>")
class SkillItem(MethodView):
    @blp.response(200, SkillDetailSchema)
    def get(self, name: str) -> dict[str, Any]:
        """Show one skill with its files"""
        owner_id = owner_or_agent()
        return _detail(owner_id, services().store.get(owner_id, name))

    @blp.response(204)
    def delete(self, name: str) -> None:
        """Delete one of your skills (built-ins and configured skills are read-only)"""
        services().store.delete(owner_only(), name)
        broadcast_sync()


@blp.route("/<name>/files/<skill_file:path>")
class SkillFile(MethodView):
    @blp.response(200, content_type=BINARY)
    @blp.doc(responses={"200": file_response("The file", "text/plain", BINARY)})
    def get(self, name: str, path: str) -> Response:
        """Download one file of a skill: text as text/plain, anything else as bytes"""
        store = services().store
        clean, data = store.read_file(store.get(owner_or_agent(), name), path, MAX_FILE_BYTES)
        return Response(data, content_type=TEXT if _is_text(clean) else BINARY)

    @owner_route
    @blp.arguments(FileEditSchema())
    @blp.response(200, SkillDetailSchema)
    def put(self, body: dict[str, Any], name: str, path: str) -> dict[str, Any]:
        """Write one file of your skill (text, at most 256 KiB); the skill gets a new hash"""
        content = body["content"]
        if len(encoded(content, path)) > MAX_EDITABLE_BYTES:
            raise ApiError(
                413,
                "file_too_large",
                f"A file edited here may hold at most {MAX_EDITABLE_BYTES // 1024} KiB of text.",
            )
        return _owner_edit(name, {path: content}, body["hash"])

    @owner_route
    @blp.arguments(FileDeleteQuerySchema(), location="query")
    @blp.response(200, SkillDetailSchema)
    def delete(self, query: dict[str, Any], name: str, path: str) -> dict[str, Any]:
        """Delete one file of your skill; the skill gets a new hash"""
        return _owner_edit(name, {path: None}, query["hash"])


def _is_text(path: str) -> bool:
    """Whether a skill's file is served as text. Nothing else is given a type a browser could
    render (an SVG, an HTML page) on the API's origin."""
    guessed = mimetypes.guess_type(path)[0] or ""
    return guessed.startswith("text/") or path.endswith(TEXT_SUFFIXES)


def _owner_edit(name: str, changes: dict[str, str | None], expected: str | None) -> dict[str, Any]:
    """An owner's edit: one atomic install; it locks an assistant draft against later drafts."""
    caller = owner_only()
    store = services().store
    base = expected or store.get(caller, name).hash
    skill = install_edit(store, caller, name, base, changes, by_owner=True)
    broadcast_sync()
    return _detail(caller, skill)


@blp.route("/<name>/duplicate", methods=["POST"])
@owner_route
@blp.arguments(DuplicateSchema())
@blp.response(201, SkillSchema)
def duplicate(body: dict[str, Any], name: str) -> Skill:
    """Copy a skill (a built-in, say) into an owned skill under a new name"""
    copy = services().store.duplicate(owner_only(), name, body["name"])
    broadcast_sync()
    return copy


@blp.route("/<name>/enabled", methods=["PUT"])
@owner_route
@blp.arguments(EnabledSchema())
@blp.response(200, SkillSchema)
def set_enabled(body: dict[str, Any], name: str) -> Skill:
    """Enable or disable a skill; with `hash`, only if it is still the content you reviewed;
    a skill held for want of a trusted signature needs `override_signature`"""
    skill = services().store.set_enabled(
        owner_only(), name, body["enabled"], body["hash"], body["override_signature"]
    )
    broadcast_sync()
    return skill


@blp.route("/<name>/execution", methods=["PUT"])
@owner_route
@blp.arguments(ExecutionSchema())
@blp.response(200, SkillSchema)
def set_execution(body: dict[str, Any], name: str) -> Skill:
    """Choose where your skill's scripts run (null: as its SKILL.md says); its hash stays"""
    skill = services().store.set_execution(owner_only(), name, body["execution"])
    broadcast_sync()
    return skill
