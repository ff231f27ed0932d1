"""Skills from configured paths (seed 004): folders of skills, single skills, clear failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import skill_files, skill_md, write_skill

from store.discovery import discover, read_only_skills
from store.errors import ConfigError
from store.settings import Settings, SettingsError
from store.skills import BUILTIN_DIR


def test_a_folder_of_skill_folders_and_a_single_skill_folder_are_both_found(tmp_path: Path):
    shelf = tmp_path / "shelf"
    write_skill(shelf, "alpha")
    write_skill(shelf, "beta")
    (shelf / "README.md").write_text("not a skill")
    single = write_skill(tmp_path / "one", "gamma")
    found = discover([shelf, single])
    assert [p.name for p in found] == ["alpha", "beta", "gamma"]


def test_a_missing_path_stops_start_up_naming_it(tmp_path: Path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="nowhere does not exist"):
        discover([missing])


def test_a_folder_without_skills_stops_start_up(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no SKILL.md"):
        discover([tmp_path / "empty"])


def test_a_duplicate_name_across_paths_stops_start_up_naming_both(tmp_path: Path):
    first = write_skill(tmp_path / "a", "alpha")
    second = write_skill(tmp_path / "b", "alpha")
    with pytest.raises(ConfigError) as caught:
        discover([first, second])
    assert str(second) in caught.value.message and str(first) in caught.value.message


def test_an_invalid_skill_stops_start_up_naming_path_and_problem(tmp_path: Path):
    files = skill_files("bad-one")
    files["scripts/broken.py"] = b"def broken(:\n"
    folder = write_skill(tmp_path, "bad-one", files)
    with pytest.raises(ConfigError) as caught:
        read_only_skills(BUILTIN_DIR, [folder])
    assert str(folder) in caught.value.message
    assert "scripts/broken.py" in caught.value.message


def test_a_configured_skill_written_for_another_agent_is_read_as_an_import_reads_it(
    tmp_path: Path,
):
    # Claude Code's keys, a display-style name and a folder of another name: kept with warnings.
    files = skill_files("review")
    claude_code = {"argument-hint": "[file]", "model": "x"}
    files["SKILL.md"] = skill_md("Code Review", **claude_code).encode()
    folder = write_skill(tmp_path, "code-review-skill", files)
    [(source, found, info)] = [s for s in read_only_skills(BUILTIN_DIR, [folder]) if s[0] == "path"]
    assert (source, found, info.name) == ("path", folder, "code-review")
    assert any('"argument-hint", "model"' in warning for warning in info.warnings), info.warnings
    assert any('"Code Review" is not a valid skill name' in w for w in info.warnings)


def test_a_configured_skill_without_front_matter_is_served_under_its_folder_name(tmp_path: Path):
    folder = write_skill(tmp_path, "plain-notes", {"SKILL.md": b"# Notes\n\nKeep notes.\n"})
    [info] = [i for source, _f, i in read_only_skills(BUILTIN_DIR, [folder]) if source == "path"]
    assert info.name == "plain-notes" and info.description == "Keep notes."
    assert any("no front matter" in warning for warning in info.warnings)


def test_the_built_in_skills_are_still_read_strictly(tmp_path: Path):
    shelf = tmp_path / "builtin"
    files = skill_files("strict-one")
    files["SKILL.md"] = skill_md("strict-one", colour="blue").encode()
    write_skill(shelf, "strict-one", files)
    with pytest.raises(ConfigError, match="colour"):
        read_only_skills(shelf, [])


def test_a_name_clashing_with_a_builtin_stops_start_up(tmp_path: Path):
    folder = write_skill(tmp_path, "skill-authoring")
    with pytest.raises(ConfigError, match="skill-authoring"):
        read_only_skills(BUILTIN_DIR, [folder])


def test_skill_paths_come_from_the_yaml_config_relative_to_it(tmp_path: Path):
    config = tmp_path / "skillfleet.yaml"
    config.write_text("skills:\n  paths:\n    - shelf\n    - /srv/skills\n")
    settings = Settings.from_env({"SKILLFLEET_CONFIG": str(config)})
    assert settings.skill_paths == (tmp_path / "shelf", Path("/srv/skills"))


def test_a_config_with_paths_that_are_not_a_list_is_refused(tmp_path: Path):
    config = tmp_path / "skillfleet.yaml"
    config.write_text("skills:\n  paths: shelf\n")
    with pytest.raises(SettingsError, match="skills.paths"):
        Settings.from_env({"SKILLFLEET_CONFIG": str(config)})
