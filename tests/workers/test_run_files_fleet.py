"""A script's command line and files on a real node worker: files in by id or inline, byte for
byte; every file the run created or changed back by id; caps, links and special files noted."""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet import Fleet, fleet, sqlite_settings, upload_file
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcpclients import mcp_client, using

from store.db import transaction
from store.models import ToolCall
from store.tokens import Role, create_token

pytestmark = pytest.mark.fleet

NODE = f"f-{uuid.uuid4().hex[:8]}"
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
# A script as public skills write them: its input and output paths on its command line.
CONVERT = """
import sys
if len(sys.argv) != 3:
    print("Usage: convert.py [input] [output]")
    sys.exit(1)
data = open(sys.argv[1], "rb").read()
with open(sys.argv[2], "wb") as out:
    out.write(data[::-1])
print(f"Wrote {len(data)} bytes to {sys.argv[2]}")
"""
# Changes one input, leaves another, makes a folder of files, a link and a FIFO.
MIXED = """
import os
open("changed.txt", "a").write("more\\n")
os.makedirs("out/deep", exist_ok=True)
open("out/deep/made.bin", "wb").write(bytes(range(256)))
os.symlink("/etc/passwd", "link")
os.mkfifo("pipe")
print(sorted(os.listdir(".")))
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("run-files")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=30)) as started:
        started.start_node(NODE)
        yield started


@pytest.fixture
def owner(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


def run(client: httpx.Client, script: str, **extra: Any) -> dict[str, Any]:
    body = {"arguments": {"skill_name": "tools", "script": script, "arguments": {"node": NODE},
                          **extra}, "chat_id": "files"}  # fmt: skip
    response = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_an_argv_script_gets_its_file_and_its_output_comes_back_byte_for_byte(owner: Fleet):
    owner.import_skill("tools", READ_NODE, {"scripts/convert.py": CONVERT})
    data = os.urandom(300_000) + b"\x00\xff" * 100
    with owner.http() as client:
        sent = upload_file(client, "in put.bin", data)
        assert (sent["name"], sent["size"]) == ("in put.bin", len(data))
        assert sent["sha256"] == hashlib.sha256(data).hexdigest()
        envelope = run(client, "scripts/convert.py", args=["in put.bin", "reversed.bin"],
                       files={"in put.bin": sent["id"]})  # fmt: skip
        assert envelope["status"] == "done", envelope["result"]["stderr"]
        result = envelope["result"]
        assert result["stdout"] == f"Wrote {len(data)} bytes to reversed.bin\n"
        [made] = result["files"]
        assert made["path"] == "reversed.bin" and made["size"] == len(data)
        assert made["sha256"] == hashlib.sha256(data[::-1]).hexdigest()
        downloaded = client.get(f"/api/files/{made['id']}")
        run_view = client.get(f"/api/runs/{result['run_id']}").json()
    assert downloaded.status_code == 200
    assert downloaded.content == data[::-1]
    assert downloaded.headers["content-type"] == "application/octet-stream"
    assert 'filename="reversed.bin"' in downloaded.headers["content-disposition"]
    assert run_view["files"] == result["files"]
    assert run_view["args"] == ["in put.bin", "reversed.bin"]
    assert run_view["input_files"]["in put.bin"]["sha256"] == sent["sha256"]


def test_an_inline_file_is_kept_by_id_and_the_call_records_no_bytes(owner: Fleet):
    owner.import_skill("tools", READ_NODE, {"scripts/convert.py": CONVERT})
    data = b"%PDF-1.7 inline\n"
    inline = {"content_base64": base64.b64encode(data).decode()}
    with owner.http() as client:
        envelope = run(client, "scripts/convert.py", args=["a.pdf", "b.pdf"],
                       files={"a.pdf": inline})  # fmt: skip
        run_view = client.get(f"/api/runs/{envelope['run_id']}").json()
        [made] = envelope["result"]["files"]
        assert client.get(f"/api/files/{made['id']}").content == data[::-1]
    assert envelope["status"] == "done", envelope
    placed = run_view["input_files"]["a.pdf"]
    assert placed["sha256"] == hashlib.sha256(data).hexdigest() and placed["size"] == len(data)
    with owner.services.sessions() as session:
        recorded = session.get(ToolCall, envelope["call_id"])
        assert recorded is not None
        assert recorded.arguments["files"] == {"a.pdf": placed}  # by id, no bytes


def test_a_file_given_again_is_placed_from_the_nodes_cache_and_never_from_an_altered_copy(
    owner: Fleet,
):
    owner.import_skill("tools", READ_NODE, {"scripts/convert.py": CONVERT})
    data = os.urandom(200_000)
    kept = owner.settings.cache_dir / NODE / ".inputs" / hashlib.sha256(data).hexdigest()
    with owner.http() as client:
        sent = upload_file(client, "in.bin", data)
        files = {"in.bin": sent["id"]}

        def convert() -> dict[str, Any]:
            return run(client, "scripts/convert.py", args=["in.bin", "out.bin"], files=files)

        assert convert()["status"] == "done"
        assert kept.read_bytes() == data  # the node kept what it fetched
        # The API's copy goes: the node's is the only one left, and the run gets it.
        (owner.settings.files_dir / sent["id"]).unlink()
        again = convert()
        assert again["status"] == "done", again
        [made] = again["result"]["files"]
        assert client.get(f"/api/files/{made['id']}").content == data[::-1]
        # A copy altered in the cache is not placed: it goes, and the file is fetched again
        # (here it can't be, so the run says so).
        kept.write_bytes(b"planted" + data[7:])
        refused = convert()
        assert refused["status"] == "failed", refused
        assert refused["error"]["code"] == "input_file_unavailable", refused
        assert not kept.exists()


def test_changed_and_new_files_come_back_and_links_and_pipes_are_noted(owner: Fleet):
    owner.import_skill("tools", READ_NODE, {"scripts/mixed.py": MIXED})
    with owner.http() as client:
        changed = upload_file(client, "changed.txt", b"first\n")
        kept = upload_file(client, "kept.txt", b"the same\n")
        envelope = run(client, "scripts/mixed.py",
                       files={"changed.txt": changed["id"], "in/kept.txt": kept["id"]})  # fmt: skip
        result = envelope["result"]
        by_path = {entry["path"]: entry for entry in result["files"]}
        changed_now = client.get(f"/api/files/{by_path['changed.txt']['id']}").content
    assert envelope["status"] == "done", envelope
    assert sorted(by_path) == ["changed.txt", "out/deep/made.bin"]
    assert changed_now == b"first\nmore\n"
    assert by_path["out/deep/made.bin"]["sha256"] == hashlib.sha256(bytes(range(256))).hexdigest()
    note = result["files_note"]
    assert "link (a symbolic link, not followed)" in note and "pipe (not a regular file)" in note


@pytest.mark.parametrize(
    ("files", "code", "said"),
    [
        ({"../x": "id"}, "invalid_call", "has an empty, '.' or '..' part"),
        ({"/etc/x": "id"}, "invalid_call", "is absolute"),
        ({"a\x00b": "id"}, "invalid_call", "NUL, control character or backslash"),
        ({"a" * 300: "id"}, "invalid_call", "too deep, or a part of it too long"),
        ({"x": "not-an-id"}, "file_not_found", "No file 'not-an-id' of yours is kept."),
        ({"x": {"content_base64": "%%%"}}, "invalid_call", "is not valid base64"),
        ({"x": 5}, "invalid_call", "must map a path in the run's working directory"),
        (["x"], "invalid_call", "must map a path in the run's working directory"),
        ({"a": "id", "a/b": "id"}, "invalid_call", "as a file and as the folder of"),
    ],
)
def test_bad_files_fail_the_call_before_anyone_is_asked(
    owner: Fleet, files: Any, code: str, said: str
):
    owner.import_skill("tools", READ_NODE, {"scripts/convert.py": CONVERT})
    with owner.http() as client:
        envelope = run(client, "scripts/convert.py", files=files)
        runs = client.get("/api/runs").json()
    assert (envelope["status"], envelope["error"]["code"]) == ("failed", code), envelope
    assert said in envelope["error"]["message"]
    assert runs == []


def test_another_owners_file_is_unknown_to_a_call_and_to_a_download(owner: Fleet):
    owner.import_skill("tools", READ_NODE, {"scripts/convert.py": CONVERT})
    other = owner.with_new_owner()
    with other.http() as client:
        theirs = upload_file(client, "secret.pdf", b"theirs")
    with owner.http() as client:
        envelope = run(client, "scripts/convert.py", args=["x", "y"], files={"x": theirs["id"]})
        download = client.get(f"/api/files/{theirs['id']}")
    assert envelope["error"]["code"] == "file_not_found"
    assert (download.status_code, download.json()["code"]) == (404, "file_not_found")


def test_an_mcp_host_sends_a_file_inline_and_reads_what_the_run_made_as_a_resource(
    owner: Fleet,
):
    owner.import_skill("tools", READ_NODE, {"scripts/convert.py": CONVERT})
    name, agent = new_agent(owner)
    data = b"%PDF-1.7 from a host without an upload step\n"
    arguments = {
        "skill_name": "tools", "script": "scripts/convert.py", "node": NODE,
        "args": ["form.pdf", "reversed.pdf"],
        "files": {"form.pdf": {"content_base64": base64.b64encode(data).decode()}},
    }  # fmt: skip

    async def scenario(client: Client) -> Any:
        result = await client.call_tool("run_skill_script", arguments)
        [link] = [item for item in result.content if item.type == "resource_link"]
        read = await client.read_resource(link.uri)
        return result, link, read

    result, link, read = using(mcp_client(owner, agent, name=name), scenario)
    assert not result.is_error, result.content
    assert link.name == "reversed.pdf" and link.size == len(data)
    [contents] = read.contents
    assert base64.b64decode(contents.blob) == data[::-1]
    assert "reversed.pdf: skillfleet://files/" in result.content[0].text
    stranger, stranger_agent = new_agent(owner.with_new_owner())

    async def steal(client: Client) -> str:
        try:
            await client.read_resource(link.uri)
        except MCPError as e:
            return str(e)
        return "read"

    assert "(file_not_found)" in using(mcp_client(owner, stranger_agent, name=stranger), steal)


def new_agent(owner: Fleet) -> tuple[str, str]:
    """An agent token of the fleet's owner, and a client name for it."""
    with transaction(owner.services.sessions) as session:
        token = create_token(session, owner.owner_name, Role.AGENT)
    return f"host-{uuid.uuid4().hex[:6]}", token
