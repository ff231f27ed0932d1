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


def test_nodes_add_prints_a_token_that_reaches_that_node_s_manifest(api, settings):
    result = skillfleet(settings, "nodes", "add", "web01")
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
    assert skillfleet(settings, "nodes", "add", "web01").returncode == 0
    again = skillfleet(settings, "nodes", "add", "web01")
    assert again.returncode == 1
    assert "already registered" in again.stderr
    assert "sf_" not in again.stdout


@pytest.mark.parametrize("name", ["Web01", "web-", "web_01", "a" * 65])
def test_nodes_add_refuses_a_name_that_is_not_a_node_name(api, settings, name):
    result = skillfleet(settings, "nodes", "add", name)
    assert result.returncode == 1
    assert "node name" in result.stderr
    with api.services.sessions() as session:
        assert session.get(Node, name) is None


def test_nodes_list_shows_registered_nodes_through_the_api(api, settings):
    skillfleet(settings, "nodes", "add", "web01")
    result = skillfleet(
        settings, "nodes", "list", SKILLFLEET_URL=api.url, SKILLFLEET_TOKEN=api.owner_token
    )
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "REGISTERED", "ALIVE"]
    cells = next(re.split(r"\s{2,}", row.strip()) for row in rows if row.startswith("web01 "))
    assert cells[:3] == ["web01", "yes", "no"]


def test_nodes_list_with_a_node_token_is_refused(api, settings):
    token = last_line(skillfleet(settings, "nodes", "add", "web01").stdout)
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
