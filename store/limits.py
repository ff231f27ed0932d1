"""Every size and count limit of the skill store, in one place."""

KIB = 1024
MIB = 1024 * 1024

MAX_SKILLS = 200
MAX_FILES = 200
MAX_FILE_BYTES = 1 * MIB
MAX_SKILL_BYTES = 5 * MIB
MAX_EDITABLE_BYTES = 256 * KIB
MAX_ZIP_BYTES = 5 * MIB
MAX_DOMAINS = 50
MAX_DRAFT_FILES = 40
MAX_SOURCE_CHATS = 10
MAX_RATIONALE_CHARS = 1000

# Resources an agent reads through read_skill_resource.
MAX_RESOURCE_BYTES = 256 * KIB

# Header fields (Agent Skills specification).
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_COMPATIBILITY_CHARS = 500

# Archives: refuse compression ratios no honest skill has.
MAX_COMPRESSION_RATIO = 200
MAX_ARCHIVE_ENTRIES = MAX_FILES + 100  # directories count as entries too

# The owner's event feed keeps about this many recent events for Last-Event-ID replay.
MAX_OWNER_EVENTS = 10_000
# List routes: the page size when none is asked for, and the largest one served.
DEFAULT_PAGE_SIZE = 250
MAX_PAGE_SIZE = 1000
