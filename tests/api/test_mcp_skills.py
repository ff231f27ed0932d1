"""The skills over /mcp: the Skills extension (SEP-2640) with fastmcp's client, the same files
as resources for hosts without it, confinement of `skill://` paths, owners kept apart, and
`notifications/resources/list_changed` on a listen stream."""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import httpx
import mcp_types as types
import pytest
import yaml
from conftest import TLS
from factories import skill_md, zip_bytes
from fastmcp.client.transports import StdioTransport
from fastmcp.server.providers.skills import SkillsDirectoryProvider
from fastmcp.skills import SkillsClientExtension
from fastmcp.skills.extension import SkillsExtension
from fleet import Fleet, fleet, sqlite_settings
from mcp.shared.exceptions import MCPError
from mcpclients import McpOwner, mcp_client, skills_client, stdio_client, using

pytestmark = pytest.mark.fleet

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
LOGO = bytes(range(256))  # not UTF-8: served as a blob


class Owner(McpOwner):
    def import_skill(self, declared: str, name: str | None = None) -> str:
        """Import the notes skill `declared` (under `name` if given); its installed name."""
        params = {"name": name} if name else {}
        upload = {"file": ("s.zip", io.BytesIO(zip_bytes(notes_files(declared), top=declared)))}
        with self.rest() as rest:
            answer = rest.post("/api/skills", params=params, files=upload)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["name"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("mcp"), sqlite_template)) as running:
        yield running


def notes_files(name: str) -> dict[str, bytes]:
    metadata = {"skillfleet.tier": "read", "parameters_schema": {"type": "object"}}
    return {
        "SKILL.md": skill_md(name, license="MIT", metadata=metadata).encode(),
        "scripts/show.py": b"print('notes')\r\n",
        "references/guide.md": "# Guide\n\nCaf\u00e9 au lait.\n".encode(),
        "assets/logo.bin": LOGO,
    }


def served_bytes(contents: Any) -> bytes:
    """The bytes a `resources/read` content stands for."""
    if hasattr(contents, "blob"):
        return base64.b64decode(contents.blob)
    return bytes(contents.text.encode())


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_skills_list_gives_each_usable_skill_with_digests_equal_to_resources_read(served):
    owner = Owner.create(served)
    name = unique("notes")
    files = notes_files(name)
    owner.import_skill(name)
    switched_off = owner.import_skill(unique("off"))
    with owner.rest() as rest:
        assert rest.put(f"/api/skills/{switched_off}/enabled", json={"enabled": False}).is_success

    async def listed(client: Any) -> Any:
        skills = await client.list_skills()
        ours = next(s for s in skills if s.frontmatter.name == name)
        read = {r.uri: served_bytes((await client.read_resource(r.uri))[0]) for r in ours.resources}
        got = await client.get_skill(ours.uri)
        return client.server_capabilities, skills, ours, read, got

    capabilities, skills, ours, read, got = using(skills_client(served, owner.agent), listed)
    assert SKILLS_EXTENSION in (capabilities.extensions or {})
    names = {s.frontmatter.name for s in skills}
    assert "skill-authoring" in names and switched_off not in names
    assert ours.uri == f"skill://{name}/SKILL.md"
    assert ours.frontmatter.root == {
        "name": name,
        "description": f"Does {name}.",
        "license": "MIT",
        "metadata": {"skillfleet.tier": "read", "parameters_schema": '{"type": "object"}'},
    }
    by_path = {r.uri.removeprefix(f"skill://{name}/"): r for r in ours.resources}
    assert sorted(by_path) == sorted(files)
    for path, resource in by_path.items():
        served = read[resource.uri]
        assert resource.digest == f"sha256:{hashlib.sha256(served).hexdigest()}", path
        assert resource.size == len(served)
        if path != "SKILL.md":
            assert served == files[path], path
    # SKILL.md is served with the frontmatter the manifest gives (its parameters_schema as
    # JSON text), over the same body.
    front, body = read[ours.uri].decode().removeprefix("---\n").split("---\n", 1)
    assert yaml.safe_load(front) == ours.frontmatter.root
    assert body == f"\n# {name}\n\nFollow these steps.\n"
    assert got == ours


def test_a_skill_installed_under_another_name_is_listed_by_that_name(served):
    owner = Owner.create(served)
    declared, installed = unique("declared"), unique("installed")
    owner.import_skill(declared, name=installed)

    async def listed(client: Any) -> Any:
        return [s for s in await client.list_skills() if s.uri.startswith("skill://installed-")]

    (entry,) = using(skills_client(served, owner.agent), listed)
    assert entry.uri == f"skill://{installed}/SKILL.md"
    assert entry.frontmatter.name == installed


def test_a_traversing_skill_uri_is_refused_as_read_skill_resource_refuses_its_path(served):
    owner = Owner.create(served)
    name = owner.import_skill(unique("notes"))
    other = owner.import_skill(unique("other"))

    async def tried(client: Any) -> Any:
        refused = {}
        for uri in (
            f"skill://{name}/../{other}/SKILL.md",
            f"skill://{name}/%2E%2E/{other}/SKILL.md",
            f"skill://{name}/scripts/../../{other}/SKILL.md",
            f"skill://{name}/%252E%252E/{other}/SKILL.md",
            f"skill://{name}//etc/passwd",
        ):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            refused[uri] = caught.value.error.message
        tool = await client.call_tool(
            "read_skill_resource", {"skill_name": name, "path": f"../{other}/SKILL.md"}
        )
        return refused, tool

    # The SDK's client sends a URI as given (fastmcp's resolves its dot segments first).
    refused, tool = using(mcp_client(served, owner.agent), tried)
    climbing = "The path may not climb out of the skill folder with '..'."
    assert tool.is_error and tool.structured_content["error"]["message"] == climbing
    messages = list(refused.values())
    assert messages[:4] == [climbing] * 4
    assert messages[4] == "The path must be relative to the skill folder, not absolute."


def test_two_owners_see_and_read_only_their_own_skills(served):
    alice, bob = Owner.create(served), Owner.create(served)
    hers = alice.import_skill(unique("hers"))
    his = bob.import_skill(unique("his"))

    async def seen_by_bob(client: Any) -> Any:
        names = {s.frontmatter.name for s in await client.list_skills()}
        errors = []
        for attempt in (
            client.get_skill(f"skill://{hers}/SKILL.md"),
            client.read_resource(f"skill://{hers}/SKILL.md"),
        ):
            with pytest.raises(MCPError) as caught:
                await attempt
            errors.append(caught.value.error.message)
        own = await client.read_resource(f"skill://{his}/SKILL.md")
        return names, errors, own

    names, errors, own = using(skills_client(served, bob.agent), seen_by_bob)
    assert his in names and hers not in names
    assert errors[0] == f"Unknown skill URI: skill://{hers}/SKILL.md"
    assert hers in errors[1] and "skill_not_found" in errors[1]
    assert own[0].text.startswith(f"---\nname: {his}\n")


def test_a_host_without_the_extension_lists_and_reads_the_files_as_resources(served):
    owner = Owner.create(served)
    name = unique("notes")
    files = notes_files(name)
    owner.import_skill(name)

    async def browsed(client: Any) -> Any:
        resources = (await client.list_resources()).resources
        ours = [r for r in resources if r.uri.startswith(f"skill://{name}/")]
        read = {r.uri: (await client.read_resource(r.uri)).contents[0] for r in ours}
        templates = (await client.list_resource_templates()).resource_templates
        return ours, read, templates

    ours, read, templates = using(mcp_client(served, owner.agent, mode="legacy"), browsed)
    assert {r.uri for r in ours} == {f"skill://{name}/{path}" for path in files}
    for resource in ours:
        path = resource.uri.removeprefix(f"skill://{name}/")
        served = served_bytes(read[resource.uri])
        assert resource.size == len(served)
        assert served == files[path] or path == "SKILL.md"  # SKILL.md: as the extension reads it
    assert read[f"skill://{name}/assets/logo.bin"].blob
    assert [t.uri_template for t in templates] == [
        "skill://{name}/{path}", "skillfleet://files/{id}",
    ]  # fmt: skip


def test_a_listening_client_hears_resources_list_changed_when_its_owner_adds_a_skill(served):
    owner = Owner.create(served)

    async def heard(client: Any) -> Any:
        async with client.listen(resources_list_changed=True) as subscription:
            await anyio.to_thread.run_sync(owner.import_skill, unique("mine"))
            with anyio.fail_after(120):
                event = await subscription.__anext__()
            return subscription.honored, event

    honored, event = using(mcp_client(served, owner.agent), heard)
    assert honored.resources_list_changed is True
    assert type(event).__name__ == "ResourcesListChanged"


def changes_heard(owner: Owner) -> Any:
    """A handshake-era client's scenario: the resources capability it was offered, and the
    first notification it hears after its owner adds a skill."""
    heard: list[Any] = []

    async def handled(message: Any) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            heard.append(message)

    async def scenario(connected: Any) -> Any:
        await connected.list_resources()  # the GET stream is open by the time this returns
        await anyio.to_thread.run_sync(owner.import_skill, unique("mine"))
        with anyio.fail_after(60):
            while not heard:
                await anyio.sleep(0.05)
        return connected.server_capabilities.resources, heard[0]

    return scenario, handled


@pytest.mark.parametrize("way", ["http", "stdio"])
def test_a_handshake_era_client_hears_resources_list_changed_when_its_owner_adds_a_skill(
    served, way
):
    owner = Owner.create(served)
    scenario, handled = changes_heard(owner)
    options = {"mode": "legacy", "message_handler": handled}
    if way == "http":
        client = mcp_client(served, owner.agent, **options)
    else:
        client = stdio_client(served, owner.agent, **options)
    offered, event = using(client, scenario)
    assert offered.list_changed is True
    assert event.method == "notifications/resources/list_changed"


def test_a_sessions_stream_needs_its_token_and_ends_with_it(served):
    owner = Owner.create(served)
    url = f"{served.url}/mcp"
    events = {"Accept": "text/event-stream", "Mcp-Session-Id": "test-host-0123456789abcdef"}
    with httpx.Client(verify=TLS, timeout=30) as http:
        assert http.get(url, headers=events).status_code == 401
        bad = {**events, "Authorization": "Bearer nope"}
        assert http.get(url, headers=bad).status_code == 401
        no_session = {"Accept": "text/event-stream", "Authorization": f"Bearer {owner.agent}"}
        assert http.get(url, headers=no_session).status_code == 405
        mine = {**events, "Authorization": f"Bearer {owner.agent}"}
        assert http.get(url, headers={**mine, "Accept": "application/json"}).status_code == 406
        with http.stream("GET", url, headers=mine) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            with owner.rest() as rest:  # the owner deletes the agent's token: the stream ends
                tokens = rest.get("/api/tokens").json()
                agent = next(t for t in tokens if t["role"] == "agent")
                assert rest.delete(f"/api/tokens/{agent['id']}").status_code == 204
            ended = b"".join(stream.iter_bytes())
        assert b"list_changed" not in ended


def test_the_stdio_server_gives_the_same_manifests_as_mcp(served):
    owner = Owner.create(served)
    name = owner.import_skill(unique("notes"))
    # Only the API's address and a token: the stdio server is a client of the API.
    env = {k: v for k, v in served.env.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.pop("SKILLFLEET_DATA_DIR", None)
    env["SKILLFLEET_TOKEN"] = owner.agent
    stdio = StdioTransport(sys.executable, ["-m", "skillfleet", "mcp"], env=env)
    over_stdio = fastmcp.Client(stdio, extensions=[SkillsClientExtension()])

    async def ours(client: Any) -> Any:
        return await client.get_skill(f"skill://{name}/SKILL.md")

    assert using(over_stdio, ours) == using(skills_client(served, owner.agent), ours)


def loads(name: str, meta: dict[str, str] | None = None) -> Any:
    """A scenario: load_skill of `name` (with `meta` as the request's _meta), its result."""

    async def loaded(connected: Any) -> Any:
        result = await connected.call_tool("load_skill", {"skill_name": name}, meta=meta)
        assert not result.is_error, result
        return result.structured_content

    return loaded


@pytest.mark.parametrize("way", ["modern", "legacy", "stdio"])
def test_every_conversation_of_a_client_gets_the_skill_s_content_from_load_skill(served, way):
    owner = Owner.create(served)
    name = owner.import_skill(unique("notes"))

    def conversation() -> Any:
        if way == "stdio":
            return stdio_client(served, owner.agent, name="Claude Desktop")
        mode = "auto" if way == "modern" else "legacy"
        return mcp_client(served, owner.agent, name="Claude Desktop", mode=mode)

    async def twice(client: Any) -> Any:  # a host's one process may serve many conversations
        return [await loads(name)(client), await loads(name)(client)]

    first = using(conversation(), twice)
    second = using(conversation(), twice)

    for answer in (*first, *second):
        assert "already_loaded" not in answer
        assert answer["content"].startswith(f'<skill_content name="{name}">')
        assert "Skill directory: ../skill" in answer["content"]


def test_a_host_that_names_its_turn_gets_already_loaded_for_a_repeat_in_that_turn(served):
    owner = Owner.create(served)
    name = owner.import_skill(unique("notes"))
    turn = {"skillfleet/turn_id": f"t-{uuid.uuid4().hex[:6]}"}
    next_turn = {"skillfleet/turn_id": f"t-{uuid.uuid4().hex[:6]}"}

    async def three_loads(client: Any) -> Any:
        return [await loads(name, meta)(client) for meta in (turn, turn, next_turn)]

    first, repeat, later = using(mcp_client(served, owner.agent), three_loads)
    assert first["content"].startswith(f'<skill_content name="{name}">')
    assert repeat["already_loaded"] is True and "content" not in repeat
    assert later["content"] == first["content"]


def schema_files(name: str) -> dict[str, bytes]:
    """A skill whose header holds a parameters_schema mapping, as skillfleet reads it."""
    metadata = {
        "skillfleet.tier": "read",
        "parameters_schema": {"type": "object", "properties": {"pdf": {"type": "string"}}},
    }
    return {
        "SKILL.md": skill_md(name, license="MIT", metadata=metadata).encode(),
        "scripts/show.py": b"print('notes')\n",
        "references/guide.md": b"# Guide\n",
    }


def fetched_into(folder: Path, skills: list[str]) -> Any:
    """A host's scenario: each skill's manifest, and every file of it read as a resource and
    written where the host keeps skills (`folder/<name>/<path>`)."""

    async def fetched(client: Any) -> Any:
        entries = {}
        for name in skills:
            entry = await client.get_skill(f"skill://{name}/SKILL.md")
            for resource in entry.resources:
                path = folder / name / resource.uri.removeprefix(f"skill://{name}/")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(served_bytes((await client.read_resource(resource.uri))[0]))
            entries[name] = entry
        return entries

    return fetched


def read_by_fastmcp(folder: Path, skills: list[str]) -> Any:
    """What fastmcp's own skills server makes of the files a host fetched: each skill's entry
    as its SkillsDirectoryProvider reads and checks them (SKILL.md's frontmatter, the name)."""
    provider = SkillsDirectoryProvider(folder, experimental_skills=True)
    server = fastmcp.FastMCP("host-copy", providers=[provider])
    server.add_extension(SkillsExtension(providers=[provider]))
    client = fastmcp.Client(server, extensions=[SkillsClientExtension()])

    async def entries(connected: Any) -> Any:
        return {name: await connected.get_skill(f"skill://{name}/SKILL.md") for name in skills}

    return using(client, entries)


def test_fastmcp_reads_every_skill_a_host_fetched_as_the_manifest_says(served, tmp_path):
    owner = Owner.create(served)
    with_schema = unique("schema")
    with owner.rest() as rest:
        upload = io.BytesIO(zip_bytes(schema_files(with_schema), top=with_schema))
        assert rest.post("/api/skills", files={"file": ("s.zip", upload)}).status_code == 201
    renamed = owner.import_skill(unique("declared"), name=unique("installed"))
    plain = unique("plain")
    plain_md = skill_md(plain, license="MIT").encode()
    with owner.rest() as rest:
        upload = io.BytesIO(zip_bytes({"SKILL.md": plain_md}, top=plain))
        assert rest.post("/api/skills", files={"file": ("s.zip", upload)}).status_code == 201
    bare = unique("bare")  # SKILL.md without front matter: the lenient reading names it
    with owner.rest() as rest:
        upload = io.BytesIO(zip_bytes({"SKILL.md": b"Keeps notes of meetings.\n"}, top=bare))
        assert rest.post("/api/skills", files={"file": ("s.zip", upload)}).status_code == 201
    skills = [with_schema, renamed, plain, bare]

    fetched = using(skills_client(served, owner.agent), fetched_into(tmp_path, skills))
    read = read_by_fastmcp(tmp_path, skills)

    for name in skills:
        assert read[name].frontmatter == fetched[name].frontmatter, name
        assert read[name].resources == fetched[name].resources, name
    assert fetched[renamed].frontmatter.name == renamed
    assert fetched[bare].frontmatter.root == {
        "name": bare,
        "description": "Keeps notes of meetings.",
    }
    assert fetched[with_schema].frontmatter.metadata == {
        "skillfleet.tier": "read",
        "parameters_schema": '{"type": "object", "properties": {"pdf": {"type": "string"}}}',
    }
    # A skill whose header the extension takes as written is served byte for byte.
    assert (tmp_path / plain / "SKILL.md").read_bytes() == plain_md
