"""Signed skills through the API, with real ssh-keygen keys: a skill shows who signed it, a
signature that does not verify refuses the import, and an owner who requires signatures gets
what no trusted key signed held until they trust its signer or override."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import skill_files, store_snapshot, zip_bytes
from github_standin import REPOS, Blob, serve
from sshkeys import fingerprint, make_key, public_line, ssh_sign
from structlog.testing import capture_logs

from api import create_app
from api.services import Services
from store.db import transaction
from store.hashing import SIGNATURE_FILE, hash_entries
from store.tokens import create_owner_token


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    return {"author": make_key(folder, "author"), "stranger": make_key(folder, "stranger")}


def signed_files(name: str, key: Path | None, *, over: str | None = None, namespace="skillfleet"):
    """A skill's files, with `skillfleet.sig` by `key` over their hash (or over `over`)."""
    files = skill_files(name)
    skill_hash = hash_entries(files.items())
    if key is not None:
        files[SIGNATURE_FILE] = ssh_sign(key, (over or skill_hash).encode(), namespace)
    return files, skill_hash


def upload(client, auth, files: dict[str, bytes], query: str = "", **form: str):
    body = {"file": (io.BytesIO(zip_bytes(files, top=None)), "skill.zip"), **form}
    return client.post(
        f"/api/skills{query}", headers=auth, data=body, content_type="multipart/form-data"
    )


def trust(client, auth, name: str, key: Path):
    body = {"name": name, "public_key": public_line(key)}
    response = client.post("/api/trusted-keys", headers=auth, json=body)
    assert response.status_code == 201, response.json


def require_signature(client, auth, on: bool = True) -> None:
    body = {"auto_tools": [], "require_signature": on}
    response = client.put("/api/settings", headers=auth, json=body)
    assert response.status_code == 200 and response.json["require_signature"] is on


def shown(client, auth, name: str) -> dict:
    response = client.get(f"/api/skills/{name}", headers=auth)
    assert response.status_code == 200
    return response.json


def enable(client, auth, name: str, **extra):
    return client.put(f"/api/skills/{name}/enabled", headers=auth, json={"enabled": True, **extra})


def test_a_skill_signed_by_a_trusted_key_shows_the_keys_name(client, auth, keys):
    trust(client, auth, "author@example.org", keys["author"])
    files, skill_hash = signed_files("signed", keys["author"])

    response = upload(client, auth, files)

    assert response.status_code == 201, response.json
    assert response.json["hash"] == skill_hash  # the signature is not part of the hash
    assert SIGNATURE_FILE not in response.json["files"]
    assert response.json["signed_by"] == "author@example.org"
    assert response.json["signature_status"] == "trusted"
    skill = shown(client, auth, "signed")
    assert (skill["signed_by"], skill["signer_fingerprint"]) == (
        "author@example.org", fingerprint(keys["author"])
    )  # fmt: skip
    assert SIGNATURE_FILE not in [f["path"] for f in skill["files"]]
    listed = {s["name"]: s for s in client.get("/api/skills", headers=auth).json}
    assert listed["signed"]["signed_by"] == "author@example.org"
    assert listed["skill-authoring"]["signature_status"] == "unsigned"


def test_a_good_signature_by_an_unknown_key_is_untrusted_and_shows_its_fingerprint(
    client, auth, keys
):
    files, _hash = signed_files("stranger-made", keys["stranger"])

    response = upload(client, auth, files)

    assert response.status_code == 201, response.json
    assert response.json["signed_by"] is None
    assert response.json["signature_status"] == "untrusted"
    assert response.json["signer_fingerprint"] == fingerprint(keys["stranger"])
    assert response.json["enabled"] is True  # the owner does not require signatures


@pytest.mark.parametrize(
    ("files_of", "said"),
    [
        (lambda keys: signed_files("bad", keys["author"], over="0" * 64)[0], "incorrect signature"),
        (lambda keys: signed_files("bad", keys["author"], namespace="git")[0], "namespace"),
        (lambda keys: {**skill_files("bad"), SIGNATURE_FILE: b"-----BEGIN SSH SIGNATURE-----\n"},
         "skillfleet.sig does not verify"),
        (lambda keys: {**skill_files("bad"), SIGNATURE_FILE: b""}, "does not verify"),
    ],
    ids=["another-hash", "foreign-namespace", "truncated", "empty"],
)  # fmt: skip
def test_a_signature_that_does_not_verify_is_422_and_the_store_is_unchanged(
    client, auth, services, keys, files_of, said
):
    trust(client, auth, "author", keys["author"])
    before = store_snapshot(services.settings.skills_dir, services.sessions)

    response = upload(client, auth, files_of(keys))

    assert response.status_code == 422, response.json
    assert response.json["code"] == "signature_invalid"
    assert said in response.json["message"]
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


def test_a_folder_of_skills_refuses_only_the_one_whose_signature_is_bad(client, auth, keys):
    good, _hash = signed_files("good-one", keys["author"])
    bad, _hash = signed_files("bad-one", keys["author"], over="f" * 64)
    files = {f"skills/good-one/{p}": d for p, d in good.items()}
    files |= {f"skills/bad-one/{p}": d for p, d in bad.items()}

    response = upload(client, auth, files)

    assert response.status_code == 207, response.json
    assert [item["name"] for item in response.json["imported"]] == ["good-one"]
    assert response.json["imported"][0]["signature_status"] == "untrusted"
    [refused] = response.json["refused"]
    assert (refused["folder"], refused["code"]) == ("skills/bad-one", "signature_invalid")


def test_replacing_a_signed_skill_with_unsigned_content_leaves_it_unsigned(client, auth, keys):
    trust(client, auth, "author", keys["author"])
    files, _hash = signed_files("changing", keys["author"])
    upload(client, auth, files)

    changed = {**skill_files("changing"), "references/new.md": b"# New\n"}
    response = upload(client, auth, changed, "?replace=true")

    assert response.status_code == 201, response.json
    assert (response.json["signed_by"], response.json["signature_status"]) == (None, "unsigned")


def test_an_owners_edit_of_a_signed_skill_drops_the_signature_and_keeps_it_enabled(
    client, auth, keys
):
    trust(client, auth, "author", keys["author"])
    files, skill_hash = signed_files("edited", keys["author"])
    upload(client, auth, files)

    edit = {"content": "# Guide\n\nChanged.\n", "hash": skill_hash}
    response = client.put("/api/skills/edited/files/references/guide.md", headers=auth, json=edit)

    assert response.status_code == 200, response.json
    assert response.json["signed_by"] is None and response.json["signature_status"] == "unsigned"
    assert response.json["enabled"] is True


# -- the owner's require_signature ---------------------------------------------------------


def test_settings_show_require_signature_off_until_the_owner_turns_it_on(client, auth):
    assert client.get("/api/settings", headers=auth).json["require_signature"] is False

    require_signature(client, auth)

    assert client.get("/api/settings", headers=auth).json["require_signature"] is True
    kept = client.put("/api/settings", headers=auth, json={"auto_tools": []})
    assert kept.json["require_signature"] is True  # left out of a PUT, it stays


def test_with_signatures_required_an_unsigned_import_is_held_and_enabled_only_by_override(
    client, auth
):
    require_signature(client, auth)

    imported = upload(client, auth, skill_files("unsigned"))

    assert imported.status_code == 201, imported.json
    assert imported.json["enabled"] is False and imported.json["signature_hold"] is True
    refused = enable(client, auth, "unsigned")
    assert refused.status_code == 409, refused.json
    assert refused.json["code"] == "signature_required"
    assert "it is unsigned" in refused.json["message"]
    assert shown(client, auth, "unsigned")["enabled"] is False
    with capture_logs() as logged:
        overridden = enable(client, auth, "unsigned", override_signature=True)
    assert overridden.status_code == 200, overridden.json
    [record] = [entry for entry in logged if entry["event"] == "signature override"]
    assert (record["skill"], record["signature"]) == ("unsigned", "unsigned")
    assert overridden.json["enabled"] is True and overridden.json["signature_hold"] is False


def test_with_signatures_required_a_trusted_signature_imports_enabled(client, auth, keys):
    require_signature(client, auth)
    trust(client, auth, "author", keys["author"])
    files, _hash = signed_files("trusted-one", keys["author"])

    response = upload(client, auth, files)

    assert response.json["enabled"] is True and response.json["signature_hold"] is False


def test_trusting_the_signer_of_a_held_skill_lifts_the_hold(client, auth, keys):
    require_signature(client, auth)
    files, _hash = signed_files("waiting", keys["stranger"])
    held = upload(client, auth, files).json
    assert held["enabled"] is False and held["signature_hold"] is True
    assert enable(client, auth, "waiting").json["code"] == "signature_required"

    trust(client, auth, "stranger", keys["stranger"])

    skill = shown(client, auth, "waiting")
    assert skill["signed_by"] == "stranger" and skill["signature_hold"] is False
    assert skill["enabled"] is False  # trusting enables nothing by itself
    assert enable(client, auth, "waiting").status_code == 200


def test_removing_a_trusted_key_holds_and_switches_off_the_skills_it_signed(client, auth, keys):
    require_signature(client, auth)
    trust(client, auth, "author", keys["author"])
    files, _hash = signed_files("revoked", keys["author"])
    assert upload(client, auth, files).json["enabled"] is True

    assert client.delete("/api/trusted-keys/author", headers=auth).status_code == 204

    skill = shown(client, auth, "revoked")
    assert skill["signed_by"] is None and skill["signature_status"] == "untrusted"
    assert skill["enabled"] is False and skill["signature_hold"] is True


def test_removing_a_key_without_the_requirement_only_makes_its_skills_untrusted(client, auth, keys):
    trust(client, auth, "author", keys["author"])
    files, _hash = signed_files("still-on", keys["author"])
    upload(client, auth, files)

    client.delete("/api/trusted-keys/author", headers=auth)

    skill = shown(client, auth, "still-on")
    assert skill["signature_status"] == "untrusted" and skill["enabled"] is True
    assert skill["signature_hold"] is False


def test_turning_the_requirement_on_holds_existing_unsigned_skills_and_off_lifts_it(client, auth):
    upload(client, auth, skill_files("older"))

    require_signature(client, auth)
    on = shown(client, auth, "older")
    require_signature(client, auth, False)
    off = shown(client, auth, "older")

    assert on["signature_hold"] is True and on["enabled"] is True  # it stays on until switched off
    assert off["signature_hold"] is False


def test_another_owners_trusted_key_does_not_make_a_skill_trusted(client, auth, other_auth, keys):
    trust(client, other_auth, "author", keys["author"])
    files, _hash = signed_files("alices", keys["author"])

    response = upload(client, auth, files)

    assert response.json["signature_status"] == "untrusted"


# -- GitHub ----------------------------------------------------------------------------------


@pytest.fixture
def github_services(settings, keys, monkeypatch) -> Iterator[Services]:
    files, _hash = signed_files("remote", keys["author"])
    repo = {f"skills/remote/{path}": Blob(data) for path, data in files.items()}
    monkeypatch.setitem(REPOS, ("author", "signed"), repo)
    with serve() as github:
        built = Services.build(settings.with_overrides(github_api_url=github.base_url))
        yield built
        built.engine.dispose()


def test_a_signed_skill_imported_from_github_shows_its_signer(github_services, keys):
    client = create_app(services=github_services).test_client()
    with transaction(github_services.sessions) as session:
        auth = {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}
    trust(client, auth, "author", keys["author"])

    url = "https://github.com/author/signed/tree/main/skills/remote"
    response = client.post("/api/skills", headers=auth, json={"github": url})

    assert response.status_code == 201, response.json
    assert response.json["signed_by"] == "author"
    assert SIGNATURE_FILE not in response.json["files"]


def test_enabling_a_held_skill_that_is_already_on_changes_nothing_and_is_not_refused(client, auth):
    upload(client, auth, skill_files("already-on"))
    require_signature(client, auth)

    again = enable(client, auth, "already-on")

    assert again.status_code == 200 and again.json["enabled"] is True
    assert again.json["signature_hold"] is True


def test_with_signatures_required_a_duplicate_of_a_built_in_is_held(client, auth):
    require_signature(client, auth)

    copy = client.post(
        "/api/skills/skill-authoring/duplicate", headers=auth, json={"name": "my-authoring"}
    )

    assert copy.status_code == 201, copy.json
    assert copy.json["enabled"] is False and copy.json["signature_hold"] is True


def test_each_version_lists_who_signed_it_and_a_rollback_brings_its_signature_back(
    client, auth, keys
):
    trust(client, auth, "author", keys["author"])
    files, signed_hash = signed_files("versioned", keys["author"])
    upload(client, auth, files)
    changed = {**skill_files("versioned"), "references/new.md": b"# New\n"}
    upload(client, auth, changed, "?replace=true")

    versions = client.get("/api/skills/versioned/versions", headers=auth).json
    signers = {version["hash"]: version["signed_by"] for version in versions}
    assert signers[signed_hash] == "author" and list(signers.values()).count(None) == 1
    # The version kept the signature it was imported with: a rollback puts it back, and it is
    # judged against the owner's trusted keys again.
    back = client.post("/api/skills/versioned/rollback", headers=auth, json={"hash": signed_hash})
    assert back.status_code == 200, back.json
    assert (shown(client, auth, "versioned")["hash"], back.json["signature_status"]) == (
        signed_hash, "trusted"
    )  # fmt: skip
    assert back.json["signed_by"] == "author"


def test_a_rollback_to_a_version_by_a_key_no_longer_trusted_is_held(client, auth, keys):
    trust(client, auth, "author", keys["author"])
    files, signed_hash = signed_files("versioned", keys["author"])
    upload(client, auth, files)
    upload(client, auth, {**skill_files("versioned"), "references/new.md": b"# New\n"},
           "?replace=true")  # fmt: skip
    assert client.delete("/api/trusted-keys/author", headers=auth).status_code == 204
    require_signature(client, auth)

    back = client.post("/api/skills/versioned/rollback", headers=auth, json={"hash": signed_hash})
    assert back.status_code == 200, back.json
    assert back.json["signature_status"] == "untrusted"
    # Held, as a skill is when the requirement is turned on: it keeps its switch until switched
    # off, and once off comes back on only with the override.
    assert (back.json["enabled"], back.json["signature_hold"]) == (True, True)
