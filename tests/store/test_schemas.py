"""The arguments schema of each script: declared, one for all, or the mode's default."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from store.errors import SkillInvalid
from store.limits import MAX_ARGUMENT_TEXT
from store.schemas import argv_of, parse_schema_text, schema_for, scripts_of
from store.validation import SkillInfo, validate_header, validate_skill_dir

NODE_PROPERTY = {
    "type": "string",
    "description": "The server to run on: one of your nodes, as list_nodes names them.",
}
WHERE_PROPERTY = {
    "type": "string",
    "description": 'Where to run: one of your nodes (list_nodes), or "spark" or "sandbox"; left '
    "out, the Spark runs it while a Spark worker serves.",
}


def info_with(execution: str = "node", schema: Any = None) -> SkillInfo:
    """A skill's header declaring `execution` (none at all for `auto`) and `schema`."""
    metadata: dict[str, Any] = {} if execution == "auto" else {"skillfleet.execution": execution}
    if schema is not None:
        metadata["parameters_schema"] = schema
    header = {"name": "demo", "description": "Demo.", "metadata": metadata}
    return validate_header(header, "", "demo")


def schema_problems(schema: Any) -> list[str]:
    with pytest.raises(SkillInvalid) as error:
        info_with("spark", schema)
    return error.value.errors or []


def skill_dir(parent: Path, metadata: str, files: Sequence[str] = ()) -> Path:
    """Write a skill "demo" whose metadata block is `metadata` (YAML indented by two)."""
    root = parent / "demo"
    root.mkdir()
    header = f"name: demo\ndescription: Demo.\nmetadata:\n{metadata}"
    (root / "SKILL.md").write_text(f"---\n{header}---\n", encoding="utf-8")
    for path in files:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("", encoding="utf-8")
    return root


def dir_problems(root: Path) -> list[str]:
    with pytest.raises(SkillInvalid) as error:
        validate_skill_dir(root)
    return error.value.errors or []


# -- parameters_schema -------------------------------------------------------------------


def test_a_parameters_schema_in_json_text_is_parsed() -> None:
    text = '{"type": "object", "properties": {"n": {"type": "integer"}}}'
    info = info_with("spark", text)
    assert info.parameters_schema == {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert info.script_schemas == {}


def test_a_parameters_schema_that_is_not_of_type_object_is_refused() -> None:
    assert schema_problems({"type": "array"}) == [
        'The parameters_schema must have "type": "object", not "array".'
    ]
    assert schema_problems({"properties": {}}) == [
        'The parameters_schema must have "type": "object".'
    ]


def test_a_parameters_schema_that_is_not_a_valid_json_schema_is_refused() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integr"}}}
    (problem,) = schema_problems(schema)
    assert problem.startswith(
        "The parameters_schema is not a valid JSON Schema at properties/n/type: "
    )


def test_a_parameters_schema_that_is_not_json_is_refused() -> None:
    assert schema_problems("{type: object") == [
        "The parameters_schema is not valid JSON: Expecting property name enclosed in double "
        "quotes (line 1, column 2)."
    ]
    assert schema_problems("[1, 2]") == [
        "The parameters_schema must be a JSON Schema object or a map from script path to "
        "schema, not a list."
    ]


def test_a_parameters_schema_built_from_yaml_aliases_is_refused_as_the_header_is_read(
    tmp_path: Path,
) -> None:
    lines = ["  parameters_schema:", "    type: object"]
    lines.append("    a0: &a0 [x, x, x, x, x, x, x, x, x, x]")
    for level in range(1, 7):
        lines.append(f"    a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    root = skill_dir(tmp_path, "\n".join(lines) + "\n")
    assert dir_problems(root) == [
        "The front matter is too large to read: with its aliases written out it holds more "
        "than 10,000 values (line 10 of SKILL.md)."
    ]


def test_a_map_of_script_schemas_is_read(tmp_path: Path) -> None:
    metadata = (
        "  parameters_schema: >-\n"
        '    {"scripts/a.py": {"type": "object"}, "scripts/b.sh": {"type": "object",'
        ' "required": ["x"]}}\n'
    )
    root = skill_dir(tmp_path, metadata, ["scripts/a.py", "scripts/b.sh"])
    info = validate_skill_dir(root)
    assert info.parameters_schema is None
    assert info.script_schemas == {
        "scripts/a.py": {"type": "object"},
        "scripts/b.sh": {"type": "object", "required": ["x"]},
    }


def test_a_map_naming_a_missing_script_is_refused(tmp_path: Path) -> None:
    metadata = "  parameters_schema:\n    scripts/missing.py: {type: object}\n"
    assert dir_problems(skill_dir(tmp_path, metadata)) == [
        'The parameters_schema names "scripts/missing.py", which the skill does not hold.'
    ]


def test_each_bad_schema_in_a_map_is_named_by_its_script_path() -> None:
    schema = {
        "scripts/a.py": {"type": "string"},
        "scripts/b.py": "text",
        "../escape.py": {"type": "object"},
    }
    assert schema_problems(schema) == [
        'The parameters_schema for "scripts/a.py" must have "type": "object", not "string".',
        'The parameters_schema for "scripts/b.py" must be a JSON Schema object, not a string.',
        'The parameters_schema names "../escape.py", which is not a relative path inside the '
        'skill such as "scripts/verify.py".',
    ]


# -- schema_for and scripts_of -----------------------------------------------------------


def test_a_node_skill_without_a_schema_requires_a_node_string() -> None:
    assert schema_for(info_with("node"), "scripts/run.py") == {
        "type": "object",
        "properties": {"node": NODE_PROPERTY},
        "required": ["node"],
    }


def test_a_spark_skill_without_a_schema_takes_any_object() -> None:
    assert schema_for(info_with("spark"), "scripts/run.py") == {"type": "object"}


def test_a_sandbox_skill_without_a_schema_takes_an_optional_node() -> None:
    assert schema_for(info_with("sandbox"), "scripts/run.py") == {
        "type": "object",
        "properties": {"node": NODE_PROPERTY},
    }


def test_a_node_skill_schema_gets_the_node_property_and_requirement_added() -> None:
    declared = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    info = info_with("node", declared)
    assert schema_for(info, "scripts/run.py") == {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "node": NODE_PROPERTY},
        "required": ["n", "node"],
    }
    assert info.parameters_schema == declared


def test_a_skill_that_runs_on_the_spark_or_a_node_takes_an_optional_node_naming_either() -> None:
    assert schema_for(info_with("auto"), "scripts/run.py") == {
        "type": "object",
        "properties": {"node": WHERE_PROPERTY},
    }
    declared = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert schema_for(info_with("auto", declared), "scripts/run.py") == {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "node": WHERE_PROPERTY},
        "required": ["n"],
    }


def test_the_declared_schema_is_never_mutated() -> None:
    declared = {"type": "object", "properties": {"n": {"type": "integer"}}}
    info = info_with("node", copy.deepcopy(declared))
    schema_for(info, "scripts/a.py")["properties"]["x"] = {}
    assert info.parameters_schema == declared
    assert schema_for(info, "scripts/a.py")["required"] == ["node"]


def test_a_spark_skill_schema_is_used_as_declared() -> None:
    declared = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert schema_for(info_with("spark", declared), "scripts/a.py") == declared


def test_a_script_map_gives_each_script_its_own_schema_and_others_the_default() -> None:
    schemas = {
        "scripts/a.py": {"type": "object", "properties": {"a": {"type": "string"}}},
        "scripts/b.sh": {"type": "object", "required": ["b"]},
    }
    info = info_with("spark", schemas)
    assert schema_for(info, "scripts/a.py") == schemas["scripts/a.py"]
    assert schema_for(info, "scripts/b.sh") == {"type": "object", "required": ["b"]}
    assert schema_for(info, "scripts/c.js") == {"type": "object"}


def test_scripts_of_lists_runnable_files_under_scripts_in_order(tmp_path: Path) -> None:
    for path in [
        "scripts/b.sh",
        "scripts/a.py",
        "scripts/tool/c.mjs",
        "scripts/d.js",
        "scripts/e.cs",
        "scripts/readme.md",
        "references/x.py",
        "SKILL.md",
    ]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("", encoding="utf-8")
    (tmp_path / "scripts" / "link.py").symlink_to(tmp_path / "scripts" / "a.py")
    assert scripts_of(tmp_path) == [
        "scripts/a.py",
        "scripts/b.sh",
        "scripts/d.js",
        "scripts/e.cs",
        "scripts/tool/c.mjs",
    ]


def test_a_skill_without_a_scripts_folder_has_no_scripts(tmp_path: Path) -> None:
    assert scripts_of(tmp_path) == []


# -- argv: the script's command line --------------------------------------------------------

ARGV_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pdf": {"type": "string"},
        "pages": {"type": "integer"},
        "verbose": {"type": "boolean"},
        "extra": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["pdf"],
    "argv": [{"option": "--pages", "property": "pages"}, "pdf", "--", "extra"],
}


def test_a_schema_with_argv_is_read_and_the_default_schema_rules_still_apply() -> None:
    info = info_with("node", copy.deepcopy(ARGV_SCHEMA))
    assert info.parameters_schema == ARGV_SCHEMA
    schema = schema_for(info, "scripts/check.py")
    assert schema["required"] == ["pdf", "node"]
    assert schema["argv"] == ARGV_SCHEMA["argv"]


def test_argv_values_are_held_to_what_a_command_line_carries_when_a_call_is_checked() -> None:
    schema = schema_for(info_with("spark", copy.deepcopy(ARGV_SCHEMA)), "scripts/check.py")
    check = Draft202012Validator(schema)
    assert check.is_valid({"pdf": "form.pdf", "pages": 2, "extra": ["-x", "--y"]})
    assert not check.is_valid({"pdf": "-rf"})  # would be read as an option
    assert not check.is_valid({"pdf": "--output=/etc/passwd"})
    assert not check.is_valid({"pdf": "a", "pages": -1})
    assert not check.is_valid({"pdf": "a\x00b"})
    assert not check.is_valid({"pdf": "a", "extra": ["x\x00"]})  # after "--": only the NUL
    assert not check.is_valid({"pdf": "x" * (MAX_ARGUMENT_TEXT + 1)})


def test_an_author_s_own_pattern_is_kept_beside_the_command_line_rule() -> None:
    declared = copy.deepcopy(ARGV_SCHEMA)
    declared["properties"]["pdf"]["pattern"] = "[.]pdf$"
    schema = schema_for(info_with("spark", declared), "scripts/check.py")
    check = Draft202012Validator(schema)
    assert check.is_valid({"pdf": "form.pdf"})
    assert not check.is_valid({"pdf": "form.txt"})
    assert not check.is_valid({"pdf": "-form.pdf"})


def test_a_script_without_argv_gets_no_command_line_rules() -> None:
    declared = {"type": "object", "properties": {"pdf": {"type": "string"}}}
    assert schema_for(info_with("spark", declared), "scripts/a.py") == declared
    assert argv_of(info_with("spark", declared), "scripts/a.py") == ()


def test_argv_of_reads_each_script_s_own_declaration() -> None:
    schemas = {"scripts/a.py": copy.deepcopy(ARGV_SCHEMA), "scripts/b.py": {"type": "object"}}
    info = info_with("spark", schemas)
    assert [entry.kind for entry in argv_of(info, "scripts/a.py")] == [
        "option",
        "positional",
        "end",
        "positional",
    ]
    assert argv_of(info, "scripts/b.py") == ()
    assert argv_of(info, "scripts/c.py") == ()


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ("pdf", 'has an argv that is a string, not a list of "--", a property name, '),
        ([7], "has an argv entry 7 that is not "),
        (["nope"], 'puts "nope" on the command line, but its properties do not declare it.'),
        (["node"], 'puts "node" on the command line, but node names the server to run on'),
        (["pdf", "pdf"], 'puts "pdf" on the command line twice.'),
        (["verbose"], 'puts "verbose" on the command line, so its "type" must be "string", '),
        ([{"flag": "--v", "property": "pdf"}], 'so its "type" must be "boolean"; it is "string".'),
        ([{"option": "--a b", "property": "pdf"}], 'which is not an option name such as "--pages"'),
        ([{"option": "-", "property": "pdf"}], "which is not an option name"),
        ([{"option": "--p", "property": "pdf", "x": 1}], 'has an argv entry {"option": "--p"'),
        (["--", "--"], 'has "--" twice in its argv.'),
        (["--", {"flag": "-v", "property": "verbose"}], 'has the flag "-v" after "--"'),
    ],
)
def test_an_argv_that_can_t_be_read_is_a_problem_naming_what_is_wrong(
    argv: Any, problem: str
) -> None:
    schema = {**copy.deepcopy(ARGV_SCHEMA), "argv": argv}
    (found,) = schema_problems({"scripts/check.py": schema})
    assert found.startswith('The parameters_schema for "scripts/check.py" ')
    assert problem in found, found


def test_a_command_line_property_without_a_declared_type_is_a_problem() -> None:
    schema = {"type": "object", "properties": {"pdf": {}}, "argv": ["pdf"]}
    assert schema_problems(schema) == [
        'The parameters_schema puts "pdf" on the command line, so its "type" must be "string", '
        '"integer", "number" or "array" with "items" of one of those; it declares none.'
    ]


def test_argv_without_a_type_is_one_broken_schema_not_a_map_of_scripts() -> None:
    assert schema_problems({"argv": ["pdf"]}) == [
        'The parameters_schema must have "type": "object".'
    ]


# -- parameters_schema sent as JSON text -----------------------------------------------------


def test_a_schema_sent_as_json_text_is_parsed_into_its_object() -> None:
    assert parse_schema_text('{"type": "object", "required": ["n"]}') == {
        "type": "object",
        "required": ["n"],
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '{"type": "object",}',
            "The parameters_schema is not valid JSON: Expecting property name enclosed in "
            "double quotes (line 1, column 19).",
        ),
        ("[1]", "The parameters_schema must be a JSON Schema object or a map from script path "),
        ("null", "The parameters_schema must be a JSON Schema object or a map from script path "),
    ],
)
def test_json_text_that_is_not_an_object_is_refused_as_a_header_would_be(
    text: str, problem: str
) -> None:
    with pytest.raises(SkillInvalid) as error:
        parse_schema_text(text)
    assert error.value.code == "skill_invalid"
    assert error.value.message.startswith(problem)
    assert error.value.errors == [error.value.message]
    assert schema_problems(text) == [error.value.message]  # the header's sentence, word for word
