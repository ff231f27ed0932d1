"""list_nodes: each node's health from its workers' heartbeats, what it serves, and no secrets;
run_command is a destructive tool that a job may be granted."""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis

from api.services import Services
from broker.policy import CallFacts, load_builtin_policy
from relay import heartbeat, naming
from store.db import transaction
from store.models import Node
from store.tokens import create_node_token


def register(services: Services, name: str) -> str:
    with transaction(services.sessions) as session:
        session.add(Node(name=name))
        return create_node_token(session, name)


def beating(client: redis.Redis, name: str) -> heartbeat.Instance:
    instance = heartbeat.Instance(
        role="node", queue=naming.node_queue(name), name=name, features=["skills"]
    )
    heartbeat.beat(client, instance, alive_seconds=30)
    return instance


def past_its_window(client: redis.Redis, instance: heartbeat.Instance) -> None:
    """The worker's last beat as it stands once its alive window ran out: it stopped beating."""
    until = time.time() - 1
    client.zadd(naming.all_workers(), {instance.id: until})
    client.zadd(naming.queue_workers(instance.queue), {instance.id: until})
    client.hset(naming.worker_key(instance.id), "until", until)


def list_nodes(client: Any, headers: dict[str, str], arguments: Any = None) -> dict[str, Any]:
    body = {"arguments": {} if arguments is None else arguments, "chat_id": "fleet"}
    response = client.post("/api/tools/list_nodes", headers=headers, json=body)
    assert response.status_code == 200, response.json
    return dict(response.json)


def test_list_nodes_tells_alive_stale_and_down_nodes_apart_and_shows_no_token(
    client, services, agent_auth, auth, live_redis
):
    live, stale, down = (f"ln-{kind}-{uuid.uuid4().hex[:6]}" for kind in ("a", "s", "d"))
    tokens = [register(services, name) for name in (live, stale, down)]
    workers = [beating(live_redis, live), beating(live_redis, stale)]
    past_its_window(live_redis, workers[1])
    try:
        envelope = list_nodes(client, agent_auth)
        api = {node["name"]: node for node in client.get("/api/nodes", headers=auth).json}
    finally:
        for instance in workers:
            heartbeat.stop(live_redis, instance)
    assert envelope["status"] == "done", envelope
    nodes = {node["name"]: node for node in envelope["result"]["nodes"]}
    assert envelope["result"]["count"] == len(nodes)
    assert (nodes[live]["health"], nodes[live]["alive"]) == ("alive", True)
    assert nodes[live]["queues"] == [f"node.{live}"] and nodes[live]["features"] == ["skills"]
    assert (nodes[stale]["health"], nodes[stale]["alive"]) == ("stale", False)
    assert nodes[stale]["last_heartbeat"] is not None
    assert (nodes[down]["health"], nodes[down]["last_heartbeat"]) == ("down", None)
    for name in (live, stale, down):  # the nodes API's view, less the package hashes
        assert nodes[name] == {k: v for k, v in api[name].items() if k != "hashes"}
    shown = str(envelope)
    assert not any(token in shown for token in tokens)


def test_list_nodes_takes_no_arguments_and_needs_a_token(client, agent_auth, live_redis):
    envelope = list_nodes(client, agent_auth, {"node": "x"})
    assert (envelope["status"], envelope["error"]["code"]) == ("failed", "invalid_call")
    response = client.post("/api/tools/list_nodes", json={"arguments": {}})
    assert response.status_code == 401


def test_run_command_is_destructive_and_a_job_may_be_granted_it(client, auth, agent_auth):
    tools = {d["function"]["name"]: d for d in client.get("/api/tools", headers=agent_auth).json}
    assert tools["run_command"]["function"]["parameters"]["required"] == ["node", "command"]
    job = {
        "name": "restart nightly",
        "cron": "0 3 * * *",
        "time_zone": "UTC",
        "steps": [{"tool": "run_command", "arguments": {"node": "web01", "command": "true"}}],
        "grants": {"tools": ["run_command"], "skills": []},
        "skills": None,
        "enabled": False,
    }
    response = client.post("/api/jobs", headers=auth, json=job)
    assert response.status_code == 201, response.json
    assert response.json["grants"]["tools"] == ["run_command"]
    policy = load_builtin_policy()
    asked = CallFacts("run_command", "destructive")
    assert policy.decide(asked).action == "require_approval"
    granted = CallFacts("run_command", "destructive", in_job=True, job_granted=True)
    assert policy.decide(granted).rule == "job-granted"
    assert policy.decide(granted).action == "allow"
    # A chat's grant never lets it run: destructive calls always ask in a chat.
    chat_granted = CallFacts("run_command", "destructive", granted=True, owner_allowed=True)
    assert policy.decide(chat_granted).action == "require_approval"
