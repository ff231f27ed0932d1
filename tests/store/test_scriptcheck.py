"""Syntax checks of skill scripts: Python in-process, shell with bash -n, JavaScript with node."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from store.scriptcheck import check_scripts

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def write(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


def test_valid_scripts_have_no_problems(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "scripts/ok.py": "import sys\nprint(sys.argv)\n",
            "scripts/ok.sh": "#!/bin/bash\nif true; then echo ok; fi\n",
            "scripts/ok.js": "const a = 1;\nconsole.log(a);\n",
            "scripts/ok.mjs": "export const a = await Promise.resolve(1);\n",
        },
    )
    assert check_scripts(tmp_path) == []


def test_a_python_syntax_error_is_reported_with_its_line(tmp_path: Path) -> None:
    write(tmp_path, {"scripts/x.py": "import os\n\ndef broken(:\n    pass\n"})
    assert check_scripts(tmp_path) == ["scripts/x.py line 3: invalid syntax."]


def test_python_is_compiled_without_running_it_or_writing_bytecode(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    write(tmp_path, {"scripts/side.py": f"open({str(marker)!r}, 'w').write('x')\n"})
    assert check_scripts(tmp_path) == []
    assert not marker.exists()
    assert not (tmp_path / "scripts" / "__pycache__").exists()


def test_python_scripts_are_checked_anywhere_in_the_skill(tmp_path: Path) -> None:
    write(tmp_path, {"references/example.py": "print('unclosed\n"})
    (problem,) = check_scripts(tmp_path)
    assert problem.startswith("references/example.py line 1: unterminated string literal")


def test_python_with_a_null_byte_is_reported(tmp_path: Path) -> None:
    (tmp_path / "nul.py").write_bytes(b"x = 1\0\n")
    (problem,) = check_scripts(tmp_path)
    assert problem.startswith("nul.py")
    assert "null bytes" in problem


@needs_bash
def test_a_shell_syntax_error_is_reported_by_bash_n(tmp_path: Path) -> None:
    write(tmp_path, {"scripts/x.sh": "echo hi\nif true; then\n  echo x\n"})
    assert check_scripts(tmp_path) == ["scripts/x.sh line 4: syntax error: unexpected end of file."]


@needs_bash
def test_a_shell_script_is_read_but_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    write(tmp_path, {"scripts/touch.sh": f"touch {marker}\n"})
    assert check_scripts(tmp_path) == []
    assert not marker.exists()


@needs_bash
def test_a_script_named_like_an_option_is_checked_as_a_file(tmp_path: Path) -> None:
    write(tmp_path, {"-x.sh": "x = (\n"})
    (problem,) = check_scripts(tmp_path)
    assert problem.startswith("-x.sh line 1: syntax error near unexpected token")


@needs_node
def test_a_javascript_syntax_error_is_reported_by_node_check(tmp_path: Path) -> None:
    write(tmp_path, {"scripts/x.js": "const a = 1;\nfunction (\n"})
    assert check_scripts(tmp_path) == [
        "scripts/x.js line 2: Function statements require a function name."
    ]


@needs_node
def test_an_mjs_script_is_checked_as_a_module(tmp_path: Path) -> None:
    write(tmp_path, {"scripts/x.mjs": "import fs from 'node:fs';\nlet let = 2;\n"})
    assert check_scripts(tmp_path) == [
        "scripts/x.mjs line 2: Unexpected strict mode reserved word."
    ]


def test_csharp_and_other_files_are_not_checked(tmp_path: Path) -> None:
    write(tmp_path, {"scripts/x.cs": "class {", "assets/notes.txt": "def (:"})
    assert check_scripts(tmp_path) == []


def test_symbolic_links_are_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("def (:\n", encoding="utf-8")
    skill = tmp_path / "skill"
    skill.mkdir()
    (skill / "link.py").symlink_to(outside)
    assert check_scripts(skill) == []


def test_every_broken_script_is_reported_in_path_order(tmp_path: Path) -> None:
    write(tmp_path, {"scripts/b.py": "def (:\n", "scripts/a.py": "1 +\n"})
    assert [problem.split(" ")[0] for problem in check_scripts(tmp_path)] == [
        "scripts/a.py",
        "scripts/b.py",
    ]
