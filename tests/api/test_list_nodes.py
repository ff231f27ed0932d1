"""list_nodes: each node's health from its workers' heartbeats, what it serves, and no secrets;
run_command is a destructive tool that a job may be granted."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis
from conftest import offer_node

from api.services import Services
from broker.policy import CallFacts, load_builtin_policy
from relay import heartbeat, naming
from store.db import transaction
from store.tokens import create_node_token


def register(services: Services, name: str) -> str:
    """Register `name` for alice, the owner the tests' tokens stand for; its node token."""
    offer_node(services, name)
    with transaction(services.sessions) as session:
        return create_node_token(session, name)


def beating(client: redis.Redis, name: str) -> heartbeat.Instance:
    instance = heartbeat.Instance(
        role="node", queue=naming.node_queue(name), name=name, features=["skills"]
    )
    heartbeat.beat(client, instance, alive_seconds=30)
    return instance


def test_a_node_whose_worker_beats_but_serves_nothing_is_not_alive_and_says_why(
    client, services, auth, agent_auth, live_redis
):
    name = f"ln-n-{uuid.uuid4().hex[:6]}"
    register(services, name)
    reason = "The standard environment could not be built: no package index answers."
    instance = heartbeat.Instance(
        role="node", queue=naming.node_queue(name), name=name, features=["skills"], reason=reason
    )
    heartbeat.beat(live_redis, instance, serving=False, alive_seconds=30)
    try:
        envelope = list_nodes(client, agent_auth)
        api = {node["name"]: node for node in client.get("/api/nodes", headers=auth).json}
    finally:
        heartbeat.stop(live_redis, instance)
    node = {node["name"]: node for node in envelope["result"]["nodes"]}[name]
    assert (node["health"], node["alive"], node["queues"]) == ("not_serving", False, [])
    assert [(w["alive"], w["serving"], w["reason"]) for w in node["workers"]] == [
        (True, False, reason)
    ]
    assert (api[name]["health"], api[name]["alive"]) == ("not_serving", False)


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


def test_list_nodes_takes_no_arguments_but_after_and_needs_a_token(client, agent_auth, live_redis):
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


# -- a fleet larger than a page ---------------------------------------------------------------


def fleet_owner(services: Services, count: int) -> tuple[int, dict[str, str], list[str]]:
    """A new owner with `count` nodes of its own (none beating): its id, auth and names."""
    from store import nodes
    from store.models import Owner
    from store.tokens import create_owner_token

    owner = f"fleet-{uuid.uuid4().hex[:8]}"
    names = [f"{owner}-n{index:03d}" for index in range(count)]
    with transaction(services.sessions) as session:
        token = create_owner_token(session, owner)
        for name in names:
            nodes.register(session, name, owner)
        owner_id = session.query(Owner.id).filter(Owner.name == owner).scalar()
    return owner_id, {"Authorization": f"Bearer {token}"}, names


def test_list_nodes_shows_a_large_fleet_a_page_at_a_time_each_node_once(
    client, services, live_redis
):
    from store.limits import LIST_NODES_SHOWN

    _, auth, names = fleet_owner(services, LIST_NODES_SHOWN + 7)
    pages, arguments = [], {}
    while True:
        envelope = list_nodes(client, auth, arguments)
        assert envelope["status"] == "done", envelope
        result = envelope["result"]
        pages.append(result)
        if result["next_after"] is None:
            break
        arguments = {"after": result["next_after"]}

    shown = [node["name"] for page in pages for node in page["nodes"]]
    mine = [name for name in shown if name in names]
    assert mine == names  # every node once, in name order
    assert [page["count"] for page in pages][0] == LIST_NODES_SHOWN
    assert all(page["total"] == len(shown) for page in pages)
    assert pages[0]["note"] == (
        f"{LIST_NODES_SHOWN} of {len(shown)} shown, by name; call list_nodes with "
        f'{{"after": "{pages[0]["next_after"]}"}} for the next ones.'
    )
    assert "note" not in pages[-1]


def test_list_nodes_refuses_an_after_that_is_not_a_name(client, services, live_redis):
    _, auth, _ = fleet_owner(services, 1)
    envelope = list_nodes(client, auth, {"after": 5})
    assert (envelope["status"], envelope["error"]["code"]) == ("failed", "invalid_call")


def test_a_refusal_names_live_nodes_among_the_first_it_checks_and_says_how_many_there_are(
    services, live_redis
):
    from broker.errors import NodeNotFound
    from broker.fleet import usable_node
    from store.limits import MAX_NODES_CHECKED

    owner_id, _, names = fleet_owner(services, MAX_NODES_CHECKED + 5)
    total = len(names)

    def refusal() -> str:
        try:
            usable_node(services.sessions, live_redis, owner_id, "not-one-of-them")
        except NodeNotFound as e:
            return e.message
        raise AssertionError("an unknown node was usable")

    beyond = beating(live_redis, names[-1])  # past the nodes a refusal checks
    try:
        none_checked = refusal()
        within = beating(live_redis, names[3])
        try:
            one = refusal()
        finally:
            heartbeat.stop(live_redis, within)
    finally:
        heartbeat.stop(live_redis, beyond)

    first = ", ".join(names[:10])
    assert none_checked == (
        "HOST: there is no node named 'not-one-of-them'; none of the first "
        f"{MAX_NODES_CHECKED} of your {total} nodes is running now ({first} and {total - 10} "
        "more; list_nodes shows them)."
    )
    assert one == (
        f"HOST: there is no node named 'not-one-of-them'; your nodes: {names[3]} (of the "
        f"first {MAX_NODES_CHECKED} of your {total}; list_nodes shows them all)."
    )


def test_the_nodes_api_pages_a_large_fleet_by_name_each_node_once(client, services, live_redis):
    _, auth, names = fleet_owner(services, 7)
    first = client.get("/api/nodes?page_size=3", headers=auth)
    shown, answer = [], first
    while True:
        assert answer.status_code == 200, answer.json
        shown += [node["name"] for node in answer.json]
        link = answer.headers.get("Link")
        if not link:
            break
        answer = client.get(link[1 : link.index(">")], headers=auth)

    assert [name for name in shown if name in names] == names
    assert len(shown) == len(set(shown)) and shown == sorted(shown)
    assert first.headers["X-Total-Count"] == str(len(shown))


@pytest.mark.both_databases
def test_list_nodes_after_a_hostile_name_is_refused_clearly(client, services, live_redis):
    _, auth, names = fleet_owner(services, 3)
    for after in ("../", "/", "../../etc/passwd", "a\x00b", "n" * 300, ""):
        envelope = list_nodes(client, auth, {"after": after})
        assert (envelope["status"], envelope["error"]["code"]) == ("failed", "invalid_call")
    envelope = list_nodes(client, auth, {"after": names[0]})
    assert [node["name"] for node in envelope["result"]["nodes"]] == names[1:]
