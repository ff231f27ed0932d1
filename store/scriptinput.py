"""How a script takes its input: its command line (argv), or JSON in SKILLFLEET_ARGS.

Skills written for other agents read their command line (`python scripts/x.py in.pdf
out.json`); skillfleet's own read JSON. What a script reads is read from its text, by
language, for load_skill's list of scripts and the review warnings.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

# Reading the command line, by language.
COMMAND_LINE = {
    ".py": re.compile(r"\bsys\.argv\b|^\s*(?:import|from)\s+(?:argparse|optparse|getopt)\b", re.M),
    ".sh": re.compile(r"\$\{?[1-9@*#]|\bgetopts\b"),
    ".js": re.compile(r"\bprocess\.argv\b"),
    ".mjs": re.compile(r"\bprocess\.argv\b"),
    ".ts": re.compile(r"\b(?:process|Bun)\.argv\b"),
    ".cs": re.compile(r"\bargs\s*(?:\[|\.Length\b)"),
}


def command_line_read(path: str, text: str) -> str | None:
    """What of the script's text reads its command line, or None when nothing does."""
    pattern = COMMAND_LINE.get(PurePosixPath(path).suffix.lower())
    found = pattern.search(text) if pattern is not None else None
    return found.group() if found is not None else None
