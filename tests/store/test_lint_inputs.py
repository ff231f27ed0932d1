"""Review warnings about a script's inputs: a command line it reads, packages it imports."""

from __future__ import annotations

from typing import Any

import pytest

from store.lint import lint
from store.validation import validate_header

ARGV_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"pdf": {"type": "string"}},
    "argv": ["pdf"],
}


def info(compatibility: str | None = None, **metadata: object):
    header: dict[str, Any] = {
        "name": "forms",
        "description": "Checks whether a PDF has fillable form fields.",
        "metadata": {"skillfleet.tier": "read", **metadata},
    }
    if compatibility is not None:
        header["compatibility"] = compatibility
    return validate_header(
        header, "Run scripts/check.py, scripts/check.sh or scripts/c.js.", "forms"
    )


def warnings_for(files: dict[str, str], **kwargs: Any) -> list[str]:
    return lint({path: text.encode() for path, text in files.items()}, info(**kwargs))


@pytest.mark.parametrize(
    ("path", "text", "shown"),
    [
        ("scripts/check.py", "import sys\nprint(sys.argv[1])\n", "sys.argv"),
        (
            "scripts/check.py",
            "import argparse\nargparse.ArgumentParser().parse_args()\n",
            "import argparse",
        ),
        ("scripts/check.sh", 'echo "$1"\n', "$1"),
        ("scripts/check.sh", 'for f in "${@}"; do echo "$f"; done\n', "${@"),
        ("scripts/c.js", "console.log(process.argv[2]);\n", "process.argv"),
    ],
)
def test_a_script_that_reads_its_command_line_while_its_schema_lists_arguments_is_flagged(
    path, text, shown
):
    schema = {"type": "object", "properties": {"pdf": {"type": "string"}}}
    found = warnings_for({path: text}, parameters_schema=schema)
    assert found == [
        f"{path} reads its command line ({shown}) but its parameters_schema declares no argv, "
        "so the arguments its schema lists never reach its command line; list them under argv, "
        "or drop them and let agents send the command line as `args`."
    ]


@pytest.mark.parametrize(
    "schema", [None, {"type": "object"}, {"type": "object", "properties": {"node": {}}}]
)
def test_a_script_that_reads_its_command_line_and_lists_no_arguments_takes_args_unflagged(schema):
    extra = {} if schema is None else {"parameters_schema": schema}
    assert warnings_for({"scripts/check.py": "import sys\nprint(sys.argv[1])\n"}, **extra) == []


def test_a_script_whose_schema_declares_argv_is_not_flagged():
    text = "import sys\nprint(sys.argv[1])\n"
    assert warnings_for({"scripts/check.py": text}, parameters_schema=ARGV_SCHEMA) == []
    listing = {"type": "object", "properties": {"name": {"type": "string"}}}
    schemas = {"scripts/check.py": ARGV_SCHEMA, "scripts/check.sh": listing}
    found = warnings_for({"scripts/check.py": text, "scripts/check.sh": 'echo "$1"\n'},
                         parameters_schema=schemas)  # fmt: skip
    assert [w.split(" ")[0] for w in found] == ["scripts/check.sh"]


def test_a_script_reading_skillfleet_args_is_not_flagged():
    text = "import json, os\nprint(json.loads(os.environ['SKILLFLEET_ARGS']))\n"
    assert warnings_for({"scripts/check.py": text}, parameters_schema={"type": "object"}) == []


UNDECLARED = (
    ", which neither the standard environment nor the skill's declared dependencies provide; "
)


@pytest.mark.parametrize("execution", ["node", "spark"])
def test_a_package_outside_the_standard_environment_must_be_declared(execution):
    text = "import fitz\nfrom pypdf import PdfReader\nimport json\n"
    found = warnings_for(
        {"scripts/check.py": text},
        parameters_schema={"type": "object"},
        **{"skillfleet.execution": execution},
    )
    assert found == [
        f"scripts/check.py imports fitz{UNDECLARED}list it in the skill's requirements.txt or "
        "the script's `# /// script` block."
    ]


def test_a_sandboxed_script_has_the_standard_library_alone():
    text = "from pypdf import PdfReader\nimport json\n"
    found = warnings_for(
        {"scripts/check.py": text},
        parameters_schema={"type": "object"},
        **{"skillfleet.execution": "sandbox"},
    )
    assert found == [
        "scripts/check.py imports pypdf, which sandboxed Python lacks: it has only the standard "
        "library; run the skill on a node or the Spark."
    ]


def test_packages_declared_in_requirements_or_a_script_block_are_not_flagged():
    script = (
        "# /// script\n"
        "# dependencies = [\n"
        '#   "PyMuPDF>=1.24",\n'
        "# ]\n"
        "# ///\n"
        "import fitz\nimport bs4\nimport dateutil.parser\n"
    )
    files = {
        "scripts/check.py": script,
        "requirements.txt": "beautifulsoup4==4.12  # parsing\npython-dateutil\n",
    }
    assert warnings_for(files, parameters_schema={"type": "object"}) == []
    alone = warnings_for({"scripts/check.py": script}, parameters_schema={"type": "object"})
    assert alone == [
        f"scripts/check.py imports bs4, dateutil{UNDECLARED}list them in the skill's "
        "requirements.txt or the script's `# /// script` block."
    ]


def test_packages_named_in_compatibility_the_skill_s_own_modules_and_optional_imports_pass():
    files = {
        "scripts/check.py": (
            "import os, sys, json\n"
            "from pypdf import PdfReader\n"
            "import yaml\n"
            "from helpers import field_names\n"
            "from scripts_lib.pages import count\n"
            "from . import sibling\n"
            "try:\n    import fitz\nexcept ImportError:\n    fitz = None\n"
        ),
        "scripts/helpers.py": "def field_names():\n    return []\n",
        "scripts_lib/pages.py": "def count():\n    return 0\n",
    }
    found = warnings_for(
        files,
        compatibility="Requires python3 with pypdf and PyYAML",
        parameters_schema={"type": "object"},
    )
    assert not [w for w in found if "standard library" in w], found


def test_every_undeclared_package_of_the_skill_is_named_in_one_warning():
    files = {
        "scripts/check.py": "import reportlab.pdfgen\nimport camelot\nimport camelot.io\n",
        "scripts/other.py": "import tabula\n",
    }
    found = warnings_for(files, parameters_schema={"type": "object"})
    assert [w for w in found if " imports " in w] == [
        f"scripts/check.py imports camelot; scripts/other.py imports tabula{UNDECLARED}list them "
        "in the skill's requirements.txt or the script's `# /// script` block."
    ]
