"""Server-side packages: built once per hash, served while current or in use, per-node manifests."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import offer_node
from factories import owned, owner_id_of, skill_files, write_skill

from api.services import Services
from store.db import transaction
from store.errors import PackageNotFound
from store.models import Run, Skill
from store.packagestore import PackageStore, execution_for, package_hash


def install(services: Services, name: str, version: str = "1", **metadata: Any) -> Skill:
    """A skill of alice's, on nodes unless `metadata` says otherwise (None: declares none)."""
    declared = {"skillfleet.execution": "node", **metadata}
    files = skill_files(name, metadata={k: v for k, v in declared.items() if v is not None})
    files["scripts/version.py"] = f"print({version!r})\n".encode()
    with services.store.staging() as stage:
        root = write_skill(stage, name, files)
        return services.store.install(root, owned(services), replace=True)


def add_run(services: Services, skill: Skill, status: str = "queued", node: str | None = "web01"):
    execution = skill.execution
    queue = f"node.{node}" if execution == "node" else execution
    with transaction(services.sessions) as session:
        session.add(
            Run(
                id=str(uuid.uuid4()),
                skill_name=skill.name,
                skill_hash=skill.hash,
                script="scripts/hello.py",
                arguments={},
                execution=execution,
                queue=queue,
                node=node if execution == "node" else None,
                owner_id=owner_id_of(services),
                status=status,
                timeout_seconds=60,
            )
        )


def finish_runs(services: Services) -> None:
    with transaction(services.sessions) as session:
        for run in session.query(Run):
            run.status = "succeeded"


def names(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    return [(entry["name"], entry["hash"]) for entry in manifest["packages"]]


@pytest.fixture
def packages(services: Services) -> PackageStore:
    """alice's packages; her nodes are web01 and web02 (a node holds its owners' skills)."""
    for node in ("web01", "web02"):
        offer_node(services, node)
    return services.packages


def test_a_package_is_built_once_per_hash_under_its_name_and_hash(services, packages):
    skill = install(services, "demo")
    info = packages.ensure_built(skill)
    assert info.path == services.settings.data_dir / "packages" / f"demo@{skill.hash}.tar.gz"
    data = info.path.read_bytes()
    assert (info.sha256, info.size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert package_hash(data) == skill.hash
    inode = info.path.stat().st_ino
    assert packages.ensure_built(skill) == info
    assert info.path.stat().st_ino == inode
    assert [p.name for p in info.path.parent.iterdir()] == [info.path.name]


def test_a_package_removed_after_it_was_built_is_built_again_when_next_needed(services, packages):
    # The path of a name and hash is remembered; whether the file is there is not.
    skill = install(services, "demo", "1")
    first = packages.ensure_built(skill)
    first.path.unlink()

    again = packages.ensure_built(skill)

    assert again.path == first.path and again.path.is_file()
    assert package_hash(again.path.read_bytes()) == skill.hash


def test_a_skill_whose_folder_no_longer_has_its_hash_is_refused_and_nothing_is_built(
    services, packages
):
    skill = install(services, "demo")
    (services.store.folder(skill) / "scripts" / "version.py").write_text("print('changed')\n")
    with pytest.raises(PackageNotFound, match="no longer have hash"):
        packages.ensure_built(skill)
    assert list(packages.packages_dir.iterdir()) == []


def test_the_current_hash_is_served(services, packages):
    skill = install(services, "demo")
    info = packages.find("demo", skill.hash, services.sessions)
    assert info.hash == skill.hash and info.path.is_file()


def test_a_replaced_hash_is_no_longer_served(services, packages):
    old = install(services, "demo", "1")
    packages.ensure_built(old)
    install(services, "demo", "2")
    with pytest.raises(PackageNotFound) as refused:
        packages.find("demo", old.hash, services.sessions)
    assert refused.value.code == "package_not_found" and refused.value.status == 404


def test_a_replaced_hash_is_served_while_a_queued_or_running_run_uses_it(services, packages):
    old = install(services, "demo", "1")
    packages.ensure_built(old)
    add_run(services, old, "running")
    install(services, "demo", "2")
    assert packages.find("demo", old.hash, services.sessions).hash == old.hash
    finish_runs(services)
    with pytest.raises(PackageNotFound):
        packages.find("demo", old.hash, services.sessions)


@pytest.mark.parametrize(
    ("name", "skill_hash"),
    [("../demo", "a" * 64), ("demo", "../" + "a" * 61), ("demo", "A" * 64), ("", "")],
)
def test_a_malformed_name_or_hash_is_not_found(services, packages, name, skill_hash):
    install(services, "demo")
    with pytest.raises(PackageNotFound):
        packages.find(name, skill_hash, services.sessions)


def test_an_unknown_skill_is_not_found(services, packages):
    with pytest.raises(PackageNotFound):
        packages.find("nothing", "a" * 64, services.sessions)


def test_each_node_s_manifest_lists_only_enabled_skills_of_its_runner(services, packages):
    node_skill = install(services, "on-node")
    spark_skill = install(services, "on-spark", **{"skillfleet.execution": "spark"})
    sandbox_skill = install(services, "in-sandbox", **{"skillfleet.execution": "sandbox"})
    install(services, "switched-off")
    services.store.set_enabled(owner_id_of(services), "switched-off", False)
    builtin = services.store.get(owner_id_of(services), "skill-authoring")

    web01 = packages.manifest_for("web01", services.sessions)
    assert names(web01) == sorted([("on-node", node_skill.hash), ("skill-authoring", builtin.hash)])
    assert names(packages.manifest_for("spark", services.sessions)) == [
        ("on-spark", spark_skill.hash)
    ]
    assert names(packages.manifest_for("sandbox", services.sessions)) == [
        ("in-sandbox", sandbox_skill.hash)
    ]


def test_a_skill_that_runs_on_the_spark_or_a_node_is_on_both_manifests(services, packages):
    either = install(services, "either", **{"skillfleet.execution": None})
    assert either.execution == "auto"
    chose_spark = install(services, "chose-spark")
    services.store.set_execution(owner_id_of(services), "chose-spark", "spark")

    for node in ("web01", "spark"):
        assert ("either", either.hash) in names(packages.manifest_for(node, services.sessions))
    assert names(packages.manifest_for("sandbox", services.sessions)) == []
    spark = names(packages.manifest_for("spark", services.sessions))
    assert ("chose-spark", chose_spark.hash) in spark
    assert "chose-spark" not in [
        name for name, _ in names(packages.manifest_for("web01", services.sessions))
    ]


def test_a_manifest_entry_names_the_package_its_sha256_and_size(services, packages):
    skill = install(services, "demo")
    manifest = packages.manifest_for("web01", services.sessions)
    entry = next(e for e in manifest["packages"] if e["name"] == "demo")
    data = packages.path("demo", skill.hash).read_bytes()
    assert entry == {
        "name": "demo",
        "hash": skill.hash,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }
    assert manifest["node"] == "web01"
    assert isinstance(manifest["issued_at"], int)


def test_a_manifest_keeps_the_hash_an_unfinished_run_on_that_node_uses(services, packages):
    old = install(services, "demo", "1")
    packages.manifest_for("web01", services.sessions)
    add_run(services, old, "queued", node="web01")
    new = install(services, "demo", "2")
    assert ("demo", old.hash) in names(packages.manifest_for("web01", services.sessions))
    assert ("demo", new.hash) in names(packages.manifest_for("web01", services.sessions))
    assert ("demo", old.hash) not in names(packages.manifest_for("web02", services.sessions))


def test_a_node_is_not_served_a_package_of_another_runner(services, packages):
    skill = install(services, "on-spark", **{"skillfleet.execution": "spark"})
    assert packages.find("on-spark", skill.hash, services.sessions, node="spark")
    with pytest.raises(PackageNotFound):
        packages.find("on-spark", skill.hash, services.sessions, node="web01")


def test_a_disabled_skill_is_served_only_to_the_node_running_it(services, packages):
    skill = install(services, "demo")
    add_run(services, skill, "queued", node="web01")
    services.store.set_enabled(owner_id_of(services), "demo", False)
    assert packages.find("demo", skill.hash, services.sessions, node="web01")
    with pytest.raises(PackageNotFound):
        packages.find("demo", skill.hash, services.sessions, node="web02")


def test_prune_removes_packages_neither_current_nor_in_use(services, packages):
    first = install(services, "demo", "1")
    packages.ensure_built(first)
    second = install(services, "demo", "2")
    packages.ensure_built(second)
    kept = install(services, "kept", "1")
    packages.ensure_built(kept)
    add_run(services, kept, "running")
    install(services, "kept", "2")
    assert packages.prune(services.sessions) == [f"demo@{first.hash}"]
    left = sorted(p.name for p in packages.packages_dir.iterdir())
    assert left == sorted([f"demo@{second.hash}.tar.gz", f"kept@{kept.hash}.tar.gz"])


def test_execution_follows_the_node_name():
    assert [execution_for(n) for n in ("spark", "sandbox", "web01")] == [
        "spark",
        "sandbox",
        "node",
    ]


def test_a_package_of_a_read_only_skill_builds_from_its_own_folder(services, packages):
    builtin = services.store.get(owner_id_of(services), "skill-authoring")
    info = packages.ensure_built(builtin)
    assert package_hash(info.path.read_bytes()) == builtin.hash
    assert Path(builtin.location or "").is_dir()
