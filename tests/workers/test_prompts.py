"""The system prompt a turn starts with says how to use skills, which mode the turn is in, and
what skillfleet's own HOST: answers mean."""

from __future__ import annotations

import pytest

from workers.prompts import system_prompt


@pytest.mark.parametrize("mode", ["execute", "plan"])
def test_the_prompt_tells_the_model_to_load_a_skill_before_following_it(mode):
    prompt = system_prompt(mode)
    assert "Before you follow a skill, call load_skill" in prompt
    assert "never follow a skill from memory" in prompt
    assert "list_skills" in prompt and "run_skill_script" in prompt


def test_the_prompt_says_to_read_the_files_a_skill_names_with_read_skill_resource():
    prompt = system_prompt("execute")
    assert "read it with read_skill_resource" in prompt
    assert "relative to the skill's folder" in prompt


def test_the_prompt_says_what_a_host_result_is_and_not_to_repeat_the_call_unchanged():
    prompt = system_prompt("execute")
    assert "A result that starts with HOST: is skillfleet speaking, not a tool" in prompt
    assert "don't repeat the same call unchanged" in prompt


def test_the_prompt_names_the_turns_mode_and_only_that_one():
    plan, execute = system_prompt("plan"), system_prompt("execute")
    assert "This turn is in plan mode" in plan and "execute mode" not in plan
    assert "This turn is in execute mode" in execute and "plan mode" not in execute


def test_a_job_step_is_told_that_nobody_watches_and_an_owners_turn_is_not():
    assert "nobody is watching, so don't ask questions" in system_prompt("execute", True)
    assert "nobody is watching" not in system_prompt("execute")


def test_the_prompt_says_how_scripts_take_command_lines_and_files():
    prompt = system_prompt("execute")
    assert "gets it in `args`, one string per argument" in prompt
    assert "Files a script needs go in `files`" in prompt
