"""Review warnings: each heuristic fires on what it looks for and stays quiet otherwise."""

from __future__ import annotations

from pathlib import Path

from store.hashing import regular_files
from store.leniency import read_skill_dir
from store.lint import lint
from store.validation import check_header, validate_header


def info(body: str = "Run scripts/run.sh when asked.", **metadata: object):
    header = {
        "name": "tidy",
        "description": "Tidies the temporary folder of a server.",
        "metadata": {"skillfleet.tier": "change", **metadata},
    }
    return validate_header(header, body, "tidy")


def warnings_for(script: str, **kwargs: object) -> str:
    return " ".join(lint({"scripts/run.sh": script.encode()}, info(**kwargs)))


def test_a_quiet_script_with_a_schema_gets_no_warning():
    schema = {"type": "object"}
    assert lint({"scripts/run.sh": b"echo hi\n"}, info(parameters_schema=schema)) == []


def test_network_use_without_allowed_domains_is_flagged_and_with_them_is_not():
    assert "reaches the network (curl" in warnings_for("curl -s https://example.com\n")
    allowed = warnings_for(
        "curl -s https://example.com\n", **{"skillfleet.allowed-domains": "example.com"}
    )
    assert "reaches the network" not in allowed


def test_destructive_commands_in_a_change_skill_are_flagged_but_not_in_a_destructive_one():
    for command in ("rm -rf /tmp/x", "dd if=/dev/zero of=/dev/sda", "mkfs.ext4 /dev/sdb1"):
        assert "runs a destructive command" in warnings_for(command + "\n"), command
    assert "runs a destructive command" in warnings_for("psql -c 'DROP TABLE users'\n")
    destructive = warnings_for("rm -rf /tmp/x\n", **{"skillfleet.tier": "destructive"})
    assert "runs a destructive command" not in destructive


def test_scripts_without_schema_or_mention_and_shell_passthrough_are_flagged():
    text = warnings_for('eval "$SKILLFLEET_ARGS"\n', body="Nothing to see.")
    assert "scripts/run.sh has no parameters_schema" in text
    assert "SKILL.md never mentions scripts/run.sh" in text
    assert "hands text to a shell" in text


def test_secrets_are_flagged_by_file_and_line_without_being_quoted():
    token = "ghp_" + "a1B2" * 8
    found = lint({"references/setup.md": f"# Setup\n\nexport GH={token}\n".encode()}, info())
    assert found == [
        "references/setup.md line 3 holds text that looks like a secret (a key, token or "
        "password); secrets don't belong in a skill."
    ]


def test_a_long_body_and_a_short_description_are_flagged():
    body = "\n".join(f"line {i}" for i in range(501))
    assert any("501 lines, over 500" in w for w in lint({}, info(body=body)))
    assert not any("lines, over" in w for w in lint({}, info(body="\n".join(["x"] * 500))))
    header = {"name": "tidy", "description": "Tidies."}
    assert any("under 20 characters" in w for w in lint({}, validate_header(header, "b", "tidy")))


def test_the_bridge_network_is_flagged_as_deprecated_and_says_what_the_scripts_reach():
    bridge = {"skillfleet.execution": "spark", "skillfleet.network": "bridge"}
    alone = warnings_for("echo hi\n", **bridge)
    assert "skillfleet.network is deprecated and opens nothing; list the hosts" in alone
    listed = {**bridge, "skillfleet.allowed-domains": "example.com"}
    assert "reach only the hosts in skillfleet.allowed-domains." in warnings_for("", **listed)
    assert "deprecated" not in warnings_for("echo hi\n")


def test_a_binary_asset_is_not_searched_for_secrets_but_a_text_one_is():
    token = "ghp_" + "a1B2" * 8
    binary = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + f"\nexport GH={token}\n".encode()
    assert lint({"assets/logo.png": binary}, info()) == []
    text = lint({"assets/notes.txt": f"export GH={token}\n".encode()}, info())
    assert text == [
        "assets/notes.txt line 1 holds text that looks like a secret (a key, token or "
        "password); secrets don't belong in a skill."
    ]


def test_allowed_domains_on_loopback_private_or_metadata_hosts_are_flagged_by_name():
    inside = (
        "localhost llm.localhost 127.0.0.1 10.1.2.3 192.168.0.9 169.254.169.254 "
        "metadata.google.internal redis printer.local 2130706433 192.0.0.8"
    )
    listed = {"skillfleet.allowed-domains": f"api.github.com {inside} example.com"}
    [warning] = [w for w in lint({}, info(**listed)) if "allowed-domains lists" in w]

    assert warning == (
        f"skillfleet.allowed-domains lists {', '.join(inside.split())}, on a local network or "
        "not a public address: a skill that reaches the server's own network or a cloud "
        "metadata service needs a careful look (skillfleet refuses such hosts unless the "
        "operator allows them)."
    )
    public = {"skillfleet.allowed-domains": "api.github.com example.com 8.8.8.8"}
    assert not any("allowed-domains lists" in w for w in lint({}, info(**public)))


def test_wildcard_and_bracketed_local_hosts_are_flagged_though_validation_refuses_them():
    header = {
        "name": "tidy",
        "description": "Tidies the temporary folder of a server.",
        "metadata": {"skillfleet.allowed-domains": "*.localhost [::1] *.internal *.example.com"},
    }
    problems: list[str] = []
    found = lint({}, check_header(header, "Run scripts/run.sh when asked.", "tidy", problems))

    assert len(problems) == 4  # none is a bare host name: such a skill is never stored
    assert any("allowed-domains lists *.localhost, [::1], *.internal, on a" in w for w in found)


def test_xml_namespaces_and_identifiers_written_as_urls_do_not_reach_the_network():
    text = (
        '"""Namespaces: see https://learn.microsoft.com/office/open-xml for the parts."""\n'
        "# Parts live in {http://schemas.openxmlformats.org/wordprocessingml/2006/main}body.\n"
        'W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"\n'
        'XML = "http://www.w3.org/XML/1998/namespace"\n'
        'DC = "http://purl.org/dc/elements/1.1/"\n'
        "MACRO = '<script:module xmlns:script=\"http://openoffice.org/2000/script\"/>'\n"
        "OWN = '<x xmlns:c=\"http://example.com/ns/custom\"/>'\n"
        'TAG = "{http://example.com/ns/custom}item"\n'
        'SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema"}\n'
        'PREFIXES = ("http://", "https://")\n'
    )
    found = lint({"scripts/run.py": text.encode()}, info(parameters_schema={"type": "object"}))
    assert found == []


def test_a_url_the_code_uses_or_a_call_that_reaches_out_is_flagged():
    def reaches(path: str, text: str) -> list[str]:
        found = lint({path: text.encode()}, info(parameters_schema={"type": "object"}))
        return [w for w in found if "reaches the network" in w]

    assert reaches("scripts/run.py", 'URL = "https://api.example.com/v1/items"\n') == [
        "scripts/run.py reaches the network (https://api.example.com) but the skill declares "
        "no skillfleet.allowed-domains."
    ]
    assert reaches("scripts/run.sh", "# see https://example.com\necho hi\n") == []
    assert reaches("scripts/run.sh", 'URL="https://example.com/x"\n') != []
    assert reaches("scripts/run.py", "import socket\nsocket.socket(socket.AF_UNIX)\n") == []
    assert reaches("scripts/run.py", "import socket\nsocket.socket(socket.AF_INET)\n") != []
    assert reaches("scripts/run.js", "await fetch(url);\n") != []


def test_init_files_and_modules_other_scripts_import_are_not_scripts_to_run():
    files = {
        "scripts/__init__.py": b"",
        "scripts/run.sh": b"echo hi\n",
        "scripts/lib/__init__.py": b"from .tables import merge\n",
        "scripts/lib/tables.py": b"def merge():\n    return 1\n",
        "scripts/lib/cells.py": b"def split():\n    return 2\n",
        "scripts/report.py": b"from lib import merge\nfrom lib.cells import split\n",
    }
    found = lint(files, info(body="Run scripts/run.sh, then scripts/report.py."))
    assert found == [
        "scripts/report.py and scripts/run.sh have no parameters_schema, so their arguments are "
        "not checked before they run."
    ]


def test_a_script_another_document_of_the_skill_mentions_is_not_unmentioned():
    files = {
        "scripts/run.sh": b"echo hi\n",
        "scripts/check.py": b"print(1)\n",
        "scripts/fill.py": b"print(2)\n",
        "scripts/lost.py": b"print(3)\n",
        "forms.md": b"Run `python scripts/check <file.pdf>`, then fill.py.\n",
    }
    found = lint(files, info(parameters_schema={"type": "object"}))
    assert found == [
        "SKILL.md never mentions scripts/lost.py; the agent won't know when to run it."
    ]


def test_many_scripts_without_a_schema_are_one_warning_naming_the_first_few():
    files = {f"scripts/step{i}.sh": b"echo hi\n" for i in range(1, 6)}
    body = " ".join(files)
    assert lint(files, info(body=body)) == [
        "scripts/step1.sh, scripts/step2.sh, scripts/step3.sh and 2 more have no "
        "parameters_schema, so their arguments are not checked before they run."
    ]


def test_a_program_no_tier_can_run_is_flagged_and_data_files_are_not():
    files = {
        "scripts/notify.rb": b'puts "hi"\n',
        "scripts/deploy": b"#!/bin/sh\necho hi\n",
        "scripts/template.xml": b"<a/>\n",
        "scripts/README.md": b"Helpers.\n",
        "scripts/greet.ts": b"console.log('hi');\n",
    }
    found = lint(files, info(body="scripts/greet.ts", parameters_schema={"type": "object"}))
    assert found == [
        "scripts/deploy and scripts/notify.rb can't run on any tier: skillfleet runs scripts by "
        "their extension (.py, .sh, .js, .mjs, .ts, .cs), so run_skill_script doesn't offer "
        "them."
    ]


PUBLIC_SHAPED = Path(__file__).resolve().parents[1] / "fixtures" / "public-shaped"


def public_warnings(name: str) -> list[str]:
    root = PUBLIC_SHAPED / name
    info = read_skill_dir(root, name)
    return lint({rel: (root / rel).read_bytes() for rel in regular_files(root)}, info)


def test_a_docx_like_skill_gets_only_the_warnings_that_matter():
    # 27 before namespaces, __init__.py, helper modules and repeats were told apart, and
    # before scripts that read their command line took a call's `args`: none is left.
    assert public_warnings("office-docs") == []


def test_a_pdf_like_skill_is_warned_of_the_one_package_nothing_provides():
    # 18 before: pypdf is in the standard environment, Pillow and pytesseract are declared.
    assert public_warnings("form-filler") == [
        "scripts/convert_pdf_to_images.py imports pdf2image, which neither the standard "
        "environment nor the skill's declared dependencies provide; list it in the skill's "
        "requirements.txt or the script's `# /// script` block.",
    ]


def test_a_skill_that_does_reach_out_and_delete_keeps_those_warnings():
    assert public_warnings("issue-reporter") == [
        "scripts/clean.sh runs a destructive command (rm -rf) but the skill's tier is change; "
        "such a script belongs in a destructive skill.",
        "scripts/report.py reaches the network (requests.post() but the skill declares no "
        "skillfleet.allowed-domains.",
        "scripts/notify.rb can't run on any tier: skillfleet runs scripts by their extension "
        "(.py, .sh, .js, .mjs, .ts, .cs), so run_skill_script doesn't offer it.",
        "scripts/clean.sh and scripts/report.py have no parameters_schema, so their arguments "
        "are not checked before they run.",
    ]
