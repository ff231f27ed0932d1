"""Skill signatures with real ssh-keygen keys: what verifies, what is refused, which keys an
owner may trust, and the content hash a signature leaves as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import owner_id_of, write_skill
from sshkeys import fingerprint, make_key, public_line, sign_folder, ssh_sign

from store.db import transaction
from store.drafts import Draft, save_draft
from store.errors import KeyExists, KeyInvalid, SignatureInvalid, SignatureRequired, TooManyKeys
from store.hashing import SIGNATURE_FILE, content_hash, hash_entries, regular_files
from store.limits import MAX_TRUSTED_KEYS
from store.models import TrustedKey
from store.signatures import allowed_signer, judge, message, set_required, take_signature
from store.sshkeygen import sign
from store.tokens import create_owner_token
from store.trustedkeys import read_key_line, trust_key, trusted_keys

HASH = "3" * 64


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    return {
        "ed25519": make_key(folder, "ed25519"),
        "rsa": make_key(folder, "rsa", "rsa", 2048),
        "ecdsa256": make_key(folder, "ecdsa256", "ecdsa", 256),
        "ecdsa384": make_key(folder, "ecdsa384", "ecdsa", 384),
        "ecdsa521": make_key(folder, "ecdsa521", "ecdsa", 521),
        "other": make_key(folder, "other"),
        "rsa1024": make_key(folder, "rsa1024", "rsa", 1024),
        "dsa": make_key(folder, "dsa", "dsa"),
    }


def trusted(name: str, key: Path) -> TrustedKey:
    """A trusted key as its row holds it (not saved)."""
    kind, blob = public_line(key).split()[:2]
    return TrustedKey(name=name, public_key=f"{kind} {blob}", fingerprint=fingerprint(key))


@pytest.mark.parametrize("kind", ["ed25519", "rsa", "ecdsa256", "ecdsa384", "ecdsa521"])
def test_a_signature_over_the_hash_by_a_trusted_key_names_that_key(keys, kind):
    signature = ssh_sign(keys[kind], message(HASH))

    verdict = judge(
        signature, HASH, [trusted("someone", keys["other"]), trusted("author", keys[kind])]
    )

    assert verdict.signed_by == "author"
    assert verdict.fingerprint == fingerprint(keys[kind])
    assert verdict.signature == signature.decode()


def test_a_good_signature_by_a_key_nobody_trusts_is_untrusted_and_shows_its_fingerprint(keys):
    verdict = judge(ssh_sign(keys["other"], message(HASH)), HASH, [trusted("a", keys["ed25519"])])

    assert verdict.signed_by is None
    assert verdict.fingerprint == fingerprint(keys["other"])


def test_no_signature_is_unsigned():
    verdict = judge(None, HASH, [])

    assert (verdict.signature, verdict.fingerprint, verdict.signed_by) == (None, None, None)


def test_a_signature_over_another_hash_is_invalid_even_from_a_trusted_key(keys):
    signature = ssh_sign(keys["ed25519"], message("4" * 64))

    with pytest.raises(SignatureInvalid) as refused:
        judge(signature, HASH, [trusted("author", keys["ed25519"])])

    assert refused.value.code == "signature_invalid" and refused.value.status == 422
    assert "incorrect signature" in refused.value.message
    assert "skillfleet-sig-" not in refused.value.message  # no temporary paths


def test_a_signature_over_the_hash_with_a_newline_is_another_message(keys):
    signature = ssh_sign(keys["ed25519"], message(HASH) + b"\n")

    with pytest.raises(SignatureInvalid):
        judge(signature, HASH, [])


def test_a_signature_in_a_foreign_namespace_is_invalid(keys):
    signature = ssh_sign(keys["ed25519"], message(HASH), namespace="git")

    with pytest.raises(SignatureInvalid) as refused:
        judge(signature, HASH, [trusted("author", keys["ed25519"])])

    assert "namespace" in refused.value.message


@pytest.mark.parametrize(
    "damage",
    [
        lambda sig: sig[: len(sig) // 2],
        lambda sig: sig.replace(b"-----END SSH SIGNATURE-----", b""),
        lambda sig: b"not a signature at all\n",
        lambda sig: b"",
        lambda sig: sig[:40] + b"\xff\xfe" + sig[42:],
    ],
    ids=["truncated", "no-footer", "text", "empty", "non-ascii"],
)
def test_a_damaged_signature_is_invalid(keys, damage):
    signature = damage(ssh_sign(keys["ed25519"], message(HASH)))

    with pytest.raises(SignatureInvalid):
        judge(signature, HASH, [trusted("author", keys["ed25519"])])


def test_a_trusted_key_is_verified_through_its_allowed_signers_line_in_the_skillfleet_namespace(
    keys,
):
    key = trusted("author", keys["ed25519"])
    signature = ssh_sign(keys["ed25519"], message(HASH))

    assert allowed_signer(key).startswith('author namespaces="skillfleet" ssh-ed25519 ')
    assert judge(signature, HASH, [key]).signed_by == "author"


def test_adding_a_signature_leaves_the_content_hash_and_the_files_as_they_were(tmp_path, keys):
    folder = write_skill(tmp_path, "signed")
    before = content_hash(folder)

    sign_folder(folder, keys["ed25519"])

    assert (folder / SIGNATURE_FILE).is_file()
    assert content_hash(folder) == before
    assert SIGNATURE_FILE not in regular_files(folder)
    # The same from a package's or a volume's entries, as nodes and runners hash them.
    files = [path for path in folder.rglob("*") if path.is_file()]
    entries = [(path.relative_to(folder).as_posix(), path.read_bytes()) for path in files]
    assert SIGNATURE_FILE in [rel for rel, _data in entries]
    assert hash_entries(entries) == before


def test_only_the_signature_at_the_root_is_left_out_of_the_hash(tmp_path):
    folder = write_skill(tmp_path, "nested")
    before = content_hash(folder)

    (folder / "references" / SIGNATURE_FILE).write_text("a file like any other")

    assert content_hash(folder) != before


def test_taking_the_signature_removes_it_from_the_staged_folder(tmp_path, keys):
    folder = write_skill(tmp_path, "signed")
    written = sign_folder(folder, keys["ed25519"])

    assert take_signature(folder) == written
    assert not (folder / SIGNATURE_FILE).exists()
    assert take_signature(folder) is None


def test_a_signature_that_is_a_folder_or_too_large_is_invalid(tmp_path):
    folder = write_skill(tmp_path, "odd")
    (folder / SIGNATURE_FILE).mkdir()
    with pytest.raises(SignatureInvalid):
        take_signature(folder)
    (folder / SIGNATURE_FILE).rmdir()
    (folder / SIGNATURE_FILE).write_bytes(b"x" * (16 * 1024 + 1))
    with pytest.raises(SignatureInvalid):
        take_signature(folder)


def test_sign_makes_what_verification_accepts(keys):
    signature = sign(message(HASH), keys["ecdsa256"])

    assert judge(signature, HASH, [trusted("me", keys["ecdsa256"])]).signed_by == "me"


# -- keys an owner may trust ---------------------------------------------------------------


def test_an_allowed_signers_line_gives_its_principal_and_key(keys):
    kind, blob, _comment = public_line(keys["ed25519"]).split()
    line = f'dev@example.org namespaces="git,skillfleet" {kind} {blob} laptop'

    read = read_key_line(line)

    assert (read.principal, read.key_type, read.blob, read.comment) == (
        "dev@example.org", kind, blob, "laptop"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("ssh-dss AAAAB3NzaC1kc3MAAACBAPE0 x", "A ssh-dss key can't be trusted"),
        ("hello world", "This is not an SSH public key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----",
         "This is a private key"),
        ("ssh-ed25519 AAAAC3Nz\nssh-ed25519 AAAAC3Nz", "one line"),
        ("-----BEGIN PGP PUBLIC KEY BLOCK-----", "This is not an SSH public key"),
        ("ssh-ed25519-cert-v01@openssh.com AAAAIHNzaC1lZDI1NTE5LWNlcnQ=",
         "ssh-ed25519-cert-v01@openssh.com key can't be trusted"),
    ],
)  # fmt: skip
def test_a_line_that_is_not_a_trustable_key_is_refused_with_the_reason(line, said):
    with pytest.raises(KeyInvalid) as refused:
        read_key_line(line)

    assert said in refused.value.message
    assert refused.value.code == "key_invalid" and refused.value.status == 422


@pytest.mark.parametrize(
    ("options", "said"),
    [('namespaces="git"', "needs the namespace 'skillfleet'"),
     ("cert-authority", "is not one skillfleet keeps"),
     ('valid-before="20300101"', "is not one skillfleet keeps"),
     ('namespaces="skillfleet",cert-authority', "'cert-authority' is not one skillfleet keeps")],
)  # fmt: skip
def test_allowed_signers_options_that_would_change_the_trust_are_refused(keys, options, said):
    kind, blob, _comment = public_line(keys["ed25519"]).split()

    with pytest.raises(KeyInvalid) as refused:
        read_key_line(f"dev@example.org {options} {kind} {blob}")

    assert said in refused.value.message


@pytest.fixture
def owner(services) -> int:
    with transaction(services.sessions) as session:
        create_owner_token(session, "alice")
    return owner_id_of(services)


@pytest.mark.parametrize(
    ("kind", "key_type", "bits"),
    [("ed25519", "ssh-ed25519", 256), ("rsa", "ssh-rsa", 2048),
     ("ecdsa256", "ecdsa-sha2-nistp256", 256), ("ecdsa384", "ecdsa-sha2-nistp384", 384),
     ("ecdsa521", "ecdsa-sha2-nistp521", 521)],
)  # fmt: skip
def test_ed25519_rsa_and_ecdsa_keys_are_trusted_with_ssh_keygens_fingerprint(
    services, owner, keys, kind, key_type, bits
):
    with transaction(services.sessions) as session:
        key = trust_key(session, owner, "author", public_line(keys[kind]))

    assert (key.key_type, key.bits, key.fingerprint) == (key_type, bits, fingerprint(keys[kind]))
    assert key.comment == f"{kind}@example.org"
    assert key.public_key == " ".join(public_line(keys[kind]).split()[:2])


@pytest.mark.parametrize(
    ("kind", "said"),
    [("rsa1024", "This RSA key has 1024 bits; an RSA key needs at least 2048"),
     ("dsa", "A ssh-dss key can't be trusted")],
)  # fmt: skip
def test_a_short_rsa_key_and_a_dsa_key_are_refused_and_nothing_is_kept(
    services, owner, keys, kind, said
):
    with transaction(services.sessions) as session, pytest.raises(KeyInvalid) as refused:
        trust_key(session, owner, "weak", public_line(keys[kind]))

    assert said in refused.value.message
    with services.sessions() as session:
        assert trusted_keys(session, owner) == []


def test_a_key_whose_type_lies_about_its_key_is_refused(services, owner, keys):
    _kind, blob, _comment = public_line(keys["rsa"]).split()

    with transaction(services.sessions) as session, pytest.raises(KeyInvalid) as refused:
        trust_key(session, owner, "liar", f"ssh-ed25519 {blob}")

    assert "ssh-keygen could not read it" in refused.value.message


def test_a_key_can_be_trusted_once_under_one_name(services, owner, keys):
    with transaction(services.sessions) as session:
        trust_key(session, owner, "author", public_line(keys["ed25519"]))

    with transaction(services.sessions) as session, pytest.raises(KeyExists) as again:
        trust_key(session, owner, "again", public_line(keys["ed25519"]))
    with transaction(services.sessions) as session, pytest.raises(KeyExists) as taken:
        trust_key(session, owner, "author", public_line(keys["other"]))

    assert "as 'author'" in again.value.message
    assert "named 'author'" in taken.value.message


def test_an_owner_trusts_at_most_the_limits_number_of_keys(services, owner, tmp_path):
    lines = [public_line(make_key(tmp_path, f"k{i}")) for i in range(MAX_TRUSTED_KEYS + 1)]
    with transaction(services.sessions) as session:
        for i, line in enumerate(lines[:-1]):
            trust_key(session, owner, f"key-{i}", line)

    with transaction(services.sessions) as session, pytest.raises(TooManyKeys) as refused:
        trust_key(session, owner, "one-more", lines[-1])

    assert refused.value.code == "too_many_keys" and refused.value.status == 409


def test_a_draft_of_an_owner_who_requires_signatures_is_held_like_any_unsigned_skill(
    services, owner
):
    with transaction(services.sessions) as session:
        set_required(session, owner, True)
    draft = Draft("drafted", "Does a thing.", "# Steps\n", {}, [], "A chat went badly.")

    saved = save_draft(services.store, owner, draft)

    assert saved.enabled is False and saved.signature_hold is True
    with pytest.raises(SignatureRequired):
        services.store.set_enabled(owner, "drafted", True, saved.hash)
    enabled = services.store.set_enabled(owner, "drafted", True, saved.hash, True)
    assert enabled.enabled is True and enabled.signature_hold is False
