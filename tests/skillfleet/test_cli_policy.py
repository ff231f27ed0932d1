"""`skillfleet policy check|explain`, and a bad SKILLFLEET_POLICY refusing start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from api.services import Services
from broker.errors import PolicyError
from store.settings import Settings

SKILLFLEET = str(Path(sys.executable).with_name("skillfleet"))
BUILTIN = str(Path(__file__).resolve().parents[2] / "broker" / "builtin_policy.yaml")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SKILLFLEET, *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_policy_check_accepts_the_builtin_policy():
    result = cli("policy", "check", BUILTIN)
    assert result.returncode == 0
    assert result.stdout.strip() == "Valid policy: 18 rules, default deny."


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            '  - name: a\n    condition: "tier =="\n    action: allow\n    priority: 1\n',
            ['"a"', "CEL"],
        ),
        (
            "  - name: b\n    condition: \"colour == 'red'\"\n    action: allow\n    priority: 1\n",
            ['"b"', "colour"],
        ),
        (
            '  - name: c\n    condition: "true"\n    action: maybe\n    priority: 1\n',
            ['"c"', "maybe"],
        ),
        ('  - name: d\n    condition: "true"\n    action: allow\n', ['"d"', "priority"]),
        (
            '  - name: e\n    condition: "true"\n    action: allow\n    priority: 1\n' * 2,
            ['"e"', "duplicate"],
        ),
    ],
)
def test_policy_check_refuses_a_bad_rule_naming_it(tmp_path: Path, body: str, words: list[str]):
    path = tmp_path / "policy.yaml"
    path.write_text("default_action: deny\nrules:\n" + body)
    result = cli("policy", "check", str(path))
    assert result.returncode == 1
    for word in words:
        assert word.lower() in result.stderr.lower(), result.stderr


def test_policy_explain_names_the_deciding_rule():
    result = cli("policy", "explain", "--tool", "run_skill_script", "--tier", "destructive")
    assert result.returncode == 0
    assert "Decision: require_approval (destructive-always-asks)" in result.stdout
    granted = cli(
        "policy", "explain", "--tool", "run_skill_script", "--tier", "destructive", "--granted"
    )
    # Seed 003: in a chat a destructive call always asks, granted or not.
    assert "Decision: require_approval (destructive-always-asks)" in granted.stdout


def test_a_bad_policy_file_refuses_start_up_naming_the_rule(tmp_path: Path, database_url: str):
    path = tmp_path / "policy.yaml"
    path.write_text(
        'default_action: deny\nrules:\n  - name: broken-rule\n    condition: "nope"\n'
        "    action: allow\n    priority: 1\n"
    )
    settings = Settings(data_dir=tmp_path / "var", database_url=database_url, policy_file=path)
    with pytest.raises(PolicyError, match="broken-rule"):
        Services.build(settings)
