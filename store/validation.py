"""Validation of a skill folder against the Agent Skills specification and skillfleet's keys.

Every check collects plain-sentence problems instead of stopping at the first one; a skill
with any problem is refused with all of them (`SkillInvalid.errors`). Size and count limits
are checked first and raise `SkillTooLarge`, whose message names the limit.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store.dependencies import dependency_problems
from store.errors import SkillInvalid, SkillTooLarge
from store.limits import (
    KIB,
    MAX_COMPATIBILITY_CHARS,
    MAX_DESCRIPTION_CHARS,
    MAX_DOMAINS,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_NAME_CHARS,
    MAX_SECRETS,
    MAX_SKILL_BYTES,
    MIB,
)
from store.names import AUTO, EXECUTIONS, is_valid_name
from store.schemas import SCHEMA_KEY, check_parameters_schema
from store.scriptcheck import check_scripts
from store.skillmd import read_skill_md

SKILL_MD = "SKILL.md"
SPEC_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
TIERS = ("read", "change", "destructive")
NETWORKS = ("none", "bridge")
PREFIX = "skillfleet."
ALIAS_PREFIX = "lucia."  # the seed's keys, accepted as aliases
SETTINGS = ("execution", "tier", "allowed-domains", "network", "secrets")
DEFAULTS = {"execution": AUTO, "tier": "change", "network": "none"}

_NAME = re.compile(r"[a-z0-9-]+", re.ASCII)
# A secret reaches a script as an environment variable of this name (docs/secrets.md).
SECRET_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}", re.ASCII)
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)", re.ASCII)
_MAX_QUOTED_CHARS = 80


@dataclass(frozen=True)
class SkillInfo:
    """A valid skill's header, with skillfleet's settings resolved to their defaults."""

    name: str
    description: str
    license: str | None
    compatibility: str | None
    metadata: dict[str, Any]
    allowed_tools: str | None
    execution: str
    tier: str
    allowed_domains: tuple[str, ...]
    network: str
    parameters_schema: dict[str, Any] | None
    script_schemas: dict[str, dict[str, Any]]
    body: str
    # What a lenient read bent (store/leniency.py); empty for a skill that meets the spec.
    warnings: tuple[str, ...] = ()
    unknown_keys: dict[str, Any] = field(default_factory=dict)
    declared_name: str | None = None  # the header's name, when the skill is installed under another
    secrets: tuple[str, ...] = ()  # skillfleet.secrets: env vars its scripts get from the owner


HeaderReader = Callable[[bytes, list[str]], "SkillInfo | None"]


def validate_skill_dir(root: Path, expected_name: str | None = None) -> SkillInfo:
    """Validate `root` strictly (as `validate --strict`): its name must equal `expected_name`
    or the folder's.

    Raises SkillTooLarge when a limit is exceeded, else SkillInvalid listing every problem.
    """
    name = expected_name if expected_name is not None else root.name
    return check_skill_dir(root, lambda data, problems: _read_skill(data, name, problems))


def check_skill_dir(root: Path, read: HeaderReader) -> SkillInfo:
    """Check the folder's files, limits and scripts; `read` checks the bytes of its SKILL.md."""
    if not root.is_dir():
        problem = f"The skill folder {_quote(root.name)} does not exist or is not a folder."
        raise SkillInvalid(_count("The skill", [problem]), errors=[problem])
    sizes, problems = _inventory(root)
    _check_sizes(sizes)
    info = None
    if SKILL_MD in sizes:
        info = read((root / SKILL_MD).read_bytes(), problems)
    elif not os.path.islink(root / SKILL_MD):  # a link is reported by _inventory
        problems.append("The skill has no SKILL.md at its root.")
    if info is not None:
        problems.extend(_missing_scripts(info, sizes))
    problems.extend(check_scripts(root))
    problems.extend(dependency_problems(root, sizes))
    if problems or info is None:
        raise SkillInvalid(_count("The skill", problems), errors=problems)
    return info


def validate_header(header: Mapping[Any, Any], body: str, folder_name: str | None) -> SkillInfo:
    """Check a parsed header; `folder_name`, when given, is the name the skill must have."""
    problems: list[str] = []
    info = check_header(header, body, folder_name, problems)
    if problems:
        raise SkillInvalid(_count("SKILL.md", problems), errors=problems)
    return info


def check_limits(root: Path) -> list[str]:
    """Check the folder's files against the limits; return their sorted POSIX relative paths.

    Raises SkillTooLarge naming the limit, or SkillInvalid when anything but regular files
    and folders is present (symbolic links are never followed).
    """
    sizes, problems = _inventory(root)
    _check_sizes(sizes)
    if problems:
        raise SkillInvalid(_count("The skill", problems), errors=problems)
    return sorted(sizes)


def quote(text: str) -> str:
    """`text` in double quotes as problems and warnings show it, cut when long."""
    return _quote(text)


def format_problems(exc: SkillInvalid | SkillTooLarge) -> list[str]:
    """The sentences to show a user for a refused skill, one per problem."""
    return list(exc.errors) if exc.errors else [exc.message]


def name_problems(name: str) -> list[str]:
    """Why `name` is not a valid skill name, one sentence per problem (none when it is)."""
    problems = _name_problems(name)
    if not problems and not is_valid_name(name):  # the grammar in store/names.py decides
        problems.append(f"The name {_quote(name)} is not a valid skill name.")
    return problems


def is_host_name(host: str) -> bool:
    """Whether `host` is a bare DNS host name (no scheme, path or port), in lowercase."""
    labels = host.split(".")
    return len(host) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)


# -- the folder --------------------------------------------------------------------------


def _inventory(root: Path) -> tuple[dict[str, int], list[str]]:
    """Map every regular file's relative path to its size; list problems with other entries."""
    sizes: dict[str, int] = {}
    problems: list[tuple[str, str]] = []
    for directory, dirs, files in os.walk(root, onerror=_raise):
        for name in sorted(dirs + files):
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            status = path.lstat()
            mode = status.st_mode
            if any("\udc80" <= char <= "\udcff" for char in relative):  # undecodable bytes
                shown = relative.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                problems.append((relative, f"The file name {_quote(shown)} is not valid UTF-8."))
            elif stat.S_ISREG(mode):
                sizes[relative] = status.st_size
            elif not stat.S_ISDIR(mode):
                kind = _kind_of_file(mode)
                problem = (
                    f"The file {_quote(relative)} is {kind}; skills may hold regular files only."
                )
                problems.append((relative, problem))
    return sizes, [problem for _path, problem in sorted(problems)]


def _check_sizes(sizes: Mapping[str, int]) -> None:
    if len(sizes) > MAX_FILES:
        raise SkillTooLarge(f"The skill has {len(sizes)} files; the limit is {MAX_FILES} files.")
    for relative in sorted(sizes):
        if sizes[relative] > MAX_FILE_BYTES:
            raise SkillTooLarge(
                f"The file {_quote(relative)} is {sizes[relative]:,} bytes; "
                f"the limit is {_bytes(MAX_FILE_BYTES)} per file."
            )
    total = sum(sizes.values())
    if total > MAX_SKILL_BYTES:
        raise SkillTooLarge(
            f"The skill holds {total:,} bytes; the limit is {_bytes(MAX_SKILL_BYTES)} per skill."
        )


def _read_skill(data: bytes, folder_name: str, problems: list[str]) -> SkillInfo | None:
    try:
        header, body = read_skill_md(data)
    except SkillInvalid as e:
        problems.extend(format_problems(e))
        return None
    return check_header(header, body, folder_name, problems)


def _missing_scripts(info: SkillInfo, sizes: Mapping[str, int]) -> list[str]:
    return [
        f"The parameters_schema names {_quote(path)}, which the skill does not hold."
        for path in info.script_schemas
        if path not in sizes
    ]


# -- the header --------------------------------------------------------------------------


def check_header(
    header: Mapping[Any, Any], body: str, folder_name: str | None, problems: list[str]
) -> SkillInfo:
    """Every spec and skillfleet rule on a parsed header; problems are appended to `problems`."""
    name = _check_name(header.get("name"), folder_name, problems)
    description = _check_description(header.get("description"), problems)
    license_ = _optional_text(header, "license", problems)
    compatibility = _check_compatibility(header.get("compatibility"), problems)
    allowed_tools = _optional_text(header, "allowed-tools", problems)
    for key in header:
        if key not in SPEC_FIELDS:
            problems.append(
                f"Unknown header key {_quote(str(key))}; put your own keys under metadata."
            )
    metadata = _check_metadata(header.get("metadata"), problems)
    execution = _choice(metadata, "execution", EXECUTIONS, problems)
    network = _choice(metadata, "network", NETWORKS, problems)
    if network == "bridge" and execution != "spark":
        said = " declares none" if execution == AUTO else f"'s execution is {_quote(execution)}"
        problems.append(
            f'The network "bridge" is only allowed with execution "spark"; this skill{said}.'
        )
    schema, script_schemas = check_parameters_schema(metadata.get(SCHEMA_KEY), problems)
    return SkillInfo(
        name=name,
        description=description,
        license=license_,
        compatibility=compatibility,
        metadata=metadata,
        allowed_tools=allowed_tools,
        execution=execution,
        tier=_choice(metadata, "tier", TIERS, problems),
        allowed_domains=_check_domains(metadata, problems),
        network=network,
        parameters_schema=schema,
        script_schemas=script_schemas,
        body=body,
        secrets=_check_secrets(metadata, problems),
    )


def _check_name(value: object, folder_name: str | None, problems: list[str]) -> str:
    if value is None:
        problems.append("The header has no name; add name: with the skill's folder name.")
        return ""
    if not isinstance(value, str):
        problems.append("The name must be a string of lowercase letters a-z, digits and hyphens.")
        return ""
    problems.extend(_name_problems(value))
    if folder_name is not None and value != folder_name:
        problems.append(
            f"The name {_quote(value)} must equal the skill's folder name {_quote(folder_name)}."
        )
    return value


def _name_problems(name: str) -> list[str]:
    if not name:
        return [
            "The name is empty; it must hold 1 to 64 lowercase letters a-z, digits and hyphens."
        ]
    quoted = _quote(name)
    problems = []
    if len(name) > MAX_NAME_CHARS:
        problems.append(
            f"The name {quoted} is {len(name)} characters long; "
            f"the limit is {MAX_NAME_CHARS} characters."
        )
    if not name.isascii():
        problems.append(
            f"The name {quoted} holds characters other than a-z, 0-9 and hyphens; names are "
            "used as folder names and grant keys, so only a-z, 0-9 and hyphens are allowed."
        )
    elif not _NAME.fullmatch(name):
        problems.append(
            f"The name {quoted} may only hold lowercase letters a-z, digits and hyphens."
        )
    if name.startswith("-") or name.endswith("-"):
        problems.append(f"The name {quoted} must not start or end with a hyphen.")
    if "--" in name:
        problems.append(f"The name {quoted} must not hold two hyphens in a row.")
    return problems


def _check_description(value: object, problems: list[str]) -> str:
    if value is None:
        problems.append(
            "The header has no description; add one that says what the skill does "
            "and when to use it."
        )
    elif not isinstance(value, str):
        problems.append("The description must be a string.")
    elif not value.strip():
        problems.append("The description is empty; say what the skill does and when to use it.")
    elif len(value) > MAX_DESCRIPTION_CHARS:
        problems.append(
            f"The description is {len(value)} characters long; "
            f"the limit is {MAX_DESCRIPTION_CHARS} characters."
        )
    else:
        return value
    return ""


def _check_compatibility(value: object, problems: list[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        problems.append(
            f"The compatibility field must be a string of 1 to {MAX_COMPATIBILITY_CHARS} "
            "characters."
        )
    elif len(value) > MAX_COMPATIBILITY_CHARS:
        problems.append(
            f"The compatibility field is {len(value)} characters long; "
            f"the limit is {MAX_COMPATIBILITY_CHARS} characters."
        )
    else:
        return value
    return None


def _optional_text(header: Mapping[Any, Any], key: str, problems: list[str]) -> str | None:
    """An optional string field; an empty YAML value (null) counts as absent."""
    value = header.get(key)
    if value is None or isinstance(value, str):
        return value
    problems.append(f"The {key} field must be a string.")
    return None


# -- metadata ----------------------------------------------------------------------------


def _check_metadata(value: object, problems: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append("The metadata field must be a mapping of keys to string values.")
        return {}
    metadata: dict[str, Any] = {}
    known = {prefix + setting for prefix in (PREFIX, ALIAS_PREFIX) for setting in SETTINGS}
    for key, item in value.items():
        if not isinstance(key, str):
            problems.append(f"The metadata key {_quote(str(key))} must be a string; quote it.")
            continue
        if key != SCHEMA_KEY and not isinstance(item, str):
            problems.append(f"The metadata value of {_quote(key)} must be a string; quote it.")
        if key.startswith(PREFIX) and key not in known:
            problems.append(
                f"Unknown metadata key {_quote(key)}; skillfleet reads "
                + ", ".join(PREFIX + setting for setting in SETTINGS)
                + "."
            )
        metadata[key] = item
    return metadata


def _setting(
    metadata: Mapping[str, Any], setting: str, problems: list[str]
) -> tuple[str, str] | None:
    """The key and value of skillfleet.<setting> or its lucia.<setting> alias, if a string."""
    given = [
        (key, metadata[key])
        for key in (PREFIX + setting, ALIAS_PREFIX + setting)
        if isinstance(metadata.get(key), str)
    ]
    if len(given) == 2 and given[0][1] != given[1][1]:
        (key, value), (alias, alias_value) = given
        problems.append(
            f"The metadata keys {_quote(key)} ({_quote(value)}) and its alias {_quote(alias)} "
            f"({_quote(alias_value)}) disagree; keep one of them."
        )
    return given[0] if given else None


def _choice(
    metadata: Mapping[str, Any], setting: str, allowed: tuple[str, ...], problems: list[str]
) -> str:
    found = _setting(metadata, setting, problems)
    if found is None:
        return DEFAULTS[setting]
    key, value = found
    if value not in allowed:
        problems.append(
            f"The metadata key {_quote(key)} must be one of {', '.join(allowed)}, "
            f"not {_quote(value)}."
        )
        return DEFAULTS[setting]
    return value


def _check_domains(metadata: Mapping[str, Any], problems: list[str]) -> tuple[str, ...]:
    key, hosts = _words(metadata, "allowed-domains", problems, str.lower)
    _check_count(key, hosts, MAX_DOMAINS, "hosts", problems)
    for host in hosts:
        if not is_host_name(host):
            problems.append(
                f"The metadata key {key} holds {_quote(host)}, which is not a host name; "
                "list bare host names such as api.github.com, without scheme, path or port."
            )
    return hosts


def is_secret_name(name: object) -> bool:
    """Whether `name` may name a secret: an environment variable's name, A-Z, 0-9 and _."""
    return isinstance(name, str) and SECRET_NAME.fullmatch(name) is not None


def _check_secrets(metadata: Mapping[str, Any], problems: list[str]) -> tuple[str, ...]:
    key, names = _words(metadata, "secrets", problems)
    _check_count(key, names, MAX_SECRETS, "secrets", problems)
    for name in names:
        if not is_secret_name(name):
            problems.append(
                f"The metadata key {key} holds {_quote(name)}, which can't name a secret; "
                "use environment variable names of A-Z, 0-9 and _ that start with a letter, "
                "such as API_TOKEN."
            )
    return names


def _words(
    metadata: Mapping[str, Any],
    setting: str,
    problems: list[str],
    fold: Callable[[str], str] = str,
) -> tuple[str, tuple[str, ...]]:
    """The quoted key of a space- or comma-separated setting and its words, each once."""
    found = _setting(metadata, setting, problems)
    if found is None:
        return "", ()
    words = (fold(word) for word in re.split(r"[\s,]+", found[1]) if word)
    return _quote(found[0]), tuple(dict.fromkeys(words))


def _check_count(
    key: str, words: tuple[str, ...], limit: int, noun: str, problems: list[str]
) -> None:
    if len(words) > limit:
        problems.append(
            f"The metadata key {key} lists {len(words)} {noun}; the limit is {limit} {noun}."
        )


# -- small helpers -----------------------------------------------------------------------


def _kind_of_file(mode: int) -> str:
    kinds = {
        stat.S_IFLNK: "a symbolic link",
        stat.S_IFIFO: "a named pipe",
        stat.S_IFSOCK: "a socket",
    }
    return kinds.get(stat.S_IFMT(mode), "a device")


def _bytes(limit: int) -> str:
    if limit % MIB == 0:
        return f"{limit // MIB} MiB"
    return f"{limit // KIB} KiB"


def _quote(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    if len(quoted) > _MAX_QUOTED_CHARS:
        return quoted[: _MAX_QUOTED_CHARS - 2] + '…"'
    return quoted


def _count(subject: str, problems: list[str]) -> str:
    return f"{subject} has {len(problems)} problem{'' if len(problems) == 1 else 's'}."


def _raise(error: OSError) -> None:
    raise error
