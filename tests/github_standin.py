"""A local HTTP server that answers like GitHub's contents API, for import tests."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from store.limits import MAX_FILES, MIB

SKILL_MD = b"---\nname: demo\ndescription: A demo skill.\n---\nHello.\n"
REF = "main"


@dataclass(frozen=True)
class Blob:
    """A file of the stand-in repository; `listed_size`/`listed_path` let the listing lie."""

    data: bytes
    listed_size: int | None = None
    listed_path: str | None = None


@dataclass(frozen=True)
class Special:
    """A symlink or submodule entry."""

    kind: str


Node = Blob | Special

PUBLIC_SKILLS = Path(__file__).parent / "fixtures" / "public-skills"


def public_skill_files() -> dict[str, bytes]:
    """Two of the public-skill fixtures, by their path under the collection's skills/."""
    return {
        f"{folder}/{path.relative_to(PUBLIC_SKILLS / folder).as_posix()}": path.read_bytes()
        for folder in ("commit-helper", "pdf")
        for path in sorted((PUBLIC_SKILLS / folder).rglob("*"))
        if path.is_file()
    }


DEMO = {
    "skills/demo/SKILL.md": Blob(SKILL_MD),
    "skills/demo/scripts/run.py": Blob(b"print('hi')\n"),
    "skills/demo/references/deep/notes.md": Blob(b"# Notes\n"),
    "skills/demo/assets/all-bytes.bin": Blob(bytes(range(256)) * 4),
}

REPOS: dict[tuple[str, str], dict[str, Node]] = {
    ("octo", "skills"): {
        **DEMO,
        "skills/linked/SKILL.md": Blob(SKILL_MD),
        "skills/linked/evil": Special("symlink"),
        "skills/sub/SKILL.md": Blob(SKILL_MD),
        "skills/sub/vendored": Special("submodule"),
        "skills/huge/SKILL.md": Blob(SKILL_MD),
        "skills/huge/big.bin": Blob(b"small really", listed_size=2 * MIB),
        "skills/liar/SKILL.md": Blob(SKILL_MD),
        "skills/liar/small.txt": Blob(b"x" * 100_000, listed_size=10),
        "skills/escape/SKILL.md": Blob(SKILL_MD),
        "skills/escape/x.txt": Blob(b"x", listed_path="elsewhere/x.txt"),
        "skills/cased/SKILL.md": Blob(SKILL_MD),
        "skills/cased/skill.md": Blob(SKILL_MD),
        "skills/many/SKILL.md": Blob(SKILL_MD),
        **{f"skills/many/f{i}.txt": Blob(b"x") for i in range(MAX_FILES)},
    },
    ("octo", "rootskill"): {"SKILL.md": Blob(SKILL_MD), "scripts/a.sh": Blob(b"echo a\n")},
    ("octo", "collection"): {
        "README.md": Blob(b"# A collection of skills\n"),
        "docs/demo.mp4": Blob(b"never downloaded", listed_size=80 * MIB),
        **{f"skills/{path}": Blob(data) for path, data in public_skill_files().items()},
        "skills/linked/SKILL.md": Blob(b"---\nname: linked\ndescription: Links.\n---\n"),
        "skills/linked/evil": Special("symlink"),
    },
}


@dataclass(frozen=True)
class Seen:
    path: str
    accept: str
    authorization: str | None
    user_agent: str


class StandIn(ThreadingHTTPServer):
    requests: list[Seen]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def downloads(self) -> list[str]:
        return [seen.path for seen in self.requests if seen.accept.endswith(".raw")]


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def listing_entry(path: str, node: Node | None) -> dict[str, object]:
    name = path.rsplit("/", 1)[-1]
    if node is None:
        return {"type": "dir", "name": name, "path": path, "size": 0}
    if isinstance(node, Special) and node.kind == "submodule":
        # Like GitHub: a submodule is listed as a file that has no download URL.
        return {"type": "file", "name": name, "path": path, "size": 0, "download_url": None}
    if isinstance(node, Special):
        return {"type": node.kind, "name": name, "path": path, "size": 0}
    size = len(node.data) if node.listed_size is None else node.listed_size
    listed_path = node.listed_path or path
    return {
        "type": "file",
        "name": name,
        "path": listed_path,
        "size": size,
        "download_url": f"https://raw.githubusercontent.com/octo/skills/main/{listed_path}",
    }


def answer_contents(files: dict[str, Node], path: str, raw: bool) -> Answer:
    node = files.get(path)
    if isinstance(node, Blob):
        if raw:
            return Answer(200, node.data)
        return Answer(200, json.dumps(listing_entry(path, node)).encode())
    prefix = f"{path}/" if path else ""
    children: dict[str, Node | None] = {}
    for key, child in files.items():
        if key.startswith(prefix):
            head, _, rest = key[len(prefix) :].partition("/")
            children[prefix + head] = None if rest else child
    if not children:
        return Answer(404, b'{"message": "Not Found"}')
    listing = [listing_entry(child, node) for child, node in sorted(children.items())]
    return Answer(200, json.dumps(listing).encode())


def answer(path: str, query: str, raw: bool) -> Answer:
    match = re.fullmatch(r"/repos/([^/]+)/([^/]+)/contents(?:/(.*))?", path)
    if match is None:
        return Answer(404, b'{"message": "Not Found"}')
    owner, repo, inner = match.group(1), match.group(2), unquote(match.group(3) or "")
    if repo == "limited":
        limited = {"x-ratelimit-remaining": "0"}
        return Answer(403, b'{"message": "API rate limit exceeded"}', limited)
    if repo == "broken":
        return Answer(500, b'{"message": "Server Error"}')
    files = REPOS.get((owner, repo))
    if files is None or parse_qs(query).get("ref") != [REF]:
        return Answer(404, b'{"message": "Not Found"}')
    return answer_contents(files, inner.removesuffix("/"), raw)


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        accept = self.headers.get("Accept", "")
        self.server.requests.append(
            Seen(url.path, accept, self.headers.get("Authorization"), self.headers["User-Agent"])
        )
        reply = answer(url.path, url.query, accept == "application/vnd.github.raw")
        self.send_response(reply.status)
        for name, value in {"Content-Length": str(len(reply.body)), **reply.headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: object) -> None:
        """Keeps test output quiet."""


@contextmanager
def serve() -> Iterator[StandIn]:
    """Run the stand-in on a free loopback port for the length of the block."""
    server = StandIn(("127.0.0.1", 0), Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
