"""The impact line an owner reads on an approval: what the call puts at risk."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from broker.classify import CallPlan
from broker.commands import Command
from store.environment import INTERPRETERS


def warning_for(plan: CallPlan) -> str:
    """A sentence naming what this exact call can change."""
    if plan.tool.name == "run_skill_script":
        return _script_warning(plan)
    if plan.command is not None:
        return _command_warning(plan.command)
    if plan.tier == "web":
        host = (plan.grant_key or "").removeprefix("host:")
        return (
            f"This reads {plan.arguments.get('url')} from {host}; its text goes to the agent. "
            f"Approving for the whole chat (or job) lets it read any page of {host}."
        )
    if plan.tool.name == "edit_skill":
        return "This changes a skill's files; its scripts then run with the new content."
    if plan.tier == "destructive":
        return f"{plan.tool.name} can delete, interrupt or expose data. Check the arguments."
    return f"{plan.tool.name} changes state. Check the arguments before approving."


def _script_warning(plan: CallPlan) -> str:
    if plan.skill is None:
        return "This call names no installed skill; approving it will fail."
    where = {
        "node": f"as a process on the server {plan.node or '(no node named)'}",
        "spark": "in a throwaway container on the Spark",
        "sandbox": "in a micro-VM on a KVM host",
    }.get(plan.execution or plan.skill.execution, "on its runner")
    impact = {
        "destructive": "The skill says this script can delete, restart or run arbitrary "
        "commands; it can change anything it can reach there.",
        "change": "The script can change state wherever it runs.",
        "read": "The skill says this script only reads.",
    }.get(plan.tier, "")
    said = (
        f"This runs {plan.script} of the skill {plan.skill.name} "
        f"(hash {plan.skill.hash[:8]}) {where}. {impact}"
    ).strip()
    return " ".join([said, *_inputs(plan)])


def _inputs(plan: CallPlan) -> list[str]:
    """The exact command line, when it has arguments, and every file the run gets."""
    parts = []
    if plan.argv and plan.script is not None:
        interpreter = INTERPRETERS.get(PurePosixPath(plan.script).suffix, ())
        parts.append(f"Command line: {shlex.join([*interpreter, plan.script, *plan.argv])}")
    if plan.files:
        listed = ", ".join(
            f"{path} ({entry['size']:,} bytes, sha256 {entry['sha256'][:12]})"
            for path, entry in sorted(plan.files.items())
        )
        parts.append(f"Files in its working directory: {listed}.")
    return parts


def _command_warning(command: Command) -> str:
    """What runs where: the exact argv (quoted as a shell would read it) on the named node."""
    how = "through /bin/sh" if command.shell else "without a shell"
    if command.runs_as == "uid":
        who = (
            f"as a user of its own on {command.node} (not the worker's; it can't read other "
            "runs or the worker's files). It can change anything any user can change there"
        )
    else:
        who = (
            f"as the node worker's user on {command.node}. It can change anything that user "
            "can change there"
        )
    return f"This runs the command below {who}. It runs {how}: {shlex.join(command.argv)}"
