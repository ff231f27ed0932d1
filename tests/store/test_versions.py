"""Skill versions: every install keeps the version before it, files once by hash, and a
kept version can be made current again."""

from __future__ import annotations

import threading
import uuid

import pytest
from factories import owned, owner_id_of, skill_files, write_skill
from sqlalchemy import delete, select, update

from store.errors import SkillBuiltin, SkillNotFound, VersionNotFound, VersionNotKept
from store.models import Job, SkillVersion, SkillVersionFile
from store.rollback import rollback
from store.versions import VERSIONS_DIR, parse_pin


def install(services, name: str, guide: str, owner: str = "alice"):
    folder = services.settings.skills_dir / ".staging" / uuid.uuid4().hex
    folder.mkdir(parents=True)
    files = skill_files(name)
    files["references/guide.md"] = guide.encode()
    root = write_skill(folder, name, files)
    return services.store.install(root, owned(services, owner), replace=True)


def stored_blobs(services) -> list[str]:
    root = services.settings.skills_dir / VERSIONS_DIR
    return sorted(p.name for p in root.rglob("*") if p.is_file())


def versions_of(services, skill) -> list[str]:
    query = select(SkillVersion.hash).where(SkillVersion.skill_id == skill.id)
    with services.sessions() as session:
        return sorted(session.scalars(query))


def test_every_install_keeps_the_version_before_it_and_files_are_stored_once(services):
    first = install(services, "notes", "one")
    second = install(services, "notes", "two")
    assert sorted([first.hash, second.hash]) == versions_of(services, second)
    # Only the guide differs: six files in two versions, four stored.
    assert len(stored_blobs(services)) == 4
    with services.sessions() as session:
        rows = session.scalars(select(SkillVersion).where(SkillVersion.skill_id == second.id))
        assert {(row.source, row.author, row.kept, row.signed_by) for row in rows} == {
            ("upload", "owner", True, None)
        }


def test_a_rollback_restores_the_files_and_hash_of_the_version(services):
    first = install(services, "notes", "one")
    install(services, "notes", "two")
    owner = owner_id_of(services)
    back = rollback(services.store, owner, "notes", first.hash)
    assert back.hash == first.hash
    folder = services.store.folder(services.store.get(owner, "notes"))
    assert (folder / "references" / "guide.md").read_text() == "one"
    assert services.store.get(owner, "notes").hash == first.hash


def test_a_rollback_to_a_hash_the_skill_never_had_is_not_found(services):
    install(services, "notes", "one")
    with pytest.raises(VersionNotFound):
        rollback(services.store, owner_id_of(services), "notes", "0" * 64)
    with pytest.raises(VersionNotFound):
        rollback(services.store, owner_id_of(services), "notes", "../etc")


def test_a_rollback_to_another_owners_version_is_not_found(services):
    mine = install(services, "notes", "mine")
    install(services, "notes", "theirs", owner="bob")
    install(services, "notes", "theirs again", owner="bob")
    with pytest.raises(VersionNotFound):
        rollback(services.store, owner_id_of(services, "bob"), "notes", mine.hash)
    with pytest.raises(SkillNotFound):
        rollback(services.store, owner_id_of(services, "carol"), "notes", mine.hash)


def test_a_built_in_skill_has_no_rollback(services):
    with pytest.raises(SkillBuiltin):
        rollback(services.store, owner_id_of(services), "skill-authoring", "0" * 64)


def test_a_version_recorded_before_versions_were_kept_is_not_kept(services):
    first = install(services, "notes", "one")
    with services.sessions.begin() as session:
        session.execute(delete(SkillVersionFile))
        session.execute(update(SkillVersion).values(kept=False))
    second = install(services, "notes", "two")  # keeps the folder it replaces
    third = install(services, "notes", "three")
    assert rollback(services.store, owner_id_of(services), "notes", first.hash).hash == first.hash
    with services.sessions.begin() as session:
        session.execute(
            update(SkillVersion).where(SkillVersion.hash == second.hash).values(kept=False)
        )
    with pytest.raises(VersionNotKept):
        rollback(services.store, owner_id_of(services), "notes", second.hash)
    assert third.hash in versions_of(services, third)


@pytest.mark.both_databases  # the deletes of trimmed versions and their files
def test_trimming_keeps_the_newest_the_current_and_the_pinned_versions(services):
    services.store.versions_kept = 2
    first = install(services, "notes", "v1")
    owner = owner_id_of(services)
    with services.sessions.begin() as session:
        steps = [{"tool": "run_skill_script", "arguments": {"skill_name": f"notes@{first.hash}"}}]
        session.add(Job(
            id=str(uuid.uuid4()), owner_id=owner, name="pinned", cron="0 * * * *",
            time_zone="UTC", steps=steps, skills="*", enabled=False,
        ))  # fmt: skip
    second = install(services, "notes", "v2")
    install(services, "notes", "v3")
    fourth = install(services, "notes", "v4")
    kept = versions_of(services, fourth)
    assert second.hash not in kept
    assert first.hash in kept and fourth.hash in kept and len(kept) == 3
    # v2's own guide went with it: SKILL.md, the script and the guides of v1, v3, v4 stay.
    assert len(stored_blobs(services)) == 5
    assert rollback(services.store, owner, "notes", first.hash).hash == first.hash


@pytest.mark.both_databases  # concurrent writes of one skill
def test_fifty_concurrent_rollbacks_have_one_outcome(services):
    first = install(services, "notes", "one")
    install(services, "notes", "two")
    owner = owner_id_of(services)
    results: list[str] = []
    errors: list[BaseException] = []

    def roll() -> None:
        try:
            results.append(rollback(services.store, owner, "notes", first.hash).hash)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=roll) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [first.hash] * 50
    skill = services.store.get(owner, "notes")
    assert skill.hash == first.hash and skill.revision == 3
    assert (services.store.folder(skill) / "references" / "guide.md").read_text() == "one"


def test_deleting_a_skill_removes_its_stored_files(services):
    install(services, "notes", "one")
    install(services, "notes", "two")
    services.store.delete(owner_id_of(services), "notes")
    assert stored_blobs(services) == []


def test_a_pin_is_a_name_and_a_full_hash():
    assert parse_pin("notes") == ("notes", None)
    assert parse_pin("notes@" + "a" * 64) == ("notes", "a" * 64)
    assert parse_pin("notes@abc") == (None, None)
    assert parse_pin("../x@" + "a" * 64) == (None, None)


def test_fifty_calls_pinning_a_version_at_once_share_one_checked_tree(services):
    from concurrent.futures import ThreadPoolExecutor

    from store.hashing import content_hash
    from store.pinned import pinned_view
    from store.versions import TREES_DIR

    first = install(services, "notes", "one")
    current = install(services, "notes", "two")
    staged = staging(services)
    with ThreadPoolExecutor(max_workers=50) as pool:
        views = list(
            pool.map(lambda _: pinned_view(services.store, current, first.hash), range(50))
        )

    folders = {view.location for view in views}
    assert len(folders) == 1 and {view.hash for view in views} == {first.hash}
    [folder] = folders
    assert content_hash(services.store.blobs.root / TREES_DIR / first.hash / "notes") == first.hash
    assert [p.name for p in (services.store.blobs.root / TREES_DIR).iterdir()] == [first.hash]
    assert staging(services) == staged  # nothing half-made is left
    owner = owner_id_of(services)
    assert services.store.get(owner, "notes").hash == current.hash  # the skill is untouched
    assert folder.endswith(f"{first.hash}/notes")


def test_a_pinned_version_whose_stored_file_was_altered_is_refused_and_no_tree_is_left(services):
    from store.pinned import pinned_view
    from store.versions import TREES_DIR

    first = install(services, "notes", "one")
    current = install(services, "notes", "two")
    with services.sessions() as session:
        digests = session.scalars(
            select(SkillVersionFile.digest).where(SkillVersionFile.hash == first.hash)
        ).all()
    for digest in digests:  # the one file the second version does not share
        path = services.store.blobs.path(digest)
        if digest not in {d for d in versions_digests(services, current.hash)}:
            path.write_bytes(b"altered")
    staged = staging(services)

    with pytest.raises(VersionNotKept):
        pinned_view(services.store, current, first.hash)
    assert not (services.store.blobs.root / TREES_DIR / first.hash).exists()
    assert staging(services) == staged


def versions_digests(services, skill_hash: str) -> set[str]:
    with services.sessions() as session:
        query = select(SkillVersionFile.digest).where(SkillVersionFile.hash == skill_hash)
        return set(session.scalars(query))


def staging(services) -> set[str]:
    """What the store's staging folder holds (this module's installs leave their parents)."""
    return {p.name for p in (services.settings.skills_dir / ".staging").iterdir()}
