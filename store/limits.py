"""Every size, count and time limit skillfleet enforces, in one place."""

KIB = 1024
MIB = 1024 * 1024

MAX_SKILLS = 200
MAX_FILES = 200
MAX_FILE_BYTES = 1 * MIB
MAX_SKILL_BYTES = 5 * MIB
MAX_EDITABLE_BYTES = 256 * KIB
MAX_ZIP_BYTES = 5 * MIB
MAX_DOMAINS = 50
MAX_SECRETS = 20  # secrets one skill may declare (skillfleet.secrets)
MAX_DEPENDENCIES = 100  # requirements one skill may declare (requirements.txt, PEP 723)
# uv's time to resolve a skill's declared requirements, and to install an environment (the
# standard one's first build downloads about 150 MB).
DEPENDENCY_RESOLVE_SECONDS = 120
DEPENDENCY_BUILD_SECONDS = 900
MAX_DRAFT_FILES = 40
MAX_SOURCE_CHATS = 10
MAX_RATIONALE_CHARS = 1000

# Resources an agent reads through read_skill_resource.
MAX_RESOURCE_BYTES = 256 * KIB
# The most a tool result may take, as compact UTF-8 JSON; past it the result is cut with a note.
RESULT_CAP = 48 * KIB
# Resource text an agent turn carries at most (UTF-8 bytes), newest reads first; older ones
# are named (broker/loaded.py), among the chat's CARRIED_READS most recent reads.
CARRIED_RESOURCE_BYTES = RESULT_CAP
CARRIED_READS = 50
# A package a node fetches: a skill holds at most MAX_SKILL_BYTES before compression.
MAX_PACKAGE_BYTES = 8 * MIB

# Header fields (Agent Skills specification).
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_COMPATIBILITY_CHARS = 500

# Archives: refuse compression ratios no honest skill has.
MAX_COMPRESSION_RATIO = 200
MAX_ARCHIVE_ENTRIES = MAX_FILES + 100  # directories count as entries too

# Imports of a folder holding many skills (a repository's zip or GitHub folder): each skill
# keeps the limits above; these bound the whole import.
MAX_BUNDLE_ENTRIES = 5000
MAX_BUNDLE_BYTES = 50 * MIB
MAX_BUNDLE_FOLDERS = 500  # GitHub folder listings, one request each
# API tokens.
MAX_OWNER_TOKENS = 100  # per owner, owner and agent tokens together
MAX_TOKEN_LABEL_CHARS = 200
# OAuth for MCP hosts (store/oauth.py, store/oauthclients.py).
OAUTH_ACCESS_SECONDS = 3600  # an access token (an agent token) lasts this long unrefreshed
OAUTH_REFRESH_SECONDS = 30 * 24 * 3600  # a refresh token unused this long is void
OAUTH_CONSENT_SECONDS = 600  # an authorization request waits this long for the owner
OAUTH_CODE_SECONDS = 120  # a code is exchanged within this long of the owner's Allow
MAX_CLIENT_DOCUMENT_BYTES = 16 * KIB  # a client's metadata document (CIMD)
CLIENT_DOCUMENT_SECONDS = 5.0  # deadline of fetching one
CLIENT_DOCUMENT_TTL = 3600  # a fetched document is used this long before it is fetched again
MAX_OAUTH_CLIENTS = 10_000  # clients registered or fetched; registration is refused past it
MAX_CLIENT_URL_CHARS = 300  # a CIMD client_id, a resource indicator
# The authoring loop: edit plans (diffs the owner approves) and chat review.
MAX_EDIT_PLANS = 200  # pending per owner; the oldest expires first
MAX_DIFF_FILE_BYTES = 32 * KIB
MAX_DIFF_BYTES = 192 * KIB
MAX_REVIEWED_CHATS = 2000  # reviewed-chat records per owner; the oldest are dropped
MAX_TRANSCRIPT_CALLS = 200  # calls read_chat_transcript returns, the latest
MAX_LISTED_CHATS = 200  # chats list_chats returns, the newest

# Lint: where a reviewer should look (warnings never block).
LINT_MAX_BODY_LINES = 500
LINT_MIN_DESCRIPTION_CHARS = 20
# Scheduled jobs.
MAX_JOBS = 100  # per owner
MAX_JOB_NAME_CHARS = 100
MAX_JOB_STEPS = 10
MAX_PROMPT_CHARS = 32_768
MAX_JOB_GRANTS = 50
KEPT_JOB_RUNS = 50  # per job, newest first
# A scheduled time found this long after it passed (the ticker was down) is skipped, not run.
JOB_MISSED_GRACE_SECONDS = 300
# The owner's event feed keeps about this many recent events for Last-Event-ID replay.
MAX_OWNER_EVENTS = 10_000
# Housekeeping's sweep: rows a transaction of it changes or deletes at most, and such
# transactions a round (the next round, a minute on, goes on with what is left).
SWEEP_BATCH = 1000
SWEEP_BATCHES = 100
# List routes: the page size when none is asked for, and the largest one served.
DEFAULT_PAGE_SIZE = 250
# Audit records an export reads at a time (api/audit.py), each batch in a session of its own.
AUDIT_EXPORT_BATCH = 1000
MAX_PAGE_SIZE = 1000
# YAML people write (SKILL.md headers, policies, the config file): the nesting it may have
# (PyYAML recurses per level and would overflow) and the values it may hold, counting each
# alias as the whole value it repeats (nested aliases multiply).
MAX_YAML_DEPTH = 32
MAX_YAML_VALUES = 10_000

# Request bodies: a refused upload is still read (and dropped) up to this much, so a client
# that sends its whole body before reading the answer gets the 413 instead of a broken pipe.
MAX_DRAINED_BYTES = 64 * MIB

# Run output: one stream entry per burst (what arrived within COALESCE_SECONDS of its first
# byte), at most CHUNK_BYTES per entry.
CHUNK_BYTES = 64 * KIB
COALESCE_BYTES = CHUNK_BYTES
COALESCE_SECONDS = 0.002
# A run's "running" status waits this long for its first output, to share its round trip.
STATUS_DELAY_SECONDS = 0.05
# What the Run row keeps of each output stream; the tool result is capped again at RESULT_CAP.
KEPT_OUTPUT_CHARS = 64 * KIB
# Redis: a read gives up after this long, a blocking read blocks at most MAX_BLOCK_MS (and gets
# a socket timeout longer than its block); an idle SSE stream sends a comment that often.
REDIS_SOCKET_TIMEOUT_SECONDS = 5.0
REDIS_CONNECT_TIMEOUT_SECONDS = 2.0
# How often kombu checks that the broker's long-lived connections still answer: a worker's
# BRPOP with no reply for 1 s + this long is dropped and reconnected (relay/app.py).
BROKER_HEALTH_CHECK_SECONDS = 5
REDIS_RETRY_SECONDS = 1.0
MAX_BLOCK_MS = 15_000
SSE_KEEPALIVE_SECONDS = MAX_BLOCK_MS / 1000
# Agent turns and notifications.
MAX_TURN_TEXT_CHARS = 64 * KIB  # the answer a Turn row keeps
MAX_MODEL_ROUNDS = 60  # model requests in one turn (the broker also stops at 50 tool calls)
MAX_PUSH_SUBSCRIPTIONS = 20  # per owner
MAX_WEBHOOKS = 20  # per owner
MAX_URL_CHARS = 1000
MAX_CHAT_HISTORY_TURNS = 10  # earlier turns of the chat the model sees
MAX_CHAT_SHOWN_TURNS = 100  # the latest turns GET /api/chats/<id> shows as messages
MAX_CHAT_MESSAGES = 1000  # messages a POST /api/chat body may carry
# A tool call's arguments or result as a turn's stream shows it (the AI SDK's tool part);
# a larger one is shown as a note (the call and its result stay whole in the database).
MAX_STREAMED_TOOL_BYTES = 64 * KIB
MAX_MODEL_NAME_CHARS = 200
MAX_BASE_URL_CHARS = 500
MAX_API_KEY_CHARS = 4096
# Model sources (store/modelsources.py): how many an owner keeps, how long listing a source's
# models may take, the answer read (a larger one is refused) and the names shown of it.
MAX_MODEL_SOURCES = 20
MODEL_LIST_SECONDS = 10.0
MAX_MODEL_LIST_BYTES = 2 * MIB
MAX_MODELS_LISTED = 500
# A context tier given as a number of tokens (store/modelchoice.py).
MIN_CONTEXT_TOKENS = 1024
MAX_CONTEXT_TOKENS = 10_000_000
# A failing model's error: the JSON error body read (a larger one is not shown) and the
# characters of its message a turn's error keeps.
MAX_MODEL_ERROR_BYTES = 16 * KIB
MAX_MODEL_ERROR_CHARS = 200
MAX_PUSH_KEY_CHARS = 200  # a subscription's p256dh and auth values

# Tool calls.
MAX_CALLS_PER_TURN = 50  # one agent turn; past it the broker refuses (rule turn-call-limit)
MAX_WAIT_SECONDS = 60.0  # the longest `?wait=` a request may hold
MAX_ID_CHARS = 200  # chat, turn and job run ids a caller sends
MAX_ARGUMENT_TEXT = 32 * KIB  # text arguments are parsed only up to this many bytes of UTF-8
# Deeper nesting is cut rather than walked: results come from scripts and may be cyclic.
MAX_RESULT_DEPTH = 64
# read_web_page: a URL's length, the redirects followed, the body read (past it the page is
# refused), the time one call may take in all, and the room its text may take in the result.
MAX_WEB_URL_CHARS = 2048
MAX_WEB_REDIRECTS = 5
MAX_WEB_PAGE_BYTES = 2 * MIB
WEB_PAGE_SECONDS = 15.0
# Pages one API process reads at once: each holds a request thread for up to WEB_PAGE_SECONDS,
# so slow sites may never take them all; a read past this fails at once (web_busy).
WEB_PAGES_AT_ONCE = 4
WEB_CONTENT_BYTES = RESULT_CAP - 4 * KIB
# Requests to owners' URLs (store/egress.py) are over by one deadline each, from the connect
# to the body's last byte, redirects included: a read's own (WEB_PAGE_SECONDS, the turn's time
# left for a model), these, or OUTBOUND_SECONDS for one that names none.
OUTBOUND_SECONDS = 30.0
WEBHOOK_SECONDS = 10.0  # one webhook delivery
PUSH_SECONDS = 10.0  # one Web Push message to its push service
MAX_PATH_CHARS = 1024  # a resource path read_skill_resource accepts
MAX_LINT_WARNINGS = 50  # review warnings kept per skill
MAX_NODES_NAMED = 10  # nodes a refusal names ("your nodes: a, b"), then "and N more"
# Nodes a refusal checks for a live worker at most, in name order (20 at a time, until it has
# MAX_NODES_NAMED to name): its cost stays that of a page however many nodes the owner has.
MAX_NODES_CHECKED = 200
LIST_NODES_SHOWN = 50  # nodes one list_nodes call shows; `after` asks for the next ones
# /metrics: the node queues (deepest first) and nodes whose heartbeats ran out (most recent
# first) it gives a series of their own; the rest are counted in fleet-wide series.
METRICS_NODE_SERIES = 20
LINT_NAMES_SHOWN = 3  # files one review warning names before `and N more`
CLI_WARNINGS_SHOWN = 5  # review warnings `skills import` and `skills show` print of a skill
MAX_CRON_CHARS = 100  # the column's width

# What ask_owner, request_secret and notify_owner take (broker/ownertools.py, questions.py).
MAX_QUESTION_CHARS = 2000  # a question, or why a secret is needed
MAX_CHOICES = 20
MAX_CHOICE_CHARS = 200
MAX_ANSWER_CHARS = 4000
MAX_SECRET_BYTES = 8 * KIB  # a secret's value, as UTF-8
MAX_NOTICE_CHARS = 1000  # a notify_owner message
MAX_DENY_REASON_CHARS = 1000  # why the owner denied a call, which its agent is told

# Live streams in Redis (a run's output, an agent turn's events): the defaults of
# SKILLFLEET_RUN_OUTPUT_BYTES, _RUN_STREAM_TTL and _RUN_STREAMS_KEPT (store/settings.py).
# A stream holds this much output (a turn's: text), then one note that the rest is not streamed;
# it expires this long after its end (while it runs, this long after its last refresh); and the
# housekeeping keeps at most this many ended streams of each kind, removing the oldest.
RUN_OUTPUT_BYTES = 1 * MIB
RUN_STREAM_TTL_SECONDS = 3600
RUN_STREAMS_KEPT = 1000
# Versions kept of each skill to roll back to, besides the current one and those a job pins
# (SKILLFLEET_VERSIONS_KEPT).
VERSIONS_KEPT = 20
# Flower keeps this many tasks in memory, dropping the oldest (its own default is 100,000).
FLOWER_MAX_TASKS = 10_000

# run_command: the command text an agent sends, and the most seconds it may ask for (a run never
# outlasts the operator's SKILLFLEET_RUN_TIMEOUT, the default when it asks for none).
MAX_COMMAND_BYTES = 8 * KIB
MAX_COMMAND_TIMEOUT_SECONDS = 3600

# A run's files (store/files.py, broker/runfiles.py): what one call may place in its working
# directory (files by id, and small ones inline as base64), what comes back of what it made,
# and how a path in that directory may look. A file's own size limit and how long it is kept
# are settings (SKILLFLEET_FILE_MAX_BYTES, SKILLFLEET_FILE_TTL).
MAX_RUN_FILES = 100
MAX_RUN_FILE_BYTES = 512 * MIB  # all of a call's input files together
MAX_INLINE_FILE_BYTES = 2 * MIB  # each inline file, decoded; a JSON body holds at most 5 MiB
MAX_OUTPUT_FILES = 100
MAX_OUTPUT_FILE_BYTES = 512 * MIB  # all of a run's output files together
MAX_FILE_PATH_CHARS = 1024
MAX_FILE_PATH_DEPTH = 16
MAX_FILE_NAME_CHARS = 255
# Files are read and sent in pieces this large: each piece of a request's or a response's body
# crosses from the server's event loop to a request thread, so fewer pieces cost less.
FILE_CHUNK_BYTES = 1 * MIB
# A worker keeps the input files it fetched, by their SHA-256, up to this many bytes (the least
# recently placed go first); a file larger than an eighth of it is never kept.
INPUT_CACHE_BYTES = 256 * MIB
# Sign-in with GitHub: device codes one client address may ask for in the window (each is a
# request to GitHub on the app's behalf, which GitHub rate-limits per app).
GITHUB_SIGNIN_STARTS = 10
GITHUB_SIGNIN_WINDOW_SECONDS = 900
MAX_SIGNIN_ID_CHARS = 64

# Signed skills and the keys an owner trusts (store/trust.py, store/sshkeygen.py).
MAX_TRUSTED_KEYS = 50  # per owner
MAX_KEY_NAME_CHARS = 64
MAX_PUBLIC_KEY_CHARS = 16 * KIB  # a public key or allowed_signers line as sent
MAX_SIGNATURE_BYTES = 16 * KIB  # skillfleet.sig (an RSA-16384 signature is some 3 KiB)
MIN_RSA_BITS = 2048
SSH_KEYGEN_SECONDS = 10.0  # one ssh-keygen run: a key check, a verification or a signing
