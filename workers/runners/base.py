"""What every runner shares: the job it gets, interpreters, environment, outcome."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from workers.runs import CANCELLED, FAILED, SUCCEEDED, TIMED_OUT, Outcome
from workers.streams import RunStream

CancelCheck = Callable[[], bool]

INTERPRETERS: dict[str, list[str]] = {
    ".py": ["python3"],
    ".sh": ["bash"],
    ".js": ["node"],
    ".mjs": ["node"],
    ".cs": ["dotnet", "run"],
}
# Scripts get the system's PATH, not the worker's: a worker's virtualenv or version-manager
# shims are no business of a skill's script (and shims cost ~100 ms per start).
SCRIPT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# .NET 10 file-based apps default to PublishAot, whose restore fetches the AOT compiler.
DOTNET_FLAGS = ["-p:PublishAot=false", "-p:NuGetAudit=false"]


@dataclass(frozen=True)
class Job:
    """One run as a runner sees it: ids, the script and its arguments, limits."""

    run_id: str
    skill_name: str
    skill_hash: str
    script: str
    arguments: dict[str, Any]
    timeout: int
    network: str = "none"
    execution: str = "node"


class Runner(Protocol):
    """Runs a job's script from a verified skill folder, streaming its output."""

    isolation: str

    def run(self, job: Job, folder: Path, stream: RunStream, cancelled: CancelCheck) -> Outcome: ...


def command_for(script: str) -> list[str]:
    """The interpreter command line for a script path, by its extension."""
    suffix = Path(script).suffix
    if suffix not in INTERPRETERS:
        raise ValueError(f"no interpreter for {suffix!r}")
    if suffix == ".cs":
        return [*INTERPRETERS[suffix], script, *DOTNET_FLAGS]
    return [*INTERPRETERS[suffix], script]


def script_environment(job: Job, base: dict[str, str] | None = None) -> dict[str, str]:
    """Arguments as JSON in SKILLFLEET_ARGS and, for seed skills, LUCIA_SKILL_ARGS."""
    encoded = json.dumps(job.arguments)
    env = {
        "PATH": SCRIPT_PATH,
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "DOTNET_CLI_TELEMETRY_OPTOUT": "1",
    }
    env.update(base or {})
    env["SKILLFLEET_ARGS"] = encoded
    env["LUCIA_SKILL_ARGS"] = encoded
    env["SKILLFLEET_RUN_ID"] = job.run_id
    return env


class OutputCollector:
    """Keeps the tail of each output stream for the Run row while publishing everything."""

    def __init__(self, stream: RunStream, keep: int = 64 * 1024) -> None:
        self.stream = stream
        self.keep = keep
        self.parts: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}

    def add(self, name: str, data: bytes) -> None:
        self.stream.output(name, data)
        buffer = self.parts[name]
        buffer.extend(data)
        if len(buffer) > self.keep * 2:
            del buffer[: len(buffer) - self.keep]

    def text(self, name: str) -> str:
        return bytes(self.parts[name][-self.keep :]).decode("utf-8", "replace")


def outcome_of(state: str | None, code: int, collector: OutputCollector, timeout: int) -> Outcome:
    """The Outcome of a script that stopped for `state` (None: it exited) with `code`."""
    stdout, stderr = collector.text("stdout"), collector.text("stderr")
    if state == TIMED_OUT:
        return Outcome(
            TIMED_OUT, code, stdout, stderr, f"The script ran past its {timeout} s limit."
        )
    if state == CANCELLED:
        return Outcome(CANCELLED, code, stdout, stderr, "The run was cancelled.")
    if code == 0:
        return Outcome(SUCCEEDED, 0, stdout, stderr)
    return Outcome(FAILED, code, stdout, stderr, f"The script exited with code {code}.")
