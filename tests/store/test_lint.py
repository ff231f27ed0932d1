"""Review warnings: each heuristic fires on what it looks for and stays quiet otherwise."""

from __future__ import annotations

from store.lint import lint
from store.validation import validate_header


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
    text = warnings_for('eval "$1"\n', body="Nothing to see.")
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
