"""Import of a skill folder from GitHub through its REST contents API."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import httpx

from store.archive import SKILL_FILE, Parts, Staging, split_entry_name, write_tree
from store.bundles import (
    StagedSkill,
    bundle_whole,
    over_bundle_bytes,
    skill_folders,
    stage_members,
)
from store.errors import ArchiveUnsafe, ImportFailed, InvalidSource, SkillTooLarge, StoreError
from store.limits import KIB, MAX_BUNDLE_FOLDERS, MIB

DEFAULT_API_BASE = "https://api.github.com"
TIMEOUT_SECONDS = 10.0

_URL_MESSAGE = (
    "Only GitHub folder addresses like https://github.com/<owner>/<repo>/tree/<ref>/<path> "
    "can be imported."
)
_RATE_LIMITED = "GitHub's API rate limit was reached; try again later or configure a GitHub token."
_OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}")
_REPO = re.compile(r"[A-Za-z0-9._-]{1,100}")
_REF_FORBIDDEN = re.compile(r"[\s~^:?*\[\\]|\.\.|@\{")
_MAX_LISTING_BYTES = 2 * MIB
_MAX_ERROR_BYTES = 64 * KIB
_FILE_MODE = 0o644
_SPECIAL_KINDS = ("symlink", "submodule")
_DIR_MODE = 0o755


@dataclass(frozen=True)
class GitHubFolder:
    """A folder of a GitHub repository at a ref; `path` is "" for the repository root."""

    owner: str
    repo: str
    ref: str
    path: str


def parse_github_url(url: str) -> GitHubFolder:
    """Reads a GitHub folder address (`…/tree/<ref>/<path>`); anything else is InvalidSource."""
    parts = urlsplit(url.strip())
    if parts.scheme != "https" or parts.netloc.lower() != "github.com" or "?" in url or "#" in url:
        raise InvalidSource(_URL_MESSAGE)
    segments = [_decode_segment(segment) for segment in parts.path.removesuffix("/").split("/")]
    # A decoded "/" (%2F) would shift the owner/repo/ref/path positions.
    if any("/" in segment for segment in segments):
        raise InvalidSource(_URL_MESSAGE)
    if len(segments) < 5 or segments[0] != "" or segments[3] != "tree":
        raise InvalidSource(_URL_MESSAGE)
    folder = GitHubFolder(
        owner=segments[1], repo=segments[2], ref=segments[4], path="/".join(segments[5:])
    )
    _check_folder(folder)
    return folder


def _check_folder(folder: GitHubFolder) -> None:
    if not _OWNER.fullmatch(folder.owner) or not _REPO.fullmatch(folder.repo):
        raise InvalidSource(_URL_MESSAGE)
    if folder.repo in (".", "..") or not _is_valid_ref(folder.ref):
        raise InvalidSource(_URL_MESSAGE)
    if folder.path and any(not _is_valid_part(part) for part in folder.path.split("/")):
        raise InvalidSource(_URL_MESSAGE)


def _decode_segment(segment: str) -> str:
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError as e:
        raise InvalidSource(_URL_MESSAGE) from e


def _has_control(text: str) -> bool:
    return any(unicodedata.category(char) == "Cc" for char in text)


def _is_valid_ref(ref: str) -> bool:
    # git's own rules for ref names (git check-ref-format), minus the slash: ref is one segment.
    return not (
        not ref
        or _has_control(ref)
        or _REF_FORBIDDEN.search(ref)
        or ref.startswith(("-", "."))
        or ref.endswith((".", ".lock"))
        or ref == "@"
    )


def _is_valid_part(part: str) -> bool:
    if part in ("", ".", "..") or "\\" in part or "/" in part:
        return False
    return not _has_control(part)


def fetch_github_folder(
    folder: GitHubFolder,
    dest: Path,
    *,
    api_base: str = DEFAULT_API_BASE,
    token: str | None = None,
    client: httpx.Client | None = None,
) -> Path:
    """Downloads a GitHub folder into `dest/<last path segment or repo>/` and returns that folder.

    The listing is checked against the import limits before any file is downloaded, and every
    download is checked against its listed size. Nothing is written unless all of it passed.
    """
    _check_folder(folder)  # a hand-made GitHubFolder gets the same checks as a parsed address
    target = dest / (folder.path.rsplit("/", 1)[-1] if folder.path else folder.repo)
    api = _Api(folder, api_base.rstrip("/"), token, client)
    with api:
        staging, paths = _list_folder(api)
        files = {parts: api.download(paths[parts], staging.sizes[parts]) for parts in paths}
    write_tree(target, staging.dirs, files, dir_mode=_DIR_MODE, file_mode=_FILE_MODE)
    return target


def is_skill_folder(
    folder: GitHubFolder, *, api_base: str = DEFAULT_API_BASE, token: str | None = None
) -> bool:
    """Whether the GitHub folder holds SKILL.md itself (else it may hold skill folders)."""
    _check_folder(folder)
    with _Api(folder, api_base.rstrip("/"), token, None) as api:
        listing = api.list_dir(folder.path)
    return any(entry.get("name") == SKILL_FILE and entry.get("type") == "file" for entry in listing)


def fetch_github_skills(
    folder: GitHubFolder,
    dest: Path,
    *,
    api_base: str = DEFAULT_API_BASE,
    token: str | None = None,
    client: httpx.Client | None = None,
) -> list[StagedSkill]:
    """Downloads every skill folder inside a GitHub folder into its own folder under `dest`.

    The whole listing is checked before any download; a skill folder over the limits or
    holding a link or submodule is refused on its own, and files outside skill folders are
    never downloaded. Raises ArchiveUnsafe, ImportFailed or SkillTooLarge for the whole folder.
    """
    _check_folder(folder)
    specials: dict[Parts, str] = {}
    total = 0
    with _Api(folder, api_base.rstrip("/"), token, client) as api:
        # Files outside skill folders are never downloaded, so only their number is bounded.
        whole = bundle_whole(max_bytes=sys.maxsize)
        staging, paths = _list_folder(api, whole, specials, MAX_BUNDLE_FOLDERS)
        staged = []
        for index, skill in enumerate(skill_folders(paths)):
            label = "/".join(skill)
            inside = {parts[len(skill) :]: paths[parts] for parts in paths if _within(parts, skill)}
            try:
                _check_specials(skill, specials)
                checked = stage_members(_members(skill, staging, inside))
                total += sum(checked.sizes.values())
                too_large = over_bundle_bytes(total)
                if too_large is not None:
                    raise too_large
            except StoreError as e:
                staged.append(StagedSkill(label, error=e))
                continue
            files = {rel: api.download(inside[rel], checked.sizes[rel]) for rel in inside}
            target = dest / str(index) / skill[-1]
            target.parent.mkdir()
            write_tree(target, checked.dirs, files, dir_mode=_DIR_MODE, file_mode=_FILE_MODE)
            staged.append(StagedSkill(label, root=target))
    return staged


def _within(parts: Parts, folder: Parts) -> bool:
    return parts[: len(folder)] == folder


def _members(
    skill: Parts, staging: Staging, inside: dict[Parts, str]
) -> list[tuple[Parts, int, bool]]:
    dirs = [(d[len(skill) :], 0, True) for d in sorted(staging.dirs) if _within(d, skill)]
    files = [(rel, staging.sizes[skill + rel], False) for rel in inside]
    return [member for member in dirs if member[0]] + files


def _check_specials(skill: Parts, specials: dict[Parts, str]) -> None:
    for parts, kind in sorted(specials.items()):
        if _within(parts, skill):
            path = "/".join(parts)
            raise ArchiveUnsafe(f"{path} is a {kind}; skills can't hold links or submodules.")


def _list_folder(
    api: _Api,
    staging: Staging | None = None,
    specials: dict[Parts, str] | None = None,
    max_folders: int | None = None,
) -> tuple[Staging, dict[Parts, str]]:
    """Lists the folder's tree; with `specials`, links and submodules are noted, not refused."""
    folder = api.folder
    staging = staging or Staging()
    paths: dict[Parts, str] = {}
    pending: list[tuple[Parts, str]] = [((), folder.path)]
    listed = 0
    while pending:
        base, repo_path = pending.pop()
        listed += 1
        if max_folders is not None and listed > max_folders:
            raise SkillTooLarge(
                f"The folder holds more than {max_folders} folders; import a smaller folder."
            )
        for entry in api.list_dir(repo_path):
            name, kind = _checked_entry(entry, repo_path, special_ok=specials is not None)
            parts = (*base, name)
            child_path = f"{repo_path}/{name}" if repo_path else name
            if specials is not None and kind in _SPECIAL_KINDS:
                specials[parts] = kind
            elif kind == "dir":
                staging.add_dir(parts)
                pending.append((parts, child_path))
            else:
                staging.add_file(parts, _entry_size(entry, child_path))
                paths[parts] = child_path
    return staging, paths


def _checked_entry(
    entry: dict[str, object], parent: str, *, special_ok: bool = False
) -> tuple[str, str]:
    kind, name, path = entry.get("type"), entry.get("name"), entry.get("path")
    if not isinstance(name, str) or not isinstance(path, str) or not isinstance(kind, str):
        raise ImportFailed("GitHub's folder listing could not be read.")
    expected = f"{parent}/{name}" if parent else name
    if len(split_entry_name(name)) != 1 or path != expected:
        raise ArchiveUnsafe(f"GitHub listed {path!r}, which is not inside {parent or 'the root'}.")
    if kind == "file" and "download_url" in entry and entry["download_url"] is None:
        kind = "submodule"  # GitHub lists submodules as files without a download URL
    if kind in _SPECIAL_KINDS and not special_ok:
        raise ArchiveUnsafe(f"{path} is a {kind}; skills can't hold links or submodules.")
    if kind not in ("file", "dir", *_SPECIAL_KINDS):
        raise ArchiveUnsafe(f"{path} has the type {kind!r}; only files and folders are imported.")
    return name, kind


def _entry_size(entry: dict[str, object], path: str) -> int:
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ImportFailed(f"GitHub listed no size for {path}.")
    return size


class _Api:
    """The few contents API requests an import makes, all on the configured base URL."""

    def __init__(
        self, folder: GitHubFolder, base: str, token: str | None, client: httpx.Client | None
    ) -> None:
        self.folder = folder
        self._base = f"{base}/repos/{quote(folder.owner, safe='')}/{quote(folder.repo, safe='')}"
        self._headers = {"User-Agent": "skillfleet", "X-GitHub-Api-Version": "2022-11-28"}
        # Plain bytes on the wire: counting compressed bytes would not bound what we keep.
        self._headers["Accept-Encoding"] = "identity"
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._owned = client is None
        self._client = client or httpx.Client(follow_redirects=False)

    def __enter__(self) -> _Api:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._owned:
            self._client.close()

    def list_dir(self, path: str) -> list[dict[str, object]]:
        """Lists one folder; a file or an unreadable answer raises ImportFailed."""
        with self._get(path, "application/vnd.github+json", "folder") as response:
            body = _read_limited(response, _MAX_LISTING_BYTES)
        if body is None:
            raise ImportFailed(f"GitHub's listing of {path or 'the root'} is too large.")
        try:
            listing = json.loads(body)
        except ValueError as e:
            raise ImportFailed("GitHub's folder listing could not be read.") from e
        if isinstance(listing, dict):
            raise ImportFailed(f"{self._where(path)} is a file, not a folder.")
        if not isinstance(listing, list) or not all(isinstance(x, dict) for x in listing):
            raise ImportFailed("GitHub's folder listing could not be read.")
        return listing

    def download(self, path: str, size: int) -> bytes:
        """Downloads one file; more bytes than GitHub listed raises ArchiveUnsafe."""
        with self._get(path, "application/vnd.github.raw", "file") as response:
            data = _read_limited(response, size)
        if data is None:
            raise ArchiveUnsafe(f"{path} is larger than the {size} bytes GitHub listed.")
        if len(data) != size:
            raise ImportFailed(f"{path} changed on GitHub during the import; try again.")
        return data

    @contextmanager
    def _get(self, path: str, accept: str, kind: str) -> Iterator[httpx.Response]:
        url = f"{self._base}/contents/{quote(path)}" if path else f"{self._base}/contents"
        headers = {**self._headers, "Accept": accept}
        params = {"ref": self.folder.ref}
        try:
            with self._client.stream(
                "GET", url, params=params, headers=headers, timeout=TIMEOUT_SECONDS
            ) as response:
                self._check_status(response, path, kind)
                yield response
        except httpx.TimeoutException as e:
            raise ImportFailed(f"GitHub did not answer within {int(TIMEOUT_SECONDS)} s.") from e
        except httpx.HTTPError as e:
            raise ImportFailed("GitHub could not be reached; the import failed.") from e

    def _check_status(self, response: httpx.Response, path: str, kind: str) -> None:
        status = response.status_code
        if status == 200:
            return
        if status == 404:
            raise ImportFailed(f"GitHub has no {kind} {self._where(path)}.")
        if status == 429 or (status == 403 and _is_rate_limited(response)):
            raise ImportFailed(_RATE_LIMITED)
        if status in (401, 403):
            raise ImportFailed(f"GitHub refused access to {self._repo_name} (HTTP {status}).")
        raise ImportFailed(f"GitHub answered HTTP {status} for {self._where(path)}.")

    @property
    def _repo_name(self) -> str:
        return f"{self.folder.owner}/{self.folder.repo}"

    def _where(self, path: str) -> str:
        return f"{path or '/'} at {self.folder.ref} in {self._repo_name}"


def _is_rate_limited(response: httpx.Response) -> bool:
    if response.headers.get("x-ratelimit-remaining") == "0":
        return True
    body = _read_limited(response, _MAX_ERROR_BYTES) or b""
    return b"rate limit" in body.lower()


def _read_limited(response: httpx.Response, limit: int) -> bytes | None:
    """Reads the body; None once it passes `limit` bytes (the rest is never read)."""
    chunks: list[bytes] = []
    total = 0
    for chunk in response.iter_bytes():
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
