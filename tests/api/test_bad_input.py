"""Bad input that once crashed the API: each answers a 4xx with a code and stores nothing."""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from conftest import REDIS_URL
from factories import skill_files, store_snapshot, zip_bytes
from fleet import fleet
from sqlalchemy import func, select

from store.models import ToolCall
from store.settings import Settings

ROUNDS = 150


def post_zip(client, auth, data: bytes):
    return client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(data), "skill.zip")},
        content_type="multipart/form-data",
    )


@pytest.mark.parametrize("opening", ["[", "{a: "])
def test_a_header_nested_five_hundred_deep_is_refused_as_invalid_and_nothing_stored(
    client, auth, services, opening
):
    closing = "]" if opening == "[" else "}"
    files = skill_files("deep")
    files["SKILL.md"] = (
        f"---\nname: deep\ndescription: {opening * 500}{closing * 500}\n---\nbody\n".encode()
    )
    before = store_snapshot(services.settings.skills_dir, services.sessions)

    response = post_zip(client, auth, zip_bytes(files, top="deep"))

    assert response.status_code == 422, response.json
    assert response.json["code"] == "skill_invalid"
    assert "nests deeper than 32 levels" in response.json["errors"][0]
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


def test_a_json_body_without_a_json_content_type_is_refused_and_no_call_recorded(
    client, auth, services
):
    body = json.dumps({"arguments": {"query": "disk"}, "chat_id": "c1"})

    response = client.post(
        "/api/tools/list_skills", data=body, headers={**auth, "Content-Type": "text/plain"}
    )

    assert response.status_code == 415
    assert response.json["code"] == "unsupported_media_type"
    assert "Content-Type: application/json" in response.json["message"]
    with services.sessions() as session:
        assert session.scalar(select(func.count()).select_from(ToolCall)) == 0


def test_a_form_body_on_a_json_route_is_refused(client, auth):
    response = client.put("/api/settings", data={"auto_tools": "true"}, headers=auth)

    assert response.status_code == 415
    assert "was sent as application/x-www-form-urlencoded" in response.json["message"]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_deleting_a_chat_while_calls_on_it_are_recorded_never_answers_500(app, auth, services):
    statuses: Counter[tuple[str, int]] = Counter()

    def call(chat: str) -> None:
        response = app.test_client().post(
            "/api/tools/list_skills", json={"arguments": {}, "chat_id": chat}, headers=auth
        )
        statuses["call", response.status_code] += 1
        if response.status_code == 409:
            assert response.json["code"] == "concurrent_change"

    def delete(chat: str) -> None:
        response = app.test_client().delete(f"/api/chats/{chat}", headers=auth)
        statuses["delete", response.status_code] += 1

    for round_number in range(ROUNDS):
        chat = f"race-{round_number}"
        app.test_client().post(
            "/api/tools/list_skills", json={"arguments": {}, "chat_id": chat}, headers=auth
        )
        threads = [
            threading.Thread(target=call, args=(chat,)),
            threading.Thread(target=delete, args=(chat,)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert {status for _kind, status in statuses} <= {200, 204, 404, 409}, statuses


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_plain_client_sending_six_mib_gets_the_413_not_a_broken_pipe(
    tmp_path: Path, database_url: str
):
    settings = Settings(data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL)
    boundary = "skillfleetboundary"
    zip_part = b"PK" + b"\0" * (6 * 1024 * 1024)
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="s.zip"\r\n'
            "Content-Type: application/zip\r\n\r\n"
        ).encode()
        + zip_part
        + f"\r\n--{boundary}--\r\n".encode()
    )
    with fleet(settings) as running:
        before = store_snapshot(settings.skills_dir, running.services.sessions)
        request = urllib.request.Request(
            f"{running.url}/api/skills",
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {running.owner_token}",
                "Content-Type": f"multipart/form-data; boundary={boundary}",
            },
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert store_snapshot(settings.skills_dir, running.services.sessions) == before
    assert refused.value.code == 413
    answer = json.loads(refused.value.read())
    assert answer["code"] == "zip_too_large"
    assert answer["message"] == "The upload is larger than 5 MiB, the limit for a skill."


@pytest.mark.parametrize(
    ("path", "code"),
    [("/api/tools/load_skill", "invalid_json"), ("/api/skills", "invalid_json")],
    ids=["a tool call (webargs reads it)", "a GitHub import (the view reads it)"],
)
def test_json_nested_too_deep_for_python_is_refused_as_bad_json_and_nothing_recorded(
    client, auth, services, path, code
):
    body = '{"arguments": ' + "[" * 100_000 + "]" * 100_000 + "}"
    before = store_snapshot(services.settings.skills_dir, services.sessions)

    response = client.post(path, data=body, headers={**auth, "Content-Type": "application/json"})

    assert response.status_code == 400, response.json
    assert response.json["code"] == code
    with services.sessions() as session:
        assert session.scalar(select(func.count()).select_from(ToolCall)) == 0
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


@pytest.mark.parametrize("sent", [0, 1, "true", "yes", None])
def test_a_boolean_of_a_json_body_is_true_or_false_and_nothing_else_is_saved(
    client, auth, services, sent
):
    before = client.get("/api/settings", headers=auth).json
    files = skill_files("switch")
    upload = {"file": (io.BytesIO(zip_bytes(files, top="switch")), "s.zip")}
    client.post("/api/skills", headers=auth, data=upload, content_type="multipart/form-data")
    skills = store_snapshot(services.settings.skills_dir, services.sessions)

    shell = client.put(
        "/api/settings", headers=auth, json={"auto_tools": [], "run_command_shell": sent}
    )
    enabled = client.put("/api/skills/switch/enabled", headers=auth, json={"enabled": sent})

    if sent is not None:  # null leaves run_command_shell as it is
        assert shell.status_code == 422, shell.json
        assert shell.json["code"] == "invalid_request"
        assert shell.json["errors"] == {"json": {"run_command_shell": ["Not a valid boolean."]}}
    assert enabled.status_code == 422, enabled.json
    assert enabled.json["code"] == "invalid_request"
    assert "enabled" in enabled.json["errors"]["json"]
    assert client.get("/api/settings", headers=auth).json == before
    assert store_snapshot(services.settings.skills_dir, services.sessions) == skills
