"""The config file (SKILLFLEET_CONFIG) is read with the bounded YAML loader of SKILL.md headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.settings import Settings, SettingsError


def settings_error(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"SKILLFLEET_CONFIG": str(path)})
    return str(caught.value)


def test_a_config_file_nested_thousands_deep_stops_start_up_with_a_settings_error(
    tmp_path: Path,
) -> None:
    config = tmp_path / "skillfleet.yaml"

    message = settings_error(config, "skills: " + "[" * 5000 + "]" * 5000 + "\n")

    assert message.startswith(f"The config file {config} is not valid YAML: ")
    assert "it nests deeper than 32 levels" in message


def test_a_config_file_whose_aliases_multiply_stops_start_up_with_a_settings_error(
    tmp_path: Path,
) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, 9)]
    config = tmp_path / "skillfleet.yaml"

    message = settings_error(config, "\n".join(lines) + "\n")

    assert "with its aliases written out it holds more than 10,000 values" in message


def test_a_small_config_file_still_reads(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    config = tmp_path / "skillfleet.yaml"
    config.write_text(f"skills:\n  paths: &paths [{shelf}]\n", encoding="utf-8")

    settings = Settings.from_env({"SKILLFLEET_CONFIG": str(config)})

    assert settings.skill_paths == (shelf,)
