"""`skillfleet skills sign`, `skillfleet trusted-keys …` and a signed import, run as an author
and an owner would run them, with real ssh-keygen keys against a real API."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import write_skill
from fleet import Fleet, fleet, sqlite_settings
from sshkeys import fingerprint, make_key, public_line
from test_up import SKILLFLEET, clean_env

from store.hashing import SIGNATURE_FILE, content_hash

CLI_LIMIT = 60.0


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """One API for the module; each test is an owner of its own."""
    with fleet(sqlite_settings(tmp_path_factory.mktemp("cli"), sqlite_template)) as running:
        yield running


@pytest.fixture
def owner(api: Fleet) -> Fleet:
    return api.with_new_owner()


def cli(api: Fleet | None, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = clean_env()
    if api is not None:
        env = clean_env(SKILLFLEET_URL=api.url, SKILLFLEET_TOKEN=api.owner_token)
    return subprocess.run(
        [SKILLFLEET, *args],
        env=env, input=stdin, capture_output=True, text=True, timeout=CLI_LIMIT,
    )  # fmt: skip


def test_sign_writes_a_signature_over_the_hash_and_leaves_the_hash_as_it_was(tmp_path):
    folder = write_skill(tmp_path, "signed-here")
    key = make_key(tmp_path, "author")
    before = content_hash(folder)

    signed = cli(None, "skills", "sign", str(folder), "--key", str(key))

    assert signed.returncode == 0, signed.stderr
    assert signed.stdout == f"Signed {before} into {folder / SIGNATURE_FILE}.\n"
    assert content_hash(folder) == before
    assert cli(None, "skills", "hash", str(folder)).stdout == before + "\n"
    # What ssh-keygen itself accepts, as git's users check a commit.
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"author {public_line(key)}\n")
    verified = subprocess.run(
        ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "author", "-n", "skillfleet",
         "-s", str(folder / SIGNATURE_FILE)],
        input=before.encode(), capture_output=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr


def test_signing_again_after_a_change_signs_the_new_hash(tmp_path):
    folder = write_skill(tmp_path, "changing")
    key = make_key(tmp_path, "author")
    cli(None, "skills", "sign", str(folder), "--key", str(key))
    (folder / "references" / "guide.md").write_text("# Changed\n")

    again = cli(None, "skills", "sign", str(folder), "--key", str(key))

    assert again.returncode == 0 and content_hash(folder) in again.stdout


def test_sign_with_a_file_that_is_no_key_exits_1_and_writes_nothing(tmp_path):
    folder = write_skill(tmp_path, "unsigned")
    not_a_key = tmp_path / "notes.txt"
    not_a_key.write_text("hello\n")

    refused = cli(None, "skills", "sign", str(folder), "--key", str(not_a_key))

    assert refused.returncode == 1
    assert "ssh-keygen could not sign with" in refused.stderr
    assert not (folder / SIGNATURE_FILE).exists()


def test_an_owner_trusts_a_key_and_imports_a_skill_it_signed(owner: Fleet, tmp_path):
    key = make_key(tmp_path, "author")
    folder = write_skill(tmp_path, "from-author")
    cli(None, "skills", "sign", str(folder), "--key", str(key))
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"# the team\nauthor@example.org {public_line(key)}\n")

    trusted = cli(owner, "trusted-keys", "add", str(allowed))
    imported = cli(owner, "skills", "import", str(folder))
    shown = cli(owner, "skills", "show", "from-author")
    listed = cli(owner, "trusted-keys", "list")

    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout == f"Trusted author@example.org: ssh-ed25519 {fingerprint(key)}\n"
    assert imported.returncode == 0, imported.stderr
    assert "signature: signed by author@example.org" in imported.stdout
    assert "signature:   signed by author@example.org" in shown.stdout
    assert "author@example.org" in listed.stdout and fingerprint(key) in listed.stdout


def test_with_signatures_required_an_unsigned_skill_is_enabled_only_with_the_override(
    owner: Fleet, tmp_path
):
    folder = write_skill(tmp_path, "nobodys")
    assert cli(owner, "trusted-keys", "require", "on").returncode == 0

    imported = cli(owner, "skills", "import", str(folder))
    refused = cli(owner, "skills", "enable", "nobodys")
    overridden = cli(owner, "skills", "enable", "nobodys", "--override-signature")

    assert "disabled" in imported.stdout and "held" in imported.stdout
    assert refused.returncode == 1 and "signature_required" in refused.stderr
    assert overridden.returncode == 0, overridden.stderr
    assert cli(owner, "trusted-keys", "require", "off").stdout == (
        "A trusted signature is no longer required.\n"
    )


def test_adding_a_weak_key_or_removing_an_unknown_one_exits_1_with_the_code(owner: Fleet, tmp_path):
    weak = make_key(tmp_path, "weak", "rsa", 1024)

    added = cli(owner, "trusted-keys", "add", str(weak) + ".pub", "--name", "weak")
    removed = cli(owner, "trusted-keys", "remove", "nobody")

    assert added.returncode == 1 and "key_invalid" in added.stderr
    assert removed.returncode == 1 and "key_not_found" in removed.stderr
