"""A runner never runs a package it did not verify: planted and altered cache folders.

The package cache (every worker's source of skill files) against the real API over HTTP, and a
real node worker running scripts; the Spark and sandbox copies are proven by the same module.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REDIS_URL, offer_node
from factories import owned, skill_files, write_skill
from fleet import Fleet, fleet, wait_until

from relay import naming
from relay.errors import PackageUnverified
from store.hashing import content_hash
from store.models import Skill
from store.names import RUNNERS
from store.settings import Settings
from store.signing import public_key_text
from workers.packages import PackageCache
from workers.runners.spark import copy_skill
from workers.verification import FolderVerifier, verify_folder

NODE = "web01"
PLANTED = b"print('planted')\n"
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
REVIEWED = "print('reviewed')\n"


@pytest.fixture
def api(settings) -> Iterator[Fleet]:
    with fleet(settings) as running:
        yield running


def cache_for(api: Fleet, cache_dir: Path, node: str = NODE) -> PackageCache:
    if node not in RUNNERS:  # the node of alice, whose skills `install` installs
        offer_node(api.services, node)
    token = api.node_env(node)["SKILLFLEET_NODE_TOKEN"]
    return PackageCache(cache_dir, api.url, node, token, public_key_text(api.services.signing_key))


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache" / NODE


@pytest.fixture
def cache(api: Fleet, cache_dir: Path) -> Iterator[PackageCache]:
    made = cache_for(api, cache_dir)
    yield made
    made.close()


def install(api: Fleet, name: str = "demo", metadata: dict[str, str] | None = None) -> Skill:
    """Install a skill through the store, as an import would."""
    files = skill_files(name, metadata=metadata or {})
    files["scripts/version.py"] = b"print('1')\n"
    with api.services.store.staging() as stage:
        root = write_skill(stage, name, files)
        return api.services.store.install(root, owned(api.services), replace=True)


def plant(cache_dir: Path, key: str) -> Path:
    """A folder dropped into the cache under `key` by someone other than the node agent."""
    files = skill_files(key.partition("@")[0])
    files["scripts/version.py"] = PLANTED
    cache_dir.mkdir(parents=True, exist_ok=True)
    return write_skill(cache_dir, key, files)


def rewrite_keeping_times(path: Path, data: bytes) -> None:
    """Change a file's bytes, then set its times back as an intruder covering tracks would."""
    before = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def refusals(cache: PackageCache, key: str) -> list[str]:
    return [reason for refused, reason in cache.last_refused if refused == key]


# -- planted folders -----------------------------------------------------------------------------


def test_a_planted_folder_is_refused_removed_and_the_real_package_fetched(api, cache, cache_dir):
    skill = install(api)
    key = f"demo@{skill.hash}"
    plant(cache_dir, key)

    folder = cache.ensure("demo", skill.hash)

    assert folder == cache_dir / key
    assert (folder / "scripts" / "version.py").read_bytes() == b"print('1')\n"
    assert content_hash(folder) == skill.hash
    [reason] = refusals(cache, key)
    assert "planted or altered" in reason and skill.hash[:12] in reason
    assert sorted(os.listdir(cache_dir)) == [key]  # no quarantine or temp folder left behind


def test_a_planted_folder_the_api_does_not_serve_fails_with_package_unverified(
    api, cache, cache_dir
):
    install(api)
    unserved = "ab" * 32
    plant(cache_dir, f"demo@{unserved}")

    with pytest.raises(PackageUnverified) as refused:
        cache.ensure("demo", unserved)

    assert refused.value.code == "package_unverified"
    assert "planted or altered" in refused.value.message
    assert "not in this node's manifest" in refused.value.message
    assert os.listdir(cache_dir) == []


def test_a_planted_link_to_a_folder_with_the_right_files_is_refused(
    api, cache, cache_dir, tmp_path
):
    skill = install(api)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(api.services.store.folder(skill), elsewhere)
    assert content_hash(elsewhere) == skill.hash
    (cache_dir / f"demo@{skill.hash}").symlink_to(elsewhere, target_is_directory=True)

    folder = cache.ensure("demo", skill.hash)

    assert not folder.is_symlink() and content_hash(folder) == skill.hash
    assert "not a folder" in refusals(cache, f"demo@{skill.hash}")[0]
    assert elsewhere.exists()  # the link went, not what it pointed at


# -- folders changed after they were verified ---------------------------------------------------


def test_a_file_altered_after_verification_is_detected_on_the_next_use(api, cache, cache_dir):
    skill = install(api)
    folder = cache.ensure("demo", skill.hash)
    script = folder / "scripts" / "version.py"
    rewrite_keeping_times(script, b"print('2')\n")  # same size, same mtime

    again = cache.ensure("demo", skill.hash)

    assert script.read_bytes() == b"print('1')\n"
    assert content_hash(again) == skill.hash
    assert len(refusals(cache, f"demo@{skill.hash}")) == 1


def test_a_folder_with_an_extra_file_is_detected(api, cache):
    skill = install(api)
    folder = cache.ensure("demo", skill.hash)
    (folder / "scripts" / "sitecustomize.py").write_bytes(PLANTED)

    cache.ensure("demo", skill.hash)

    assert not (folder / "scripts" / "sitecustomize.py").exists()
    assert content_hash(folder) == skill.hash
    assert "planted or altered" in refusals(cache, f"demo@{skill.hash}")[0]


def test_a_link_added_inside_a_folder_is_detected_though_the_hash_skips_links(api, cache):
    skill = install(api)
    folder = cache.ensure("demo", skill.hash)
    (folder / "scripts" / "secrets.txt").symlink_to("/etc/hostname")
    assert content_hash(folder) == skill.hash  # the hash alone would not notice

    cache.ensure("demo", skill.hash)

    assert not (folder / "scripts" / "secrets.txt").is_symlink()
    assert "not a regular file" in refusals(cache, f"demo@{skill.hash}")[0]


def test_a_verified_folder_is_not_read_again_while_nothing_in_it_changed(api, cache):
    skill = install(api)
    folder = cache.ensure("demo", skill.hash)
    hashed = cache.verifier.hashed

    for _ in range(20):
        with cache.using("demo", skill.hash) as used:
            assert used == folder

    assert cache.verifier.hashed == hashed
    assert cache.last_refused == []


def test_sync_replaces_an_altered_folder_before_a_run_needs_it(api, cache):
    skill = install(api)
    key = f"demo@{skill.hash}"
    assert key in cache.sync().installed
    (cache.path("demo", skill.hash) / "SKILL.md").write_text("---\nname: demo\n---\nObey.\n")

    report = cache.sync()

    assert key in dict(report.refused) and key in report.installed
    assert content_hash(cache.path("demo", skill.hash)) == skill.hash


def test_the_sandbox_worker_s_cache_refuses_a_planted_folder_the_same_way(api, tmp_path):
    sandboxed = {"skillfleet.execution": "sandbox"}
    skill = install(api, "boxed", sandboxed)
    cache_dir = tmp_path / "cache" / naming.SANDBOX
    plant(cache_dir, f"boxed@{skill.hash}")
    sandbox_cache = cache_for(api, cache_dir, naming.SANDBOX)
    try:
        folder = sandbox_cache.ensure("boxed", skill.hash)
    finally:
        sandbox_cache.close()
    assert content_hash(folder) == skill.hash
    assert refusals(sandbox_cache, f"boxed@{skill.hash}")


# -- the verification itself ----------------------------------------------------------------------


def test_a_copy_for_a_container_or_micro_vm_verifies_only_with_the_same_files(tmp_path):
    source = write_skill(tmp_path, "demo")
    expected = content_hash(source)
    copy = tmp_path / "copy"
    copy_skill(source, copy)
    verify_folder(copy, expected)

    (copy / "scripts" / "hello.py").write_bytes(PLANTED)
    with pytest.raises(PackageUnverified, match="planted or altered"):
        verify_folder(copy, expected, "The skill's copy for the container")


def test_the_verifier_forgets_a_proof_when_the_folder_is_replaced(tmp_path):
    folder = write_skill(tmp_path, "demo")
    expected = content_hash(folder)
    verifier = FolderVerifier()
    verifier.verify(folder, expected)
    verifier.verify(folder, expected)
    assert verifier.hashed == 1

    replacement = write_skill(tmp_path / "new", "demo", {"SKILL.md": b"other\n"})
    shutil.rmtree(folder)
    replacement.rename(folder)

    with pytest.raises(PackageUnverified):
        verifier.verify(folder, expected)
    assert verifier.hashed == 2


# -- a real node worker ----------------------------------------------------------------------------


@pytest.fixture
def running(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, run_timeout=20
    )
    with fleet(settings) as started:
        yield started


def run_tick(running: Fleet, node: str) -> dict[str, Any]:
    arguments = {"skill_name": "ticker", "script": "scripts/tick.py", "arguments": {"node": node}}
    body = {"arguments": arguments, "chat_id": "verify"}
    with running.http() as client:
        response = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def synced(running: Fleet, node: str, name: str) -> bool:
    """The node logged a sync that ended after it installed `name`."""
    text = running.log_text(node)
    installed = max(text.find(f"package={name}@"), text.find(f'"package": "{name}@'))
    return installed >= 0 and "packages synced" in text[installed:]


def marker_script(marker: Path) -> bytes:
    return f"open({str(marker)!r}, 'w').write('ran')\nprint('planted')\n".encode()


@pytest.mark.fleet
def test_a_node_run_refuses_an_altered_folder_and_runs_the_package_fetched_again(
    running: Fleet, tmp_path: Path
):
    node = f"t-{uuid.uuid4().hex[:8]}"
    running.start_node(node)
    imported = running.import_skill("ticker", READ_NODE, {"scripts/tick.py": REVIEWED})
    folder = running.settings.cache_dir / node / f"ticker@{imported['hash']}"
    wait_until(lambda: synced(running, node, "ticker"), 30, "the node's sync of ticker")
    marker = tmp_path / "planted-script-ran"
    rewrite_keeping_times(folder / "scripts" / "tick.py", marker_script(marker))

    envelope = run_tick(running, node)

    assert envelope["status"] == "done", envelope
    assert envelope["result"]["stdout"] == "reviewed\n"
    assert not marker.exists()
    assert content_hash(folder) == imported["hash"]
    assert "planted or altered" in running.log_text(node)


@pytest.mark.fleet
def test_a_node_run_whose_planted_folder_can_t_be_fetched_again_fails_with_package_unverified(
    running: Fleet, tmp_path: Path
):
    node = f"t-{uuid.uuid4().hex[:8]}"
    imported = running.import_skill("ticker", READ_NODE, {"scripts/tick.py": REVIEWED})
    marker = tmp_path / "planted-script-ran"
    planted = plant(running.settings.cache_dir / node, f"ticker@{imported['hash']}")
    (planted / "scripts" / "tick.py").write_bytes(marker_script(marker))
    # The node can't reach the API: its syncs fail and touch nothing, so only the run can act.
    env = dict(running.node_env(node), SKILLFLEET_URL="http://127.0.0.1:1")
    running.start(node, "worker", "node", "--name", node, env=env)
    running.wait_for_queue(naming.node_queue(node))

    envelope = run_tick(running, node)

    assert envelope["status"] == "failed", envelope
    assert envelope["error"]["code"] == "package_unverified"
    assert "planted or altered" in envelope["error"]["message"]
    assert "could not be installed" in envelope["error"]["message"]
    assert "manifest could not be fetched" in envelope["error"]["message"]
    assert not marker.exists()
    assert not planted.exists()
    with running.http() as client:
        run = client.get(f"/api/runs/{envelope['run_id']}").json()
    assert run["status"] == "failed" and run["exit_code"] is None
    assert "planted or altered" in run["error"]
