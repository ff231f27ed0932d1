"""SQLAlchemy models. Alembic migrations in migrations/ are the only source of the schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from store.states import (
    ApprovalStatus,
    CallStatus,
    EditPlanStatus,
    JobRunStatus,
    QuestionStatus,
    RunStatus,
    TurnStatus,
    check,
)

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back aware (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, datetime: UTCDateTime()}


class Owner(Base):
    """A person who owns skills, chats, grants and approvals."""

    __tablename__ = "owners"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # run_command's command runs through /bin/sh -c instead of as a plain argv (owner setting).
    run_command_shell: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # New content no key the owner trusts signed is held: installed disabled, and switched on
    # only with an explicit override (store/signatures.py).
    require_signature: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class ApiToken(Base):
    """A bearer token, stored as its SHA-256: an owner's (role owner or agent) or a node agent's."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        CheckConstraint(
            "(kind = 'node' AND role IS NULL) OR (kind = 'owner' AND role IN ('owner', 'agent'))",
            name="role",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # "owner" or "node"
    # An owner's token: "owner" does everything of that owner, "agent" calls tools and reads.
    role: Mapped[str | None] = mapped_column(String(16))
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    node_name: Mapped[str | None] = mapped_column(String(64))
    label: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]
    # An agent token an MCP host got through OAuth (store/oauth.py): the resource it is bound to
    # (the /mcp URL it may be used at, RFC 8707).
    resource: Mapped[str | None] = mapped_column(String(300))
    # Refused from this moment on (an OAuth access token, a GitHub sign-in's token); None: until
    # deleted.
    expires_at: Mapped[datetime | None]

    owner: Mapped[Owner | None] = relationship()


class OAuthClient(Base):
    """An MCP host known to the authorization server: registered (RFC 7591) or named by the
    URL of its metadata document (CIMD), with the metadata it gave as `info`."""

    __tablename__ = "oauth_clients"

    id: Mapped[int] = mapped_column(primary_key=True)
    client_id: Mapped[str] = mapped_column(String(300), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    # The URL of its metadata document (CIMD); None for a registered client.
    document_url: Mapped[str | None] = mapped_column(String(300))
    info: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    fetched_at: Mapped[datetime] = mapped_column(default=utcnow)


class OAuthGrant(Base):
    """One authorization request of a client: opened at /oauth/authorize, signed in to and
    decided by an owner on the consent page, then its code exchanged once for tokens."""

    __tablename__ = "oauth_grants"

    id: Mapped[int] = mapped_column(primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64), unique=True)
    client_id: Mapped[str] = mapped_column(
        ForeignKey("oauth_clients.client_id", ondelete="CASCADE")
    )
    redirect_uri: Mapped[str] = mapped_column(Text)
    redirect_uri_explicit: Mapped[bool] = mapped_column(Boolean)
    code_challenge: Mapped[str] = mapped_column(String(128))
    state: Mapped[str | None] = mapped_column(Text)
    scopes: Mapped[str] = mapped_column(String(300), default="")
    resource: Mapped[str] = mapped_column(String(300))
    # The owner who signed in on the consent page, and that sign-in's session (a cookie).
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    session_hash: Mapped[str | None] = mapped_column(String(64))
    code_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    # The agent token its code was exchanged for: revoked if the code is presented again.
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]
    used_at: Mapped[datetime | None]


class OAuthRefreshToken(Base):
    """A refresh token of an OAuth agent token (`token_id`), stored as its SHA-256. Each use
    rotates it; using one twice revokes the agent token and every refresh token of it."""

    __tablename__ = "oauth_refresh_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"))
    client_id: Mapped[str] = mapped_column(String(300))
    scopes: Mapped[str] = mapped_column(String(300), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


class GitHubSession(Base):
    """A console sign-in with GitHub: the owner token it gave, the GitHub user it was given to
    (by id, which never changes), and that user's GitHub tokens (sealed, store/secrets.py) to
    refresh it with."""

    __tablename__ = "github_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_id: Mapped[int] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"), unique=True
    )
    github_user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    github_login: Mapped[str] = mapped_column(String(64))
    access_token: Mapped[str] = mapped_column(Text)
    refresh_token: Mapped[str | None] = mapped_column(Text)
    # When GitHub's access token and refresh token stop working (None: they don't expire).
    access_expires_at: Mapped[datetime | None]
    refresh_expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    refreshed_at: Mapped[datetime | None]


class Skill(Base):
    """The index entry of one skill; its files live in a folder named by the skill.

    An owned skill belongs to one owner (names are unique per owner); a shared skill (built-in,
    or found on a configured path) has no owner, is read-only and every owner sees it.
    """

    __tablename__ = "skills"
    __table_args__ = (
        UniqueConstraint("owner_id", "name"),
        CheckConstraint(
            "execution_choice IS NULL OR execution_choice IN ('node', 'spark', 'sandbox')",
            name="execution_choice",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), index=True)
    source: Mapped[str] = mapped_column(String(16))  # builtin, path, upload, github, copy, draft
    origin: Mapped[str | None] = mapped_column(Text)
    location: Mapped[str | None] = mapped_column(Text)  # folder of a read-only skill
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    author: Mapped[str] = mapped_column(String(16))  # builtin, owner, assistant, operator
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    hash: Mapped[str] = mapped_column(String(64))
    revision: Mapped[int] = mapped_column(Integer, default=1)
    description: Mapped[str] = mapped_column(Text)
    # Where its scripts run: the owner's choice, else SKILL.md's skillfleet.execution, else
    # `auto` (store/validation.py); the owner's choice is kept apart, across new content.
    execution: Mapped[str] = mapped_column(String(16))
    execution_choice: Mapped[str | None] = mapped_column(String(16))
    tier: Mapped[str] = mapped_column(String(16))
    file_count: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(Integer)
    locked: Mapped[bool] = mapped_column(Boolean, default=False)
    # Review notes: lint warnings of this content; for drafts, the chats and the reason.
    lint_warnings: Mapped[list[str] | None] = mapped_column(JSON)
    source_chats: Mapped[list[str] | None] = mapped_column(JSON)
    rationale: Mapped[str | None] = mapped_column(Text)
    # The author's SSH signature over the content hash (`skillfleet.sig`, store/signatures.py):
    # its text, the fingerprint of the key that made it, and the name of the owner's trusted
    # key it verified with (None: unsigned, or signed by a key the owner does not trust).
    signature: Mapped[str | None] = mapped_column(Text)
    signer_fingerprint: Mapped[str | None] = mapped_column(String(100))
    signed_by: Mapped[str | None] = mapped_column(String(64))
    # Held: the owner requires signatures and no trusted key signed this content; it is
    # switched on only with the override.
    signature_hold: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # What the import bent to accept the skill (store/leniency.py), shown for review.
    warnings: Mapped[list[str]] = mapped_column(JSON, default=list, server_default="[]")

    @property
    def read_only(self) -> bool:
        return self.source in ("builtin", "path")

    @property
    def signature_status(self) -> str:
        """trusted (`signed_by` names the owner's key), untrusted (a good signature by a key
        the owner does not trust) or unsigned (store/signatures.py)."""
        if self.signed_by is not None:
            return "trusted"
        return "untrusted" if self.signer_fingerprint is not None else "unsigned"


class SkillVersion(Base):
    """A content hash a skill has or had: what a job's grant or step may name (`name@<hash>`),
    who made it and how, and whether its files are kept to roll back to (store/versions.py)."""

    __tablename__ = "skill_versions"

    skill_id: Mapped[int] = mapped_column(
        ForeignKey("skills.id", ondelete="CASCADE"), primary_key=True
    )
    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    # What made it (upload, github, copy, draft, edit, builtin, path) and who (owner,
    # assistant, operator, builtin); None for versions recorded before versions were kept.
    source: Mapped[str | None] = mapped_column(String(16))
    author: Mapped[str | None] = mapped_column(String(16))
    # The key that signed it, as the owner's trusted keys name it; None: unsigned or unchecked.
    signed_by: Mapped[str | None] = mapped_column(String(200))
    # The author's `skillfleet.sig` it came with (not part of its hash): a rollback puts it back.
    signature: Mapped[str | None] = mapped_column(Text)
    file_count: Mapped[int | None] = mapped_column(Integer)
    size_bytes: Mapped[int | None] = mapped_column(Integer)
    # Whether its files are in the store (skill_version_files), so it can be made current again.
    kept: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class SkillVersionFile(Base):
    """One file of a kept version: its path and the SHA-256 its bytes are stored under."""

    __tablename__ = "skill_version_files"
    __table_args__ = (
        ForeignKeyConstraint(
            ["skill_id", "hash"],
            ["skill_versions.skill_id", "skill_versions.hash"],
            ondelete="CASCADE",
        ),
    )

    skill_id: Mapped[int] = mapped_column(primary_key=True)
    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    path: Mapped[str] = mapped_column(String(1024), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), index=True)


class Chat(Base):
    """A conversation of an owner, named by the client's chat id."""

    __tablename__ = "chats"
    __table_args__ = (
        UniqueConstraint("owner_id", "external_id"),
        # The list's order, newest first, within the owner's (api/paging.py).
        Index("ix_chats_owner_newest", "owner_id", "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(200))
    declined_calls: Mapped[int] = mapped_column(Integer, default=0)
    expired_calls: Mapped[int] = mapped_column(Integer, default=0)
    failed_calls: Mapped[int] = mapped_column(Integer, default=0)
    timed_out_calls: Mapped[int] = mapped_column(Integer, default=0)
    known_skills: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChatActivation(Base):
    """The skills a chat loaded, at the hash it got: carried into its turns (`broker/loaded.py`)."""

    __tablename__ = "chat_activations"

    chat_id: Mapped[int] = mapped_column(
        ForeignKey("chats.id", ondelete="CASCADE"), primary_key=True
    )
    skill_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    skill_hash: Mapped[str] = mapped_column(String(64))
    activated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ToolCall(Base):
    """One tool call an agent made, with its outcome."""

    __tablename__ = "tool_calls"
    __table_args__ = (
        CheckConstraint(check(CallStatus), name="status"),
        Index("ix_tool_calls_owner_newest", "owner_id", "created_at", "id"),
        Index("ix_tool_calls_owner_status_newest", "owner_id", "status", "created_at", "id"),
        Index("ix_tool_calls_chat_newest", "chat_id", "owner_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    chat_id: Mapped[int | None] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    job_run_id: Mapped[str | None] = mapped_column(String(64))
    turn_id: Mapped[str | None] = mapped_column(String(200), index=True)
    tool: Mapped[str] = mapped_column(String(64))
    tier: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16), default="execute")
    status: Mapped[str] = mapped_column(String(24))
    rule: Mapped[str | None] = mapped_column(String(100))
    arguments: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    result: Mapped[Any | None] = mapped_column(JSON)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    skill_name: Mapped[str | None] = mapped_column(String(64))
    skill_hash: Mapped[str | None] = mapped_column(String(64))
    grant_key: Mapped[str | None] = mapped_column(String(200))
    node: Mapped[str | None] = mapped_column(String(64))
    approval_id: Mapped[str | None] = mapped_column(String(36))
    run_id: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    # The chat's id as its agent sent it (over MCP it names the client), read with the row.
    chat_name: Mapped[str | None] = column_property(
        select(Chat.external_id).where(Chat.id == chat_id).scalar_subquery()
    )


class TurnCount(Base):
    """How many calls one turn of an owner has admitted; counted up by one conditional UPDATE."""

    __tablename__ = "turn_counts"

    owner_id: Mapped[int] = mapped_column(
        ForeignKey("owners.id", ondelete="CASCADE"), primary_key=True
    )
    turn: Mapped[str] = mapped_column(String(240), primary_key=True)
    calls: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class Grant(Base):
    """A grant key that lets matching calls run without asking, in one scope.

    Scopes: `chat` (subject: the chat's row id), `job` (subject: the job id) and `owner`
    (the owner's settings: change tools that always run).
    """

    __tablename__ = "grants"
    __table_args__ = (UniqueConstraint("owner_id", "scope", "subject", "key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    scope: Mapped[str] = mapped_column(String(8))
    subject: Mapped[str] = mapped_column(String(200))
    chat_id: Mapped[int | None] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Approval(Base):
    """The owner's answer to exactly one call: tool, arguments, skill hash and node."""

    __tablename__ = "approvals"
    __table_args__ = (
        CheckConstraint(check(ApprovalStatus), name="status"),
        Index("ix_approvals_owner_newest", "owner_id", "created_at", "id"),
        Index("ix_approvals_owner_status_newest", "owner_id", "status", "created_at", "id"),
        # What expiry reads before each list (the owner's) and each sweep (everyone's).
        Index("ix_approvals_owner_status_expires", "owner_id", "status", "expires_at"),
        Index("ix_approvals_status_expires", "status", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    call_id: Mapped[str] = mapped_column(ForeignKey("tool_calls.id", ondelete="CASCADE"))
    chat_id: Mapped[int | None] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    job_run_id: Mapped[str | None] = mapped_column(String(64))
    tool: Mapped[str] = mapped_column(String(64))
    tier: Mapped[str] = mapped_column(String(16))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSON)
    skill_name: Mapped[str | None] = mapped_column(String(64))
    skill_hash: Mapped[str | None] = mapped_column(String(64))
    node: Mapped[str | None] = mapped_column(String(64))
    grant_key: Mapped[str | None] = mapped_column(String(200))
    rule: Mapped[str | None] = mapped_column(String(100))
    warning: Mapped[str] = mapped_column(Text)
    offers_chat_grant: Mapped[bool] = mapped_column(Boolean, default=True)
    # The call's chat was the caller's guess, not one conversation (an MCP client that named
    # none): approving for that chat is not offered.
    chat_guessed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    status: Mapped[str] = mapped_column(String(24))  # indexed with expires_at below
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    answered_at: Mapped[datetime | None]
    # Why the owner denied the call, when they said; its agent is told it too.
    reason: Mapped[str | None] = mapped_column(Text)


class Question(Base):
    """Something a call asks the owner (ask_owner), or a secret it asks them to type
    (request_secret: `kind` secret; the value goes to `owner_secrets`, never here)."""

    __tablename__ = "questions"
    __table_args__ = (
        CheckConstraint(check(QuestionStatus), name="status"),
        Index("ix_questions_owner_newest", "owner_id", "created_at", "id"),
        Index("ix_questions_owner_status_newest", "owner_id", "status", "created_at", "id"),
        Index("ix_questions_owner_status_expires", "owner_id", "status", "expires_at"),
        Index("ix_questions_status_expires", "status", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    call_id: Mapped[str] = mapped_column(ForeignKey("tool_calls.id", ondelete="CASCADE"))
    chat_id: Mapped[int | None] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    job_run_id: Mapped[str | None] = mapped_column(String(64))
    turn_id: Mapped[str | None] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))  # question | secret
    text: Mapped[str] = mapped_column(Text)  # the question, or why the secret is needed
    choices: Mapped[list[str] | None] = mapped_column(JSON)
    secret_name: Mapped[str | None] = mapped_column(String(64))
    skill_name: Mapped[str | None] = mapped_column(String(64))
    # The skill's full content hash when it was asked: the version the owner's answer allows.
    skill_hash: Mapped[str | None] = mapped_column(String(64))
    answer: Mapped[str | None] = mapped_column(Text)  # never set for a secret
    status: Mapped[str] = mapped_column(String(24))  # indexed with expires_at below
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    answered_at: Mapped[datetime | None]


class OwnerSecret(Base):
    """A secret the owner gave, encrypted at rest; `skill_name` "" when it is the owner's
    alone, else the skill it belongs to."""

    __tablename__ = "owner_secrets"
    __table_args__ = (UniqueConstraint("owner_id", "skill_name", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    skill_name: Mapped[str] = mapped_column(String(64), default="")
    value: Mapped[str] = mapped_column(Text)  # Fernet token (store/secrets.py)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class TrustedKey(Base):
    """An SSH public key the owner trusts to sign skills, under a name skills show as
    `signed_by` (store/trustedkeys.py)."""

    __tablename__ = "trusted_keys"
    __table_args__ = (
        UniqueConstraint("owner_id", "name"),
        UniqueConstraint("owner_id", "fingerprint", name="uq_trusted_keys_owner_fingerprint"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    key_type: Mapped[str] = mapped_column(String(64))  # ssh-ed25519, ssh-rsa, ecdsa-sha2-…
    public_key: Mapped[str] = mapped_column(Text)  # `<type> <base64>`, no comment
    fingerprint: Mapped[str] = mapped_column(String(100))  # SHA256:…, as ssh-keygen shows it
    bits: Mapped[int] = mapped_column(Integer)
    comment: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class EditPlan(Base):
    """An edit_skill call read once: the changes, their diff and the hash they apply to."""

    __tablename__ = "edit_plans"
    __table_args__ = (CheckConstraint(check(EditPlanStatus), name="status"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    call_id: Mapped[str] = mapped_column(String(36), index=True, unique=True)
    approval_id: Mapped[str | None] = mapped_column(String(36), index=True)
    skill_name: Mapped[str] = mapped_column(String(64))
    base_hash: Mapped[str] = mapped_column(String(64))
    changes: Mapped[dict[str, Any]] = mapped_column(JSON)
    diff: Mapped[str] = mapped_column(Text)
    lint_warnings: Mapped[list[str]] = mapped_column(JSON)
    rationale: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    applied_hash: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    answered_at: Mapped[datetime | None]


class ChatReview(Base):
    """A chat the owner's chat review already looked at (and the skill it led to, if any)."""

    __tablename__ = "chat_reviews"
    __table_args__ = (UniqueConstraint("owner_id", "chat_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    chat_id: Mapped[int] = mapped_column(ForeignKey("chats.id", ondelete="CASCADE"))
    skill_name: Mapped[str | None] = mapped_column(String(64))
    reviewed_at: Mapped[datetime] = mapped_column(default=utcnow)


# A run names a skill's script (every skill column set, no command) or a command (the reverse).
RUN_SUBJECT = (
    "(command IS NULL AND skill_name IS NOT NULL AND skill_hash IS NOT NULL "
    "AND script IS NOT NULL) OR (command IS NOT NULL AND skill_name IS NULL "
    "AND skill_hash IS NULL AND script IS NULL)"
)


class Run(Base):
    """One dispatched script, or one command on a node (run_command): where it ran, how it
    ended and its capped output."""

    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(check(RunStatus), name="status"),
        CheckConstraint(RUN_SUBJECT, name="subject"),
        Index("ix_runs_owner_newest", "owner_id", "created_at", "id"),
        Index("ix_runs_owner_status_newest", "owner_id", "status", "created_at", "id"),
        Index("ix_runs_chat_newest", "chat_id", "owner_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    call_id: Mapped[str | None] = mapped_column(String(36), index=True)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("owners.id", ondelete="SET NULL"))
    # The call's chat (None: a job's command, a call of no chat, or the chat was deleted), so
    # that a chat's runs are read through their own index (`GET /api/runs?chat=`).
    chat_id: Mapped[int | None] = mapped_column(ForeignKey("chats.id", ondelete="SET NULL"))
    skill_name: Mapped[str | None] = mapped_column(String(64))
    skill_hash: Mapped[str | None] = mapped_column(String(64))
    script: Mapped[str | None] = mapped_column(String(1024))
    # run_command's argv, executed without a shell (None: a skill's script).
    command: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The script's command line as the call gave it (`args`; None: from its argv schema), the
    # files placed in its working directory (path to {id, size, sha256}) and those it made.
    args: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))
    input_files: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    output_files: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    execution: Mapped[str] = mapped_column(String(16))
    queue: Mapped[str] = mapped_column(String(80))
    node: Mapped[str | None] = mapped_column(String(64))
    network: Mapped[str] = mapped_column(String(16), default="none")
    isolation: Mapped[str | None] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    stdout: Mapped[str] = mapped_column(Text, default="")
    stderr: Mapped[str] = mapped_column(Text, default="")
    error: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str | None] = mapped_column(String(200))
    timeout_seconds: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class StoredFile(Base):
    """A file of an owner's: uploaded (`POST /api/files`), sent inline with a call, or made by
    a run; its bytes are `<data>/files/<id>`, kept until `expires_at` (store/files.py)."""

    __tablename__ = "files"
    __table_args__ = (Index("ix_files_owner_newest", "owner_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    # The run that made it and its path in that run's working directory (None: uploaded).
    run_id: Mapped[str | None] = mapped_column(String(36), index=True)
    path: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)


class RunFacts(Protocol):
    """What a run's row says: a `Run`, or the row a worker's claim or finish read back."""

    id: str
    call_id: str | None
    owner_id: int | None
    skill_name: str | None
    skill_hash: str | None
    script: str | None
    command: list[str] | None
    arguments: dict[str, Any]
    args: list[str] | None
    input_files: dict[str, Any] | None
    output_files: list[dict[str, Any]] | None
    execution: str
    node: str | None
    network: str
    isolation: str | None
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    error: str | None
    timeout_seconds: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class Node(Base):
    """A managed server registered with `skillfleet nodes add`."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class NodeOwner(Base):
    """An owner a node is offered to: its scripts may run there (store/nodes.py)."""

    __tablename__ = "node_owners"

    node_name: Mapped[str] = mapped_column(
        ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True
    )
    owner_id: Mapped[int] = mapped_column(
        ForeignKey("owners.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Job(Base):
    """A scheduled job of an owner: a cron time in a time zone and the steps it runs.

    Its grants live in `grants` with scope `job` and the job's id as subject.
    """

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    cron: Mapped[str] = mapped_column(String(100))
    time_zone: Mapped[str] = mapped_column(String(64))
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    # None: no skills; "*": every enabled skill; or a list of names (built-ins always offered).
    skills: Mapped[Any | None] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # The model its prompt steps run on; None: the owner's default (store/modelchoice.py).
    model_source: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(200))
    reasoning_effort: Mapped[str | None] = mapped_column(String(16))
    context: Mapped[str | None] = mapped_column(String(16))
    # The next cron time, in UTC; the ticker claims a due time by moving it on.
    next_run_at: Mapped[datetime | None] = mapped_column(index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class JobRun(Base):
    """One run of a job: its own chat in execute mode; steps in order, the first failure stops."""

    __tablename__ = "job_runs"
    __table_args__ = (CheckConstraint(check(JobRunStatus), name="status"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    trigger: Mapped[str] = mapped_column(String(16))  # schedule or manual
    due_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(16), index=True)
    step: Mapped[int] = mapped_column(Integer, default=0)  # the step running or waiting
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # each finished step's outcome
    call_id: Mapped[str | None] = mapped_column(String(36))  # the open call of `step`
    approval_id: Mapped[str | None] = mapped_column(String(36))
    worker: Mapped[str | None] = mapped_column(String(200))
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class Turn(Base):
    """One agent turn: a prompt answered by the owner's model calling the governed tools."""

    __tablename__ = "turns"
    __table_args__ = (
        CheckConstraint(check(TurnStatus), name="status"),
        # A chat's turns in order (its history, api/chat.py).
        Index("ix_turns_chat_newest", "owner_id", "chat_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    chat_id: Mapped[str | None] = mapped_column(String(200), index=True)  # the frontend's id
    job_run_id: Mapped[str | None] = mapped_column(String(36))
    mode: Mapped[str] = mapped_column(String(16), default="execute")
    prompt: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), index=True)
    text: Mapped[str | None] = mapped_column(Text)  # the model's answer, capped
    calls: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200))
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # The client's id of the user message this turn answers (POST /api/chat).
    prompt_id: Mapped[str | None] = mapped_column(String(200))
    # The turn that regenerated this one's answer; a replaced turn leaves the chat's history.
    replaced_by: Mapped[str | None] = mapped_column(String(36))
    # Tokens the model reported for the turn's requests, summed (workers/usage.py).
    usage: Mapped[dict[str, int] | None] = mapped_column(JSON)


class ModelSource(Base):
    """An OpenAI-compatible endpoint an owner's turns may run on; keys are kept encrypted."""

    __tablename__ = "model_sources"
    __table_args__ = (UniqueConstraint("owner_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))  # openai or litellm
    base_url: Mapped[str] = mapped_column(String(500))
    api_key: Mapped[str | None] = mapped_column(Text)  # Fernet token, never the key itself
    # LiteLLM: a virtual key per owner minted with the operator's master key, kept sealed.
    virtual_key: Mapped[bool] = mapped_column(Boolean, default=False)
    minted_key: Mapped[str | None] = mapped_column(Text)
    # Whether requests carry reasoning_effort; None: by the model's name (store/modelchoice.py).
    reasoning_effort: Mapped[bool | None] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ModelSetting(Base):
    """The owner's default model: a source of theirs, a model name, effort and context tier."""

    __tablename__ = "model_settings"

    owner_id: Mapped[int] = mapped_column(
        ForeignKey("owners.id", ondelete="CASCADE"), primary_key=True
    )
    source: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    reasoning_effort: Mapped[str | None] = mapped_column(String(16))
    context: Mapped[str | None] = mapped_column(String(16))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class PushSubscription(Base):
    """A browser's Web Push subscription: where to send and the keys to encrypt for."""

    __tablename__ = "push_subscriptions"
    __table_args__ = (UniqueConstraint("owner_id", "endpoint"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    endpoint: Mapped[str] = mapped_column(String(1000))
    p256dh: Mapped[str] = mapped_column(String(200))
    auth: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Webhook(Base):
    """A URL that gets the owner's events, each delivery signed with the webhook's secret."""

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(1000))
    events: Mapped[list[str]] = mapped_column(JSON)
    secret: Mapped[str] = mapped_column(Text)  # Fernet token of the signing secret
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AuditHead(Base):
    """The end of an owner's audit chain: its last seq (store/audit.py). Appending moves it
    first, so its row lock keeps the owner's appends in one line."""

    __tablename__ = "audit_heads"

    owner_id: Mapped[int] = mapped_column(
        ForeignKey("owners.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(BigInteger)


class AuditRecord(Base):
    """One record of an owner's audit chain: what happened (kind, actor, subject, facts),
    when, and the hash of the record before it (store/audit.py)."""

    __tablename__ = "audit_records"
    __table_args__ = (
        # What happened to one call, run, approval or skill, in order.
        Index("ix_audit_records_owner_subject_seq", "owner_id", "subject", "seq"),
    )

    # The key is the chain's order, and the lists' (api/audit.py): a kind and a time are
    # filtered along it, and retention trims each chain from its start (store/audit.py).
    owner_id: Mapped[int] = mapped_column(
        ForeignKey("owners.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    created_at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(100))
    subject: Mapped[str] = mapped_column(String(300))
    facts: Mapped[dict[str, Any]] = mapped_column(JSON)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
