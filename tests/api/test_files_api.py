"""Owners' files through the API: upload, download, list and delete; another owner's answers
404; limits and bad input refused with nothing kept; a run's files only to its node's token."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import io
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fleet import fleet
from sqlalchemy import func, select, update

from api import create_app
from api.services import Services
from store.db import transaction
from store.limits import KIB, MAX_OUTPUT_FILE_BYTES, MAX_OUTPUT_FILES
from store.models import Run, StoredFile, utcnow
from store.tokens import create_node_token

SMALL_LIMIT = 64 * KIB


def upload(client, headers, name: str = "report.pdf", data: bytes = b"%PDF-1.7\n") -> Any:
    body = {"file": (io.BytesIO(data), name)}
    return client.post("/api/files", headers=headers, data=body, content_type="multipart/form-data")


def kept(services: Services) -> int:
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(StoredFile)) or 0)


def on_disk(services: Services) -> list[str]:
    folder = services.settings.files_dir
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_an_upload_is_kept_by_id_downloaded_byte_for_byte_listed_and_deleted(client, auth):
    data = bytes(range(256)) * 10
    made = upload(client, auth, "data set.bin", data)
    assert made.status_code == 201, made.json
    body = made.json
    assert (body["name"], body["size"]) == ("data set.bin", len(data))
    assert body["sha256"] == hashlib.sha256(data).hexdigest() and body["run_id"] is None
    got = client.get(f"/api/files/{body['id']}", headers=auth)
    assert got.status_code == 200 and got.data == data
    assert got.headers["Content-Type"] == "application/octet-stream"
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    assert got.headers["Content-Disposition"].startswith('attachment; filename="data set.bin"')
    assert [f["id"] for f in client.get("/api/files", headers=auth).json] == [body["id"]]
    assert client.delete(f"/api/files/{body['id']}", headers=auth).status_code == 204
    gone = client.get(f"/api/files/{body['id']}", headers=auth)
    assert (gone.status_code, gone.json["code"]) == (404, "file_not_found")


def test_an_agent_uploads_and_downloads_but_deletes_nothing(client, auth, agent_auth, services):
    made = upload(client, agent_auth).json
    assert client.get(f"/api/files/{made['id']}", headers=agent_auth).status_code == 200
    refused = client.delete(f"/api/files/{made['id']}", headers=agent_auth)
    assert (refused.status_code, refused.json["code"]) == (403, "owner_only")
    assert kept(services) == 1


def test_another_owners_file_is_not_there_for_reading_listing_or_deleting(
    client, auth, other_auth, services
):
    made = upload(client, auth).json
    for method in ("GET", "DELETE"):
        answer = client.open(f"/api/files/{made['id']}", method=method, headers=other_auth)
        assert (answer.status_code, answer.json["code"]) == (404, "file_not_found")
    assert client.get("/api/files", headers=other_auth).json == []
    assert kept(services) == 1


@pytest.mark.parametrize("file_id", ["..", "x" * 300, "a%00b", "not-a-uuid", "0" * 36])
def test_a_malformed_file_id_is_not_found_and_touches_nothing(client, auth, file_id):
    answer = client.get(f"/api/files/{file_id}", headers=auth)
    assert (answer.status_code, answer.json["code"]) == (404, "file_not_found")


def test_uploads_need_a_token(client):
    assert upload(client, {}).status_code == 401
    assert client.get(f"/api/files/{uuid.uuid4()}").status_code == 401


def test_an_upload_past_the_limit_is_413_and_nothing_is_kept(settings, auth_for_limit):
    client, auth, services = auth_for_limit
    answer = upload(client, auth, "big.bin", b"x" * (SMALL_LIMIT + 1))
    assert (answer.status_code, answer.json["code"]) == (413, "file_too_large")
    assert "SKILLFLEET_FILE_MAX_BYTES" in answer.json["message"]
    assert kept(services) == 0 and on_disk(services) == []
    assert upload(client, auth, "fits.bin", b"x" * SMALL_LIMIT).status_code == 201


@pytest.fixture
def auth_for_limit(settings, token) -> Any:
    """An app whose files may be SMALL_LIMIT bytes, on the same database as `token`'s."""
    built = Services.build(dataclasses.replace(settings, file_max_bytes=SMALL_LIMIT))
    yield create_app(services=built).test_client(), {"Authorization": f"Bearer {token}"}, built
    built.engine.dispose()


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"data": {"other": (b"x", "a.txt")}}, 400, "file_missing"),
        ({"json": {"file": "x"}}, 415, "unsupported_media_type"),
        ({"data": {"file": (b"x", "")}}, 422, "file_invalid"),
        ({"data": {"file": (b"x", "..")}}, 422, "file_invalid"),
    ],
)
def test_a_malformed_upload_is_refused_with_nothing_kept(
    client, auth, services, kwargs, status, code
):
    if "data" in kwargs:  # a stream of its own for each database it runs on
        parts = {field: (io.BytesIO(data), name) for field, (data, name) in kwargs["data"].items()}
        kwargs = {"data": parts, "content_type": "multipart/form-data"}
    answer = client.post("/api/files", headers=auth, **kwargs)
    assert (answer.status_code, answer.json["code"]) == (status, code), answer.json
    assert kept(services) == 0 and on_disk(services) == []


def test_a_name_with_folders_or_control_characters_is_kept_as_its_last_part_shown_plainly(
    client, auth
):
    made = upload(client, auth, "../../etc/pass\x1bwd\u202e.txt").json
    assert made["name"] == "passwd.txt"


def test_an_expired_file_answers_404_and_the_sweep_removes_it(client, auth, services):
    made = upload(client, auth).json
    with transaction(services.sessions) as session:
        session.execute(update(StoredFile).values(expires_at=utcnow() - timedelta(seconds=1)))
    gone = client.get(f"/api/files/{made['id']}", headers=auth)
    assert (gone.status_code, gone.json["code"]) == (404, "file_not_found")
    assert services.files.expire() == 1
    assert kept(services) == 0 and on_disk(services) == []


def test_fifty_uploads_at_once_are_fifty_whole_files(settings, token):
    with fleet(settings) as running:
        headers = {"Authorization": f"Bearer {token}"}

        def one(number: int) -> dict[str, Any]:
            data = f"file {number}\n".encode() * 1000
            files = {"file": (f"f{number}.txt", io.BytesIO(data))}
            answer = httpx.post(f"{running.url}/api/files", headers=headers, files=files)
            assert answer.status_code == 201, answer.text
            return {"sha256": hashlib.sha256(data).hexdigest(), **answer.json()}

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            made = list(pool.map(one, range(50)))
        for entry in made:
            assert entry["sha256"] == entry["sha256"]
            got = httpx.get(f"{running.url}/api/files/{entry['id']}", headers=headers)
            assert hashlib.sha256(got.content).hexdigest() == entry["sha256"]
        assert len({entry["id"] for entry in made}) == 50
        assert kept(running.services) == 50


# -- a run's files, to its node's agent only -------------------------------------------------


@pytest.fixture
def running_run(services: Services, client, auth) -> dict[str, Any]:
    """A run of alice's running on web01 whose call placed one uploaded file."""
    made = upload(client, auth, "in.pdf", b"input bytes").json
    run_id = str(uuid.uuid4())
    with transaction(services.sessions) as session:
        alice = session.scalar(select(StoredFile.owner_id))
        session.add(Run(
            id=run_id, owner_id=alice, skill_name="s", skill_hash="a" * 64, script="scripts/x.py",
            arguments={}, execution="node", queue="node.web01", node="web01", status="running",
            timeout_seconds=60, input_files={"in.pdf": {"id": made["id"], "size": made["size"],
                                                        "sha256": made["sha256"]}},
        ))  # fmt: skip
        web01 = create_node_token(session, "web01")
        web02 = create_node_token(session, "web02")
    return {"run": run_id, "file": made["id"], "web01": web01, "web02": web02}


def test_a_node_fetches_its_running_runs_input_and_sends_back_what_it_made(
    client, auth, running_run
):
    node = {"Authorization": f"Bearer {running_run['web01']}"}
    base = f"/api/nodes/web01/runs/{running_run['run']}/files"
    got = client.get(f"{base}/{running_run['file']}", headers=node)
    assert (got.status_code, got.data) == (200, b"input bytes")
    sent = client.post(base, headers=node, query_string={"path": "out/a.txt"}, data=b"made",
                       content_type="application/octet-stream")  # fmt: skip
    assert sent.status_code == 201, sent.json
    assert (sent.json["run_id"], sent.json["path"], sent.json["name"]) == (
        running_run["run"], "out/a.txt", "a.txt",
    )  # fmt: skip
    assert client.get(f"/api/files/{sent.json['id']}", headers=auth).data == b"made"


@pytest.mark.parametrize("who", ["owner", "agent", "other node", "no token"])
def test_a_runs_files_are_no_one_elses_to_fetch_or_send(
    client, auth, agent_auth, running_run, who, services
):
    headers = {
        "owner": auth, "agent": agent_auth, "no token": {},
        "other node": {"Authorization": f"Bearer {running_run['web02']}"},
    }[who]  # fmt: skip
    base = f"/api/nodes/web01/runs/{running_run['run']}/files"
    got = client.get(f"{base}/{running_run['file']}", headers=headers)
    sent = client.post(base, headers=headers, query_string={"path": "x.txt"}, data=b"x",
                       content_type="application/octet-stream")  # fmt: skip
    expected = {"owner": 404, "agent": 403, "other node": 404, "no token": 401}[who]
    assert (got.status_code, sent.status_code) == (expected, expected)
    assert kept(services) == 1


@pytest.mark.parametrize("path", ["../x", "/etc/x", "a\x00b", "a" * 2000, "a//b"])
def test_a_node_sending_a_bad_path_is_refused_and_nothing_is_kept(
    client, running_run, path, services
):
    node = {"Authorization": f"Bearer {running_run['web01']}"}
    sent = client.post(f"/api/nodes/web01/runs/{running_run['run']}/files", headers=node,
                       query_string={"path": path}, data=b"x",
                       content_type="application/octet-stream")  # fmt: skip
    assert (sent.status_code, sent.json["code"]) == (422, "invalid_path"), sent.json
    assert kept(services) == 1


def test_an_input_that_expired_is_not_served_to_its_node(client, running_run, services):
    with transaction(services.sessions) as session:
        session.execute(update(StoredFile).values(expires_at=utcnow() - timedelta(seconds=1)))
    node = {"Authorization": f"Bearer {running_run['web01']}"}
    got = client.get(
        f"/api/nodes/web01/runs/{running_run['run']}/files/{running_run['file']}", headers=node
    )
    assert (got.status_code, got.json["code"]) == (404, "file_not_found")


def test_a_file_the_run_did_not_name_is_not_served_to_its_node(client, auth, running_run):
    other = upload(client, auth, "other.pdf", b"not for the run").json
    node = {"Authorization": f"Bearer {running_run['web01']}"}
    got = client.get(
        f"/api/nodes/web01/runs/{running_run['run']}/files/{other['id']}", headers=node
    )
    assert (got.status_code, got.json["code"]) == (404, "file_not_found")


def test_an_upload_with_fields_besides_the_file_is_refused_with_nothing_kept(
    client, auth, services
):
    body = {"file": (io.BytesIO(b"x"), "a.txt"), "enable": "true"}
    answer = client.post("/api/files", headers=auth, data=body, content_type="multipart/form-data")
    assert (answer.status_code, answer.json["code"]) == (422, "unknown_fields")
    assert kept(services) == 0


def test_the_approval_card_shows_the_exact_command_line_and_each_files_size_and_hash(
    client, auth, agent_auth, wiper
):
    made = upload(client, auth, "db.dump", b"x" * 1234).json
    call = {"arguments": {"skill_name": "wiper", "script": "scripts/wipe.sh",
                          "arguments": {"node": "web01"}, "args": ["--all", "db.dump"],
                          "files": {"db.dump": made["id"]}}, "chat_id": "c"}  # fmt: skip
    envelope = client.post("/api/tools/run_skill_script", headers=agent_auth, json=call).json
    assert envelope["status"] == "pending_approval", envelope
    card = client.get(f"/api/approvals/{envelope['approval_id']}", headers=auth).json
    assert "Command line: bash scripts/wipe.sh --all db.dump" in card["warning"]
    assert f"db.dump (1,234 bytes, sha256 {made['sha256'][:12]})" in card["warning"]
    assert card["arguments"]["args"] == ["--all", "db.dump"]
    assert card["arguments"]["files"] == {
        "db.dump": {"id": made["id"], "size": 1234, "sha256": made["sha256"]}
    }
    approved = client.post(
        f"/api/approvals/{envelope['approval_id']}", headers=auth, json={"decision": "approve"}
    )
    assert approved.status_code == 200, approved.json
    ran = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert ran["result"]["would_dispatch"]["args"] == ["--all", "db.dump"]
    assert ran["result"]["would_dispatch"]["files"]["db.dump"]["sha256"] == made["sha256"]


@pytest.mark.parametrize("full", ["count", "bytes"])
def test_a_run_that_sent_back_all_it_may_is_refused_another_file(
    client, running_run, services, full
):
    """The run's files so far are counted in the same read as the run: past the number or the
    bytes a run may send back, the next file is refused and not kept."""
    with transaction(services.sessions) as session:
        owner_id = session.scalar(select(StoredFile.owner_id))
        many = MAX_OUTPUT_FILES if full == "count" else 1
        size = 1 if full == "count" else MAX_OUTPUT_FILE_BYTES
        now = utcnow()
        for number in range(many):
            session.add(StoredFile(
                id=str(uuid.uuid4()), owner_id=owner_id, name=f"f{number}", size=size,
                sha256="0" * 64, run_id=running_run["run"], path=f"f{number}", created_at=now,
                expires_at=now + timedelta(days=1),
            ))  # fmt: skip
    node = {"Authorization": f"Bearer {running_run['web01']}"}
    before = kept(services)
    sent = client.post(f"/api/nodes/web01/runs/{running_run['run']}/files", headers=node,
                       query_string={"path": "one-more.txt"}, data=b"x",
                       content_type="application/octet-stream")  # fmt: skip
    assert (sent.status_code, sent.json["code"]) == (409, "run_files_full"), sent.json
    assert kept(services) == before
