"""The SSH keys the owner trusts to sign skills: trust one, list them, trust one no longer."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from api.auth import actor, owner_only
from api.blueprint import Blueprint
from api.nodes import broadcast_sync
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.services import services
from store.auditevents import audit_trust
from store.db import transaction
from store.limits import MAX_PUBLIC_KEY_CHARS
from store.models import TrustedKey
from store.trustedkeys import KEY_NAME, distrust_key, trust_key, trusted_keys

blp = Blueprint(
    "trusted_keys",
    __name__,
    url_prefix="/api/trusted-keys",
    description="SSH keys trusted to sign skills",
)


class TrustedKeyCreateSchema(ma.Schema):
    """Read by the store's own checks (store/trustedkeys.py), so that their code answers
    (key_invalid); the fields say what those checks accept."""

    name = ma.fields.Raw(
        load_default=None,
        metadata={
            "type": "string",
            "pattern": f"^{KEY_NAME.pattern}$",
            "description": "What skills it signed show as signed_by; left out, the "
            "principal of an allowed_signers line",
        },
    )
    public_key = ma.fields.Raw(
        load_default=None,
        metadata={
            "type": "string",
            "maxLength": MAX_PUBLIC_KEY_CHARS,
            "description": "An Ed25519, RSA (2048 bits or more) or ECDSA SSH public key: a "
            ".pub file's line, or a line of an allowed_signers file",
        },
    )


class TrustedKeySchema(ma.Schema):
    name = ma.fields.String()
    key_type = ma.fields.String(metadata={"description": "ssh-ed25519, ssh-rsa, ecdsa-sha2-…"})
    public_key = ma.fields.String(metadata={"description": "`<type> <base64>`"})
    fingerprint = ma.fields.String(metadata={"description": "SHA256:…, as ssh-keygen -l shows"})
    bits = ma.fields.Integer()
    comment = ma.fields.String(allow_none=True)
    created_at = ma.fields.DateTime()


@blp.route("")
class TrustedKeys(MethodView):
    @owner_route
    @blp.response(200, TrustedKeySchema(many=True))
    @keyset(blp)
    def get(self, page: Page) -> list[TrustedKey]:
        """List the SSH keys you trust to sign skills, by name"""
        caller = owner_only()
        with services().sessions() as session:
            keys = trusted_keys(session, caller)
        return memory_page(keys, page, caller, lambda key: (key.name,))

    @owner_route
    @blp.arguments(TrustedKeyCreateSchema())
    @blp.response(201, TrustedKeySchema)
    def post(self, body: dict[str, Any]) -> TrustedKey:
        """Trust an SSH key to sign skills; your skills it signed become trusted"""
        caller = owner_only()
        with transaction(services().sessions) as session:
            key = trust_key(session, caller, body["name"], body["public_key"])
            session.flush()  # the audit's append is the transaction's last statement
            audit_trust(session, caller, actor(), key.name, "added", key.fingerprint)
            return key


@blp.route("/<name>", methods=["DELETE"])
@owner_route
@blp.response(204)
def delete_trusted_key(name: str) -> None:
    """Trust a key no longer: skills it signed become untrusted (and held, when you require
    signatures)"""
    caller = owner_only()
    with transaction(services().sessions) as session:
        fingerprint = distrust_key(session, caller, name)
        session.flush()
        audit_trust(session, caller, actor(), name, "removed", fingerprint)
    broadcast_sync()  # skills it signed may have been switched off
