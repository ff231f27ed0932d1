"""`skillfleet nodes add|list` and `skillfleet keys show`, run as a user would run them."""

from __future__ import annotations

import base64
import re
import subprocess
from collections.abc import Iterator

import pytest
from fleet import Fleet, fleet
from test_up import SKILLFLEET, clean_env

from store.models import Node
from store.settings import Settings
from store.signing import public_key_text, verify_manifest

CLI_LIMIT = 60.0


@pytest.fixture
def api(settings: Settings) -> Iterator[Fleet]:
    with fleet(settings) as running:
        yield running


def skillfleet(settings: Settings, *args: str, **values: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(
        DATABASE_URL=settings.database,
        SKILLFLEET_DATA_DIR=str(settings.data_dir),
        **values,
    )
    return subprocess.run(
        [SKILLFLEET, *args], env=env, capture_output=True, text=True, timeout=CLI_LIMIT
    )


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def add(api: Fleet, settings: Settings, node: str = "web01") -> subprocess.CompletedProcess[str]:
    return skillfleet(settings, "nodes", "add", node, "--owner", api.owner_name)


def test_nodes_add_prints_a_token_that_reaches_that_node_s_manifest(api, settings):
    result = add(api, settings)
    assert result.returncode == 0, result.stderr
    token = last_line(result.stdout)
    assert re.fullmatch(r"sf_[A-Za-z0-9_-]+", token)
    with api.services.sessions() as session:
        assert session.get(Node, "web01") is not None
    headers = {"Authorization": f"Bearer {token}"}
    with api.http() as client:
        own = client.get("/api/nodes/web01/manifest", headers=headers)
        other = client.get("/api/nodes/web02/manifest", headers=headers)
        owner_route = client.get("/api/skills", headers=headers)
    assert own.status_code == 200
    assert verify_manifest(public_key_text(api.services.signing_key), own.json())["node"] == "web01"
    assert (other.status_code, owner_route.status_code) == (404, 403)


def test_nodes_add_refuses_a_node_that_is_already_registered(api, settings):
    assert add(api, settings).returncode == 0
    again = add(api, settings)
    assert again.returncode == 1
    assert "already registered" in again.stderr
    assert "sf_" not in again.stdout


@pytest.mark.parametrize("name", ["Web01", "web-", "web_01", "a" * 65])
def test_nodes_add_refuses_a_name_that_is_not_a_node_name(api, settings, name):
    result = add(api, settings, name)
    assert result.returncode == 1
    assert "node name" in result.stderr
    with api.services.sessions() as session:
        assert session.get(Node, name) is None


def test_nodes_add_needs_an_owner_that_exists_and_registers_nothing_otherwise(api, settings):
    missing = skillfleet(settings, "nodes", "add", "web01")
    assert missing.returncode == 1
    assert "Name the owner of 'web01' with --owner." in missing.stderr
    unknown = skillfleet(settings, "nodes", "add", "web01", "--owner", "nobody-at-all")
    assert unknown.returncode == 1
    assert "There is no owner named 'nobody-at-all'." in unknown.stderr
    assert "sf_" not in unknown.stdout
    with api.services.sessions() as session:
        assert session.get(Node, "web01") is None


def test_sharing_a_node_asks_first_and_each_owner_then_sees_it(api, settings):
    assert add(api, settings).returncode == 0
    other = api.with_new_owner()
    with other.http() as client:  # with_new_owner shared the fleet's nodes; web01 is not one
        assert "web01" not in [n["name"] for n in client.get("/api/nodes").json()]
    asked = subprocess.run(
        [SKILLFLEET, "nodes", "share", "web01", other.owner_name],
        env=clean_env(DATABASE_URL=settings.database, SKILLFLEET_DATA_DIR=str(settings.data_dir)),
        input="n\n", capture_output=True, text=True, timeout=CLI_LIMIT,
    )  # fmt: skip
    assert asked.returncode == 1 and "Aborted" in asked.stderr
    assert "a uid and namespaces of its own" in asked.stdout
    shared = skillfleet(settings, "nodes", "share", "web01", other.owner_name, "--yes")
    assert shared.returncode == 0, shared.stderr
    assert shared.stdout.strip() == f"'web01' is now offered to {other.owner_name} too."
    owners = skillfleet(settings, "nodes", "owners", "web01").stdout.split()
    assert sorted(owners) == sorted([api.owner_name, other.owner_name])
    with other.http() as client:
        seen = {n["name"]: n for n in client.get("/api/nodes").json()}
    assert seen["web01"]["shared"] is True
    gone = skillfleet(settings, "nodes", "unshare", "web01", other.owner_name)
    assert gone.stdout.strip() == f"'web01' is no longer offered to {other.owner_name}."
    with other.http() as client:
        assert "web01" not in [n["name"] for n in client.get("/api/nodes").json()]


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (("share", "nowhere", "OWNER"), "No node named 'nowhere' is registered."),
        (("share", "web01", "nobody-at-all"), "There is no owner named 'nobody-at-all'."),
        (("share", "spark", "OWNER"), "'spark' is a runner every owner shares, not a node."),
        (("unshare", "web01", "nobody-at-all"), "There is no owner named 'nobody-at-all'."),
    ],
)
def test_sharing_what_does_not_exist_is_refused_clearly(api, settings, arguments, said):
    assert add(api, settings).returncode == 0
    named = [api.owner_name if part == "OWNER" else part for part in arguments]
    result = skillfleet(settings, "nodes", *named, "--yes") if named[0] == "share" else (
        skillfleet(settings, "nodes", *named))  # fmt: skip
    assert result.returncode == 1
    assert said in result.stderr


def test_nodes_list_shows_registered_nodes_through_the_api(api, settings):
    add(api, settings)
    result = skillfleet(
        settings, "nodes", "list", SKILLFLEET_URL=api.url, SKILLFLEET_TOKEN=api.owner_token
    )
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "REGISTERED", "ALIVE"]
    cells = next(re.split(r"\s{2,}", row.strip()) for row in rows if row.startswith("web01 "))
    assert cells[:3] == ["web01", "yes", "no"]


def test_nodes_list_with_a_node_token_is_refused(api, settings):
    token = last_line(add(api, settings).stdout)
    result = skillfleet(settings, "nodes", "list", SKILLFLEET_URL=api.url, SKILLFLEET_TOKEN=token)
    assert result.returncode == 1
    assert "forbidden" in result.stderr


def test_keys_show_prints_the_same_44_character_key_every_time(settings, tmp_path):
    first = skillfleet(settings, "keys", "show")
    second = skillfleet(settings, "keys", "show")
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    key = last_line(first.stdout)
    assert len(key) == 44 and len(base64.b64decode(key, validate=True)) == 32
    assert last_line(second.stdout) == key


def test_keys_show_prints_the_key_the_api_signs_with(api, settings):
    key = last_line(skillfleet(settings, "keys", "show").stdout)
    assert key == public_key_text(api.services.signing_key)


def test_the_sparks_token_takes_no_owner_and_an_owner_can_be_made_before_its_tokens(api, settings):
    spark = skillfleet(settings, "nodes", "add", "spark")
    assert spark.returncode == 0, spark.stderr
    owned = skillfleet(settings, "nodes", "add", "sandbox", "--owner", api.owner_name)
    assert owned.returncode == 1 and "takes no --owner" in owned.stderr
    made = skillfleet(settings, "owners", "add", "carol")
    again = skillfleet(settings, "owners", "add", "carol")
    assert made.stdout.strip() == "The owner 'carol' was made."
    assert again.stdout.strip() == "The owner 'carol' exists already."
    assert "carol" in skillfleet(settings, "owners", "list").stdout.split()
    assert skillfleet(settings, "nodes", "add", "web09", "--owner", "carol").returncode == 0
