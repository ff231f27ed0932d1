"""/api/trusted-keys: the SSH keys an owner trusts to sign skills, with real ssh-keygen keys,
and every way a caller may get it wrong or try what is not theirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from sshkeys import fingerprint, make_key, public_line

from store.limits import MAX_PUBLIC_KEY_CHARS


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    return {
        "ed25519": make_key(folder, "ed25519"),
        "ecdsa": make_key(folder, "ecdsa", "ecdsa", 384),
        "rsa1024": make_key(folder, "rsa1024", "rsa", 1024),
    }


def trust(client, auth, name, key: Path | str):
    text = public_line(key) if isinstance(key, Path) else key
    return client.post("/api/trusted-keys", headers=auth, json={"name": name, "public_key": text})


def test_an_owner_trusts_a_key_sees_it_listed_and_removes_it(client, auth, keys):
    created = trust(client, auth, "dev@example.org", keys["ed25519"])

    assert created.status_code == 201, created.json
    assert created.json["name"] == "dev@example.org"
    assert created.json["key_type"] == "ssh-ed25519"
    assert created.json["fingerprint"] == fingerprint(keys["ed25519"])
    assert created.json["bits"] == 256
    assert created.json["comment"] == "ed25519@example.org"
    listed = client.get("/api/trusted-keys", headers=auth)
    assert listed.status_code == 200
    assert [key["name"] for key in listed.json] == ["dev@example.org"]

    removed = client.delete("/api/trusted-keys/dev@example.org", headers=auth)

    assert removed.status_code == 204 and removed.data == b""
    assert client.get("/api/trusted-keys", headers=auth).json == []


def test_an_allowed_signers_line_is_accepted_and_its_principal_names_the_key(client, auth, keys):
    line = f'ops@example.org namespaces="git,skillfleet" {public_line(keys["ecdsa"])}'

    created = client.post("/api/trusted-keys", headers=auth, json={"public_key": line})

    assert created.status_code == 201, created.json
    assert created.json["name"] == "ops@example.org"
    assert created.json["key_type"] == "ecdsa-sha2-nistp384"


def test_keys_are_listed_by_name_and_paged(client, auth, keys):
    trust(client, auth, "zed", keys["ed25519"])
    trust(client, auth, "amy", keys["ecdsa"])

    first = client.get("/api/trusted-keys?page_size=1", headers=auth)

    assert [key["name"] for key in first.json] == ["amy"]
    assert 'rel="next"' in first.headers["Link"]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"name": "weak", "public_key": "rsa1024"}, "This RSA key has 1024 bits"),
        ({"name": "dsa", "public_key": "ssh-dss AAAAB3NzaC1kc3MAAACBAPE0 old"},
         "A ssh-dss key can't be trusted"),
        ({"name": "x", "public_key": "not a key"}, "This is not an SSH public key"),
        ({"name": "x"}, "Send the public key as text in 'public_key'."),
        ({"name": "x", "public_key": 7}, "Send the public key as text in 'public_key'."),
        ({"name": "x", "public_key": ["ssh-ed25519"]}, "Send the public key as text"),
        ({"public_key": "ed25519"}, "Give the key a name"),
        ({"name": 5, "public_key": "ed25519"}, "A key's name has 1 to 64 characters"),
        ({"name": "../etc", "public_key": "ed25519"}, "A key's name has 1 to 64 characters"),
        ({"name": "a/b", "public_key": "ed25519"}, "A key's name has 1 to 64 characters"),
        ({"name": "a\0b", "public_key": "ed25519"}, "A key's name has 1 to 64 characters"),
        ({"name": "n" * 300, "public_key": "ed25519"}, "A key's name has 1 to 64 characters"),
        ({"name": "x", "public_key": "k" * (MAX_PUBLIC_KEY_CHARS + 1)},
         f"at most {MAX_PUBLIC_KEY_CHARS} characters"),
    ],
)  # fmt: skip
def test_a_key_or_name_that_cannot_be_trusted_is_422_key_invalid_and_nothing_is_kept(
    client, auth, keys, body, said
):
    if isinstance(body.get("public_key"), str) and body["public_key"] in keys:
        body = {**body, "public_key": public_line(keys[body["public_key"]])}

    response = client.post("/api/trusted-keys", headers=auth, json=body)

    assert response.status_code == 422, response.json
    assert response.json["code"] == "key_invalid"
    assert said in response.json["message"]
    assert client.get("/api/trusted-keys", headers=auth).json == []


def test_the_same_key_or_name_twice_is_409_key_exists(client, auth, keys):
    trust(client, auth, "dev", keys["ed25519"])

    again = trust(client, auth, "other-name", keys["ed25519"])
    taken = trust(client, auth, "dev", keys["ecdsa"])

    assert again.status_code == 409 and again.json["code"] == "key_exists"
    assert taken.status_code == 409 and taken.json["code"] == "key_exists"


@pytest.mark.parametrize(
    ("data", "content_type", "status", "code"),
    [
        ('["dev", "ssh-ed25519 AAAA"]', "application/json", 422, "invalid_request"),
        ('"ssh-ed25519 AAAA"', "application/json", 422, "invalid_request"),
        ("{not json", "application/json", 400, "invalid_json"),
        ("name=dev", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    ],
)
def test_a_body_of_the_wrong_shape_is_refused(client, auth, data, content_type, status, code):
    response = client.post("/api/trusted-keys", headers=auth, data=data, content_type=content_type)

    assert response.status_code == status, response.json
    assert response.json["code"] == code


def test_an_unknown_field_is_refused(client, auth, keys):
    body = {"name": "dev", "public_key": public_line(keys["ed25519"]), "owner_id": 2}

    response = client.post("/api/trusted-keys", headers=auth, json=body)

    assert response.status_code == 422 and "owner_id" in response.json["errors"]["json"]


def test_an_oversize_body_is_413_before_it_is_read(client, auth):
    body = '{"name": "x", "public_key": "' + "k" * (6 * 1024 * 1024) + '"}'

    response = client.post(
        "/api/trusted-keys", headers=auth, data=body, content_type="application/json"
    )

    assert response.status_code == 413


def test_without_a_token_every_route_is_401(client):
    assert client.get("/api/trusted-keys").status_code == 401
    assert client.post("/api/trusted-keys", json={}).status_code == 401
    assert client.delete("/api/trusted-keys/dev").status_code == 401


def test_an_agent_token_is_403_owner_only_on_every_route(client, auth, agent_auth, keys):
    trust(client, auth, "dev", keys["ed25519"])

    listed = client.get("/api/trusted-keys", headers=agent_auth)
    added = client.post("/api/trusted-keys", headers=agent_auth, json={})
    removed = client.delete("/api/trusted-keys/dev", headers=agent_auth)

    for response in (listed, added, removed):
        assert response.status_code == 403 and response.json["code"] == "owner_only"
    assert [key["name"] for key in client.get("/api/trusted-keys", headers=auth).json] == ["dev"]


def test_another_owners_key_is_not_listed_and_its_name_answers_404(client, auth, other_auth, keys):
    trust(client, other_auth, "bobs-key", keys["ed25519"])

    assert client.get("/api/trusted-keys", headers=auth).json == []
    removed = client.delete("/api/trusted-keys/bobs-key", headers=auth)
    assert removed.status_code == 404 and removed.json["code"] == "key_not_found"
    assert [k["name"] for k in client.get("/api/trusted-keys", headers=other_auth).json] == [
        "bobs-key"
    ]
    # The same key may be trusted by each owner, under any name.
    assert trust(client, auth, "alices-name", keys["ed25519"]).status_code == 201


@pytest.mark.parametrize("name", ["..%2F..%2Fetc", "a%00b", "n" * 300, "%2E%2E", "nobody"])
def test_a_bad_or_unknown_name_to_remove_is_404(client, auth, name):
    response = client.delete(f"/api/trusted-keys/{name}", headers=auth)

    assert response.status_code == 404
    assert response.json["code"] in ("key_not_found", "not_found")


def test_a_name_with_a_slash_matches_no_route(client, auth):
    assert client.delete("/api/trusted-keys/a/b", headers=auth).status_code == 404
