"""Validation of skill folders and headers: every rule, its sentence, and the limits."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from store.errors import SkillInvalid, SkillTooLarge
from store.limits import MAX_DOMAINS, MAX_FILE_BYTES, MAX_FILES, MAX_SKILL_BYTES
from store.validation import (
    SkillInfo,
    check_limits,
    format_problems,
    is_host_name,
    is_valid_name,
    validate_header,
    validate_skill_dir,
)

DESCRIPTION = "Says hello. Use when greeting someone."


def make_skill(
    parent: Path, name: str, header: str | None = None, files: dict[str, str] | None = None
) -> Path:
    """Write a skill folder with a SKILL.md holding `header` and the given text files."""
    root = parent / name
    root.mkdir()
    if header is None:
        header = f"name: {name}\ndescription: {DESCRIPTION}\n"
    (root / "SKILL.md").write_text(f"---\n{header}---\n# Hello\n", encoding="utf-8")
    for path, text in (files or {}).items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


def header_problems(header: dict[str, Any], folder: str | None = "demo") -> list[str]:
    with pytest.raises(SkillInvalid) as error:
        validate_header(header, "", folder)
    return error.value.errors or []


def with_metadata(**metadata: Any) -> dict[str, Any]:
    return {"name": "demo", "description": DESCRIPTION, "metadata": metadata}


def dir_problems(root: Path, expected_name: str | None = None) -> list[str]:
    with pytest.raises(SkillInvalid) as error:
        validate_skill_dir(root, expected_name)
    return error.value.errors or []


# -- a valid skill -----------------------------------------------------------------------


def test_a_minimal_skill_is_valid_with_skillfleet_defaults(tmp_path: Path) -> None:
    info = validate_skill_dir(make_skill(tmp_path, "hello"))
    assert info == SkillInfo(
        name="hello",
        description=DESCRIPTION,
        license=None,
        compatibility=None,
        metadata={},
        allowed_tools=None,
        execution="auto",
        tier="change",
        allowed_domains=(),
        network="none",
        parameters_schema=None,
        script_schemas={},
        body="# Hello\n",
    )


def test_every_spec_field_and_skillfleet_key_is_read(tmp_path: Path) -> None:
    header = (
        "name: fetcher\n"
        f"description: {DESCRIPTION}\n"
        "license: Apache-2.0\n"
        "compatibility: Needs curl\n"
        "allowed-tools: Bash(curl:*) Read\n"
        "metadata:\n"
        "  author: ops\n"
        "  skillfleet.execution: spark\n"
        "  skillfleet.tier: read\n"
        "  skillfleet.allowed-domains: API.github.com, pypi.org  example.com\n"
        "  skillfleet.network: bridge\n"
        "  parameters_schema:\n"
        "    type: object\n"
        "    properties: {url: {type: string}}\n"
    )
    info = validate_skill_dir(make_skill(tmp_path, "fetcher", header))
    assert (info.license, info.compatibility, info.allowed_tools) == (
        "Apache-2.0",
        "Needs curl",
        "Bash(curl:*) Read",
    )
    assert (info.execution, info.tier, info.network) == ("spark", "read", "bridge")
    assert info.allowed_domains == ("api.github.com", "pypi.org", "example.com")
    assert info.parameters_schema == {
        "type": "object",
        "properties": {"url": {"type": "string"}},
    }
    assert info.metadata["author"] == "ops"


# -- name --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (
            "PDF-Tools",
            'The name "PDF-Tools" may only hold lowercase letters a-z, digits and hyphens.',
        ),
        (
            "pdf_tools",
            'The name "pdf_tools" may only hold lowercase letters a-z, digits and hyphens.',
        ),
        ("-pdf", 'The name "-pdf" must not start or end with a hyphen.'),
        ("pdf-", 'The name "pdf-" must not start or end with a hyphen.'),
        ("pdf--tools", 'The name "pdf--tools" must not hold two hyphens in a row.'),
        ("a" * 65, f'The name "{"a" * 65}" is 65 characters long; the limit is 64 characters.'),
        ("", "The name is empty; it must hold 1 to 64 lowercase letters a-z, digits and hyphens."),
    ],
)
def test_a_bad_name_is_refused_with_a_sentence_saying_what_is_allowed(
    name: str, problem: str
) -> None:
    assert header_problems({"name": name, "description": DESCRIPTION}, None) == [problem]


@pytest.mark.parametrize("name", ["café", "ñandú", "tool\uff11", "ｐｄｆ", "ＡＢＣ"])
def test_unicode_letters_and_digits_in_a_name_are_refused(name: str) -> None:
    (problem,) = header_problems({"name": name, "description": DESCRIPTION}, None)
    assert problem == (
        f'The name "{name}" holds characters other than a-z, 0-9 and hyphens; names are used '
        "as folder names and grant keys, so only a-z, 0-9 and hyphens are allowed."
    )
    assert not is_valid_name(name)


def test_a_name_of_64_characters_is_allowed() -> None:
    assert is_valid_name("a" * 64)
    assert is_valid_name("pdf-tools-2")


def test_a_missing_or_non_string_name_is_refused() -> None:
    assert header_problems({"description": DESCRIPTION}) == [
        "The header has no name; add name: with the skill's folder name."
    ]
    assert header_problems({"name": 12, "description": DESCRIPTION}) == [
        "The name must be a string of lowercase letters a-z, digits and hyphens."
    ]


def test_a_name_that_differs_from_the_folder_name_is_refused(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "hello", f"name: goodbye\ndescription: {DESCRIPTION}\n")
    assert dir_problems(root) == ['The name "goodbye" must equal the skill\'s folder name "hello".']


def test_the_expected_name_replaces_the_folder_name_when_given(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "staging-1234", f"name: hello\ndescription: {DESCRIPTION}\n")
    assert validate_skill_dir(root, expected_name="hello").name == "hello"
    assert dir_problems(root, "other") == [
        'The name "hello" must equal the skill\'s folder name "other".'
    ]


# -- the other spec fields ----------------------------------------------------------------


def test_a_missing_empty_or_long_description_is_refused() -> None:
    assert header_problems({"name": "demo"}) == [
        "The header has no description; add one that says what the skill does and when to use it."
    ]
    assert header_problems({"name": "demo", "description": "  "}) == [
        "The description is empty; say what the skill does and when to use it."
    ]
    assert header_problems({"name": "demo", "description": "x" * 1025}) == [
        "The description is 1025 characters long; the limit is 1024 characters."
    ]
    assert header_problems({"name": "demo", "description": ["a"]}) == [
        "The description must be a string."
    ]


def test_a_description_of_1024_characters_is_allowed() -> None:
    assert validate_header({"name": "demo", "description": "x" * 1024}, "", "demo").name == "demo"


def test_compatibility_must_be_1_to_500_characters() -> None:
    base = {"name": "demo", "description": DESCRIPTION}
    assert header_problems({**base, "compatibility": "x" * 501}) == [
        "The compatibility field is 501 characters long; the limit is 500 characters."
    ]
    assert header_problems({**base, "compatibility": ""}) == [
        "The compatibility field must be a string of 1 to 500 characters."
    ]


def test_license_and_allowed_tools_must_be_strings() -> None:
    base = {"name": "demo", "description": DESCRIPTION}
    assert header_problems({**base, "license": 2, "allowed-tools": ["Read"]}) == [
        "The license field must be a string.",
        "The allowed-tools field must be a string.",
    ]


def test_an_unknown_top_level_key_is_refused() -> None:
    assert header_problems({"name": "demo", "description": DESCRIPTION, "foo": "bar"}) == [
        'Unknown header key "foo"; put your own keys under metadata.'
    ]


def test_a_header_with_four_problems_reports_all_four() -> None:
    header = {"name": "Bad_Name", "description": "", "foo": 1, "metadata": {"version": 1.0}}
    with pytest.raises(SkillInvalid) as error:
        validate_header(header, "", None)
    assert error.value.message == "SKILL.md has 4 problems."
    assert error.value.errors == [
        'The name "Bad_Name" may only hold lowercase letters a-z, digits and hyphens.',
        "The description is empty; say what the skill does and when to use it.",
        'Unknown header key "foo"; put your own keys under metadata.',
        'The metadata value of "version" must be a string; quote it.',
    ]


def test_header_and_folder_problems_are_reported_together(tmp_path: Path) -> None:
    header = "name: Hello\ndescription: ''\nfoo: 1\n"
    root = make_skill(tmp_path, "hello", header, {"scripts/bad.py": "def f(:\n"})
    problems = dir_problems(root)
    assert len(problems) == 5
    assert problems[-1].startswith("scripts/bad.py line 1: ")


# -- metadata ----------------------------------------------------------------------------


def test_metadata_must_be_a_mapping_of_string_values() -> None:
    assert header_problems({"name": "demo", "description": DESCRIPTION, "metadata": "x"}) == [
        "The metadata field must be a mapping of keys to string values."
    ]
    assert header_problems(with_metadata(version=2)) == [
        'The metadata value of "version" must be a string; quote it.'
    ]


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("skillfleet.execution", "gpu", 'must be one of node, spark, sandbox, not "gpu".'),
        ("skillfleet.tier", "admin", 'must be one of read, change, destructive, not "admin".'),
        ("skillfleet.network", "host", 'must be one of none, bridge, not "host".'),
    ],
)
def test_a_skillfleet_setting_outside_its_values_is_refused(
    key: str, value: str, problem: str
) -> None:
    assert header_problems(with_metadata(**{key: value})) == [f'The metadata key "{key}" {problem}']


def test_a_misspelt_skillfleet_key_is_refused() -> None:
    assert header_problems(with_metadata(**{"skillfleet.teir": "read"})) == [
        'Unknown metadata key "skillfleet.teir"; skillfleet reads skillfleet.execution, '
        "skillfleet.tier, skillfleet.allowed-domains, skillfleet.network, skillfleet.secrets."
    ]


def test_the_bridge_network_is_only_allowed_with_spark_execution() -> None:
    assert header_problems(with_metadata(**{"skillfleet.network": "bridge"})) == [
        'The network "bridge" is only allowed with execution "spark"; this skill declares none.'
    ]


def test_the_seeds_lucia_keys_are_accepted_as_aliases() -> None:
    info = validate_header(
        with_metadata(
            **{
                "lucia.execution": "spark",
                "lucia.tier": "destructive",
                "lucia.allowed-domains": "example.com",
                "lucia.network": "bridge",
            }
        ),
        "",
        "demo",
    )
    assert (info.execution, info.tier, info.network) == ("spark", "destructive", "bridge")
    assert info.allowed_domains == ("example.com",)


def test_a_key_and_its_lucia_alias_with_different_values_are_refused() -> None:
    metadata = {"skillfleet.tier": "read", "lucia.tier": "change"}
    assert header_problems(with_metadata(**metadata)) == [
        'The metadata keys "skillfleet.tier" ("read") and its alias "lucia.tier" ("change") '
        "disagree; keep one of them."
    ]
    same = {"skillfleet.tier": "read", "lucia.tier": "read"}
    assert validate_header(with_metadata(**same), "", "demo").tier == "read"


@pytest.mark.parametrize(
    "host",
    [
        "https://example.com",
        "example.com/path",
        "example.com:443",
        "-bad.com",
        "ex_ample.com",
        "bücher.de",
    ],
)
def test_an_allowed_domain_that_is_not_a_bare_host_name_is_refused(host: str) -> None:
    assert header_problems(with_metadata(**{"skillfleet.allowed-domains": host})) == [
        f'The metadata key "skillfleet.allowed-domains" holds "{host}", which is not a host '
        "name; list bare host names such as api.github.com, without scheme, path or port."
    ]


def test_more_allowed_domains_than_the_limit_are_refused() -> None:
    hosts = " ".join(f"h{index}.example.com" for index in range(MAX_DOMAINS + 1))
    assert header_problems(with_metadata(**{"skillfleet.allowed-domains": hosts})) == [
        'The metadata key "skillfleet.allowed-domains" lists 51 hosts; the limit is 50 hosts.'
    ]


def test_host_names_are_checked_label_by_label() -> None:
    assert is_host_name("api.github.com")
    assert is_host_name("localhost")
    assert not is_host_name("a..b")
    assert not is_host_name(("a" * 64) + ".com")


# -- the folder and its limits ------------------------------------------------------------


def test_a_folder_without_skill_md_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    assert dir_problems(root) == ["The skill has no SKILL.md at its root."]


def test_a_skill_md_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo")
    (root / "SKILL.md").write_bytes(b"---\nname: demo\ndescription: caf\xe9\n---\n")
    assert dir_problems(root) == [
        "SKILL.md is not UTF-8 text: line 3 holds bytes that can't be decoded."
    ]


def test_a_symbolic_link_is_refused_and_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret", encoding="utf-8")
    root = make_skill(tmp_path, "demo")
    (root / "assets").mkdir()
    (root / "assets" / "link.txt").symlink_to(outside)
    (root / "linked-dir").symlink_to(tmp_path)
    assert dir_problems(root) == [
        'The file "assets/link.txt" is a symbolic link; skills may hold regular files only.',
        'The file "linked-dir" is a symbolic link; skills may hold regular files only.',
    ]
    with pytest.raises(SkillInvalid):
        check_limits(root)


def test_a_file_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo")
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb"):
        pass
    assert dir_problems(root) == ['The file name "caf\ufffd.txt" is not valid UTF-8.']


def test_a_named_pipe_is_refused(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo")
    os.mkfifo(root / "pipe")
    assert dir_problems(root) == [
        'The file "pipe" is a named pipe; skills may hold regular files only.'
    ]


def test_check_limits_returns_the_sorted_relative_paths(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo", files={"scripts/b.py": "", "assets/a.txt": ""})
    assert check_limits(root) == ["SKILL.md", "assets/a.txt", "scripts/b.py"]


def test_more_files_than_the_limit_are_refused_as_too_large(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo")
    (root / "assets").mkdir()
    for index in range(MAX_FILES):
        (root / "assets" / f"{index}.txt").write_bytes(b"")
    with pytest.raises(SkillTooLarge) as error:
        validate_skill_dir(root)
    assert error.value.message == "The skill has 201 files; the limit is 200 files."
    assert format_problems(error.value) == [error.value.message]


def test_a_file_over_one_mib_is_refused_naming_the_limit(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo")
    (root / "big.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    with pytest.raises(SkillTooLarge) as error:
        check_limits(root)
    assert error.value.message == (
        'The file "big.bin" is 1,048,577 bytes; the limit is 1 MiB per file.'
    )


def test_a_skill_over_five_mib_is_refused_naming_the_limit(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo")
    skill_md = (root / "SKILL.md").stat().st_size
    remaining = MAX_SKILL_BYTES + 1 - skill_md
    for index in range(6):
        size = min(MAX_FILE_BYTES, remaining)
        (root / f"part{index}.bin").write_bytes(b"\0" * size)
        remaining -= size
    with pytest.raises(SkillTooLarge) as error:
        validate_skill_dir(root)
    assert error.value.message == "The skill holds 5,242,881 bytes; the limit is 5 MiB per skill."


def test_limits_are_checked_before_anything_else(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo", "name: Wrong\n")
    (root / "big.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    with pytest.raises(SkillTooLarge):
        validate_skill_dir(root)


def test_format_problems_lists_every_sentence_of_an_invalid_skill(tmp_path: Path) -> None:
    root = make_skill(tmp_path, "demo", "name: demo\n")
    with pytest.raises(SkillInvalid) as error:
        validate_skill_dir(root)
    assert error.value.message == "The skill has 1 problem."
    assert format_problems(error.value) == [
        "The header has no description; add one that says what the skill does and when to use it."
    ]
