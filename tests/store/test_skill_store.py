"""The store keeps folders and index in step, whatever happens."""

from __future__ import annotations

import uuid

import pytest
from factories import owned, owner_id_of, store_snapshot, write_skill
from sqlalchemy import event

from store.errors import SkillExists, StoreFull
from store.models import Skill


def stage(services, name: str):
    folder = services.settings.skills_dir / ".staging" / uuid.uuid4().hex
    folder.mkdir(parents=True)
    return write_skill(folder, name)


def test_a_database_failure_during_install_leaves_no_folder_behind(services):
    before = store_snapshot(services.settings.skills_dir, services.sessions)
    root = stage(services, "doomed")

    def explode(*_args):
        raise RuntimeError("database went away")

    event.listen(Skill, "before_insert", explode)
    try:
        with pytest.raises(RuntimeError):
            services.store.install(root, owned(services))
    finally:
        event.remove(Skill, "before_insert", explode)
    assert not (services.settings.skills_dir / "owner_1" / "doomed").exists()
    assert root.is_dir()  # moved back to staging, for its owner to clean up
    after = store_snapshot(services.settings.skills_dir, services.sessions)
    assert [p for p in after[0] if not p.startswith(".staging")] == [
        p for p in before[0] if not p.startswith(".staging")
    ]
    assert after[1] == before[1]


def test_a_failed_replace_restores_the_old_folder(services):
    services.store.install(stage(services, "keeper"), owned(services))
    old_hash = services.store.get(owner_id_of(services), "keeper").hash
    new_root = stage(services, "keeper")
    (new_root / "references" / "guide.md").write_text("changed")

    def explode(*_args):
        raise RuntimeError("database went away")

    event.listen(Skill, "before_update", explode)
    try:
        with pytest.raises(RuntimeError):
            services.store.install(new_root, owned(services), replace=True)
    finally:
        event.remove(Skill, "before_update", explode)
    kept = (
        services.store.folder(services.store.get(owner_id_of(services), "keeper"))
        / "references"
        / "guide.md"
    )
    assert kept.read_text() == "# Guide\n\nRead me.\n"
    assert services.store.get(owner_id_of(services), "keeper").hash == old_hash


def test_installing_an_existing_name_without_replace_is_refused(services):
    services.store.install(stage(services, "twice"), owned(services))
    with pytest.raises(SkillExists):
        services.store.install(stage(services, "twice"), owned(services))


def test_an_orphan_folder_without_an_index_entry_is_replaced_by_an_install(services):
    orphan = services.settings.skills_dir / f"owner_{owner_id_of(services)}" / "orphan"
    orphan.mkdir(parents=True)
    (orphan / "junk.txt").write_text("left by a crash")
    skill = services.store.install(stage(services, "orphan"), owned(services))
    assert skill.name == "orphan"
    assert not (orphan / "junk.txt").exists()


def test_the_store_refuses_a_skill_beyond_its_two_hundred(services, monkeypatch):
    monkeypatch.setattr("store.skills.MAX_SKILLS", 2)  # per owner; shared skills don't count
    services.store.install(stage(services, "one"), owned(services))
    services.store.install(stage(services, "two"), owned(services))
    with pytest.raises(StoreFull, match="2 skills"):
        services.store.install(stage(services, "three"), owned(services))
    assert not (services.settings.skills_dir / "owner_1" / "three").exists()
    # The limit is each owner's: another owner still has room.
    assert services.store.install(stage(services, "three"), owned(services, "bob")).name == "three"


def test_a_skill_folder_of_the_old_layout_moves_into_its_owners_folder(services):
    from store.skills import SkillStore

    skill = services.store.install(stage(services, "older"), owned(services))
    current = services.store.folder(skill)
    legacy = services.settings.skills_dir / "older"
    current.rename(legacy)  # where a release before per-owner skills kept it
    reopened = SkillStore(services.sessions, services.settings.skills_dir)
    assert not legacy.exists()
    assert (reopened.folder(skill) / "SKILL.md").is_file()
