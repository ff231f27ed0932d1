"""The node's package cache against the real API over HTTP: verified installs, refusals, sync."""

from __future__ import annotations

import http
import json
import os
import shutil
import stat
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from conftest import TLS, offer_node
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from factories import owned, owner_id_of, skill_files, write_skill
from fleet import Fleet, fleet, wait_until
from werkzeug.serving import make_server

from relay import naming
from relay.connections import database_number
from relay.errors import PackageRefused, RunError
from store.db import transaction
from store.hashing import content_hash
from store.models import Run, Skill
from store.packagestore import PackageStore
from store.signing import public_key_text
from workers import agent
from workers.agent import SyncLoop
from workers.packages import PackageCache, SyncReport

NODE = "web01"
WAIT_SECONDS = 10.0


@pytest.fixture
def api(settings) -> Iterator[Fleet]:
    with fleet(settings) as running:
        yield running


@pytest.fixture
def node_token(api: Fleet) -> str:
    offer_node(api.services, NODE)  # the node of alice, whose skills the tests install
    return api.node_env(NODE)["SKILLFLEET_NODE_TOKEN"]


@pytest.fixture
def public_key(api: Fleet) -> str:
    return public_key_text(api.services.signing_key)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache" / NODE


@pytest.fixture
def cache(api: Fleet, cache_dir: Path, node_token: str, public_key: str) -> Iterator[PackageCache]:
    made = PackageCache(cache_dir, api.url, NODE, node_token, public_key)
    yield made
    made.close()


def install(
    api: Fleet, name: str, version: str = "1", extra: dict[str, bytes] | None = None
) -> Skill:
    """Install (or replace) a skill through the store, as an import would."""
    files = skill_files(name)
    files["scripts/version.py"] = f"print({version!r})\n".encode()
    files.update(extra or {})
    with api.services.store.staging() as stage:
        root = write_skill(stage, name, files)
        return api.services.store.install(root, owned(api.services), replace=True)


def visible(cache_dir: Path) -> list[str]:
    """Everything in the cache folder but the installed packages' insides."""
    return sorted(os.listdir(cache_dir))


def modes_of(paths: list[Path]) -> set[int]:
    return {stat.S_IMODE(p.lstat().st_mode) for p in paths}


@contextmanager
def tampering_proxy(
    upstream: str,
    manifest: Callable[[dict[str, Any]], None] | None = None,
    package: Callable[[bytes], bytes] | None = None,
) -> Iterator[str]:
    """A real HTTP server between node and API that changes what passes through."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ["PATH_INFO"]
        headers = {"Authorization": environ.get("HTTP_AUTHORIZATION", "")}
        # httpx's 5 s default is less than a loaded machine's API may take: a proxy's timeout
        # would be a 500 the node reports, not the tampering under test.
        answer = httpx.get(upstream + path, headers=headers, timeout=60)
        body = answer.content
        if answer.status_code == 200 and path.endswith("/manifest") and manifest:
            signed = answer.json()
            manifest(signed)
            body = json.dumps(signed).encode()
        elif answer.status_code == 200 and "/packages/" in path and package:
            body = package(body)
        status = f"{answer.status_code} {http.HTTPStatus(answer.status_code).phrase}"
        start_response(status, [("Content-Type", answer.headers["content-type"])])
        return [body]

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


# -- installing ------------------------------------------------------------------------------


def test_ensure_installs_exactly_the_run_s_hash_with_its_files(api, cache, cache_dir):
    skill = install(api, "demo")
    folder = cache.ensure("demo", skill.hash)
    assert folder == cache_dir / f"demo@{skill.hash}"
    assert content_hash(folder) == skill.hash
    assert (folder / "scripts" / "version.py").read_text() == "print('1')\n"
    assert cache.held()["demo"] == [skill.hash]
    assert cache.ensure("demo", skill.hash) == folder


def test_installed_packages_have_private_modes_and_no_exec_bit(api, cache, cache_dir):
    skill = install(api, "demo", extra={"scripts/run.sh": b"#!/bin/sh\necho hi\n"})
    os.chmod(api.services.store.folder(skill) / "scripts" / "run.sh", 0o755)
    folder = cache.ensure("demo", skill.hash)
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    dirs = [p for p in [folder, *folder.rglob("*")] if p.is_dir()]
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert (folder / "scripts" / "run.sh") in files
    assert modes_of(dirs) == {0o700}
    assert modes_of(files) == {0o600}


def test_a_package_appears_by_one_rename_never_partly_written(api, cache, cache_dir):
    many = {f"references/note-{i:03}.md": f"note {i}\n".encode() * 50 for i in range(150)}
    skill = install(api, "bulky", extra=many)
    expected = len(list((api.services.store.folder(skill)).rglob("*")))
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        target = cache_dir / f"bulky@{skill.hash}"
        while True:
            finished = done.is_set()
            if target.is_dir():
                seen.append(len(list(target.rglob("*"))))
            if finished:
                return

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        cache.ensure("bulky", skill.hash)
    finally:
        done.set()
        watcher.join(timeout=10)
    assert seen, "the watcher never saw the installed folder"
    assert set(seen) == {expected}
    assert visible(cache_dir) == [f"bulky@{skill.hash}"]


def test_two_processes_installing_the_same_hash_end_with_one_complete_folder(
    api, cache_dir, node_token, public_key
):
    skill = install(api, "demo")
    caches = [PackageCache(cache_dir, api.url, NODE, node_token, public_key) for _ in range(4)]
    start = threading.Barrier(len(caches))
    found: list[Path] = []

    def run(one: PackageCache) -> None:
        start.wait()
        found.append(one.ensure("demo", skill.hash))

    threads = [threading.Thread(target=run, args=(one,)) for one in caches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for one in caches:
        one.close()
    assert found == [cache_dir / f"demo@{skill.hash}"] * len(caches)
    assert content_hash(found[0]) == skill.hash
    assert visible(cache_dir) == [f"demo@{skill.hash}"]


# -- refusals ----------------------------------------------------------------------------------


def test_a_package_whose_bytes_were_changed_in_transit_is_refused_and_not_installed(
    api, cache_dir, node_token, public_key
):
    skill = install(api, "demo")
    flip = lambda data: data[:-1] + bytes([data[-1] ^ 1])  # noqa: E731
    with tampering_proxy(api.url, package=flip) as url:
        tampered = PackageCache(cache_dir, url, NODE, node_token, public_key)
        with pytest.raises(PackageRefused, match="SHA-256 does not match"):
            tampered.ensure("demo", skill.hash)
        report = tampered.sync()
        tampered.close()
    assert f"demo@{skill.hash}" in dict(report.refused)
    assert f"demo@{skill.hash}" in dict(tampered.last_refused)
    assert report.installed == [] and tampered.held() == {}
    assert not [name for name in visible(cache_dir) if name.startswith("demo@")]
    assert not [name for name in visible(cache_dir) if name.startswith(".")]


def test_a_package_whose_files_do_not_hash_to_its_name_is_refused_even_with_a_matching_sha256(
    api, cache, cache_dir
):
    skill = install(api, "demo")
    other = install(api, "other")
    packages = api.services.packages
    packages.ensure_built(skill)
    # The server's copy of the package is swapped for another skill's; its SHA-256 is signed.
    packages.path("demo", skill.hash).write_bytes(packages.ensure_built(other).path.read_bytes())
    api.services.packages = PackageStore(packages.packages_dir, api.services.store)
    with pytest.raises(PackageRefused, match="hash to"):
        cache.ensure("demo", skill.hash)
    assert "demo" not in cache.held()
    assert not [name for name in visible(cache_dir) if name.startswith((".", "demo@"))]


def test_a_manifest_changed_in_transit_is_refused(api, cache_dir, node_token, public_key):
    skill = install(api, "demo")

    def swap_sha(signed: dict[str, Any]) -> None:
        for entry in signed["manifest"]["packages"]:
            entry["sha256"] = "0" * 64

    with tampering_proxy(api.url, manifest=swap_sha) as url:
        tampered = PackageCache(cache_dir, url, NODE, node_token, public_key)
        with pytest.raises(PackageRefused, match="signature does not verify"):
            tampered.ensure("demo", skill.hash)
        report = tampered.sync()
        tampered.close()
    assert [key for key, _reason in report.refused] == ["manifest"]
    assert report.installed == [] and tampered.held() == {}


def test_a_manifest_signed_by_another_key_is_refused(api, cache_dir, node_token):
    skill = install(api, "demo")
    wrong = public_key_text(Ed25519PrivateKey.generate())
    cache = PackageCache(cache_dir, api.url, NODE, node_token, wrong)
    with pytest.raises(PackageRefused, match="manifest"):
        cache.ensure("demo", skill.hash)
    assert cache.held() == {}
    cache.close()


def test_a_manifest_issued_for_another_node_is_refused(api, cache_dir, node_token, public_key):
    skill = install(api, "demo")
    api.node_env("web02")  # the fleet owner's node too: its token may read web02's manifest
    with api.http() as owner:
        web02 = owner.get("/api/nodes/web02/manifest").json()

    def replay(signed: dict[str, Any]) -> None:
        signed.clear()
        signed.update(web02)

    with tampering_proxy(api.url, manifest=replay) as url:
        tampered = PackageCache(cache_dir, url, NODE, node_token, public_key)
        with pytest.raises(PackageRefused, match="another node"):
            tampered.ensure("demo", skill.hash)
        tampered.close()


def test_a_hash_missing_from_the_manifest_is_refused(api, cache):
    install(api, "demo")
    off = install(api, "switched-off")
    api.services.store.set_enabled(owner_id_of(api.services), "switched-off", False)
    with pytest.raises(PackageRefused, match="not in this node's manifest"):
        cache.ensure("demo", "0" * 64)
    with pytest.raises(PackageRefused, match="not in this node's manifest"):
        cache.ensure("switched-off", off.hash)
    with pytest.raises(PackageRefused, match="malformed"):
        cache.ensure("../demo", "0" * 64)
    assert "demo" not in cache.held() and "switched-off" not in cache.held()


def test_a_token_of_another_node_can_t_fetch_this_node_s_manifest(api, cache_dir, public_key):
    install(api, "demo")
    other_token = api.node_env("web02")["SKILLFLEET_NODE_TOKEN"]
    cache = PackageCache(cache_dir, api.url, NODE, other_token, public_key)
    with pytest.raises(RunError, match="404"):
        cache.sync()
    cache.close()


# -- syncing -------------------------------------------------------------------------------------


def test_sync_installs_every_listed_package_and_removes_stale_hashes(api, cache):
    first = install(api, "demo", "1")
    report = cache.sync()
    assert f"demo@{first.hash}" in report.installed
    second = install(api, "demo", "2")
    report = cache.sync()
    assert report.installed == [f"demo@{second.hash}"]
    assert report.removed == [f"demo@{first.hash}"]
    assert cache.held()["demo"] == [second.hash]
    assert cache.sync().installed == []


def test_sync_after_a_rollback_installs_the_version_rolled_back_to_verified(api, cache):
    from store.rollback import rollback

    first = install(api, "demo", "1")
    cache.sync()
    second = install(api, "demo", "2")
    assert cache.sync().installed == [f"demo@{second.hash}"]
    rollback(api.services.store, owner_id_of(api.services), "demo", first.hash)
    report = cache.sync()
    assert report.installed == [f"demo@{first.hash}"]
    assert report.removed == [f"demo@{second.hash}"]
    folder = cache.ensure("demo", first.hash)
    assert content_hash(folder) == first.hash
    assert (folder / "scripts" / "version.py").read_text() == "print('1')\n"


def test_an_unchanged_manifest_is_not_sent_again_and_a_changed_one_is(
    api, cache_dir, node_token, public_key
):
    statuses: list[int] = []
    hooks = {"response": [lambda response: statuses.append(response.status_code)]}
    with httpx.Client(verify=TLS, event_hooks=hooks) as client:
        cache = PackageCache(cache_dir, api.url, NODE, node_token, public_key, client)
        first = install(api, "demo", "1")
        assert f"demo@{first.hash}" in cache.sync().installed
        assert cache.sync() == SyncReport() and statuses[-1] == 304
        assert cache.held()["demo"] == [first.hash]
        second = install(api, "demo", "2")
        report = cache.sync()
        assert statuses[-1] == 200
        assert (report.installed, report.removed) == (
            [f"demo@{second.hash}"],
            [f"demo@{first.hash}"],
        )
        assert cache.sync() == SyncReport() and statuses[-1] == 304


def test_sync_removes_a_disabled_skill(api, cache):
    skill = install(api, "demo")
    cache.sync()
    api.services.store.set_enabled(owner_id_of(api.services), "demo", False)
    assert cache.sync().removed == [f"demo@{skill.hash}"]
    assert "demo" not in cache.held()


def test_sync_keeps_a_hash_in_use_until_the_run_ends(api, cache):
    first = install(api, "demo", "1")
    with cache.using("demo", first.hash) as folder:
        install(api, "demo", "2")
        report = cache.sync()
        assert report.removed == []
        assert content_hash(folder) == first.hash
    assert cache.sync().removed == [f"demo@{first.hash}"]
    assert not folder.exists()


def test_a_sync_with_an_unverified_manifest_removes_nothing(api, cache, cache_dir, node_token):
    skill = install(api, "demo")
    cache.sync()
    wrong = public_key_text(Ed25519PrivateKey.generate())
    other = PackageCache(cache_dir, api.url, NODE, node_token, wrong)
    report = other.sync()
    other.close()
    assert [key for key, _reason in report.refused] == ["manifest"]
    assert report.removed == [] and cache.held()["demo"] == [skill.hash]


def test_a_hash_a_queued_run_still_uses_stays_after_the_skill_changed(api, cache):
    first = install(api, "demo", "1")
    api.services.packages.ensure_built(first)
    with transaction(api.services.sessions) as session:
        session.add(
            Run(
                id=str(uuid.uuid4()),
                skill_name="demo",
                skill_hash=first.hash,
                script="scripts/version.py",
                arguments={},
                execution="node",
                queue=f"node.{NODE}",
                node=NODE,
                owner_id=owner_id_of(api.services),
                status="queued",
                timeout_seconds=60,
            )
        )
    install(api, "demo", "2")
    assert content_hash(cache.ensure("demo", first.hash)) == first.hash


# -- the sync loop -------------------------------------------------------------------------------


@contextmanager
def running_loop(loop: SyncLoop) -> Iterator[SyncLoop]:
    loop.start()
    try:
        yield loop
    finally:
        loop.stop()


def test_the_loop_syncs_at_start_and_when_a_skill_is_imported(api, cache, redis_client):
    first = install(api, "demo")
    with running_loop(SyncLoop(cache, redis_client, NODE, every=3600)) as loop:
        wait_until(lambda: loop.syncs >= 1 and loop.subscribed.is_set(), WAIT_SECONDS, "a sync")
        assert cache.held()["demo"] == [first.hash]
        imported = api.import_skill("fresh", {}, {})
        wait_until(lambda: "fresh" in cache.held(), WAIT_SECONDS, "the imported skill")
        assert cache.held()["fresh"] == [imported["hash"]]


def test_the_loop_syncs_when_the_owner_asks_that_node_to(api, cache, redis_client):
    with running_loop(SyncLoop(cache, redis_client, NODE, every=3600)) as loop:
        wait_until(lambda: loop.syncs >= 1 and loop.subscribed.is_set(), WAIT_SECONDS, "a sync")
        skill = install(api, "quiet")  # straight into the store: nobody was told
        with api.http() as owner:
            assert owner.post(f"/api/nodes/{NODE}/sync").status_code == 202
        wait_until(lambda: "quiet" in cache.held(), WAIT_SECONDS, "the requested sync")
        assert cache.held()["quiet"] == [skill.hash]


def test_the_loop_hears_only_its_own_database_s_sync_requests(api, cache, redis_client):
    with running_loop(SyncLoop(cache, redis_client, NODE, every=3600)) as loop:
        wait_until(lambda: loop.syncs >= 1 and loop.subscribed.is_set(), WAIT_SECONDS, "a sync")
        db = database_number(redis_client)
        # Channels are the server's: another database's deployment asks on its own.
        assert redis_client.publish(naming.nodes_sync(db + 1000), "sync") == 0
        assert redis_client.publish(naming.node_sync(NODE, db + 1000), "sync") == 0
        assert redis_client.publish(naming.nodes_sync(db), "sync") >= 1
        wait_until(lambda: loop.syncs >= 2, WAIT_SECONDS, "the requested sync")


def test_the_intervals_between_syncs_are_spread_around_the_period():
    drawn = [agent.interval(60.0) for _ in range(200)]
    assert all(60 * (1 - agent.JITTER) <= seconds <= 60 * (1 + agent.JITTER) for seconds in drawn)
    assert max(drawn) - min(drawn) > 60 * agent.JITTER  # spread, not one value for every node


def test_a_failing_sync_never_ends_the_loop(cache_dir, node_token, public_key, redis_client):
    unreachable = PackageCache(cache_dir, "http://127.0.0.1:1", NODE, node_token, public_key)
    with running_loop(SyncLoop(unreachable, redis_client, NODE, every=0.1)) as loop:
        wait_until(lambda: loop.syncs >= 3, WAIT_SECONDS, "three failed syncs")
        assert loop.is_alive()
    unreachable.close()


def test_a_sync_the_api_did_not_answer_is_tried_again_within_seconds_not_an_interval(
    cache_dir, node_token, public_key, redis_client, capfd
):
    # A node started beside its API (as `skillfleet up` starts them) finds it still starting:
    # it asks again soon, and says so without a warning while the API may still be starting.
    unreachable = PackageCache(cache_dir, "http://127.0.0.1:1", NODE, node_token, public_key)
    with running_loop(SyncLoop(unreachable, redis_client, NODE, every=3600)) as loop:
        wait_until(lambda: loop.syncs >= 3, WAIT_SECONDS, "two tries after the first failed")
        assert loop.is_alive() and loop.last_report is None
    unreachable.close()
    said = [json.loads(line) for line in capfd.readouterr().out.splitlines() if "sync" in line]
    failed = [line for line in said if line.get("event") == "package sync failed"]
    assert len(failed) >= 3 and {line["level"] for line in failed} == {"info"}, said


def test_the_loop_keeps_syncing_on_time_while_redis_is_away(api, cache):
    away = redis.Redis.from_url("redis://127.0.0.1:1/0")
    install(api, "demo")
    with running_loop(SyncLoop(cache, away, NODE, every=0.1)) as loop:
        wait_until(lambda: loop.syncs >= 2, WAIT_SECONDS, "syncs without Redis")
        assert "demo" in cache.held() and not loop.subscribed.is_set()


def test_an_unexpected_sync_failure_never_ends_the_loop_either(api, cache, cache_dir, redis_client):
    install(api, "demo")
    shutil.rmtree(cache_dir)  # installing has nowhere to write: an OSError, not a refusal
    with running_loop(SyncLoop(cache, redis_client, NODE, every=0.1)) as loop:
        wait_until(lambda: loop.syncs >= 2, WAIT_SECONDS, "two failed syncs")
        assert loop.is_alive()
    assert not cache_dir.exists()
