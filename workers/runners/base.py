"""What every runner shares: the job it gets, interpreters, command line, environment, outcome."""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from broker.runs import Outcome
from relay.streams import RunStream
from store import environment
from store.commandline import Entry, command_line
from store.frontmatter import read_loose
from store.leniency import read_header
from store.limits import COALESCE_BYTES, KEPT_OUTPUT_CHARS, STATUS_DELAY_SECONDS
from store.schemas import argv_of
from store.states import RunStatus
from workers.runfiles import RunFiles
from workers.secrets import Redactor

CancelCheck = Callable[[], bool]

# By extension, from the standard environment every tier has (store/environment.py).
INTERPRETERS: dict[str, list[str]] = {
    suffix: list(command) for suffix, command in environment.INTERPRETERS.items()
}
# Scripts get the system's PATH, not the worker's: a worker's virtualenv or version-manager
# shims are no business of a skill's script (and shims cost ~100 ms per start).
SCRIPT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# .NET 10 file-based apps default to PublishAot, whose restore fetches the AOT compiler.
DOTNET_FLAGS = ["-p:PublishAot=false", "-p:NuGetAudit=false"]
# `dotnet run` reads options up to "--"; what follows goes to the program.
DOTNET_END = "--"


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
    argv: tuple[str, ...] = ()  # after the script's path, as its schema declares (script_argv)
    # A Python script that needs its package runs as its module (interpreters.needs_package);
    # any other by its path.
    as_module: bool = True
    # The owner's secrets the skill declares, as environment variables; never shown in a repr.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    command: tuple[str, ...] = ()  # run_command: the whole argv, run instead of a script
    # The call's files for the working directory (path to {id, size, sha256}), and the channel
    # that fetches them and sends back what the run made (None: no files travel).
    inputs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    files: RunFiles | None = field(default=None, repr=False, compare=False)


class Runner(Protocol):
    """Runs a job's script from a verified skill folder, streaming its output.

    Output still buffered when the script ends may stay pending in the stream: it goes out
    with the run's exit event, which the caller always sends.
    """

    isolation: str

    def run(self, job: Job, folder: Path, stream: RunStream, cancelled: CancelCheck) -> Outcome: ...


@runtime_checkable
class CommandRunner(Protocol):
    """A runner that also runs run_command's commands (the node runner)."""

    def run_command(self, job: Job, stream: RunStream, cancelled: CancelCheck) -> Outcome: ...


def command_for(script: str, argv: Sequence[str] = ()) -> list[str]:
    """The interpreter command line for a script path, by its extension, then `argv`.

    Each of `argv` is one argument of the script: the list is executed, never read by a shell,
    and every interpreter stops reading options of its own at the script's path.
    """
    suffix = Path(script).suffix
    if suffix not in INTERPRETERS:
        raise ValueError(f"no interpreter for {suffix!r}")
    if suffix == ".cs":
        end = [DOTNET_END, *argv] if argv else []
        return [*INTERPRETERS[suffix], script, *DOTNET_FLAGS, *end]
    return [*INTERPRETERS[suffix], script, *argv]


def script_argv(
    folder: Path, skill_name: str, skill_hash: str, script: str, arguments: Mapping[str, Any]
) -> tuple[str, ...]:
    """The command-line arguments of a run's script, as the skill in `folder` declares them.

    `folder` holds the verified files of `skill_hash`: the declaration is read from there, not
    from anything the run's message or row carries. Raises CommandLineError (a HOST: sentence)
    when the arguments can't make a safe command line.
    """
    declared = _declared_argv(str(folder), skill_name, skill_hash, script)
    return tuple(command_line(declared, arguments)) if declared else ()


@functools.lru_cache(maxsize=512)
def _declared_argv(folder: str, name: str, skill_hash: str, script: str) -> tuple[Entry, ...]:
    """Read once per hash and script: a hash names the skill's files for good."""
    loose = read_loose((Path(folder) / "SKILL.md").read_bytes())
    return argv_of(read_header(loose.header, loose.body, name), script)


def script_environment(job: Job, base: dict[str, str] | None = None) -> dict[str, str]:
    """Arguments as JSON in SKILLFLEET_ARGS and, for seed skills, LUCIA_SKILL_ARGS."""
    encoded = json.dumps(job.arguments)
    env = {
        **job.secrets,  # first: the runner's own variables below win over a secret's name
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
    """Keeps the tail of each output stream for the Run row while publishing everything.

    With `coalesce_seconds`, output is published in bursts: what arrived within that window
    after the first byte (up to COALESCE_BYTES) becomes one stream entry, not one per write.
    A burst that opens after a quiet window goes out as soon as it holds whole lines, as a
    terminal would show it (a print's text and its newline may come as two writes); what follows
    within the window waits for the window's end.
    The caller then waits at most `wait_left()` and calls `flush_due()`, and `flush()` at the end.

    `started` notes the run's "running" status; it goes out with the first output, or alone
    STATUS_DELAY_SECONDS after the start, so a short run's status and output share one round trip.
    """

    def __init__(
        self,
        stream: RunStream,
        keep: int = KEPT_OUTPUT_CHARS,
        coalesce_seconds: float = 0,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        self.stream = stream
        # Each secret's value is replaced before output is kept or published.
        self.redactors = {name: Redactor(secrets or {}) for name in ("stdout", "stderr")}
        self.keep = keep
        self.coalesce_seconds = coalesce_seconds
        self.parts: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.pending: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.flush_at: float | None = None
        self.published_at = -math.inf  # when the last entry went out
        self.quiet_burst = False  # the burst buffered now opened a window after the last entry

    def started(self, **details: Any) -> None:
        self.stream.status_later("running", **details)
        if self.flush_at is None:
            self.flush_at = time.monotonic() + STATUS_DELAY_SECONDS

    def add(self, name: str, data: bytes) -> None:
        redactor = self.redactors[name]
        if redactor:
            data = redactor.feed(data)
            if not data:
                return
        buffer = self.parts[name]
        buffer.extend(data)
        if len(buffer) > self.keep * 2:
            del buffer[: len(buffer) - self.keep]
        if self.coalesce_seconds <= 0:
            self.stream.output(name, data)
            return
        pending = self.pending[name]
        if not any(self.pending.values()):  # the first byte of a burst: publish within the window
            now = time.monotonic()
            self.quiet_burst = now - self.published_at >= self.coalesce_seconds
            burst_ends = now + self.coalesce_seconds
            self.flush_at = burst_ends if self.flush_at is None else min(self.flush_at, burst_ends)
        pending.extend(data)
        if self.quiet_burst and all(part.endswith(b"\n") for part in self.pending.values() if part):
            self.flush()
        elif len(pending) >= COALESCE_BYTES:
            self._publish(name)

    def wait_left(self) -> float | None:
        """Seconds until buffered output is due, None when nothing waits."""
        if self.flush_at is None:
            return None
        return max(0.0, self.flush_at - time.monotonic())

    def flush_due(self) -> None:
        if self.flush_at is not None and time.monotonic() >= self.flush_at:
            self.flush()

    def flush(self) -> None:
        """Publish what is buffered, with the stream's pending entries, in one round trip."""
        self._hand_over()
        self.stream.send_pending()
        self.published_at = time.monotonic()

    def finish(self) -> None:
        """At the script's end: what is still buffered goes out with the run's exit event.

        One round trip less for a short run, whose only output usually arrives within the
        window; whoever ends the run sends it (`RunStream.exit`, or `send_pending`).
        """
        self._hand_over()

    def _hand_over(self) -> None:
        """Move the buffered output to the stream's pending entries."""
        for name in self.pending:
            self._publish(name, later=True)
        self.flush_at = None

    def _publish(self, name: str, later: bool = False) -> None:
        pending = self.pending[name]
        if pending:
            self.stream.output(name, bytes(pending), later=later)
            pending.clear()
            if not later:
                self.published_at = time.monotonic()
                self.quiet_burst = False  # a burst cut at the byte limit: the rest waits
        if not any(self.pending.values()):
            self.flush_at = None  # the next byte opens a new burst

    def release(self) -> None:
        """At the end: output held back as a possible start of a secret goes out after all."""
        for name, redactor in self.redactors.items():
            held = redactor.release()
            if held:
                self.parts[name].extend(held)
                self.stream.output(name, held, later=True)

    def text(self, name: str) -> str:
        return bytes(self.parts[name][-self.keep :]).decode("utf-8", "replace")


def outcome_of(state: str | None, code: int, collector: OutputCollector, timeout: int) -> Outcome:
    """The Outcome of a script that stopped for `state` (None: it exited) with `code`."""
    collector.release()
    stdout, stderr = collector.text("stdout"), collector.text("stderr")
    if state == RunStatus.TIMED_OUT:
        return Outcome(
            RunStatus.TIMED_OUT, code, stdout, stderr, f"The script ran past its {timeout} s limit."
        )
    if state == RunStatus.CANCELLED:
        return Outcome(RunStatus.CANCELLED, code, stdout, stderr, "The run was cancelled.")
    if code == 0:
        return Outcome(RunStatus.SUCCEEDED, 0, stdout, stderr)
    return Outcome(RunStatus.FAILED, code, stdout, stderr, f"The script exited with code {code}.")
