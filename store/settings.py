"""The one place that reads the environment: every setting with its type and default."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from store import limits
from store.safeyaml import load_yaml

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8750
DEFAULT_DATA_DIR = "var"
DEFAULT_GITHUB_API = "https://api.github.com"
DEFAULT_GITHUB_URL = "https://github.com"
# A GitHub sign-in whose GitHub token never expires (an OAuth app's) lasts this long before the
# console checks the person's access with GitHub again.
DEFAULT_GITHUB_SESSION_SECONDS = 8 * 3600
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
DEFAULT_RUNNER_IMAGE = "skillfleet/runner:latest"
# The master group name Redis's own sentinel.conf examples use.
DEFAULT_SENTINEL_MASTER = "mymaster"
DEFAULT_RUN_TIMEOUT = 300
# A message nobody acknowledged comes back after this long (Celery's default is an hour).
DEFAULT_VISIBILITY_TIMEOUT = 60
# An agent turn stops after this long (waiting for an approval included).
DEFAULT_TURN_TIMEOUT = 900
# Wrong tokens a client address may send in a window of this many seconds; past them it gets
# 429 until the window ends.
DEFAULT_AUTH_FAILURES = 20
DEFAULT_AUTH_FAILURE_WINDOW = 60
# Web Push subscriptions are accepted only for these push services (a leading `*.` matches
# any subdomain): Google (FCM), Mozilla, Apple and Microsoft (WNS).
DEFAULT_PUSH_SERVICES = (
    "fcm.googleapis.com",
    "updates.push.services.mozilla.com",
    "*.push.apple.com",
    "*.notify.windows.com",
)
DEFAULT_PUSH_CONTACT = "mailto:skillfleet@localhost"
DEFAULT_FLOWER_PORT = 5555
# Open streams and `?wait=` long-polls: at most this many per token at once; a quiet stream
# sends a comment this often, and ends after the idle time with nothing but those, or after the
# longest time in all (its client reconnects), or when a chunk can't be written within the send
# timeout; the open streams' tokens are checked again this often.
DEFAULT_API_THREADS = 16
DEFAULT_STREAM_LIMIT = 200
DEFAULT_STREAM_KEEPALIVE = 15
DEFAULT_STREAM_IDLE = 900
DEFAULT_STREAM_MAX = 3600
DEFAULT_STREAM_SEND_TIMEOUT = 15
DEFAULT_STREAM_RECHECK = 30
# A connection whose request headers are not all in this long after it opened is closed.
DEFAULT_HEADER_TIMEOUT = 10
# A tool call's `?wait=` waits this long for its run in the request's thread before the live
# tier takes the wait over (most runs end sooner, and pay for no hand-off).
DEFAULT_WAIT_GRACE_MS = 200
DEFAULT_WAIT_GRACE = DEFAULT_WAIT_GRACE_MS / 1000
# A worker beats this often and counts as gone once it has not for the alive window; the
# housekeeping (answers a gone worker's runs `interrupted`) and the sweep (expires approvals,
# drops old turn counts) run this often on the control worker.
DEFAULT_HEARTBEAT_SECONDS = 2.0
DEFAULT_WORKER_ALIVE_SECONDS = 10.0
DEFAULT_HOUSEKEEPING_SECONDS = 5.0
DEFAULT_SWEEP_SECONDS = 60.0
# An MCP tool call whose approval the owner has not answered returns after this long, naming
# the approval (the agent collects the outcome later with get_call_outcome): below the
# shortest default tool-call timeout of the common hosts that fits a person's answer at all
# (pydantic-ai's 300 s, the mcp SDK's and fastmcp's 300 s HTTP read; docs/mcp.md).
DEFAULT_MCP_APPROVAL_WAIT = 240.0
# ask_owner and request_secret wait this long for the owner's answer, then end `unanswered`;
# notify_owner sends at most this many notices per agent turn and per owner and hour.
DEFAULT_QUESTION_WAIT = 1800.0
DEFAULT_NOTIFY_PER_TURN = 3
DEFAULT_NOTIFY_PER_HOUR = 20
FLOWER_USER = "admin"
# A node runs each script as a uid of its own from this range ("uid"), or as its worker's user
# ("worker": a single-owner node's opt-out, for scripts that must be root).
NODE_RUN_AS = ("uid", "worker")
DEFAULT_RUN_UIDS = (2_100_000_000, 2_100_000_999)
# A root node worker's runs' folder: a tmpfs of its own of at most this size (of memory).
DEFAULT_RUN_TMPFS = "50%"
# An owner's file (an upload, or one a run made): at most this large, kept this long.
DEFAULT_FILE_MAX_BYTES = 64 * limits.MIB
DEFAULT_FILE_TTL = 86_400
# Traces (store/tracing.py): the exporters OTEL_TRACES_EXPORTER may name (OTLP over HTTP, or
# lines on standard output for a look by hand) and the samplers OTEL_TRACES_SAMPLER may name.
TRACE_EXPORTERS = ("otlp", "console")
TRACE_SAMPLERS = (
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
    "always_on",
    "always_off",
    "traceidratio",
)
OTLP_PROTOCOL = "http/protobuf"
# The audit trail keeps each record this long (days), apart from runs and calls.
DEFAULT_AUDIT_RETENTION_DAYS = 365


class SettingsError(Exception):
    """Raised when an environment variable or the config file holds an unusable value."""


@dataclass(frozen=True)
class SignInRule:
    """Who may sign in with GitHub as `owner`: the GitHub user of numeric id `subject` (kind
    `user`), or any member of the organisation `subject` (kind `org`)."""

    kind: str
    subject: str
    owner: str


_GITHUB_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
_OWNER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_RULE_FORMAT = (
    "SKILLFLEET_GITHUB_SIGNIN is a comma-separated list of user:<GitHub user id>=<owner> and "
    "org:<GitHub organisation>=<owner>, e.g. user:583231=alice,org:acme=acme-team"
)


def signin_rules(raw: str) -> tuple[SignInRule, ...]:
    """SKILLFLEET_GITHUB_SIGNIN read: `user:<id>=<owner>` and `org:<login>=<owner>` rules."""
    rules = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        who, equals, owner = item.partition("=")
        kind, colon, subject = who.strip().partition(":")
        subject, owner = subject.strip(), owner.strip()
        if not equals or not colon or not _OWNER_NAME.fullmatch(owner):
            raise SettingsError(f"{_RULE_FORMAT}; {item!r} is not one.")
        if kind == "user" and subject.isascii() and subject.isdigit() and len(subject) <= 20:
            rules.append(SignInRule("user", str(int(subject)), owner))
        elif kind == "org" and _GITHUB_LOGIN.fullmatch(subject):
            rules.append(SignInRule("org", subject.lower(), owner))
        else:
            raise SettingsError(
                f"{_RULE_FORMAT}; in {item!r}, a user is named by its numeric id (GET "
                "https://api.github.com/users/<login> shows it) and an org by its login."
            )
    return tuple(rules)


@dataclass(frozen=True)
class Settings:
    """Settings of every skillfleet process, converted once."""

    data_dir: Path = Path(DEFAULT_DATA_DIR)
    database_url: str | None = None
    redis_url: str | None = None
    # Redis Sentinel: the sentinels that name the current primary of the master group
    # `redis_sentinel_master`. Set, every client finds the primary through them, and `REDIS_URL`
    # gives only the database number and credentials (its host is not used).
    redis_sentinels: tuple[tuple[str, int], ...] = ()
    redis_sentinel_master: str = DEFAULT_SENTINEL_MASTER
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    bootstrap_token: str | None = None
    config_file: Path | None = None
    skill_paths: tuple[Path, ...] = ()
    policy_file: Path | None = None
    github_api_url: str = DEFAULT_GITHUB_API
    github_token: str | None = None
    # Owners' sign-in with GitHub's device flow (api/signin.py): GitHub's web address (its
    # /login/device/code and /login/oauth/access_token), the app's client id (no id: no GitHub
    # sign-in) and secret (sent when refreshing), and who may sign in as which owner.
    github_url: str = DEFAULT_GITHUB_URL
    github_client_id: str | None = None
    github_client_secret: str | None = None
    github_signin: tuple[SignInRule, ...] = ()
    github_session_seconds: int = DEFAULT_GITHUB_SESSION_SECONDS
    runner_image: str = DEFAULT_RUNNER_IMAGE
    # The Docker network a container run's egress proxy reaches its skill's allowed domains on,
    # and whether those names may resolve to private addresses (workers/runners/egress.py).
    runner_network: str = "bridge"
    runner_network_private: bool = False
    # A container run's files straight in its /work volume's folder when the worker reaches it;
    # false: always through the engine's archive API (workers/runners/workdirs.py).
    spark_work_direct: bool = True
    run_timeout: int = DEFAULT_RUN_TIMEOUT
    api_url: str = DEFAULT_URL
    # The API's address as MCP hosts reach it (OAuth's issuer and /mcp's resource URL); None:
    # the scheme and Host of each request.
    public_url: str | None = None
    node_token: str | None = None
    manifest_public_key: str | None = None
    sandbox_isolation: str = "hyperlight"
    node_run_as: str = NODE_RUN_AS[0]
    run_uids: tuple[int, int] = DEFAULT_RUN_UIDS
    # Where a node makes each run's folder (None: `skillfleet-runs` in the system's temp folder).
    run_dir: Path | None = None
    # The size of the tmpfs a root node worker mounts on that folder for itself ("off": none).
    run_tmpfs: str = DEFAULT_RUN_TMPFS
    file_max_bytes: int = DEFAULT_FILE_MAX_BYTES
    file_ttl: int = DEFAULT_FILE_TTL
    # Python packages for scripts: the index uv installs from (None: uv's default, PyPI); where
    # a node keeps the standard environment and declared dependencies (None: `skillfleet-env`
    # in the system's temp folder), and whether it builds the standard environment at all.
    package_index: str | None = None
    env_dir: Path | None = None
    standard_env: bool = True
    dry_run: bool = False
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT
    task_events: bool = False
    # relay/fenced/kombu_redis.py: kombu's Redis transport survives losing Redis mid-message.
    fenced_kombu: bool = True
    # relay/fenced/uvicorn_http.py: time limits on a request's headers and body.
    fenced_uvicorn: bool = True
    log_level: str = "info"
    metrics_public: bool = False
    metrics_token: str | None = None
    cors_origins: tuple[str, ...] = ()
    turn_timeout: int = DEFAULT_TURN_TIMEOUT
    push_services: tuple[str, ...] = DEFAULT_PUSH_SERVICES
    push_contact: str = DEFAULT_PUSH_CONTACT
    # Hosts requests to owners' URLs may reach though they are not public (store/egress.py).
    egress_allow: tuple[str, ...] = ()
    # The operator's LiteLLM proxy and its master key: a `litellm` source at that address may
    # mint a virtual key per owner (store/modelkeys.py); the key goes nowhere else.
    litellm_url: str | None = None
    litellm_master_key: str | None = None
    # Wrong tokens per client address (relay/lockouts.py), and the proxies in front of the API
    # whose X-Forwarded-For entries name the client.
    auth_failures: int = DEFAULT_AUTH_FAILURES
    auth_failure_window: int = DEFAULT_AUTH_FAILURE_WINDOW
    trusted_proxies: int = 0
    metrics_dir: Path | None = None
    flower_host: str = DEFAULT_HOST
    flower_port: int = DEFAULT_FLOWER_PORT
    flower_user: str | None = None
    flower_password: str | None = None
    log_format: str = "json"
    # The live tier (api/asgi.py): Flask's threads per API process, and what bounds a stream.
    api_threads: int = DEFAULT_API_THREADS
    stream_limit: int = DEFAULT_STREAM_LIMIT
    # MCP `subscriptions/listen` streams one token may hold open at once (default: stream_limit).
    mcp_listen_limit: int = DEFAULT_STREAM_LIMIT
    stream_keepalive: float = DEFAULT_STREAM_KEEPALIVE
    stream_idle: float = DEFAULT_STREAM_IDLE
    stream_max: float = DEFAULT_STREAM_MAX
    stream_send_timeout: float = DEFAULT_STREAM_SEND_TIMEOUT
    stream_recheck: float = DEFAULT_STREAM_RECHECK
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    wait_grace: float = DEFAULT_WAIT_GRACE
    # Liveness and the clock's chores: a test (or a small deployment) shortens them.
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    worker_alive_seconds: float = DEFAULT_WORKER_ALIVE_SECONDS
    housekeeping_seconds: float = DEFAULT_HOUSEKEEPING_SECONDS
    sweep_seconds: float = DEFAULT_SWEEP_SECONDS
    mcp_approval_wait: float = DEFAULT_MCP_APPROVAL_WAIT
    question_wait: float = DEFAULT_QUESTION_WAIT
    notify_per_turn: int = DEFAULT_NOTIFY_PER_TURN
    notify_per_hour: int = DEFAULT_NOTIFY_PER_HOUR
    # Bounded memory: what Redis keeps of runs' and turns' streams, what Flower keeps of tasks.
    run_output_bytes: int = limits.RUN_OUTPUT_BYTES
    run_stream_ttl: int = limits.RUN_STREAM_TTL_SECONDS
    run_streams_kept: int = limits.RUN_STREAMS_KEPT
    # Versions kept of each skill to roll back to (besides the current one and pinned ones).
    versions_kept: int = limits.VERSIONS_KEPT
    flower_max_tasks: int = limits.FLOWER_MAX_TASKS
    # Traces: the exporters OpenTelemetry's standard variables ask for (none: no traces, and
    # nothing of OpenTelemetry imported) and the sampler. The SDK reads the other OTEL_*
    # variables itself, as prometheus_client does PROMETHEUS_MULTIPROC_DIR: the endpoint, its
    # headers, timeout and compression, the service name and resource attributes, batch sizes.
    traces: tuple[str, ...] = ()
    trace_sampler: str = TRACE_SAMPLERS[0]
    trace_sampler_ratio: float = 1.0
    # The instrumentations left out (flask, celery, sqlalchemy, redis): fewer spans, less cost.
    trace_skipped: tuple[str, ...] = ()
    audit_retention_days: int = DEFAULT_AUDIT_RETENTION_DAYS
    # The audit trail is always on; only bench/audit.py turns it off, to measure its cost.
    bench_audit_off: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def skills_dir(self) -> Path:
        return self.data_dir / "skills"

    @property
    def database(self) -> str:
        """The SQLAlchemy URL: `DATABASE_URL`, else a SQLite file in the data dir."""
        if self.database_url:
            return normalise_database_url(self.database_url)
        return f"sqlite:///{(self.data_dir / 'skillfleet.db').resolve()}"

    @property
    def listens_on_loopback(self) -> bool:
        """Whether `skillfleet api`/`up` bind the API to a loopback address only."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False  # a host name: assume it is reachable from elsewhere

    @property
    def metrics_open(self) -> bool:
        """/metrics needs no token: the API listens on loopback only, or the operator said so."""
        return self.metrics_public or self.listens_on_loopback

    @property
    def flower_password_file(self) -> Path:
        """Where `skillfleet up` keeps Flower's generated password (0600)."""
        return self.data_dir / "flower-password"

    @property
    def embedded_redis_file(self) -> Path:
        return self.data_dir / "redis.db"

    @property
    def cache_dir(self) -> Path:
        """Where a node agent keeps the skill packages it installed."""
        return self.data_dir / "cache"

    @property
    def files_dir(self) -> Path:
        """Where owners' files are kept (store/files.py)."""
        return self.data_dir / "files"

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"

    @property
    def redis(self) -> str:
        """`REDIS_URL`, else the embedded Redis socket `skillfleet up` starts (with sentinels:
        database 0 of the primary they name, no password)."""
        if self.redis_url:
            return self.redis_url
        if self.redis_sentinels:
            return "redis:///0"
        return f"unix://{(self.data_dir / 'redis.socket').resolve()}"

    def with_overrides(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read `SKILLFLEET_*`, `DATABASE_URL` and `REDIS_URL`, then the YAML config file."""
        env = os.environ if env is None else env
        config_file = _path(env.get("SKILLFLEET_CONFIG"))
        config = _read_config(config_file) if config_file else {}
        traces, sampler, ratio = _traces(env)
        return cls(
            data_dir=Path(env.get("SKILLFLEET_DATA_DIR") or DEFAULT_DATA_DIR),
            database_url=env.get("DATABASE_URL") or None,
            redis_url=env.get("REDIS_URL") or None,
            redis_sentinels=_sentinels(env.get("SKILLFLEET_REDIS_SENTINELS")),
            redis_sentinel_master=_sentinel_master(env.get("SKILLFLEET_REDIS_SENTINEL_MASTER")),
            host=env.get("SKILLFLEET_HOST") or DEFAULT_HOST,
            port=_int(env, "SKILLFLEET_PORT", DEFAULT_PORT),
            bootstrap_token=_secret(env, "SKILLFLEET_BOOTSTRAP_TOKEN"),
            config_file=config_file,
            skill_paths=_skill_paths(config, config_file),
            policy_file=_path(env.get("SKILLFLEET_POLICY")),
            github_api_url=(env.get("SKILLFLEET_GITHUB_API") or DEFAULT_GITHUB_API).rstrip("/"),
            github_token=env.get("SKILLFLEET_GITHUB_TOKEN") or None,
            github_url=(env.get("SKILLFLEET_GITHUB_URL") or DEFAULT_GITHUB_URL).rstrip("/"),
            github_client_id=env.get("SKILLFLEET_GITHUB_CLIENT_ID") or None,
            github_client_secret=_secret(env, "SKILLFLEET_GITHUB_CLIENT_SECRET"),
            github_signin=signin_rules(env.get("SKILLFLEET_GITHUB_SIGNIN") or ""),
            github_session_seconds=_at_least(
                env, "SKILLFLEET_GITHUB_SESSION_SECONDS", DEFAULT_GITHUB_SESSION_SECONDS, 60
            ),
            runner_image=env.get("SKILLFLEET_RUNNER_IMAGE") or DEFAULT_RUNNER_IMAGE,
            runner_network=env.get("SKILLFLEET_RUNNER_NETWORK") or "bridge",
            runner_network_private=_bool(env, "SKILLFLEET_RUNNER_NETWORK_PRIVATE"),
            spark_work_direct=_bool(env, "SKILLFLEET_SPARK_WORK_DIRECT", True),
            run_timeout=_int(env, "SKILLFLEET_RUN_TIMEOUT", DEFAULT_RUN_TIMEOUT),
            api_url=(env.get("SKILLFLEET_URL") or DEFAULT_URL).rstrip("/"),
            public_url=(env.get("SKILLFLEET_PUBLIC_URL") or "").rstrip("/") or None,
            node_token=_secret(env, "SKILLFLEET_NODE_TOKEN"),
            manifest_public_key=_secret(env, "SKILLFLEET_MANIFEST_KEY"),
            sandbox_isolation=_choice(
                env, "SKILLFLEET_SANDBOX_ISOLATION", ("hyperlight", "container"), "hyperlight"
            ),
            node_run_as=_choice(env, "SKILLFLEET_NODE_RUN_AS", NODE_RUN_AS, NODE_RUN_AS[0]),
            run_uids=_uid_range(env.get("SKILLFLEET_RUN_UIDS")),
            run_dir=_path(env.get("SKILLFLEET_RUN_DIR")),
            run_tmpfs=_tmpfs_size(env.get("SKILLFLEET_RUN_TMPFS")),
            file_max_bytes=_at_least(
                env, "SKILLFLEET_FILE_MAX_BYTES", DEFAULT_FILE_MAX_BYTES, limits.KIB
            ),
            file_ttl=_at_least(env, "SKILLFLEET_FILE_TTL", DEFAULT_FILE_TTL, 60),
            package_index=_index(_secret(env, "SKILLFLEET_PACKAGE_INDEX")),
            env_dir=_path(env.get("SKILLFLEET_ENV_DIR")),
            standard_env=_bool(env, "SKILLFLEET_STANDARD_ENV", default=True),
            dry_run=_bool(env, "SKILLFLEET_DRY_RUN"),
            task_events=_bool(env, "SKILLFLEET_TASK_EVENTS"),
            fenced_kombu=_bool(env, "SKILLFLEET_FENCED_KOMBU", default=True),
            fenced_uvicorn=_bool(env, "SKILLFLEET_FENCED_UVICORN", default=True),
            log_level=_choice(
                env, "SKILLFLEET_LOG_LEVEL", ("debug", "info", "warning", "error"), "info"
            ),
            visibility_timeout=_int(
                env, "SKILLFLEET_VISIBILITY_TIMEOUT", DEFAULT_VISIBILITY_TIMEOUT
            ),
            metrics_public=_bool(env, "SKILLFLEET_METRICS_PUBLIC"),
            cors_origins=_origins(env.get("SKILLFLEET_CORS_ORIGINS")),
            turn_timeout=_int(env, "SKILLFLEET_TURN_TIMEOUT", DEFAULT_TURN_TIMEOUT),
            push_services=_hosts(env, "SKILLFLEET_PUSH_SERVICES", DEFAULT_PUSH_SERVICES),
            push_contact=env.get("SKILLFLEET_PUSH_CONTACT") or DEFAULT_PUSH_CONTACT,
            egress_allow=_egress_allow(env.get("SKILLFLEET_EGRESS_ALLOW")),
            litellm_url=(env.get("SKILLFLEET_LITELLM_URL") or "").rstrip("/") or None,
            litellm_master_key=_secret(env, "SKILLFLEET_LITELLM_MASTER_KEY"),
            auth_failures=_at_least(env, "SKILLFLEET_AUTH_FAILURES", DEFAULT_AUTH_FAILURES, 0),
            auth_failure_window=_at_least(
                env, "SKILLFLEET_AUTH_FAILURE_WINDOW", DEFAULT_AUTH_FAILURE_WINDOW, 1
            ),
            trusted_proxies=_at_least(env, "SKILLFLEET_TRUSTED_PROXIES", 0, 0),
            metrics_token=_secret(env, "SKILLFLEET_METRICS_TOKEN"),
            # prometheus_client reads this name itself; gunicorn's workers share the folder.
            metrics_dir=_path(env.get("PROMETHEUS_MULTIPROC_DIR")),
            flower_host=env.get("SKILLFLEET_FLOWER_HOST") or DEFAULT_HOST,
            flower_port=_int(env, "SKILLFLEET_FLOWER_PORT", DEFAULT_FLOWER_PORT),
            flower_user=env.get("SKILLFLEET_FLOWER_USER") or None,
            flower_password=_secret(env, "SKILLFLEET_FLOWER_PASSWORD"),
            log_format=_choice(env, "SKILLFLEET_LOG_FORMAT", ("json", "console"), "json"),
            api_threads=_int(env, "SKILLFLEET_API_THREADS", DEFAULT_API_THREADS),
            stream_limit=_int(env, "SKILLFLEET_STREAM_LIMIT", DEFAULT_STREAM_LIMIT),
            mcp_listen_limit=_at_least(
                env,
                "SKILLFLEET_MCP_LISTEN_LIMIT",
                _int(env, "SKILLFLEET_STREAM_LIMIT", DEFAULT_STREAM_LIMIT),
                1,
            ),
            stream_keepalive=_int(env, "SKILLFLEET_STREAM_KEEPALIVE", DEFAULT_STREAM_KEEPALIVE),
            stream_idle=_int(env, "SKILLFLEET_STREAM_IDLE", DEFAULT_STREAM_IDLE),
            stream_max=_int(env, "SKILLFLEET_STREAM_MAX", DEFAULT_STREAM_MAX),
            stream_send_timeout=_int(
                env, "SKILLFLEET_STREAM_SEND_TIMEOUT", DEFAULT_STREAM_SEND_TIMEOUT
            ),
            stream_recheck=_int(env, "SKILLFLEET_STREAM_RECHECK", DEFAULT_STREAM_RECHECK),
            header_timeout=_int(env, "SKILLFLEET_HEADER_TIMEOUT", DEFAULT_HEADER_TIMEOUT),
            wait_grace=_int(env, "SKILLFLEET_WAIT_GRACE_MS", DEFAULT_WAIT_GRACE_MS) / 1000,
            **_timings(env),
            mcp_approval_wait=_mcp_approval_wait(env, config, config_file),
            question_wait=_seconds(env, "SKILLFLEET_QUESTION_WAIT_SECONDS", DEFAULT_QUESTION_WAIT),
            notify_per_turn=_at_least(
                env, "SKILLFLEET_NOTIFY_PER_TURN", DEFAULT_NOTIFY_PER_TURN, 0
            ),
            notify_per_hour=_at_least(
                env, "SKILLFLEET_NOTIFY_PER_HOUR", DEFAULT_NOTIFY_PER_HOUR, 0
            ),
            run_output_bytes=_at_least(
                env, "SKILLFLEET_RUN_OUTPUT_BYTES", limits.RUN_OUTPUT_BYTES, limits.KIB
            ),
            run_stream_ttl=_at_least(
                env, "SKILLFLEET_RUN_STREAM_TTL", limits.RUN_STREAM_TTL_SECONDS, 1
            ),
            run_streams_kept=_at_least(
                env, "SKILLFLEET_RUN_STREAMS_KEPT", limits.RUN_STREAMS_KEPT, 1
            ),
            flower_max_tasks=_at_least(
                env, "SKILLFLEET_FLOWER_MAX_TASKS", limits.FLOWER_MAX_TASKS, 1
            ),
            versions_kept=_at_least(env, "SKILLFLEET_VERSIONS_KEPT", limits.VERSIONS_KEPT, 1),
            traces=traces,
            trace_sampler=sampler,
            trace_sampler_ratio=ratio,
            trace_skipped=_names(env.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS")),
            audit_retention_days=_at_least(
                env, "SKILLFLEET_AUDIT_RETENTION_DAYS", DEFAULT_AUDIT_RETENTION_DAYS, 1
            ),
            bench_audit_off=_bool(env, "SKILLFLEET_BENCH_AUDIT_OFF"),
            extra=config,
        )


@dataclass(frozen=True)
class ClientSettings:
    """What the CLI needs to talk to a running API."""

    url: str = DEFAULT_URL
    token: str | None = None
    mcp_approval_wait: float = DEFAULT_MCP_APPROVAL_WAIT  # `skillfleet mcp`'s, as the API's

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientSettings:
        env = os.environ if env is None else env
        return cls(
            url=(env.get("SKILLFLEET_URL") or DEFAULT_URL).rstrip("/"),
            token=env.get("SKILLFLEET_TOKEN") or None,
            mcp_approval_wait=_seconds(
                env, "SKILLFLEET_MCP_APPROVAL_WAIT", DEFAULT_MCP_APPROVAL_WAIT
            ),
        )


def normalise_database_url(url: str) -> str:
    """Use psycopg 3 for plain `postgresql://` URLs."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _origins(raw: str | None) -> tuple[str, ...]:
    """Browser origins allowed to call the API (`https://app.example.com`), comma separated."""
    origins = tuple(part.strip().rstrip("/") for part in (raw or "").replace(" ", ",").split(","))
    for origin in origins:
        if origin and origin != "*" and not origin.startswith(("http://", "https://")):
            raise SettingsError(
                f"SKILLFLEET_CORS_ORIGINS holds {origin!r}; give origins like https://host:port."
            )
    return tuple(origin for origin in origins if origin)


def _index(url: str | None) -> str | None:
    """A package index's URL (a PEP 503 simple index, as uv's --default-index takes it)."""
    if url is not None and not url.startswith(("https://", "http://", "file://")):
        raise SettingsError(
            "SKILLFLEET_PACKAGE_INDEX must be the URL of a package index, such as "
            "https://pypi.example.com/simple."
        )
    return url.rstrip("/") if url else None


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _uid_range(raw: str | None) -> tuple[int, int]:
    if not raw:
        return DEFAULT_RUN_UIDS
    first, dash, last = raw.strip().partition("-")
    try:
        bounds = (int(first), int(last if dash else first))
    except ValueError:
        bounds = (0, 0)
    if not 0 < bounds[0] <= bounds[1] < 2**32 - 1:
        raise SettingsError(
            f"SKILLFLEET_RUN_UIDS must be a range of uids such as 2100000000-2100000999, "
            f"without root's; got {raw!r}."
        )
    return bounds


def _tmpfs_size(raw: str | None) -> str:
    value = (raw or DEFAULT_RUN_TMPFS).strip().lower()
    if value != "off" and not re.fullmatch(r"[1-9][0-9]{0,15}[kmg%]?", value):
        raise SettingsError(
            "SKILLFLEET_RUN_TMPFS must be a tmpfs size (bytes, or a number with k, m, g or %, "
            f"such as 512m or 25%), or off; got {raw!r}."
        )
    return value


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """`NAME`, else the text of the file that `NAME_FILE` names (a secrets volume)."""
    if env.get(name):
        return env[name]
    file_name = env.get(f"{name}_FILE")
    if not file_name:
        return None
    try:
        text = Path(file_name).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise SettingsError(f"{name}_FILE names {file_name}, which can't be read: {e}") from e
    return text or None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, not {raw!r}.") from None


def _bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name} must be true or false, not {raw!r}.")


def _hosts(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = env.get(name)
    if not raw:
        return default
    return tuple(host.strip().lower() for host in raw.split(",") if host.strip())


def _sentinels(raw: str | None) -> tuple[tuple[str, int], ...]:
    """`host:port` pairs separated by commas (`[::1]:26379` for an IPv6 address)."""
    found: list[tuple[str, int]] = []
    for part in (raw or "").split(","):
        entry = part.strip()
        if not entry:
            continue
        host, _, port = entry.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or len(entry) > 300:
            raise SettingsError(
                f"SKILLFLEET_REDIS_SENTINELS holds {entry[:300]!r}; give the sentinels as "
                "host:port pairs separated by commas, such as sentinel-1:26379,sentinel-2:26379."
            )
        found.append((host, int(port)))
    return tuple(found)


def _sentinel_master(raw: str | None) -> str:
    """The master group's name as the sentinels know it (`sentinel monitor <name> …`)."""
    name = (raw or "").strip() or DEFAULT_SENTINEL_MASTER
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name):
        raise SettingsError(
            "SKILLFLEET_REDIS_SENTINEL_MASTER must be the master group's name, letters, digits, "
            "'.', '_' and '-' only, at most 100 characters."
        )
    return name


def _at_least(env: Mapping[str, str], name: str, default: int, least: int) -> int:
    value = _int(env, name, default)
    if value < least:
        raise SettingsError(f"{name} must be at least {least}, not {value}.")
    return value


# A host name of SKILLFLEET_EGRESS_ALLOW (underscores too: container names may have them).
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


def _egress_allow(raw: str | None) -> tuple[str, ...]:
    """Host names, addresses and networks (`10.1.0.0/16`), separated by commas or spaces."""
    entries = tuple(part.strip().lower() for part in (raw or "").replace(" ", ",").split(","))
    for entry in entries:
        if entry and not (_is_network(entry) or _HOST_NAME.fullmatch(entry.rstrip("."))):
            raise SettingsError(
                f"SKILLFLEET_EGRESS_ALLOW holds {entry!r}; give host names, addresses or "
                "networks like 10.1.0.0/16."
            )
    return tuple(entry for entry in entries if entry)


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive number of seconds, fractions allowed (`0.5`)."""
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number of seconds, not {raw!r}.") from None
    if not 0 < value < float("inf"):
        raise SettingsError(f"{name} must be more than 0 seconds, not {raw!r}.")
    return value


def _timings(env: Mapping[str, str]) -> dict[str, float]:
    """The heartbeat and its alive window (which must outlast two beats), the housekeeping and
    the sweep."""
    every = _seconds(env, "SKILLFLEET_HEARTBEAT_SECONDS", DEFAULT_HEARTBEAT_SECONDS)
    alive = _seconds(env, "SKILLFLEET_WORKER_ALIVE_SECONDS", DEFAULT_WORKER_ALIVE_SECONDS)
    if alive < 2 * every:
        raise SettingsError(
            f"SKILLFLEET_WORKER_ALIVE_SECONDS ({alive:g}) must be at least twice "
            f"SKILLFLEET_HEARTBEAT_SECONDS ({every:g}), or one late beat counts a worker gone."
        )
    return {
        "heartbeat_seconds": every,
        "worker_alive_seconds": alive,
        "housekeeping_seconds": _seconds(
            env, "SKILLFLEET_HOUSEKEEPING_SECONDS", DEFAULT_HOUSEKEEPING_SECONDS
        ),
        "sweep_seconds": _seconds(env, "SKILLFLEET_SWEEP_SECONDS", DEFAULT_SWEEP_SECONDS),
    }


def _traces(env: Mapping[str, str]) -> tuple[tuple[str, ...], str, float]:
    """OpenTelemetry's standard variables: traces go out when OTEL_TRACES_EXPORTER names an
    exporter or an OTLP endpoint is set, unless OTEL_SDK_DISABLED is true or the exporter is
    `none`; with neither set, there are none."""
    named = [part.strip().lower() for part in (env.get("OTEL_TRACES_EXPORTER") or "").split(",")]
    named = [part for part in named if part]
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if _bool(env, "OTEL_SDK_DISABLED") or named == ["none"] or not (named or endpoint):
        return (), TRACE_SAMPLERS[0], 1.0
    exporters = tuple(dict.fromkeys(named or ["otlp"]))
    unknown = [name for name in exporters if name not in TRACE_EXPORTERS]
    if unknown:
        raise SettingsError(
            f"OTEL_TRACES_EXPORTER may name {', '.join(TRACE_EXPORTERS)} or none, "
            f"not {', '.join(unknown)!r}."
        )
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    if "otlp" in exporters and protocol not in (None, "", OTLP_PROTOCOL):
        raise SettingsError(
            f"skillfleet sends traces over OTLP/HTTP ({OTLP_PROTOCOL}), not {protocol!r}: "
            "point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318)."
        )
    sampler = _choice(env, "OTEL_TRACES_SAMPLER", TRACE_SAMPLERS, TRACE_SAMPLERS[0])
    ratio = 1.0
    if sampler.endswith("traceidratio") and env.get("OTEL_TRACES_SAMPLER_ARG"):
        raw = env["OTEL_TRACES_SAMPLER_ARG"]
        try:
            ratio = float(raw)
        except ValueError:
            ratio = -1.0
        if not 0 <= ratio <= 1:
            raise SettingsError(f"OTEL_TRACES_SAMPLER_ARG must be from 0 to 1, not {raw!r}.")
    return exporters, sampler, ratio


def _names(raw: str | None) -> tuple[str, ...]:
    """A comma-separated list of names, lowercased."""
    return tuple(part.strip().lower() for part in (raw or "").split(",") if part.strip())


def _choice(env: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    raw = env.get(name) or default
    if raw not in allowed:
        raise SettingsError(f"{name} must be one of {', '.join(allowed)}, not {raw!r}.")
    return raw


def _read_config(path: Path) -> dict[str, Any]:
    try:
        loaded = load_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"The config file {path} does not exist.") from None
    except yaml.YAMLError as e:
        raise SettingsError(f"The config file {path} is not valid YAML: {e}") from e
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise SettingsError(f"The config file {path} must hold a mapping.")
    return loaded


def _mcp_approval_wait(
    env: Mapping[str, str], config: Mapping[str, Any], config_file: Path | None
) -> float:
    """SKILLFLEET_MCP_APPROVAL_WAIT, else the config file's `mcp.approval_wait`, in seconds."""
    if env.get("SKILLFLEET_MCP_APPROVAL_WAIT"):
        return _seconds(env, "SKILLFLEET_MCP_APPROVAL_WAIT", DEFAULT_MCP_APPROVAL_WAIT)
    mcp = config.get("mcp") or {}
    if not isinstance(mcp, dict):
        raise SettingsError(f"'mcp' in {config_file} must be a mapping with 'approval_wait'.")
    value = mcp.get("approval_wait", DEFAULT_MCP_APPROVAL_WAIT)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
        raise SettingsError(f"'mcp.approval_wait' in {config_file} must be a number of seconds.")
    return float(value)


def _skill_paths(config: Mapping[str, Any], config_file: Path | None) -> tuple[Path, ...]:
    skills = config.get("skills") or {}
    if not isinstance(skills, dict):
        raise SettingsError(f"'skills' in {config_file} must be a mapping with 'paths'.")
    paths = skills.get("paths") or []
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise SettingsError(f"'skills.paths' in {config_file} must be a list of folder paths.")
    base = config_file.parent if config_file else Path(".")
    return tuple((base / p) if not Path(p).is_absolute() else Path(p) for p in paths)
