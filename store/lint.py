"""Review warnings: heuristics that tell the owner where to look before enabling or approving.

They never block anything and prove nothing; the owner still reads the scripts. Each warning
is one sentence naming the files (and line) at fault, never quoting a secret; what many
scripts share (no schema, never mentioned, an undeclared package) is one warning naming them.
The scripts an agent runs are those under scripts/ with an interpreter
(store/environment.py); a module the others import (an `__init__.py`, a helper) is no script
to run, so only what its code does is looked at (store/imports.py).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from store.egress import local_host
from store.environment import INTERPRETERS, provided_modules
from store.imports import library_modules, needed_modules, parsed
from store.limits import (
    LINT_MAX_BODY_LINES,
    LINT_MIN_DESCRIPTION_CHARS,
    LINT_NAMES_SHOWN,
    MAX_LINT_WARNINGS,
)
from store.packagenames import declared_modules
from store.reach import network_use
from store.schemas import SCRIPTS_DIR, argv_of
from store.scriptinput import command_line_read
from store.validation import SkillInfo

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
# Programs by extension that no tier has an interpreter for: a script an agent can't run.
_OTHER_PROGRAMS = frozenset(
    {
        ".rb", ".pl", ".php", ".go", ".rs", ".java", ".kt", ".kts", ".swift", ".ps1", ".bat",
        ".cmd", ".lua", ".r", ".jl", ".scala", ".groovy", ".c", ".cc", ".cpp", ".zsh", ".fish",
        ".tsx", ".jsx", ".cjs", ".mts", ".cts", ".ex", ".exs", ".hs", ".dart", ".vbs", ".tcl",
    }
)  # fmt: skip
# Documents of the skill besides SKILL.md that tell the agent when to run a script.
_DOCUMENTS = (".md", ".txt", ".rst")
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
    scripts = sorted(path for path in files if _is_script(path))
    texts = {path: files[path].decode("utf-8", "replace") for path in scripts}
    trees = {path: tree for path in scripts if path.endswith(".py")
             if (tree := parsed(texts[path])) is not None}  # fmt: skip
    run = [path for path in scripts if path not in library_modules(trees)]
    warnings: list[str] = []
    for path in scripts:
        warnings.extend(_code_warnings(path, texts[path], info))
    warnings.extend(_unrunnable(files))
    warnings.extend(_undeclared_schemas(run, texts, info))
    warnings.extend(_command_lines(run, texts, info))
    warnings.extend(_packages(trees, files, info))
    warnings.extend(_unmentioned(run, files, info))
    warnings.extend(_secret_warnings(files))
    warnings.extend(_skill_warnings(info))
    return warnings[:MAX_LINT_WARNINGS]


def _skill_warnings(info: SkillInfo) -> list[str]:
    """What the header and body say: the network settings, the body's length, the description."""
    warnings = []
    if info.network == "bridge":
        warnings.append(_deprecated_network(info))
    inside = [host for host in info.allowed_domains if local_host(host) is not None]
    if inside:
        warnings.append(
            f"skillfleet.allowed-domains lists {', '.join(inside)}, on a local network or not "
            "a public address: a skill that reaches the server's own network or a cloud "
            "metadata service needs a careful look (skillfleet refuses such hosts unless the "
            "operator allows them)."
        )
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
    return warnings


def _secret_warnings(files: Mapping[str, bytes]) -> list[str]:
    warnings = []
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
    return warnings


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
    return pure.parts[0] == SCRIPTS_DIR and pure.suffix.lower() in INTERPRETERS


def _code_warnings(path: str, text: str, info: SkillInfo) -> list[str]:
    """What one script's code does that the owner should look at: network, deletion, a shell."""
    warnings: list[str] = []
    network = network_use(path, text)
    if network is not None and not info.allowed_domains:
        warnings.append(
            f"{path} reaches the network ({_shown(network)}) but the skill declares "
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
    return warnings


def _unrunnable(files: Mapping[str, bytes]) -> list[str]:
    """Programs under scripts/ that no tier can run: an extension without an interpreter, or
    none at all with a `#!` line (scripts run by their extension, never their mode)."""
    found = []
    for path in sorted(files):
        pure = PurePosixPath(path)
        if pure.parts[0] != SCRIPTS_DIR or len(pure.parts) < 2:
            continue
        suffix = pure.suffix.lower()
        if suffix in _OTHER_PROGRAMS or (not suffix and files[path].startswith(b"#!")):
            found.append(path)
    if not found:
        return []
    runnable = ", ".join(INTERPRETERS)
    return [
        f"{_names(found)} can't run on any tier: skillfleet runs scripts by their extension "
        f"({runnable}), so run_skill_script doesn't offer {_them(found)}."
    ]


def _undeclared_schemas(run: list[str], texts: Mapping[str, str], info: SkillInfo) -> list[str]:
    """Scripts taking JSON arguments that no schema checks (one that reads its command line
    gets the call's `args`, which no schema describes)."""
    lacking = [
        path
        for path in run
        if info.parameters_schema is None
        and path not in info.script_schemas
        and command_line_read(path, texts[path]) is None
    ]
    if not lacking:
        return []
    if len(lacking) == 1:
        return [
            f"{lacking[0]} has no parameters_schema, so its arguments are not checked before "
            "it runs."
        ]
    return [
        f"{_names(lacking)} have no parameters_schema, so their arguments are not checked "
        "before they run."
    ]


def _command_lines(run: list[str], texts: Mapping[str, str], info: SkillInfo) -> list[str]:
    """Scripts that read their command line while their schema declares properties but no
    argv: those properties reach them as JSON only, and an agent may send them as `arguments`
    (a script whose schema declares none just takes the call's `args`)."""
    reading: list[tuple[str, str]] = []
    for path in run:
        found = command_line_read(path, texts[path])
        if found is not None and not argv_of(info, path) and _schema_properties(info, path):
            reading.append((path, _shown(found)))
    if not reading:
        return []
    how = (
        "so the arguments its schema lists never reach its command line; list them under argv, "
        "or drop them and let agents send the command line as `args`."
    )
    if len(reading) == 1:
        path, shown = reading[0]
        return [f"{path} reads its command line ({shown}) but its parameters_schema declares "
                f"no argv, {how}"]  # fmt: skip
    return [
        f"{_names([path for path, _ in reading])} read their command line but their "
        f"parameters_schema declares no argv, {how}"
    ]


def _schema_properties(info: SkillInfo, path: str) -> bool:
    """The script's schema declares properties besides `node` (which never reaches it)."""
    schema = info.script_schemas.get(path) or info.parameters_schema or {}
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return bool(set(properties or {}) - {"node"})


def _unmentioned(run: list[str], files: Mapping[str, bytes], info: SkillInfo) -> list[str]:
    """Scripts that neither SKILL.md nor the skill's other documents mention."""
    documents = [info.body] + [
        files[path].decode("utf-8", "replace")
        for path in files
        if path.lower().endswith(_DOCUMENTS) and path != "SKILL.md"
    ]
    never = [path for path in run if not any(_mentions(text, path) for text in documents)]
    if not never:
        return []
    if len(never) == 1:
        return [f"SKILL.md never mentions {never[0]}; the agent won't know when to run it."]
    return [f"SKILL.md never mentions {_names(never)}; the agent won't know when to run them."]


def _mentions(text: str, path: str) -> bool:
    """Whether a document names the script: its path or file name, with or without extension."""
    pure = PurePosixPath(path)
    return any(name in text for name in (path, pure.name, str(pure.with_suffix(""))))


def _packages(
    trees: Mapping[str, ast.AST], files: Mapping[str, bytes], info: SkillInfo
) -> list[str]:
    """Imports that neither Python's standard library, the standard environment, the skill's
    declared dependencies nor its own files provide; a sandboxed skill has the standard
    library alone."""
    known = set(sys.stdlib_module_names) | _local_modules(files)
    if info.execution != "sandbox":
        known |= provided_modules() | declared_modules(files)
    named = (info.compatibility or "").lower()
    lacking = {
        path: missing
        for path, tree in sorted(trees.items())
        if (
            missing := [
                m for m in needed_modules(tree) if m not in known and m.lower() not in named
            ]
        )
    }
    if not lacking:
        return []
    modules = sorted({module for missing in lacking.values() for module in missing})
    it = "it" if len(modules) == 1 else "them"
    imports = "; ".join(f"{path} imports {', '.join(missing)}" for path, missing in lacking.items())
    if info.execution == "sandbox":
        return [
            f"{imports}, which sandboxed Python lacks: it has only the standard library; run "
            "the skill on a node or the Spark."
        ]
    return [
        f"{imports}, which neither the standard environment nor the skill's declared "
        f"dependencies provide; list {it} in the skill's requirements.txt or the script's "
        f"`# /// script` block."
    ]


def _local_modules(files: Mapping[str, bytes]) -> frozenset[str]:
    """Names a script may import from the skill itself: its .py files and its folders."""
    names: set[str] = set()
    for path in files:
        pure = PurePosixPath(path)
        names.update(pure.parts[:-1])
        if pure.suffix == ".py":
            names.add(pure.stem)
    return frozenset(names)


def _names(paths: list[str]) -> str:
    """`a, b and c`, or the first few and how many more."""
    if len(paths) > LINT_NAMES_SHOWN:
        more = len(paths) - LINT_NAMES_SHOWN
        return f"{', '.join(paths[:LINT_NAMES_SHOWN])} and {more} more"
    return ", ".join(paths[:-1]) + f" and {paths[-1]}" if len(paths) > 1 else paths[0]


def _them(paths: Iterable[str]) -> str:
    return "it" if len(list(paths)) == 1 else "them"


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
