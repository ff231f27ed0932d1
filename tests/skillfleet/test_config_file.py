"""Settings read at start: the config file (SKILLFLEET_CONFIG), read with the bounded YAML loader
of SKILL.md headers, and the liveness and chore timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.app import create_celery
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


def test_liveness_and_chore_timings_read_as_seconds_with_fractions() -> None:
    settings = Settings.from_env(
        {
            "SKILLFLEET_HEARTBEAT_SECONDS": "0.5",
            "SKILLFLEET_WORKER_ALIVE_SECONDS": "2",
            "SKILLFLEET_HOUSEKEEPING_SECONDS": "0.25",
            "SKILLFLEET_SWEEP_SECONDS": "3",
        }
    )
    assert (settings.heartbeat_seconds, settings.worker_alive_seconds) == (0.5, 2.0)
    assert (settings.housekeeping_seconds, settings.sweep_seconds) == (0.25, 3.0)
    assert Settings.from_env({}).worker_alive_seconds == 10.0


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"SKILLFLEET_HEARTBEAT_SECONDS": "soon"}, "must be a number of seconds"),
        ({"SKILLFLEET_SWEEP_SECONDS": "0"}, "must be more than 0 seconds"),
        ({"SKILLFLEET_HOUSEKEEPING_SECONDS": "nan"}, "must be more than 0 seconds"),
        ({"SKILLFLEET_HOUSEKEEPING_SECONDS": "inf"}, "must be more than 0 seconds"),
        ({"SKILLFLEET_WORKER_ALIVE_SECONDS": "3"}, "at least twice SKILLFLEET_HEARTBEAT_SECONDS"),
    ],
)
def test_unusable_timings_stop_start_up_with_the_variable_named(env: dict, words: str) -> None:
    with pytest.raises(SettingsError, match=words):
        Settings.from_env(env)


def test_beat_runs_the_housekeeping_and_the_sweep_at_the_settings_pace() -> None:
    app = create_celery(Settings(housekeeping_seconds=0.5, sweep_seconds=3), current=False)
    schedule = app.conf.beat_schedule
    assert schedule["housekeeping"]["schedule"] == 0.5
    assert schedule["sweep"]["schedule"] == 3


def test_the_mcp_approval_wait_comes_from_the_environment_or_the_config_file(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mcp:\n  approval_wait: 90\n", encoding="utf-8")
    assert Settings.from_env({"SKILLFLEET_CONFIG": str(config)}).mcp_approval_wait == 90.0
    both = {"SKILLFLEET_CONFIG": str(config), "SKILLFLEET_MCP_APPROVAL_WAIT": "30"}
    assert Settings.from_env(both).mcp_approval_wait == 30.0
    assert Settings.from_env({}).mcp_approval_wait == 240.0
    config.write_text("mcp:\n  approval_wait: soon\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="'mcp.approval_wait' in .* must be a number"):
        Settings.from_env({"SKILLFLEET_CONFIG": str(config)})
