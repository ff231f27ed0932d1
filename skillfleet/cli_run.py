"""`skillfleet run SKILL SCRIPT`: run a script through the broker and stream its output live."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import click
import httpx

from skillfleet.client import Client, ClientError
from store.settings import ClientSettings
from store.states import CallStatus

# Exit codes for runs that ended without one of their own, as shells report them.
STATE_EXIT = {"timed_out": 124, "cancelled": 130, "interrupted": 137, "failed": 1}
# A long poll waits for the run's end too; short steps start streaming soon after approval.
WAIT_STEP_SECONDS = 1


@click.command("run")
@click.argument("skill")
@click.argument("script")
@click.option(
    "--node",
    default=None,
    help="Where to run: a node's name, or spark or sandbox (as the skill allows)",
)
@click.option("--args", "arguments", default="{}", help="The script's arguments as a JSON object")
@click.option("--chat-id", default="cli", show_default=True, help="The chat the call belongs to")
@click.option("--mode", type=click.Choice(["execute", "plan"]), default="execute")
def run(skill: str, script: str, node: str | None, arguments: str, chat_id: str, mode: str) -> None:
    """Run SCRIPT of SKILL, print its output as it comes, exit with the script's exit code."""
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as e:
        raise click.ClickException(f"--args is not valid JSON: {e.msg}.") from e
    tool_args: dict[str, Any] = {"skill_name": skill, "script": script, "arguments": parsed}
    if node is not None:
        tool_args["node"] = node
    client = Client(ClientSettings.from_env(), timeout=None)
    started: dict[str, str] = {}
    try:
        sys.exit(_run(client, tool_args, chat_id, mode, started))
    except ClientError as e:
        click.echo(f"Error ({e.code}): {e.message}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(_interrupted(client, started))


def _run(
    client: Client, tool_args: dict[str, Any], chat_id: str, mode: str, started: dict[str, str]
) -> int:
    body = {"arguments": tool_args, "chat_id": chat_id, "mode": mode}
    envelope = client.json("POST", "/api/tools/run_skill_script", json=body)
    if envelope["status"] == CallStatus.PENDING_APPROVAL:
        approval = envelope["approval_id"]
        started["approval_id"] = approval
        started["call_id"] = envelope["call_id"]
        click.echo(f"Waiting for the owner's approval {approval}; to answer it:", err=True)
        click.echo(f"  skillfleet approvals approve {approval}", err=True)
        envelope = _wait_for_answer(client, envelope["call_id"])
        started.pop("approval_id")
    if envelope.get("run_id") and envelope["status"] in (
        CallStatus.RUNNING,
        CallStatus.DONE,
        CallStatus.FAILED,
    ):
        started["run_id"] = envelope["run_id"]
        return stream_run(client, envelope["run_id"])
    return _report(envelope)


def _interrupted(client: Client, started: dict[str, str]) -> int:
    """Ctrl-C: cancel the run on the server, or withdraw the pending approval; exit 130."""
    if "run_id" in started:
        run_id = started["run_id"]
        try:
            client.json("POST", f"/api/runs/{run_id}/cancel")
            click.echo(f"\n[run {run_id} cancelled]", err=True)
        except ClientError as e:
            click.echo(f"\n[run {run_id}: {e.message}]", err=True)
    elif "approval_id" in started:
        approval = started["approval_id"]
        try:  # the dropped wait withdrew it already, unless the API missed the disconnect
            client.json("POST", f"/api/calls/{started['call_id']}/withdraw")
        except ClientError:
            pass  # withdrawn already, or answered just now
        click.echo(f"\n[stopped waiting; approval {approval} withdrawn]", err=True)
    return STATE_EXIT["cancelled"]


def _wait_for_answer(client: Client, call_id: str) -> dict[str, Any]:
    while True:
        call = client.json("GET", f"/api/calls/{call_id}", params={"wait": WAIT_STEP_SECONDS})
        if call["status"] != CallStatus.PENDING_APPROVAL:
            return {
                "call_id": call_id,
                "status": call["status"],
                "run_id": call.get("run_id"),
                "result": call.get("result"),
                "error": {"code": call["error_code"], "message": call["error_message"]}
                if call.get("error_code")
                else None,
            }


def _report(envelope: dict[str, Any]) -> int:
    if envelope.get("error"):
        error = envelope["error"]
        click.echo(f"{envelope['status']}: {error['message']} ({error['code']})", err=True)
        return 1
    click.echo(json.dumps(envelope.get("result"), indent=2))
    return 0


def stream_run(client: Client, run_id: str) -> int:
    """Follow the run's SSE stream, reconnecting with Last-Event-ID if the connection drops."""
    last_id = "0-0"
    for _attempt in range(20):
        try:
            for event_id, kind, data in _events(client, run_id, last_id):
                last_id = event_id
                if kind == "stdout":
                    sys.stdout.write(data.get("text", ""))
                    sys.stdout.flush()
                elif kind == "stderr":
                    sys.stderr.write(data.get("text", ""))
                    sys.stderr.flush()
                elif kind == "exit":
                    return _finished(run_id, data)
        except httpx.HTTPError:
            time.sleep(0.5)
    raise ClientError("Lost the run's output stream; see `GET /api/runs/<id>`.")


def _events(client: Client, run_id: str, last_id: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    headers = {"Last-Event-ID": last_id, "Accept": "text/event-stream"}
    with client.http.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as response:
        if response.status_code >= 400:
            response.read()
            client.request("GET", f"/api/runs/{run_id}")  # raises the API's error
        event_id, kind, data = last_id, "message", ""
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "" and data:
                yield event_id, kind, json.loads(data)
                kind, data = "message", ""


def _finished(run_id: str, data: dict[str, Any]) -> int:
    state = data.get("status", "failed")
    code = data.get("exit_code")
    click.echo(f"[run {run_id} {state}, exit code {code}]", err=True)
    if isinstance(code, int) and state in ("succeeded", "failed"):
        return code
    return STATE_EXIT.get(state, 1)
