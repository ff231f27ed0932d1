"""GitHub import against a local HTTP server that answers like GitHub's contents API."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from store.errors import ArchiveUnsafe, ImportFailed, InvalidSource, SkillTooLarge, StoreError
from store.github import GitHubFolder, fetch_github_folder, parse_github_url
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


@pytest.fixture
def github() -> Iterator[StandIn]:
    server = StandIn(("127.0.0.1", 0), Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    staging = tmp_path / "staging"
    staging.mkdir()
    return staging


def fetch(github: StandIn, url: str, dest: Path, token: str | None = None) -> Path:
    return fetch_github_folder(parse_github_url(url), dest, api_base=github.base_url, token=token)


def assert_refused(
    github: StandIn, url: str, dest: Path, error: type[StoreError], *words: str
) -> StoreError:
    with pytest.raises(error) as caught:
        fetch(github, url, dest)
    for word in words:
        assert word in caught.value.message, caught.value.message
    assert list(dest.iterdir()) == [], "a refused import must leave nothing behind"
    return caught.value


def tree(url: str) -> str:
    return f"https://github.com/octo/skills/tree/{REF}/{url}"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (tree("skills/demo"), GitHubFolder("octo", "skills", "main", "skills/demo")),
        (tree("skills/demo/"), GitHubFolder("octo", "skills", "main", "skills/demo")),
        ("https://github.com/octo/skills/tree/main", GitHubFolder("octo", "skills", "main", "")),
        ("https://github.com/o-1/r.e_p-o/tree/v1.2/a", GitHubFolder("o-1", "r.e_p-o", "v1.2", "a")),
        (tree("my%20skill"), GitHubFolder("octo", "skills", "main", "my skill")),
    ],
)
def test_github_folder_addresses_are_parsed(url: str, expected: GitHubFolder) -> None:
    assert parse_github_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/octo/skills/blob/main/skills/demo/SKILL.md",
        "https://raw.githubusercontent.com/octo/skills/main/skills/demo/SKILL.md",
        "http://github.com/octo/skills/tree/main/skills/demo",
        "https://gitlab.com/octo/skills/tree/main/skills/demo",
        "https://github.com.evil.example/octo/skills/tree/main/skills/demo",
        "https://user@github.com/octo/skills/tree/main/skills/demo",
        "https://github.com:8443/octo/skills/tree/main/skills/demo",
        "https://github.com/octo/skills",
        "https://github.com/octo/skills/tree",
        "https://github.com/octo/skills/tree/main/skills/demo?x=1",
        "https://github.com/octo/skills/tree/main/skills/demo#readme",
        "https://github.com/octo/skills/tree/main/skills/../secrets",
        "https://github.com/octo/skills/tree/main/skills//demo",
        "https://github.com/octo/skills/tree/main/a%2Fb",
        "https://github.com/-octo/skills/tree/main/skills",
        "https://github.com/octo/sk~ills/tree/main/skills",
        "https://github.com/octo/skills/tree/bad..ref/skills",
        "ftp://github.com/octo/skills/tree/main/skills",
        "not a url",
        "",
    ],
)
def test_addresses_other_than_github_folders_are_refused(url: str) -> None:
    with pytest.raises(InvalidSource) as caught:
        parse_github_url(url)
    assert caught.value.code == "invalid_source"
    assert caught.value.message.startswith("Only GitHub folder addresses like https://github.com/")


def test_import_reproduces_the_exact_files_of_the_folder(github: StandIn, dest: Path) -> None:
    root = fetch(github, tree("skills/demo"), dest)
    assert root == dest / "demo"
    got = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    want = {key.removeprefix("skills/demo/"): node.data for key, node in DEMO.items()}
    assert got == want


def test_import_of_a_repository_root_is_named_after_the_repository(
    github: StandIn, dest: Path
) -> None:
    root = fetch(github, "https://github.com/octo/rootskill/tree/main", dest)
    assert root == dest / "rootskill"
    assert (root / "scripts" / "a.sh").read_bytes() == b"echo a\n"


def test_import_requests_stay_on_the_base_url_and_name_skillfleet(
    github: StandIn, dest: Path
) -> None:
    fetch(github, tree("skills/demo"), dest)
    assert github.requests, "the stand-in must have been asked"
    assert {seen.user_agent for seen in github.requests} == {"skillfleet"}
    assert {seen.authorization for seen in github.requests} == {None}
    assert sorted(github.downloads()) == sorted(f"/repos/octo/skills/contents/{k}" for k in DEMO)


def test_import_with_a_token_sends_it_as_bearer(github: StandIn, dest: Path) -> None:
    fetch(github, tree("skills/demo"), dest, token="t0ken")
    assert {seen.authorization for seen in github.requests} == {"Bearer t0ken"}


@pytest.mark.parametrize(("folder", "kind"), [("linked", "symlink"), ("sub", "submodule")])
def test_folder_with_symlink_or_submodule_is_refused(
    github: StandIn, dest: Path, folder: str, kind: str
) -> None:
    assert_refused(github, tree(f"skills/{folder}"), dest, ArchiveUnsafe, kind)


def test_oversized_listing_is_refused_before_any_download(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/huge"), dest, SkillTooLarge, "big.bin", "1 MiB")
    assert github.downloads() == []


def test_folder_with_too_many_files_is_refused_before_any_download(
    github: StandIn, dest: Path
) -> None:
    assert_refused(github, tree("skills/many"), dest, SkillTooLarge, "200 files")
    assert github.downloads() == []


def test_file_larger_than_listed_is_refused_during_download(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/liar"), dest, ArchiveUnsafe, "small.txt", "larger")


def test_listing_entry_outside_the_folder_is_refused(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/escape"), dest, ArchiveUnsafe, "elsewhere/x.txt")


def test_folder_with_names_differing_only_in_case_is_refused(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/cased"), dest, ArchiveUnsafe, "differ only in case")


def test_unknown_folder_fails_with_a_clear_sentence(github: StandIn, dest: Path) -> None:
    error = assert_refused(github, tree("skills/nope"), dest, ImportFailed)
    assert error.code == "import_failed"
    assert error.message == "GitHub has no folder skills/nope at main in octo/skills."


def test_unknown_ref_fails_like_an_unknown_folder(github: StandIn, dest: Path) -> None:
    url = "https://github.com/octo/skills/tree/nobranch/skills/demo"
    assert_refused(github, url, dest, ImportFailed, "no folder skills/demo at nobranch")


def test_a_file_address_is_not_imported_as_a_folder(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/demo/SKILL.md"), dest, ImportFailed, "not a folder")


def test_rate_limit_fails_with_a_clear_sentence(github: StandIn, dest: Path) -> None:
    url = "https://github.com/octo/limited/tree/main/skills/demo"
    assert_refused(github, url, dest, ImportFailed, "rate limit", "token")


def test_server_error_fails_without_a_stack_trace(github: StandIn, dest: Path) -> None:
    url = "https://github.com/octo/broken/tree/main/skills/demo"
    error = assert_refused(github, url, dest, ImportFailed, "HTTP 500")
    assert "Traceback" not in error.message


def test_unreachable_github_fails_with_import_failed(dest: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    folder = parse_github_url(tree("skills/demo"))
    with pytest.raises(ImportFailed) as caught:
        fetch_github_folder(folder, dest, api_base=f"http://127.0.0.1:{closed_port}")
    assert "could not be reached" in caught.value.message
    assert list(dest.iterdir()) == []
