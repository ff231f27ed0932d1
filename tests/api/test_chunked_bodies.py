"""A body sent in chunks (Transfer-Encoding: chunked, no Content-Length) is read like any other,
within the same limit, by the API as `skillfleet api` serves it over HTTP."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from factories import skill_files, store_snapshot, zip_bytes
from fleet import LiveServer

from api.bodies import MAX_BODY_BYTES
from store.archive import size_text

CHUNK = 16 * 1024


@pytest.fixture
def served(app: Any) -> Iterator[LiveServer]:
    server = LiveServer(app)
    yield server
    server.stop()


def chunked(data: bytes) -> Iterator[bytes]:
    """`data` as httpx sends a body it can't measure: in chunks, without Content-Length."""
    for start in range(0, len(data), CHUNK):
        yield data[start : start + CHUNK]


def settings_of(served: LiveServer, auth: dict[str, str]) -> Any:
    return httpx.get(f"{served.url}/api/settings", headers=auth).json()


def test_a_chunked_json_body_is_read_and_its_change_saved(served, auth):
    body = json.dumps({"auto_tools": [], "run_command_shell": True}).encode()

    answer = httpx.put(
        f"{served.url}/api/settings",
        content=chunked(body),
        headers={**auth, "Content-Type": "application/json"},
    )

    assert answer.request.headers["Transfer-Encoding"] == "chunked"
    assert "Content-Length" not in answer.request.headers
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "auto_tools": [],
        "run_command_shell": True,
        "require_signature": False,
    }
    assert settings_of(served, auth)["run_command_shell"] is True


def test_a_chunked_skill_upload_is_read_and_installed(served, auth):
    form = httpx.Request(
        "POST",
        f"{served.url}/api/skills",
        files={"file": ("s.zip", io.BytesIO(zip_bytes(skill_files("chunky"), top="chunky")))},
    )
    body, content_type = form.read(), form.headers["Content-Type"]

    answer = httpx.post(
        f"{served.url}/api/skills",
        content=chunked(body),
        headers={**auth, "Content-Type": content_type},
    )

    assert answer.request.headers["Transfer-Encoding"] == "chunked"
    assert answer.status_code == 201, answer.text
    assert answer.json()["name"] == "chunky"


def test_a_chunked_body_past_the_limit_is_refused_413_and_nothing_is_saved(served, auth, services):
    entries = ", ".join(['"list_skills"'] * (MAX_BODY_BYTES // 14 + 1))
    body = f'{{"auto_tools": [{entries}], "run_command_shell": true}}'.encode()
    assert len(body) > MAX_BODY_BYTES
    before = (
        settings_of(served, auth),
        store_snapshot(services.settings.skills_dir, services.sessions),
    )

    answer = httpx.put(
        f"{served.url}/api/settings",
        content=chunked(body),
        headers={**auth, "Content-Type": "application/json"},
        timeout=60,
    )

    assert answer.status_code == 413
    assert answer.json() == {
        "code": "body_too_large",
        "status": 413,
        "message": f"The request body is larger than {size_text(MAX_BODY_BYTES)}.",
    }
    assert answer.headers["Connection"] == "close"
    after = (
        settings_of(served, auth),
        store_snapshot(services.settings.skills_dir, services.sessions),
    )
    assert after == before
