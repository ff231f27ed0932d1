"""Every tool with its tier for the owner's settings page, and which of them a setting or a
job's grants can name."""

from __future__ import annotations

from sqlalchemy import select

from api.bodies import MAX_BODY_BYTES
from broker.classify import RUN
from broker.grants import OWNER, OWNER_SUBJECT, tool_key
from store.db import transaction
from store.models import Grant, Owner


def tools(client, auth) -> dict[str, dict[str, object]]:
    response = client.get("/api/settings/tools?page_size=100", headers=auth)
    assert response.status_code == 200, response.json
    assert response.headers["X-Total-Count"] == str(len(response.json))
    return {tool["name"]: tool for tool in response.json}


def test_every_tool_is_listed_with_its_tier_and_what_may_be_granted(client, auth, services):
    listed = tools(client, auth)
    registry = services.broker.registry
    assert set(listed) == {tool.name for tool in registry if tool.implemented}
    for name, tool in listed.items():
        assert tool["tier"] == str(registry.get(name).tier), name
    assert listed["load_skill"]["aliases"] == ["activate_skill"]
    run_command = listed["run_command"]
    assert run_command["tier"] == "destructive"
    assert run_command["job_may_grant"] and not run_command["owner_may_allow"]
    script = listed["run_skill_script"]  # each skill's tier: the skill is granted, not the tool
    assert not script["owner_may_allow"] and not script["job_may_grant"]
    assert not any(tool["runs_without_asking"] for tool in listed.values())
    assert not any(t["owner_may_allow"] for t in listed.values() if t["tier"] != "change")


def test_run_skill_script_is_refused_as_a_setting_with_what_to_allow_instead(client, auth):
    refused = client.put("/api/settings", headers=auth, json={"auto_tools": ["run_skill_script"]})
    assert refused.status_code == 422 and refused.json["code"] == "invalid_setting"
    assert "skill:<name>@<hash8>" in refused.json["message"]


def test_the_tool_list_is_the_owners_alone(client, auth, agent_auth):
    assert client.get("/api/settings/tools").status_code == 401
    as_agent = client.get("/api/settings/tools", headers=agent_auth)
    assert as_agent.status_code == 403 and as_agent.json["code"] == "owner_only"
    for bad in ("..%2F..", "a%00b", "x" * 300, "run_command"):
        assert client.get(f"/api/settings/tools/{bad}", headers=auth).status_code in (404, 405)
    for method in ("put", "post", "delete"):
        answered = getattr(client, method)("/api/settings/tools", headers=auth, json={})
        assert answered.status_code == 405, method
    huge = client.post(
        "/api/settings/tools",
        headers={**auth, "Content-Type": "application/json"},
        data=b"[" + b"1," * (MAX_BODY_BYTES // 2) + b"1]",
    )
    assert huge.status_code in (405, 413)
    bad_cursor = client.get("/api/settings/tools?cursor=x", headers=auth)
    assert bad_cursor.status_code == 400 and bad_cursor.json["code"] == "invalid_cursor"
    bad_size = client.get("/api/settings/tools?page_size=many", headers=auth)
    assert bad_size.status_code == 422


def test_a_tool_key_in_the_settings_is_shown_ticked_for_its_owner_alone(
    client, auth, other_auth, services
):
    # No change tool but run_skill_script is built in, and PUT refuses that one: its key is
    # written as an older release could have.
    with transaction(services.sessions) as session:
        alice = session.scalar(select(Owner.id).where(Owner.name == "alice"))
        session.add(Grant(owner_id=alice, scope=OWNER, subject=OWNER_SUBJECT, key=tool_key(RUN)))
    assert tools(client, auth)[RUN]["runs_without_asking"]
    assert not tools(client, other_auth)[RUN]["runs_without_asking"]
