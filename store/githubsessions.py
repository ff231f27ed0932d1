"""Console sign-ins with GitHub: who may sign in as which owner, and the owner token each gets.

A sign-in gives an owner token (role `owner`, labelled with the GitHub login) that expires
with GitHub's access token, or after SKILLFLEET_GITHUB_SESSION_SECONDS for a token that never
expires. Refreshing it asks GitHub again (a new access token from the refresh token, then the
user and, for an org rule, the membership): a person taken off the list, or out of the org,
can't renew. Deleting the token ends the sign-in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.errors import GitHubUserNotAllowed, NotAGitHubSession
from store.githubdevice import GitHubUser, Grant
from store.models import ApiToken, GitHubSession, utcnow
from store.secrets import Sealer
from store.settings import SignInRule
from store.tokens import Role, ensure_owner, issue_token

NOT_ALLOWED = (
    "The GitHub user {login} (id {id}) may not sign in here: ask the operator to add "
    "user:{id}=<owner> to SKILLFLEET_GITHUB_SIGNIN. Nothing was granted."
)


def scope_for(rules: Sequence[SignInRule]) -> str:
    """The OAuth scope to ask for: read:org when an org rule must see private membership."""
    return "read:org" if any(rule.kind == "org" for rule in rules) else ""


def owner_for(
    rules: Sequence[SignInRule], user: GitHubUser, is_member: Callable[[str], bool]
) -> str:
    """The owner `user` signs in as: a rule naming the user's id first, then the org rules in
    the order given; GitHubUserNotAllowed when none matches."""
    for rule in rules:
        if rule.kind == "user" and rule.subject == str(user.id):
            return rule.owner
    for rule in rules:
        if rule.kind == "org" and is_member(rule.subject):
            return rule.owner
    raise GitHubUserNotAllowed(NOT_ALLOWED.format(login=user.login, id=user.id))


def session_end(grant: Grant, session_seconds: int) -> datetime:
    """When the owner token of a sign-in expires: with GitHub's access token, or after
    `session_seconds` when that never expires."""
    return grant.access_expires_at or utcnow() + timedelta(seconds=session_seconds)


def open_session(
    session: Session,
    sealer: Sealer,
    owner_name: str,
    user: GitHubUser,
    grant: Grant,
    session_seconds: int,
) -> tuple[ApiToken, str]:
    """An owner token for `owner_name` (made if new) and the GitHub session behind it."""
    owner = ensure_owner(session, owner_name)
    expires_at = session_end(grant, session_seconds)
    row, token = issue_token(
        session, owner.id, Role.OWNER, f"GitHub sign-in: {user.login}", expires_at=expires_at
    )
    session.add(
        GitHubSession(
            token_id=row.id,
            github_user_id=user.id,
            github_login=user.login,
            **_sealed(sealer, grant),
        )
    )
    session.flush()
    return row, token


def session_of(session: Session, token_id: int | None) -> tuple[GitHubSession, ApiToken]:
    """The GitHub session behind the token `token_id`; NotAGitHubSession for another token."""
    found = session.execute(
        select(GitHubSession, ApiToken)
        .join(ApiToken, ApiToken.id == GitHubSession.token_id)
        .where(GitHubSession.token_id == token_id)
    ).first()
    if found is None:
        raise NotAGitHubSession(
            "This token was not given by a GitHub sign-in; only those are refreshed."
        )
    return found[0], found[1]


def renew(
    sealer: Sealer,
    github: GitHubSession,
    token: ApiToken,
    user: GitHubUser,
    grant: Grant,
    session_seconds: int,
) -> None:
    """Keep GitHub's new tokens and move the owner token's expiry on."""
    for key, value in _sealed(sealer, grant).items():
        setattr(github, key, value)
    github.github_login = user.login
    github.refreshed_at = utcnow()
    token.expires_at = session_end(grant, session_seconds)


def access_token(sealer: Sealer, github: GitHubSession) -> str:
    return sealer.unseal(github.access_token)


def refresh_token(sealer: Sealer, github: GitHubSession) -> str | None:
    return sealer.unseal(github.refresh_token) if github.refresh_token else None


def _sealed(sealer: Sealer, grant: Grant) -> dict[str, object]:
    return {
        "access_token": sealer.seal(grant.access_token),
        "refresh_token": sealer.seal(grant.refresh_token) if grant.refresh_token else None,
        "access_expires_at": grant.access_expires_at,
        "refresh_expires_at": grant.refresh_expires_at,
    }
