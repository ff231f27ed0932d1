"""How an import reads a header that bends the spec, and what it keeps strict."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from factories import skill_md, write_skill
from hypothesis import given
from hypothesis import strategies as st

from store.errors import SkillInvalid
from store.leniency import (
    derive_name,
    json_safe,
    read_header,
    read_skill_dir,
    relax_header,
    split_tools,
)
from store.validation import check_header, is_valid_name, validate_skill_dir


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("PDF Tools", "pdf-tools"),
        ("my_skill", "my-skill"),
        ("  Data -- Cleaner!  ", "data-cleaner"),
        ("café-tools", "cafe-tools"),
        ("Ｆｕｌｌ Width", "full-width"),
        ("x" * 70, "x" * 64),
        ("a" * 63 + "-b", "a" * 63),
        ("数据", ""),
        ("already-valid", "already-valid"),
    ],
)
def test_a_name_is_derived_by_the_documented_rule(text: str, name: str) -> None:
    assert derive_name(text) == name


@given(st.text())
def test_a_derived_name_is_empty_or_follows_the_name_rule(text: str) -> None:
    name = derive_name(text)
    assert name == "" or is_valid_name(name)


@given(st.one_of(st.none(), st.integers(), st.text()), st.one_of(st.none(), st.text()))
def test_the_installed_name_always_follows_the_name_rule(
    declared: object, folder: str | None
) -> None:
    relaxed = relax_header({"name": declared, "description": "Does things."}, "", folder, None)
    problems: list[str] = []
    info = check_header(relaxed.header, "", relaxed.name, problems)
    derivable = derive_name(str(declared)) if declared is not None else ""
    if derivable or derive_name(folder or ""):
        assert problems == [] and relaxed.problems == []
        assert is_valid_name(info.name)
    else:
        assert relaxed.problems  # no name can be made: the import asks for one


@pytest.mark.parametrize(
    ("value", "tools"),
    [
        ("Read Grep", ["Read", "Grep"]),
        ("Read, Grep,Glob", ["Read", "Grep", "Glob"]),
        (
            "Bash(git add:*), Bash(npm run test *) Read",
            ["Bash(git add:*)", "Bash(npm run test *)", "Read"],
        ),
        ("Bash(a,b)", ["Bash(a,b)"]),
        ("", []),
    ],
)
def test_allowed_tools_split_on_spaces_and_commas_outside_parentheses(
    value: str, tools: list[str]
) -> None:
    assert split_tools(value) == tools


def test_the_strict_check_still_refuses_what_the_import_accepts(tmp_path: Path) -> None:
    md = skill_md("Shown Name", **{"argument-hint": "[file]", "allowed-tools": ["Read"]})
    root = write_skill(tmp_path, "shown", {"SKILL.md": md.encode()})

    with pytest.raises(SkillInvalid) as caught:
        validate_skill_dir(root)
    assert any("argument-hint" in problem for problem in caught.value.errors or [])

    info = read_skill_dir(root, root.name)
    assert info.name == "shown-name"
    assert info.allowed_tools == "Read"
    assert info.unknown_keys == {"argument-hint": "[file]"}
    assert len(info.warnings) == 3


def test_an_unknown_key_never_becomes_a_setting(tmp_path: Path) -> None:
    md = skill_md("plain", **{"skillfleet.tier": "read", "execution": "spark"})
    info = read_skill_dir(write_skill(tmp_path, "plain", {"SKILL.md": md.encode()}), "plain")
    assert (info.tier, info.execution) == ("change", "auto")
    assert info.unknown_keys == {"skillfleet.tier": "read", "execution": "spark"}


def test_skillfleet_settings_stay_strict(tmp_path: Path) -> None:
    md = skill_md("loose", metadata={"skillfleet.tier": "admin", "skillfleet.networks": "x"})
    root = write_skill(tmp_path, "loose", {"SKILL.md": md.encode()})
    with pytest.raises(SkillInvalid) as caught:
        read_skill_dir(root, "loose")
    errors = caught.value.errors or []
    assert any('"skillfleet.tier" must be one of' in e for e in errors)
    assert any('Unknown metadata key "skillfleet.networks"' in e for e in errors)


def test_a_missing_description_is_taken_from_the_first_paragraph() -> None:
    body = "# Title\n\nSummarises logs for the on-call engineer.\nUse it after an alert.\n\nMore."
    info = read_header({"name": "logs"}, body, "logs")
    assert info.description == "Summarises logs for the on-call engineer. Use it after an alert."
    assert any("no description" in warning for warning in info.warnings)


def test_a_header_with_neither_description_nor_prose_is_refused() -> None:
    with pytest.raises(SkillInvalid) as caught:
        read_header({"name": "empty"}, "# Only a title\n", "empty")
    assert any("description" in problem for problem in caught.value.errors or [])


def test_a_long_description_is_cut_for_the_catalog() -> None:
    info = read_header({"name": "wordy", "description": "w" * 1500}, "", "wordy")
    assert len(info.description) == 1024
    assert any("1500 characters" in warning for warning in info.warnings)


def test_allowed_tools_that_are_neither_text_nor_a_list_are_ignored_with_a_warning() -> None:
    info = read_header(
        {"name": "odd", "description": "Odd.", "allowed-tools": {"Read": True}}, "", "odd"
    )
    assert info.allowed_tools is None
    assert any("allowed-tools" in warning for warning in info.warnings)


def test_yaml_values_are_kept_in_a_form_json_can_carry() -> None:
    value = {"when": datetime.date(2025, 1, 2), 3: {1, 2}, "x": float("nan"), "b": b"\x00"}
    assert json_safe(value) == {"when": "2025-01-02", "3": [1, 2], "x": "nan", "b": "AA=="}


def test_unquoted_colons_are_read_as_text_and_refused_by_the_strict_check(
    tmp_path: Path,
) -> None:
    md = "---\nname: notes\ndescription: Writes notes. Use when: asked.\n---\nBody.\n"
    root = write_skill(tmp_path, "notes", {"SKILL.md": md.encode()})

    info = read_skill_dir(root, "notes")

    assert info.description == "Writes notes. Use when: asked."
    read_as_text = 'the value of "description" is read as plain text, as written.'
    assert info.warnings[0].endswith(read_as_text)
    with pytest.raises(SkillInvalid) as caught:
        validate_skill_dir(root)
    assert caught.value.errors[0].startswith("The front matter is not valid YAML")


@pytest.mark.parametrize(
    "header",
    [
        "name: notes\ndescription: [Writes notes: when asked\n",  # a flow list left open
        "name: notes\ndescription: Writes notes\n  - stray: item\n",  # a broken structure
        "name: notes\nmetadata:\n  skillfleet.tier: read: write\n",  # nested: never quoted
    ],
)
def test_yaml_broken_in_other_ways_stays_refused(tmp_path: Path, header: str) -> None:
    md = f"---\n{header}---\nBody.\n"
    root = write_skill(tmp_path, "notes", {"SKILL.md": md.encode()})

    with pytest.raises(SkillInvalid) as caught:
        read_skill_dir(root, "notes")
    assert caught.value.errors[0].startswith("The front matter is not valid YAML")


def test_markdown_without_front_matter_reads_as_a_header_with_no_keys(tmp_path: Path) -> None:
    md = "# Notes\n\nWrites short notes from a transcript.\n"
    root = write_skill(tmp_path, "notes", {"SKILL.md": md.encode()})

    info = read_skill_dir(root, "notes")

    assert (info.name, info.description) == ("notes", "Writes short notes from a transcript.")
    assert info.warnings[0].startswith("SKILL.md has no front matter")
    assert info.unknown_keys == {}
    with pytest.raises(SkillInvalid):
        validate_skill_dir(root)


def test_a_front_matter_after_blank_lines_is_not_read_as_markdown(tmp_path: Path) -> None:
    md = "\n---\nname: notes\ndescription: Writes notes.\n---\nBody.\n"
    root = write_skill(tmp_path, "notes", {"SKILL.md": md.encode()})

    with pytest.raises(SkillInvalid) as caught:
        read_skill_dir(root, "notes")
    assert caught.value.errors == ["SKILL.md has no front matter: it must start with a line '---'."]
