"""The node agent's package cache: verified skill packages installed by one rename each."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import structlog

from relay.errors import PackageRefused, PackageUnverified, RunError
from store.errors import ArchiveUnsafe, ManifestInvalid
from store.hashing import content_hash
from store.limits import MAX_PACKAGE_BYTES
from store.packages import extract_package
from store.packagestore import valid_key
from store.signing import verify_manifest
from workers.secrets import SecretMissing
from workers.verification import FolderVerifier

log = structlog.get_logger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
TEMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
# A temporary folder this old belongs to a process that died mid-install.
STALE_TEMP_SECONDS = 3600.0
KEPT_REFUSALS = 20
HTTP_TIMEOUT = 30.0


@dataclass(frozen=True)
class Entry:
    """One package of a verified manifest."""

    name: str
    hash: str
    sha256: str
    size: int

    @property
    def key(self) -> str:
        return f"{self.name}@{self.hash}"


@dataclass
class SyncReport:
    """What one sync did: packages installed and removed, and refusals with their reasons."""

    installed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)


class PackageCache:
    """`cache/<name>@<hash>/` folders, each verified (signature, SHA-256, content hash).

    Each use proves again that a folder hashes to its name (cheaply while nothing changed), so
    a folder planted in the cache or altered after its install never runs.
    """

    def __init__(
        self,
        cache_dir: Path,
        api_url: str,
        node: str,
        token: str,
        public_key: str,
        client: httpx.Client | None = None,
    ) -> None:
        self.cache_dir = cache_dir
        self.node = node
        self.public_key = public_key
        self._owns_client = client is None
        self.client = client or httpx.Client(timeout=HTTP_TIMEOUT)
        self._base = api_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._in_use: Counter[str] = Counter()
        self._refusals: deque[tuple[str, str]] = deque(maxlen=KEPT_REFUSALS)
        self.verifier = FolderVerifier()
        # The last manifest that verified: its ETag and its packages.
        self._manifest: tuple[str, dict[str, Entry]] | None = None
        cache_dir.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        cache_dir.chmod(DIR_MODE)

    def close(self) -> None:
        """Close the HTTP client this cache made (a client passed in stays open)."""
        if self._owns_client:
            self.client.close()

    # -- what is held ------------------------------------------------------------

    def path(self, name: str, skill_hash: str) -> Path:
        return self.cache_dir / f"{name}@{skill_hash}"

    def held(self) -> dict[str, list[str]]:
        """Installed packages: skill name to its hashes."""
        found: dict[str, list[str]] = {}
        for key in self._installed_keys():
            name, _, skill_hash = key.partition("@")
            found.setdefault(name, []).append(skill_hash)
        return {name: sorted(hashes) for name, hashes in sorted(found.items())}

    @property
    def last_refused(self) -> list[tuple[str, str]]:
        """The latest refusals (package, reason), oldest first, for the heartbeat."""
        with self._lock:
            return list(self._refusals)

    def _installed_keys(self) -> list[str]:
        return sorted(
            entry.name
            for entry in os.scandir(self.cache_dir)
            if "@" in entry.name
            and not entry.name.startswith(".")
            and entry.is_dir(follow_symlinks=False)
        )

    # -- installing ----------------------------------------------------------------

    def ensure(self, name: str, skill_hash: str) -> Path:
        """The folder of exactly `name@hash`, proven to hash to it; installed now if new.

        A held folder that does not verify (planted, or altered since it was installed) is
        removed and the package fetched again; raises PackageUnverified if that fails too.
        """
        key = f"{name}@{skill_hash}"
        if not valid_key(name, skill_hash):
            raise self._refuse(key, "The package name or hash is malformed.")
        target = self.path(name, skill_hash)
        with self._key_lock(key):
            try:
                if self._held(key, target, skill_hash):
                    return target
            except PackageUnverified as e:
                return self._refetch(key, e)
            return self._fetch(key)

    @contextmanager
    def using(self, name: str, skill_hash: str) -> Iterator[Path]:
        """Mark `name@hash` in use for the block (sync keeps it) and yield its folder."""
        key = f"{name}@{skill_hash}"
        with self._lock:
            self._in_use[key] += 1
        try:
            yield self.ensure(name, skill_hash)
        finally:
            with self._lock:
                self._in_use[key] -= 1
                if self._in_use[key] <= 0:
                    del self._in_use[key]

    def manifest(self) -> dict[str, Entry]:
        """This node's packages from the API, once the signature verified.

        The API is asked with the tag of the last manifest that verified (If-None-Match): while
        it is still the node's, the API answers 304 and that manifest's packages are returned.
        """
        with self._lock:
            held = self._manifest
        headers = dict(self._headers)
        if held is not None:
            headers["If-None-Match"] = held[0]
        signed, tag = self._get_manifest(headers)
        if signed is None and held is not None:
            return dict(held[1])
        try:
            manifest = verify_manifest(self.public_key, signed)
        except ManifestInvalid as e:
            raise self._refuse("manifest", e.message) from e
        if manifest.get("node") != self.node:
            raise self._refuse("manifest", "The manifest was issued for another node.")
        try:
            entries = _entries(manifest.get("packages"))
        except ValueError as e:
            raise self._refuse("manifest", str(e)) from e
        with self._lock:
            self._manifest = (tag, dict(entries)) if tag else None
        return entries

    def _held(self, key: str, target: Path, skill_hash: str) -> bool:
        """True when `target` is installed and proven; False when absent.

        Raises PackageUnverified (after removing the folder) when it is there but doesn't verify.
        """
        if not os.path.lexists(target):
            return False
        try:
            self.verifier.verify(target, skill_hash, _folder_of(key))
        except PackageUnverified as e:
            self._refuse(key, e.message)
            self._discard(target)
            raise
        return True

    def _fetch(self, key: str) -> Path:
        """Install `key` from the signed manifest and prove the folder where it now lies."""
        entry = self.manifest().get(key)
        if entry is None:
            raise self._refuse(key, f"{key} is not in this node's manifest.")
        folder = self._install(entry)
        self.verifier.verify(folder, entry.hash, _folder_of(key))
        return folder

    def _refetch(self, key: str, unverified: PackageUnverified) -> Path:
        """Install `key` again after its folder failed to verify; PackageUnverified if it can't."""
        try:
            return self._fetch(key)
        except RunError as e:
            raise PackageUnverified(
                f"{unverified.message} It was removed, and a fresh copy could not be "
                f"installed: {e.message}"
            ) from e

    def _install(self, entry: Entry) -> Path:
        target = self.path(entry.name, entry.hash)
        data = self._download(entry)
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise self._refuse(entry.key, "The package's SHA-256 does not match the manifest.")
        temp = self.cache_dir / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
        try:
            self._unpack(entry, data, temp)
            try:
                os.rename(temp, target)  # the one step that makes the package visible
            except OSError:
                if not target.is_dir():
                    raise
                # Another process installed the same verified content first; keep theirs.
        finally:
            shutil.rmtree(temp, ignore_errors=True)
        log.info("package installed", package=entry.key, node=self.node)
        return target

    def _unpack(self, entry: Entry, data: bytes, temp: Path) -> None:
        try:
            extract_package(data, temp, entry.sha256)
            _restrict_modes(temp)
        except ArchiveUnsafe as e:
            raise self._refuse(entry.key, e.message) from e
        found = content_hash(temp)
        if found != entry.hash:
            raise self._refuse(entry.key, f"The package's files hash to {found}, not {entry.hash}.")

    def _download(self, entry: Entry) -> bytes:
        if entry.size > MAX_PACKAGE_BYTES:
            raise self._refuse(entry.key, "The manifest lists a package larger than a skill.")
        url = f"{self._base}/api/nodes/{self.node}/packages/{entry.key}"
        chunks: list[bytes] = []
        received = 0
        try:
            with self.client.stream("GET", url, headers=self._headers) as response:
                _check_status(response, entry.key)
                for chunk in response.iter_bytes():
                    received += len(chunk)
                    if received > entry.size:
                        raise self._refuse(
                            entry.key, "The package is larger than the manifest says."
                        )
                    chunks.append(chunk)
        except httpx.HTTPError as e:
            raise RunError(f"The package {entry.key} could not be downloaded: {e}") from e
        return b"".join(chunks)

    def _get_manifest(self, headers: dict[str, str]) -> tuple[Any, str | None]:
        """The signed manifest (None when the API answered 304) and its ETag."""
        url = f"{self._base}/api/nodes/{self.node}/manifest"
        try:
            response = self.client.get(url, headers=headers)
            tag = response.headers.get("ETag")
            if response.status_code == 304 and "If-None-Match" in headers:
                return None, tag
            _check_status(response, "the manifest")
            return response.json(), tag
        except httpx.HTTPError as e:
            raise RunError(f"The manifest could not be fetched from the API: {e}") from e
        except ValueError as e:
            raise self._refuse("manifest", "The manifest is not JSON.") from e

    # -- a run's secrets ---------------------------------------------------------------

    def secrets(self, run_id: str) -> dict[str, str]:
        """The secrets of a run this node is running, from the API with the node's token.

        Raises RunError (code `secret_missing` when the API refused to give them).
        """
        url = f"{self._base}/api/nodes/{self.node}/runs/{run_id}/secrets"
        try:
            response = self.client.get(url, headers=self._headers)
        except httpx.HTTPError as e:
            raise RunError(f"The run's secrets could not be fetched from the API: {e}") from e
        if response.status_code == 409:
            raise SecretMissing(_error_message(response))
        _check_status(response, "the run's secrets")
        try:
            values = response.json().get("secrets")
        except (ValueError, AttributeError):
            values = None
        if not isinstance(values, dict):
            raise RunError("The API answered the run's secrets with no mapping of them.")
        return {str(name): str(value) for name, value in values.items()}

    # -- syncing ---------------------------------------------------------------------

    def sync(self) -> SyncReport:
        """Install every listed package, then remove unlisted ones that no run is using."""
        report = SyncReport()
        try:
            entries = self.manifest()
        except PackageRefused as e:
            report.refused.append(("manifest", e.message))
            return report  # an unverified manifest decides nothing, removals included
        for key in sorted(entries):
            self._sync_one(entries[key], report)
        report.removed = self._remove_unlisted(set(entries))
        self._clean_temp()
        return report

    def _sync_one(self, entry: Entry, report: SyncReport) -> None:
        target = self.path(entry.name, entry.hash)
        with self._key_lock(entry.key):
            try:
                if self._held(entry.key, target, entry.hash):
                    return
            except PackageUnverified as e:
                report.refused.append((entry.key, e.message))
            try:
                self._install(entry)
                self.verifier.verify(target, entry.hash, _folder_of(entry.key))
                report.installed.append(entry.key)
            except (PackageRefused, PackageUnverified) as e:
                report.refused.append((entry.key, e.message))
            except RunError as e:
                log.warning("package not installed", package=entry.key, error=e.message)

    def _remove_unlisted(self, listed: set[str]) -> list[str]:
        removed = []
        for key in self._installed_keys():
            if key in listed:
                continue
            with self._key_lock(key), self._lock:
                if self._in_use[key] > 0:
                    continue
                if not self._discard(self.cache_dir / key):
                    continue  # another process sharing the cache removed it first
            log.info("package removed", package=key, node=self.node)
            removed.append(key)
        return removed

    def _discard(self, folder: Path) -> bool:
        """Remove an installed folder by a rename, then delete it; False if absent or stuck."""
        trash = self.cache_dir / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
        try:
            os.rename(folder, trash)
        except FileNotFoundError:
            return False
        except OSError as e:
            log.error("package folder not removed", folder=folder.name, error=str(e))
            return False
        finally:
            self.verifier.forget(folder)
        shutil.rmtree(trash, ignore_errors=True)
        if trash.is_symlink():  # rmtree refuses a link; the link alone goes
            trash.unlink()
        return True

    def _clean_temp(self) -> None:
        """Delete trash, and temporary folders left by a process that died mid-install."""
        cutoff = time.time() - STALE_TEMP_SECONDS
        for entry in os.scandir(self.cache_dir):
            if entry.name.startswith(TRASH_PREFIX) or (
                entry.name.startswith(TEMP_PREFIX) and entry.stat().st_mtime < cutoff
            ):
                shutil.rmtree(entry.path, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------

    @contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            yield

    def _refuse(self, key: str, reason: str) -> PackageRefused:
        """Log and remember a refusal; returns the error for the caller to raise."""
        log.error("package refused", package=key, node=self.node, reason=reason)
        with self._lock:
            self._refusals.append((key, reason))
        return PackageRefused(f"Package {key} refused: {reason}")


def _folder_of(key: str) -> str:
    """How a message names the cached folder of `key` (its hash shortened)."""
    name, _, skill_hash = key.partition("@")
    return f"The cached folder of {name}@{skill_hash[:12]}"


def _check_status(response: httpx.Response, what: str) -> None:
    if response.status_code != 200:
        response.read()
        detail = response.text[:300]
        raise RunError(f"The API answered {response.status_code} for {what}: {detail}")


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["message"])
    except (ValueError, KeyError, TypeError):
        return f"The API refused the run's secrets ({response.status_code})."


def _entries(raw: object) -> dict[str, Entry]:
    """The manifest's package list; ValueError names what is malformed."""
    if not isinstance(raw, list):
        raise ValueError("The manifest has no package list.")
    entries = {}
    for item in raw:
        try:
            entry = Entry(
                str(item["name"]), str(item["hash"]), str(item["sha256"]), int(item["size"])
            )
        except (TypeError, KeyError, ValueError) as e:
            raise ValueError("The manifest holds a malformed package entry.") from e
        if not valid_key(entry.name, entry.hash):
            raise ValueError(f"The manifest lists a malformed package {entry.key}.")
        entries[entry.key] = entry
    return entries


def _restrict_modes(root: Path) -> None:
    """Folders 0700, files 0600, never an exec bit, whatever the umask or the archive said."""
    for folder, dirnames, filenames in os.walk(root):
        paths = [os.path.join(folder, name) for name in (*dirnames, *filenames)]
        if any(os.path.islink(path) for path in paths):  # chmod must never follow a link
            raise ArchiveUnsafe("The unpacked package holds a link.")
        os.chmod(folder, DIR_MODE)
        for name in filenames:
            os.chmod(os.path.join(folder, name), FILE_MODE)
