"""The consent page of OAuth for MCP hosts, part of the console: the owner signs in as on the
console (pasting the owner's token), sees which client asks, where it came from and the role
it gets (agent), and presses Allow or Deny.

Two forms, each posted to this page:

1. **Sign in**: the owner's token. The request is bound to that owner (another owner can't
   answer it afterwards) and the browser gets a sign-in cookie for it (HttpOnly,
   SameSite=Strict, this path only).
2. **Allow / Deny**: needs that cookie and the form's CSRF token, derived from it. Allow sends
   the browser back to the host with a code; Deny with `error=access_denied`.

A browser's post from another page (its Origin header) is refused at either step.

Nothing may frame the page (X-Frame-Options DENY, CSP frame-ancestors 'none'); its forms may
post only here and be redirected only to the client's redirect URI.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from flask import Blueprint, Flask, redirect, render_template_string, request
from mcp.server.auth.provider import construct_redirect_uri
from sqlalchemy import select
from sqlalchemy.orm import Session
from werkzeug.wrappers import Response

from api.auth import signed_in_owner
from api.errors import ApiError
from api.oauth.urls import CONSENT_PATH
from api.services import services
from store import oauth
from store.db import transaction
from store.errors import StoreError
from store.limits import OAUTH_CONSENT_SECONDS
from store.models import OAuthClient, OAuthGrant

COOKIE = "sf_consent"
SIGN_IN = "sign-in"  # the sign-in form's CSRF key: the request id alone is what it needs
POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self' {redirect}"
)

blp = Blueprint("oauth_consent", __name__)

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>skillfleet · {{ title }}</title>
<link rel="stylesheet" href="/console/console.css">
</head>
<body>
<main class="consent">
<h1>{{ title }}</h1>
{% if error %}
<p class="error" id="error" data-code="{{ error.code }}">{{ error.message }}</p>
{% else %}
<section id="client">
<p><strong id="client-name">{{ client.name }}</strong> asks to use skillfleet's MCP gateway
as you, with the role <strong id="role">agent</strong>: it may call tools and read calls,
runs, approvals and skills; it can't answer approvals or change settings.</p>
<dl>
<dt>Where it comes from</dt><dd id="origin">{{ origin }}</dd>
<dt>It returns to</dt><dd id="redirect-host">{{ redirect_host }}</dd>
<dt>Access to</dt><dd id="resource">{{ grant.resource }}</dd>
</dl>
<p>Its token shows in your tokens as <q>{{ client.name }}</q>; deleting it there ends the
host's access at once.</p>
</section>
{% if owner %}
<form method="post" action="{{ action }}">
<p>Signed in as <strong id="owner">{{ owner }}</strong>.</p>
<input type="hidden" name="request" value="{{ request_id }}">
<input type="hidden" name="csrf" value="{{ csrf }}">
<button type="submit" name="decision" value="allow" id="allow">Allow</button>
<button type="submit" name="decision" value="deny" id="deny" class="quiet">Deny</button>
</form>
{% else %}
<form method="post" action="{{ action }}">
<label for="token">Sign in with your owner token</label>
<input type="password" id="token" name="token" autocomplete="off" required>
<input type="hidden" name="request" value="{{ request_id }}">
<input type="hidden" name="csrf" value="{{ csrf }}">
<button type="submit" name="decision" value="sign-in" id="sign-in">Sign in</button>
</form>
{% endif %}
{% endif %}
</main>
</body>
</html>
"""


@blp.get(CONSENT_PATH)
def consent_page() -> Response:
    """The page an MCP host sends the owner to: the client, and a sign-in form."""
    request_id = request.args.get("request", "")
    try:
        with transaction(services().sessions) as session:
            grant = oauth.pending_grant(session, request_id)
            client = _client(session, grant)
            return _page(grant, client, request_id, owner=None)
    except StoreError as e:
        return _error_page(e.status, e.code, e.message)


@blp.post(CONSENT_PATH)
def consent_answer() -> Response:
    """Sign in, or the owner's Allow or Deny."""
    form = request.form
    request_id = form.get("request", "")
    decision = form.get("decision", "")
    try:
        _check_origin()
        if decision == SIGN_IN:
            return _sign_in(request_id, form.get("csrf", ""), form.get("token", ""))
        if decision in ("allow", "deny"):
            return _decide(request_id, form.get("csrf", ""), decision == "allow")
    except (StoreError, ApiError) as e:
        return _error_page(e.status, e.code, e.message)
    return _error_page(400, "invalid_decision", "Press Sign in, Allow or Deny.")


def _sign_in(request_id: str, csrf: str, token: str) -> Response:
    if not hmac.compare_digest(oauth.csrf_token(SIGN_IN, request_id), csrf):
        raise oauth.NotSignedIn("The form's CSRF token does not match; reload the page.")
    if not token.strip():
        raise ApiError(401, "unauthorized", "Paste your owner token to sign in.")
    owner = signed_in_owner(token)
    assert owner.owner_id is not None
    with transaction(services().sessions) as session:
        signed = oauth.sign_in(session, request_id, owner.owner_id)
        grant = oauth.pending_grant(session, request_id)
        client = _client(session, grant)
        response = _page(grant, client, request_id, owner=owner.owner_name, signed=signed)
    response.set_cookie(
        COOKIE,
        signed,
        httponly=True,
        samesite="Strict",
        secure=request.scheme == "https",
        path=CONSENT_PATH,
        max_age=OAUTH_CONSENT_SECONDS,
    )
    return response


def _decide(request_id: str, csrf: str, allowed: bool) -> Response:
    signed = request.cookies.get(COOKIE, "")
    with transaction(services().sessions) as session:
        grant = oauth.signed_in_grant(session, request_id, signed, csrf)
        target, state = grant.redirect_uri, grant.state
        if allowed:
            answer = {"code": oauth.allow(session, grant)}
        else:
            oauth.deny(session, grant)
            answer = {"error": "access_denied", "error_description": "The owner denied access."}
    issuer = services().settings.public_url or request.host_url.rstrip("/")
    location = construct_redirect_uri(target, state=state, iss=issuer, **answer)
    response = redirect(location, code=303)
    response.delete_cookie(COOKIE, path=CONSENT_PATH)
    return _protected(response, target)


def _page(
    grant: OAuthGrant,
    client: OAuthClient | None,
    request_id: str,
    owner: str | None,
    signed: str | None = None,
) -> Response:
    name = client.name if client is not None else grant.client_id
    document = client.document_url if client is not None else None
    origin = (
        f"its metadata document at {document}"
        if document
        else f"it registered itself as '{name}' (a name of its own choosing)"
    )
    csrf = oauth.csrf_token(signed, request_id) if signed else oauth.csrf_token(SIGN_IN, request_id)
    title = f"Allow {name}?" if owner else "Sign in to answer an MCP host"
    text = render_template_string(
        PAGE,
        title=title,
        client={"name": name},
        origin=origin,
        redirect_host=urlsplit(grant.redirect_uri).netloc or grant.redirect_uri,
        grant=grant,
        owner=owner,
        request_id=request_id,
        csrf=csrf,
        action=CONSENT_PATH,
        error=None,
    )
    return _protected(Response(text, mimetype="text/html"), grant.redirect_uri)


def _error_page(status: int, code: str, message: str) -> Response:
    text = render_template_string(
        PAGE, title="Authorization refused", error={"code": code, "message": message}
    )
    return _protected(Response(text, status=status, mimetype="text/html"), None)


def _protected(response: Response, redirect_uri: str | None) -> Response:
    """No framing, no caching, forms to this page (and its redirect to the client) only."""
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = POLICY.format(
        redirect=_source(redirect_uri) if redirect_uri else ""
    ).rstrip()
    response.headers["Cache-Control"] = "no-store"
    # Not no-referrer: under it a browser posts the forms with `Origin: null`, which the
    # origin check refuses. Same-origin still sends nothing to the client's redirect.
    response.headers["Referrer-Policy"] = "same-origin"
    return response


def _source(uri: str) -> str:
    """The CSP source of a redirect URI: its origin, or its scheme for an app's own."""
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:"


def _client(session: Session, grant: OAuthGrant) -> OAuthClient | None:
    found: OAuthClient | None = session.scalar(
        select(OAuthClient).where(OAuthClient.client_id == grant.client_id)
    )
    return found


def _check_origin() -> None:
    """A browser names the page a form was posted from: only this one may post here."""
    origin = request.headers.get("Origin")
    if origin is not None and origin.rstrip("/") != request.host_url.rstrip("/"):
        raise oauth.NotSignedIn("This form may be posted only from skillfleet's own page.")


def install_consent(app: Flask) -> None:
    app.register_blueprint(blp)
