"""The owner's skills as MCP resources and through the Skills extension (SEP-2640).

Each file of each skill the caller may use (enabled, owned or shared: GET /api/skills) is the
resource `skill://<name>/<path>`. Hosts that speak the extension (`io.modelcontextprotocol/
skills`) get every skill's manifest from `skills/list` and `skills/get`: its SKILL.md header and
every file with its `sha256:` digest and size. Hosts that don't still list and read the same
files as resources (and through the tools). A host reads SKILL.md's frontmatter as the
extension requires it (a string for each `metadata` value, `name` the name in the URI); where
the header as written is not that (a `parameters_schema` mapping, a skill installed under
another name, a header only skillfleet's lenient reading takes), `skill://<name>/SKILL.md` is
served with the manifest's frontmatter over the same body, and the manifest's digest is of
those bytes. The stored file, its content hash and the REST routes keep the bytes uploaded.

Everything is read through the REST routes with the caller's token, so the API decides who
sees what; a file is read by GET /api/skills/<name>/files/<path>, whose path is confined by the
same code as a `read_skill_resource` call (`store/resources.py`), after the gateway has checked
it the same way. A manifest is built from the bytes those routes serve, so its digests are
those of what `resources/read` returns; it is kept by the skill's content hash, and only when
the bytes read hash to it (a skill edited meanwhile is read again next time).

Changes: a client hears `notifications/resources/list_changed` when the set of the caller's
skills or any skill's content changes: on a `subscriptions/listen` stream that asks for
`resources_list_changed` (protocol 2026-07-28), on the session's GET stream of `/mcp` or on the
stdio connection (handshake-era protocols). Each looks again when woken (`Wakeup`: in the API,
by any process's change to a skill or token, api/asgi.py) and every `poll` seconds regardless.
"""

from __future__ import annotations

import base64
import json
import mimetypes
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import anyio
import mcp_types as types
import structlog
import yaml
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourcesListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from api.mcp.rest import Rest, RestError
from store.errors import SkillInvalid, StoreError
from store.frontmatter import read_loose
from store.hashing import file_digest, hash_entries
from store.resources import check_relative_path
from store.skillmd import read_skill_md

log = structlog.get_logger(__name__)

EXTENSION = "io.modelcontextprotocol/skills"
SCHEME = "skill"
SKILL_MD = "SKILL.md"
LIST_POLL = 3.0  # seconds between two looks at a listening caller's skills, unless woken
MANIFESTS_KEPT = 512  # manifests kept in memory, by skill name and content hash
SKILLS_PER_PAGE = 50  # skills whose files make one page of resources/list
# Manifests built at once, and files each reads at once: at most 16 requests of one caller.
SKILLS_AT_ONCE = 4
FILES_AT_ONCE = 4
TEMPLATE = types.ResourceTemplate(
    name="skill-file",
    uri_template="skill://{name}/{path}",
    description="A file of one of your skills: SKILL.md, scripts/…, references/…, assets/…",
)


class GetSkillParams(types.RequestParams):
    """Parameters of `skills/get`: the URI of the skill's SKILL.md."""

    uri: str


@dataclass(frozen=True)
class SkillFile:
    path: str
    digest: str  # lowercase hex SHA-256 of its bytes
    size: int


@dataclass(frozen=True)
class Manifest:
    """One skill as the extension shows it: its header and its files."""

    name: str
    header: dict[str, Any]
    files: tuple[SkillFile, ...]

    @property
    def uri(self) -> str:
        return skill_uri(self.name, SKILL_MD)

    def entry(self) -> dict[str, Any]:
        """The skill's entry of `skills/list` and `skills/get`."""
        resources = [
            {"uri": skill_uri(self.name, f.path), "digest": f"sha256:{f.digest}", "size": f.size}
            for f in self.files
        ]
        return {"uri": self.uri, "frontmatter": self.header, "resources": resources}

    def resources(self) -> list[types.Resource]:
        return [
            types.Resource(
                uri=skill_uri(self.name, f.path),
                name=f"{self.name}/{f.path}",
                mime_type=mime_type(f.path),
                size=f.size,
                description=self.header.get("description") if f.path == SKILL_MD else None,
            )
            for f in self.files
        ]


def skill_uri(name: str, path: str) -> str:
    return f"{SCHEME}://{name}/{quote(path, safe='/')}"


def parse_uri(uri: str) -> tuple[str, str]:
    """The skill's name and the file's clean relative path a `skill://` URI names; an
    MCPError for any other URI, or a path `read_skill_resource` would refuse."""
    parts = urlsplit(uri)
    if parts.scheme != SCHEME or not parts.netloc or parts.query or parts.fragment:
        raise MCPError(INVALID_PARAMS, f"Not a skill file's URI: {uri!r} (skill://<name>/<path>).")
    try:
        path = check_relative_path(unquote(parts.path.removeprefix("/")))
    except StoreError as e:
        raise MCPError(INVALID_PARAMS, str(e)) from e
    return parts.netloc, path


def mime_type(path: str) -> str:
    guessed = mimetypes.guess_type(path)[0]
    if path.endswith(".md"):
        return "text/markdown"
    return guessed or "application/octet-stream"


def wire_header(header: dict[str, Any], name: str, description: str) -> dict[str, Any]:
    """SKILL.md's header as written, in JSON. Three things the extension requires differ:
    `name` is the name the skill is installed under; a `metadata` value that is not a string
    (a `parameters_schema` mapping) is its JSON text, which skillfleet reads the same way; a
    value JSON has no type for (a YAML date) is its text."""
    shown: dict[str, Any] = json.loads(json.dumps(header, default=str, ensure_ascii=False))
    shown["name"] = name
    if not isinstance(shown.get("description"), str) or not shown["description"].strip():
        shown["description"] = description
    metadata = shown.get("metadata")
    if isinstance(metadata, dict):
        shown["metadata"] = {
            str(key): value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            for key, value in metadata.items()
        }
    elif "metadata" in shown:
        del shown["metadata"]
    return shown


def served_skill_md(data: bytes, name: str, description: str | None) -> bytes:
    """SKILL.md as `resources/read` serves it: as uploaded when its header is what the
    extension requires (`wire_header`), else that header over the same body. `description`
    stands in for a header without one; None when it is not known (`lacks_description`)."""
    try:
        loose = read_loose(data)
    except SkillInvalid:
        return data  # unreadable here as everywhere: served as it is
    shown = wire_header(loose.header, name, description or name)
    if _as_written(data, shown):
        return data
    front = yaml.safe_dump(shown, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return f"---\n{front}---\n\n{loose.body}".encode()


def lacks_description(data: bytes) -> bool:
    """Whether SKILL.md's header holds no description of its own (the index has one)."""
    try:
        written = read_loose(data).header.get("description")
    except SkillInvalid:
        return True
    return not (isinstance(written, str) and written.strip())


def _as_written(data: bytes, shown: dict[str, Any]) -> bool:
    """Whether SKILL.md's front matter reads, strictly, as the header `shown`."""
    try:
        header, _body = read_skill_md(data)
    except SkillInvalid:
        return False
    return bool(json.loads(json.dumps(header, default=str, ensure_ascii=False)) == shown)


class Catalog:
    """Builds the caller's manifests through REST, keeping each by the skill's name and content
    hash (a manifest is a function of those alone, so callers who see the same skill share it;
    each still sees only what GET /api/skills shows it)."""

    def __init__(self, kept: int = MANIFESTS_KEPT) -> None:
        self.kept = kept
        self.manifests: OrderedDict[tuple[str, str], Manifest] = OrderedDict()

    async def all(self, rest: Rest) -> list[Manifest]:
        """A manifest for each enabled skill the caller may use, by name."""
        summaries = sorted(await rest.skills(), key=lambda s: str(s["name"]))
        found: list[Manifest | None] = [None] * len(summaries)
        limiter = anyio.CapacityLimiter(SKILLS_AT_ONCE)

        async def build(index: int, summary: dict[str, Any]) -> None:
            async with limiter:
                found[index] = await self.of(rest, summary)

        async with anyio.create_task_group() as group:
            for index, summary in enumerate(summaries):
                group.start_soon(build, index, summary)
        return [manifest for manifest in found if manifest is not None]

    async def named(self, rest: Rest, name: str) -> Manifest | None:
        """The manifest of the skill `name`, or None when the caller has no enabled one."""
        try:
            summary = await rest.skill(name)
        except RestError as e:
            if e.http_status == 404:
                return None
            raise
        return await self.of(rest, summary) if summary.get("enabled") else None

    async def of(self, rest: Rest, summary: dict[str, Any]) -> Manifest:
        """The manifest of a skill as GET /api/skills shows it."""
        content_hash = str(summary["hash"])
        key = (str(summary["name"]), content_hash)
        kept = self.manifests.get(key)
        if kept is not None:
            self.manifests.move_to_end(key)
            return kept
        manifest, read_hash = await _read(rest, summary)
        if read_hash == content_hash:
            self.manifests[key] = manifest
            while len(self.manifests) > self.kept:
                self.manifests.popitem(last=False)
        return manifest


async def _read(rest: Rest, summary: dict[str, Any]) -> tuple[Manifest, str]:
    """A skill's manifest from the bytes the API serves, and the content hash of those bytes."""
    name = str(summary["name"])
    listed = [str(f["path"]) for f in (await rest.skill(name))["files"]]
    contents: dict[str, bytes] = {}
    limiter = anyio.CapacityLimiter(FILES_AT_ONCE)

    async def fetch(path: str) -> None:
        async with limiter:
            contents[path] = await rest.skill_file(name, path)

    async with anyio.create_task_group() as group:
        for path in listed:
            group.start_soon(fetch, path)
    description = str(summary.get("description") or name)
    served = dict(contents)
    served[SKILL_MD] = served_skill_md(contents.get(SKILL_MD, b""), name, description)
    files = tuple(SkillFile(p, file_digest(served[p]), len(served[p])) for p in listed)
    try:
        header = read_loose(served[SKILL_MD]).header
    except SkillInvalid:
        header = {}
    manifest = Manifest(name, wire_header(header, name, description), files)
    return manifest, hash_entries(contents.items())


CallerRest = Callable[[ServerRequestContext[Any, Any]], Rest]


class Wakeup:
    """Wakes every watcher at once (something may have changed), or each after `every`
    seconds when nothing does. Wakings are counted, so a watcher busy looking when one came
    looks again at once."""

    def __init__(self, every: float = LIST_POLL) -> None:
        self.every = every
        self.count = 0
        self._event = anyio.Event()

    def wake(self) -> None:
        self.count += 1
        self._event.set()
        self._event = anyio.Event()

    async def wait(self, seen: int) -> int:
        """Return once woken after the waking numbered `seen` (at once if that happened
        already), or after `every` seconds; gives the number to pass next time."""
        if self.count == seen:
            with anyio.move_on_after(self.every):
                await self._event.wait()
        return self.count


class SkillResources:
    """The request handlers: resources, `skills/list`, `skills/get`, `subscriptions/listen`."""

    def __init__(self, rest_of: CallerRest, wakeup: Wakeup | None = None) -> None:
        self.rest_of = rest_of
        self.wakeup = wakeup or Wakeup()
        self.catalog = Catalog()

    async def list_skills(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        manifests = await self._all(ctx)
        return {"skills": [m.entry() for m in manifests], "ttlMs": 0, "cacheScope": "private"}

    async def get_skill(
        self, ctx: ServerRequestContext[Any, Any], params: GetSkillParams
    ) -> dict[str, Any]:
        name, path = parse_uri(params.uri)
        manifest = await self._named(ctx, name) if path == SKILL_MD else None
        if manifest is None or manifest.uri != params.uri:
            raise MCPError(INVALID_PARAMS, f"Unknown skill URI: {params.uri}")
        return {"skill": manifest.entry(), "ttlMs": 0, "cacheScope": "private"}

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        cursor = params.cursor if params is not None else None
        start = int(cursor) if cursor and cursor.isdigit() else 0
        manifests = await self._all(ctx)
        page = manifests[start : start + SKILLS_PER_PAGE]
        after = start + SKILLS_PER_PAGE
        return types.ListResourcesResult(
            resources=[resource for m in page for resource in m.resources()],
            next_cursor=str(after) if after < len(manifests) else None,
        )

    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[TEMPLATE])

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        name, path = parse_uri(params.uri)
        rest = self.rest_of(ctx)
        try:
            data = await rest.skill_file(name, path)
            if path == SKILL_MD:
                data = served_skill_md(data, name, await _description(rest, name, data))
        except RestError as e:
            raise MCPError(INVALID_PARAMS, f"{e.message} ({e.code})") from e
        return types.ReadResourceResult(contents=[contents(params.uri, path, data)])

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """One listen stream, told when the caller's skills change (the SDK's handler
        acknowledges, stamps and filters; this only publishes to the stream's own bus)."""
        bus = InMemorySubscriptionBus()
        handler = ListenHandler(bus, max_subscriptions=1)
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch, self.rest_of(ctx), bus, handler)
            try:
                result = await handler(ctx, params)
            finally:
                group.cancel_scope.cancel()
        return result

    async def _watch(
        self, rest: Rest, bus: InMemorySubscriptionBus, handler: ListenHandler
    ) -> None:
        async for _ in self.changes(rest):
            await bus.publish(ResourcesListChanged())
        handler.close()  # the token is gone: end the stream

    async def changes(self, rest: Rest) -> AsyncIterator[None]:
        """Once for each change of the caller's skills; ends when its token is gone."""
        woken = self.wakeup.count
        seen = await _state(rest)
        while True:
            woken = await self.wakeup.wait(woken)
            try:
                now = await _state(rest)
            except RestError as e:
                if e.http_status in (401, 403):
                    return
                log.info("mcp listen: skills not read", code=e.code)
                continue
            if now != seen:
                seen = now
                yield None

    async def _all(self, ctx: ServerRequestContext[Any, Any]) -> list[Manifest]:
        try:
            return await self.catalog.all(self.rest_of(ctx))
        except RestError as e:
            raise MCPError(INVALID_PARAMS, f"{e.message} ({e.code})") from e

    async def _named(self, ctx: ServerRequestContext[Any, Any], name: str) -> Manifest | None:
        try:
            return await self.catalog.named(self.rest_of(ctx), name)
        except RestError as e:
            raise MCPError(INVALID_PARAMS, f"{e.message} ({e.code})") from e


async def _description(rest: Rest, name: str, data: bytes) -> str | None:
    """The description a served SKILL.md's header needs: its own, else the index's."""
    if not lacks_description(data):
        return None
    return str((await rest.skill(name)).get("description") or name)


async def _state(rest: Rest) -> frozenset[tuple[str, str]]:
    """What a change of the caller's resources changes: each enabled skill's name and hash."""
    return frozenset((str(s["name"]), str(s["hash"])) for s in await rest.skills())


def contents(
    uri: str, path: str, data: bytes
) -> types.TextResourceContents | types.BlobResourceContents:
    """A file's bytes as MCP content: text when they are UTF-8 (so the text's UTF-8 bytes are
    the file's, digest and all), base64 otherwise."""
    kind = mime_type(path)
    try:
        return types.TextResourceContents(uri=uri, mime_type=kind, text=data.decode("utf-8"))
    except UnicodeDecodeError:
        blob = base64.b64encode(data).decode("ascii")
        return types.BlobResourceContents(uri=uri, mime_type=kind, blob=blob)
