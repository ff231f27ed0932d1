"""Reading SKILL.md: front matter, body, encoding and YAML problems."""

from __future__ import annotations

import pytest

from store.errors import SkillInvalid
from store.skillmd import decode_skill_md, parse_skill_md, read_skill_md, split_front_matter

MINIMAL = "---\nname: demo\ndescription: Does a demo.\n---\n# Demo\n\nSteps.\n"


def problems_of(error: pytest.ExceptionInfo[SkillInvalid]) -> list[str]:
    return error.value.errors or []


def test_front_matter_and_body_are_split_at_the_closing_fence() -> None:
    yaml_text, body = split_front_matter(MINIMAL)
    assert yaml_text == "name: demo\ndescription: Does a demo."
    assert body == "# Demo\n\nSteps.\n"


def test_leading_blank_lines_of_the_body_are_dropped() -> None:
    _yaml, body = split_front_matter("---\nname: a\n---\n\n  \n\nText\n")
    assert body == "Text\n"


def test_crlf_line_endings_and_trailing_whitespace_on_fences_are_accepted() -> None:
    yaml_text, body = split_front_matter("--- \r\nname: a\r\n---\t\r\n\r\nBody\r\nMore\r\n")
    assert yaml_text == "name: a"
    assert body == "Body\nMore\n"


def test_a_byte_order_mark_before_the_front_matter_is_accepted() -> None:
    header, body = parse_skill_md("\ufeff" + MINIMAL)
    assert header == {"name": "demo", "description": "Does a demo."}
    assert body.startswith("# Demo")


def test_a_line_of_four_hyphens_does_not_close_the_front_matter() -> None:
    yaml_text, body = split_front_matter("---\nname: a\n----\n---\nBody")
    assert yaml_text == "name: a\n----"
    assert body == "Body"


def test_an_empty_body_is_an_empty_string() -> None:
    assert split_front_matter("---\nname: a\n---\n") == ("name: a", "")


def test_text_without_front_matter_is_refused_with_a_sentence() -> None:
    with pytest.raises(SkillInvalid) as error:
        split_front_matter("# Just markdown\n---\nname: a\n---\n")
    assert problems_of(error) == ["SKILL.md has no front matter: it must start with a line '---'."]


def test_front_matter_that_is_never_closed_is_refused() -> None:
    with pytest.raises(SkillInvalid) as error:
        split_front_matter("---\nname: a\ndescription: b\n")
    assert problems_of(error) == [
        "SKILL.md's front matter is never closed: add a line '---' after the header."
    ]


def test_invalid_yaml_is_refused_with_its_reason_and_line_in_skill_md() -> None:
    with pytest.raises(SkillInvalid) as error:
        parse_skill_md("---\nname: a\ndescription: [unclosed\n---\n")
    (problem,) = problems_of(error)
    assert problem.startswith("The front matter is not valid YAML: ")
    assert "(line 3 of SKILL.md)" in problem
    assert problem.endswith(".")


def test_python_tags_are_refused_because_only_safe_load_is_used() -> None:
    text = "---\nname: !!python/object/apply:os.system ['true']\n---\n"
    with pytest.raises(SkillInvalid) as error:
        parse_skill_md(text)
    assert problems_of(error)[0].startswith("The front matter is not valid YAML: ")


def test_a_header_that_is_a_list_is_refused() -> None:
    with pytest.raises(SkillInvalid) as error:
        parse_skill_md("---\n- name\n- description\n---\n")
    assert problems_of(error) == [
        "The front matter must be a mapping of keys to values, not a list."
    ]


def test_an_empty_header_is_refused() -> None:
    with pytest.raises(SkillInvalid) as error:
        parse_skill_md("---\n---\nBody\n")
    assert problems_of(error) == [
        "The front matter is empty: it must hold at least name and description."
    ]


def test_skill_md_that_is_not_utf8_is_refused_with_a_sentence() -> None:
    with pytest.raises(SkillInvalid) as error:
        decode_skill_md(b"---\nname: caf\xe9\n---\n")
    assert problems_of(error) == [
        "SKILL.md is not UTF-8 text: line 2 holds bytes that can't be decoded."
    ]


def test_utf8_bytes_with_a_byte_order_mark_are_read() -> None:
    header, body = read_skill_md(b"\xef\xbb\xbf" + MINIMAL.encode("utf-8"))
    assert header["name"] == "demo"
    assert body == "# Demo\n\nSteps.\n"
