"""Manifest signatures: a key made once with private modes, and every tampering refused."""

from __future__ import annotations

import base64
import json
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from store.errors import ConfigError, ManifestInvalid
from store.signing import (
    KEY_FILE,
    canonical_bytes,
    load_or_create_key,
    manifest_tag,
    public_key_text,
    sign_manifest,
    verify_manifest,
)

MANIFEST: dict[str, Any] = {
    "node": "web01",
    "issued_at": 1_700_000_000,
    "packages": [{"name": "demo", "hash": "a" * 64, "sha256": "b" * 64, "size": 123}],
}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def key(tmp_path: Path) -> Ed25519PrivateKey:
    return load_or_create_key(tmp_path / "keys")


def test_the_key_is_created_on_first_use_in_a_private_folder(tmp_path):
    keys_dir = tmp_path / "var" / "keys"
    load_or_create_key(keys_dir)
    assert mode(keys_dir) == 0o700
    assert mode(keys_dir / KEY_FILE) == 0o600
    assert (keys_dir / KEY_FILE).read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert [p.name for p in keys_dir.iterdir()] == [KEY_FILE]


def test_the_same_key_is_loaded_on_every_later_start(tmp_path):
    first = public_key_text(load_or_create_key(tmp_path / "keys"))
    second = public_key_text(load_or_create_key(tmp_path / "keys"))
    assert first == second


def test_processes_racing_to_create_the_key_all_end_up_with_one_key(tmp_path):
    keys_dir = tmp_path / "keys"
    found: list[str] = []
    start = threading.Barrier(8)

    def create() -> None:
        start.wait()
        found.append(public_key_text(load_or_create_key(keys_dir)))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(found) == 8 and len(set(found)) == 1
    assert [p.name for p in keys_dir.iterdir()] == [KEY_FILE]


def test_a_key_file_that_is_not_a_key_is_refused_naming_the_file(tmp_path):
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    (keys_dir / KEY_FILE).write_text("not a key")
    with pytest.raises(ConfigError, match="manifest.key"):
        load_or_create_key(keys_dir)


def test_the_public_key_text_is_the_raw_32_byte_key_in_base64(key):
    text = public_key_text(key)
    assert len(text) == 44
    assert len(base64.b64decode(text, validate=True)) == 32


def test_a_signed_manifest_verifies_and_survives_a_json_round_trip(key):
    signed = json.loads(json.dumps(sign_manifest(key, MANIFEST)))
    assert verify_manifest(public_key_text(key), signed) == MANIFEST


def test_the_signature_covers_the_canonical_json_bytes(key):
    signed = sign_manifest(key, MANIFEST)
    expected = json.dumps(MANIFEST, sort_keys=True, separators=(",", ":")).encode()
    assert canonical_bytes(MANIFEST) == expected
    key.public_key().verify(base64.b64decode(signed["signature"]), expected)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m["packages"][0].update(sha256="c" * 64),
        lambda m: m["packages"].append({"name": "evil", "hash": "d" * 64}),
        lambda m: m.update(node="web02"),
        lambda m: m.update(issued_at=1_800_000_000),
    ],
    ids=["sha256", "extra-package", "node", "issued-at"],
)
def test_a_modified_manifest_is_refused(key, change):
    signed = json.loads(json.dumps(sign_manifest(key, MANIFEST)))
    change(signed["manifest"])
    with pytest.raises(ManifestInvalid, match="does not verify"):
        verify_manifest(public_key_text(key), signed)


def test_a_manifest_signed_by_another_key_is_refused(key):
    signed = sign_manifest(Ed25519PrivateKey.generate(), MANIFEST)
    with pytest.raises(ManifestInvalid, match="does not verify"):
        verify_manifest(public_key_text(key), signed)


def test_a_flipped_signature_bit_is_refused(key):
    signed = sign_manifest(key, MANIFEST)
    raw = bytearray(base64.b64decode(signed["signature"]))
    raw[0] ^= 1
    signed["signature"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(ManifestInvalid):
        verify_manifest(public_key_text(key), signed)


@pytest.mark.parametrize(
    "signed",
    [
        None,
        [],
        "text",
        {"manifest": MANIFEST},
        {"signature": "AAAA"},
        {"manifest": [], "signature": "AAAA"},
        {"manifest": MANIFEST, "signature": 7},
        {"manifest": MANIFEST, "signature": "not base64!"},
        {"manifest": MANIFEST, "signature": base64.b64encode(b"short").decode()},
    ],
    ids=[
        "null",
        "list",
        "string",
        "no-signature",
        "no-manifest",
        "manifest-list",
        "signature-number",
        "signature-not-base64",
        "signature-short",
    ],
)
def test_a_malformed_signed_manifest_is_refused(key, signed):
    with pytest.raises(ManifestInvalid):
        verify_manifest(public_key_text(key), signed)


@pytest.mark.parametrize("public_key", ["", "not base64!", base64.b64encode(b"x" * 31).decode()])
def test_a_malformed_public_key_is_refused(key, public_key):
    with pytest.raises(ManifestInvalid, match="public key"):
        verify_manifest(public_key, sign_manifest(key, MANIFEST))


def test_manifest_invalid_maps_to_a_stable_code_and_status():
    assert (ManifestInvalid.code, ManifestInvalid.status) == ("manifest_invalid", 422)


def test_a_manifest_s_tag_follows_its_node_packages_and_key_not_its_issue_time(key):
    tag = manifest_tag(key, MANIFEST)
    assert manifest_tag(key, {**MANIFEST, "issued_at": 1_800_000_000}) == tag
    other_node = {**MANIFEST, "node": "web02"}
    more = {**MANIFEST, "packages": [*MANIFEST["packages"], {**MANIFEST["packages"][0], "size": 1}]}
    changed = [other_node, more, {**MANIFEST, "packages": []}]
    assert tag not in {manifest_tag(key, manifest) for manifest in changed}
    assert manifest_tag(Ed25519PrivateKey.generate(), MANIFEST) != tag
