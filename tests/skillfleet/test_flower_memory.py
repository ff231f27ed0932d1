"""Flower keeps a bounded number of tasks in memory, as many as SKILLFLEET_FLOWER_MAX_TASKS,
and its tasks page shows how each ended."""

from __future__ import annotations

from flower.options import options
from flower.views.tasks import visible_task_columns

from skillfleet.flower import flower_command
from store.settings import Settings


def test_flower_is_told_to_keep_at_most_the_configured_number_of_tasks():
    settings = Settings.from_env({"SKILLFLEET_FLOWER_MAX_TASKS": "2000"})
    command = flower_command(settings)
    arguments = command[command.index("flower") :]  # the command line Flower's parser reads
    kept = {name: options[name] for name in options}
    try:
        options.parse_command_line(arguments, final=False)  # an unknown flag would raise
        assert options.max_tasks == 2000
        assert Settings.from_env({}).flower_max_tasks == 10_000  # Flower's own is 100,000
    finally:
        for name, value in kept.items():
            setattr(options, name, value)


def test_flower_s_tasks_page_shows_each_task_s_result_and_exception():
    command = flower_command(Settings.from_env({}))
    kept = {name: options[name] for name in options}
    try:
        options.parse_command_line(command[command.index("flower") :], final=False)
        shown = [label for _slug, label in visible_task_columns(options.tasks_columns)]
    finally:
        for name, value in kept.items():
            setattr(options, name, value)
    # A failed run's task names the run and its end in its exception (workers/outcomes.py).
    assert shown[:5] == ["Name", "UUID", "State", "Result", "Exception"]
