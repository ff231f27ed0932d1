"""What a chat's turns carry of the skill content it loaded (broker/loaded.py), read from the
real database and store after real calls through POST /api/tools."""

from __future__ import annotations

import io

from factories import owner_id_of, skill_files, zip_bytes

from broker import loaded
from store.db import core_connection

SECRET = "ghp_" + "b" * 36


def install(client, auth, name: str, files: dict[str, bytes]) -> None:
    response = client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top=name)), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json


def read(client, auth, name: str, path: str, chat: str = "c1") -> dict:
    body = {"arguments": {"skill_name": name, "path": path}, "chat_id": chat}
    envelope = client.post("/api/tools/read_skill_resource", headers=auth, json=body).json
    assert envelope["status"] == "done", envelope
    return dict(envelope["result"])


def carried(services, chat: str, **budget: int) -> loaded.Carried:
    """What the turns of the owner's chat `chat` carry, read as the control worker reads it."""
    with core_connection(services.sessions) as connection:
        return loaded.carried(services.store, connection, owner_id_of(services), chat, **budget)


def test_resources_fill_the_budget_from_the_newest_read_and_the_rest_are_named(
    client, auth, services
):
    files = skill_files("notes")
    files.update({f"references/{n}.md": (n * 300).encode() for n in ("a", "b", "c")})
    files["references/d.bin"] = b"\xff\xfe" * 10
    install(client, auth, "notes", files)
    results = [read(client, auth, "notes", f"references/{n}") for n in ("a.md", "b.md", "c.md")]
    read(client, auth, "notes", "references/b.md")  # read again: carried once
    read(client, auth, "notes", "references/d.bin")  # binary: never carried
    read(client, auth, "notes", "references/c.md", chat="other")
    block = len(results[0]["content"].encode())

    kept = carried(services, "c1", budget=2 * block)
    assert kept.skills == []  # no load_skill in this chat
    assert kept.resources == [results[2]["content"], results[1]["content"]]
    assert kept.left_out == ["notes/references/a.md"]
    text = kept.text()
    assert text.startswith(loaded.CARRIED_HEAD)
    assert text.endswith(f"{loaded.NOT_CARRIED} notes/references/a.md")


def test_carried_content_is_redacted_as_the_tool_result_was(client, auth, services):
    files = skill_files("leaky")
    files["references/creds.md"] = f"token: {SECRET}\n".encode()
    install(client, auth, "leaky", files)
    body = {"arguments": {"skill_name": "leaky"}, "chat_id": "c1"}
    skill = client.post("/api/tools/load_skill", headers=auth, json=body).json["result"]
    resource = read(client, auth, "leaky", "references/creds.md")
    assert SECRET not in resource["content"] and "[redacted]" in resource["content"]

    kept = carried(services, "c1")
    assert kept.skills == [skill["content"]] and kept.resources == [resource["content"]]
    assert SECRET not in kept.text()


def test_a_chat_that_never_called_a_tool_carries_nothing(services):
    kept = carried(services, "new")
    assert kept == loaded.Carried() and kept.text() == ""
