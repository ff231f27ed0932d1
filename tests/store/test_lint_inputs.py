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
def test_a_script_that_reads_its_command_line_without_argv_declared_is_flagged(path, text, shown):
    found = warnings_for({path: text}, parameters_schema={"type": "object"})
    assert found == [
        f"{path} reads its command line ({shown}) but its parameters_schema declares no argv, "
        "so it gets no arguments there; list them under argv."
    ]


def test_a_script_whose_schema_declares_argv_is_not_flagged():
    text = "import sys\nprint(sys.argv[1])\n"
    assert warnings_for({"scripts/check.py": text}, parameters_schema=ARGV_SCHEMA) == []
    schemas = {"scripts/check.py": ARGV_SCHEMA, "scripts/check.sh": {"type": "object"}}
    found = warnings_for({"scripts/check.py": text, "scripts/check.sh": 'echo "$1"\n'},
                         parameters_schema=schemas)  # fmt: skip
    assert [w.split(" ")[0] for w in found] == ["scripts/check.sh"]


def test_a_script_reading_skillfleet_args_is_not_flagged():
    text = "import json, os\nprint(json.loads(os.environ['SKILLFLEET_ARGS']))\n"
    assert warnings_for({"scripts/check.py": text}, parameters_schema={"type": "object"}) == []


@pytest.mark.parametrize(
    ("execution", "where"),
    [
        ("node", "each node's python3 needs it"),
        (
            "spark",
            "the runner image has only the standard library; the operator builds one with it",
        ),
        ("sandbox", "sandboxed Python has only the standard library: run the skill on a node"),
    ],
)
def test_a_package_outside_the_standard_library_must_be_named_in_compatibility(execution, where):
    text = "from pypdf import PdfReader\nimport json\n"
    found = warnings_for(
        {"scripts/check.py": text},
        parameters_schema={"type": "object"},
        **{"skillfleet.execution": execution},
    )
    assert len(found) == 1
    assert found[0].startswith(
        "scripts/check.py imports pypdf, which Python's standard library lacks"
    )
    assert where in found[0]
    assert found[0].endswith('; name it in compatibility, such as "Requires python3 with pypdf".')


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


def test_every_undeclared_package_of_a_script_is_named_in_one_warning():
    text = "import reportlab.pdfgen\nimport pypdf\nimport pypdf.generic\n"
    found = warnings_for({"scripts/check.py": text}, parameters_schema={"type": "object"})
    assert found == [
        "scripts/check.py imports pypdf, reportlab, which Python's standard library lacks: each "
        "node's python3 needs them; name them in compatibility, such as \"Requires python3 with "
        'pypdf".'
    ]
