"""Review warnings: heuristics that tell the owner where to look before enabling or approving.

They never block anything and prove nothing; the owner still reads the scripts. Each warning
is one sentence naming the file (and line) at fault, never quoting a secret.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Mapping
from pathlib import PurePosixPath

from store.limits import LINT_MAX_BODY_LINES, LINT_MIN_DESCRIPTION_CHARS, MAX_LINT_WARNINGS
from store.schemas import SCRIPT_SUFFIXES, SCRIPTS_DIR, argv_of
from store.validation import SkillInfo

# Calls that reach the network from a script, by what a reader would search for.
_NETWORK = re.compile(
    r"\b(?:curl|wget|nc|ssh|scp|rsync)\s|\brequests\.\w+\(|\burllib\.request\b|\bhttpx\b"
    r"|\bhttp\.client\b|\bsocket\.socket\(|\bfetch\(|\baiohttp\b|\bInvoke-WebRequest\b"
    r"|\bHttpClient\b|https?://",
)
_DESTRUCTIVE = re.compile(
    r"\brm\s+-[a-zA-Z]*[rR][a-zA-Z]*f|\brm\s+-[a-zA-Z]*f[a-zA-Z]*[rR]|\bdd\s+[^\n]*\bof="
    r"|\bmkfs(?:\.\w+)?\b|\bDROP\s+(?:TABLE|DATABASE|SCHEMA)\b|\bTRUNCATE\s+TABLE\b"
    r"|\bshutil\.rmtree\(|\bwipefs\b|\bshred\b|\bfdisk\b|\bparted\b|\bsystemctl\s+(?:stop|disable)"
    r"|\breboot\b|\bshutdown\b",
    re.IGNORECASE,
)
_PASSTHROUGH = re.compile(
    r"shell\s*=\s*True|\bos\.system\(|\beval\s*\(|\bexec\s*\(|\beval\s+\"?\$|\bbash\s+-c\s+\"?\$"
)
# Reading the command line, by language: such a script gets arguments there only when its
# schema declares argv.
_COMMAND_LINE = {
    ".py": re.compile(r"\bsys\.argv\b|^\s*(?:import|from)\s+(?:argparse|optparse|getopt)\b", re.M),
    ".sh": re.compile(r"\$\{?[1-9@*#]|\bgetopts\b"),
    ".js": re.compile(r"\bprocess\.argv\b"),
    ".mjs": re.compile(r"\bprocess\.argv\b"),
    ".cs": re.compile(r"\bargs\s*(?:\[|\.Length\b)"),
}
# Where a Python script's packages must be, by where it runs ({it}: "it" or "them").
_PACKAGES_LIVE = {
    "node": ": each node's python3 needs {it}",
    "spark": ": the runner image has only the standard library; the operator builds one with {it}",
    "sandbox": ", and sandboxed Python has only the standard library: run the skill on a node",
}
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError", "Exception")
_SECRETS = (
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    re.compile(
        r"(?i)\b[\w-]{0,40}(?:password|passwd|secret|token|api[_-]?key|access[_-]?key)"
        r"[\"']?\s*[=:]\s*[\"'][^\"'\s$%{}<>]{8,}[\"']"
    ),
)


def lint(files: Mapping[str, bytes], info: SkillInfo) -> list[str]:
    """Review warnings for a skill's files (POSIX path -> bytes) and its parsed header."""
    warnings: list[str] = []
    scripts = sorted(path for path in files if _is_script(path))
    local = _local_modules(files)
    for path in scripts:
        text = files[path].decode("utf-8", "replace")
        warnings.extend(_script_warnings(path, text, info, local))
    for path in sorted(files):
        data = files[path]
        if _binary(data):  # an image or an archive: no line to point at
            continue
        line = _secret_line(data.decode("utf-8", "replace"))
        if line is not None:
            warnings.append(
                f"{path} line {line} holds text that looks like a secret (a key, token or "
                "password); secrets don't belong in a skill."
            )
    if info.network == "bridge":
        warnings.append(_deprecated_network(info))
    lines = info.body.count("\n") + 1
    if lines > LINT_MAX_BODY_LINES:
        warnings.append(
            f"SKILL.md's body is {lines} lines, over {LINT_MAX_BODY_LINES}; move detail into "
            "references/ so the agent reads it only when needed."
        )
    if len(info.description.strip()) < LINT_MIN_DESCRIPTION_CHARS:
        warnings.append(
            f"The description is under {LINT_MIN_DESCRIPTION_CHARS} characters; say what the "
            "skill does and when to use it, so the agent picks it at the right time."
        )
    return warnings[:MAX_LINT_WARNINGS]


def _deprecated_network(info: SkillInfo) -> str:
    """`skillfleet.network: bridge` opens no network: allowed-domains say what is reached."""
    reached = (
        "its scripts reach only the hosts in skillfleet.allowed-domains"
        if info.allowed_domains
        else "list the hosts its scripts need in skillfleet.allowed-domains, or they get no network"
    )
    return f"skillfleet.network is deprecated and opens nothing; {reached}."


def _is_script(path: str) -> bool:
    pure = PurePosixPath(path)
    return pure.parts[0] == SCRIPTS_DIR and pure.suffix.lower() in SCRIPT_SUFFIXES


def _local_modules(files: Mapping[str, bytes]) -> frozenset[str]:
    """Names a script may import from the skill itself: its .py files and its folders."""
    names: set[str] = set()
    for path in files:
        pure = PurePosixPath(path)
        names.update(pure.parts[:-1])
        if pure.suffix == ".py":
            names.add(pure.stem)
    return frozenset(names)


def _script_warnings(path: str, text: str, info: SkillInfo, local: frozenset[str]) -> list[str]:
    warnings: list[str] = []
    network = _NETWORK.search(text)
    if network is not None and not info.allowed_domains:
        warnings.append(
            f"{path} reaches the network ({_shown(network.group())}) but the skill declares "
            "no skillfleet.allowed-domains."
        )
    destructive = _DESTRUCTIVE.search(text)
    if destructive is not None and info.tier in ("read", "change"):
        warnings.append(
            f"{path} runs a destructive command ({_shown(destructive.group())}) but the "
            f"skill's tier is {info.tier}; such a script belongs in a destructive skill."
        )
    passthrough = _PASSTHROUGH.search(text)
    if passthrough is not None:
        warnings.append(
            f"{path} hands text to a shell or an evaluator ({_shown(passthrough.group())}); "
            "check that no argument can become a command."
        )
    if info.parameters_schema is None and path not in info.script_schemas:
        warnings.append(
            f"{path} has no parameters_schema, so its arguments are not checked before it runs."
        )
    warnings.extend(_input_warnings(path, text, info, local))
    if path not in info.body and PurePosixPath(path).name not in info.body:
        warnings.append(f"SKILL.md never mentions {path}; the agent won't know when to run it.")
    return warnings


def _input_warnings(path: str, text: str, info: SkillInfo, local: frozenset[str]) -> list[str]:
    """What a script reads that skillfleet gives it only when declared: argv, packages."""
    warnings: list[str] = []
    suffix = PurePosixPath(path).suffix.lower()
    reads = _COMMAND_LINE.get(suffix)
    found = reads.search(text) if reads is not None else None
    if found is not None and not argv_of(info, path):
        warnings.append(
            f"{path} reads its command line ({_shown(found.group())}) but its parameters_schema "
            "declares no argv, so it gets no arguments there; list them under argv."
        )
    if suffix == ".py":
        missing = _undeclared_packages(text, info, local)
        if missing:
            it = "it" if len(missing) == 1 else "them"
            where = _PACKAGES_LIVE.get(info.execution, _PACKAGES_LIVE["node"]).format(it=it)
            warnings.append(
                f"{path} imports {', '.join(missing)}, which Python's standard library lacks"
                f"{where}; name {it} in compatibility, such as "
                f'"Requires python3 with {missing[0]}".'
            )
    return warnings


def _undeclared_packages(text: str, info: SkillInfo, local: frozenset[str]) -> list[str]:
    """Top-level modules a Python script imports that are neither in the standard library, nor
    the skill's own, nor named in its compatibility; one guarded by `except ImportError` is
    optional."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # the syntax check reports it
    optional = _guarded_imports(tree)
    declared = (info.compatibility or "").lower()
    found: dict[str, None] = {}
    for node in ast.walk(tree):
        if node in optional:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            known = top in sys.stdlib_module_names or top in local
            if not known and top.lower() not in declared:
                found[top] = None
    return sorted(found)


def _guarded_imports(tree: ast.AST) -> set[ast.AST]:
    """Imports inside a `try` that handles ImportError: the script copes without them."""
    guarded: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for statement in node.body:
                guarded.update(ast.walk(statement))
    return guarded


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type
    if kinds is None:
        return True
    names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    return any(isinstance(name, ast.Name) and name.id in _IMPORT_ERRORS for name in names)


# Each secret pattern needs one of its markers (lowercased) in the text; substring tests are
# far cheaper than the patterns, and most files hold none (a 5 MiB skill: ~1 s without them).
_MARKERS: tuple[tuple[str, ...], ...] = (
    ("-----begin",),
    ("akia", "asia"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ("sk-",),
    ("xox",),
    ("eyj",),
    ("password", "passwd", "secret", "token", "api_key", "api-key", "apikey", "access"),
)


# Bytes looked at for a NUL: a file with one there is binary, as git decides for its diffs.
_BINARY_PROBE = 8000


def _binary(data: bytes) -> bool:
    """Binary content: a NUL byte early on. Random bytes (an image, an archive) hold one in
    their first 8,000 bytes but for a chance of about 1 in 10^13; text never does."""
    return b"\0" in data[:_BINARY_PROBE]


def _secret_line(text: str) -> int | None:
    lowered = text.lower()
    for pattern, markers in zip(_SECRETS, _MARKERS, strict=True):
        if not any(marker in lowered for marker in markers):
            continue
        found = pattern.search(text)
        if found is not None:
            return text.count("\n", 0, found.start()) + 1
    return None


def _shown(match: str) -> str:
    return " ".join(match.split())[:40]
