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
# List routes: the page size when none is asked for, and the largest one served.
DEFAULT_PAGE_SIZE = 250
MAX_PAGE_SIZE = 1000
# YAML people write (SKILL.md headers, policies, the config file): the nesting it may have
# (PyYAML recurses per level and would overflow) and the values it may hold, counting each
# alias as the whole value it repeats (nested aliases multiply).
MAX_YAML_DEPTH = 32
MAX_YAML_VALUES = 10_000

# Request bodies: a refused upload is still read (and dropped) up to this much, so a client
# that sends its whole body before reading the answer gets the 413 instead of a broken pipe.
MAX_DRAINED_BYTES = 64 * MIB

# A run's message goes out before its row is saved, so that the save overlaps the message's
# way to the worker. The API saves the row within RUN_SAVE_SECONDS of sending it or rolls it
# back; a worker that finds no row waits RUN_SAVE_WAIT_SECONDS for it, then drops the message.
RUN_SAVE_SECONDS = 10.0
RUN_SAVE_WAIT_SECONDS = 30.0
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
MAX_MODEL_NAME_CHARS = 200
MAX_BASE_URL_CHARS = 500
MAX_API_KEY_CHARS = 4096
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
MAX_PATH_CHARS = 1024  # a resource path read_skill_resource accepts
MAX_LINT_WARNINGS = 50  # review warnings kept per skill
MAX_CRON_CHARS = 100  # the column's width

# What ask_owner, request_secret and notify_owner take (broker/ownertools.py, questions.py).
MAX_QUESTION_CHARS = 2000  # a question, or why a secret is needed
MAX_CHOICES = 20
MAX_CHOICE_CHARS = 200
MAX_ANSWER_CHARS = 4000
MAX_SECRET_BYTES = 8 * KIB  # a secret's value, as UTF-8
MAX_NOTICE_CHARS = 1000  # a notify_owner message

# Live streams in Redis (a run's output, an agent turn's events): the defaults of
# SKILLFLEET_RUN_OUTPUT_BYTES, _RUN_STREAM_TTL and _RUN_STREAMS_KEPT (store/settings.py).
# A stream holds this much output (a turn's: text), then one note that the rest is not streamed;
# it expires this long after its end (while it runs, this long after its last refresh); and the
# housekeeping keeps at most this many ended streams of each kind, removing the oldest.
RUN_OUTPUT_BYTES = 1 * MIB
RUN_STREAM_TTL_SECONDS = 3600
RUN_STREAMS_KEPT = 1000
# Flower keeps this many tasks in memory, dropping the oldest (its own default is 100,000).
FLOWER_MAX_TASKS = 10_000

# run_command: the command text an agent sends, and the most seconds it may ask for (a run never
# outlasts the operator's SKILLFLEET_RUN_TIMEOUT, the default when it asks for none).
MAX_COMMAND_BYTES = 8 * KIB
MAX_COMMAND_TIMEOUT_SECONDS = 3600
