"""Model sources through the API: sources kept per owner with sealed keys, their model lists
(or why there are none), LiteLLM virtual keys minted with the operator's master key, and the
default model picked from a source. The sources are stand-ins on 127.0.0.1, which the settings
allow as an operator lists a local model server in SKILLFLEET_EGRESS_ALLOW.
"""

from __future__ import annotations

import json

import pytest
from conftest import REDIS_URL
from litellm_standin import MASTER_KEY, MODELS, litellm_standin
from sqlalchemy import select
from trickle import trickling

from broker.modelaccess import list_models
from store.deadlines import Deadline
from store.egress import Egress
from store.limits import MAX_MODEL_SOURCES
from store.models import ModelSource
from store.secrets import Sealer
from store.settings import Settings

SOURCES = "/api/model-sources"


@pytest.fixture
def litellm():
    with litellm_standin() as proxy:
        yield proxy


@pytest.fixture
def settings(tmp_path, database_url, litellm) -> Settings:
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        egress_allow=("127.0.0.1",), litellm_url=litellm.url, litellm_master_key=MASTER_KEY,
    )  # fmt: skip


def add(client, auth, **body):
    return client.post(SOURCES, headers=auth, json=body)


def test_an_owner_keeps_several_sources_whose_keys_are_sealed_and_never_shown(
    client, auth, services, settings, litellm
):
    first = add(client, auth, name="local", base_url=f"{litellm.url}/v1/", api_key="sk-local")
    assert first.status_code == 201, first.json
    assert first.json["base_url"] == f"{litellm.url}/v1" and first.json["api_key_set"] is True
    assert "sk-local" not in json.dumps(first.json)
    second = add(client, auth, name="cloud", base_url="http://127.0.0.1:9/v1")
    assert second.status_code == 201 and second.json["api_key_set"] is False
    listed = client.get(SOURCES, headers=auth).json
    assert [s["name"] for s in listed] == ["cloud", "local"]
    # Replaced without a key: the key stays.
    again = add(client, auth, name="local", base_url=f"{litellm.url}/v1", kind="openai")
    assert again.status_code == 201 and again.json["api_key_set"] is True
    with services.sessions() as session:
        row = session.scalar(select(ModelSource).where(ModelSource.name == "local"))
    assert "sk-local" not in row.api_key
    assert Sealer(settings.keys_dir).unseal(row.api_key) == "sk-local"
    assert client.delete(f"{SOURCES}/cloud", headers=auth).status_code == 204
    assert client.get(f"{SOURCES}/cloud", headers=auth).status_code == 404


def test_sources_are_the_owners_alone(client, auth, agent_auth, other_auth, litellm):
    add(client, auth, name="local", base_url=f"{litellm.url}/v1")
    refused = add(client, agent_auth, name="mine", base_url=f"{litellm.url}/v1")
    assert refused.status_code == 403 and refused.json["code"] == "owner_only"
    for method in ("get", "delete"):
        answer = getattr(client, method)(f"{SOURCES}/local", headers=agent_auth)
        assert answer.status_code == 403 and answer.json["code"] == "owner_only"
    for path in (f"{SOURCES}/local", f"{SOURCES}/local/models"):
        answer = client.get(path, headers=other_auth)
        assert answer.status_code == 404 and answer.json["code"] == "source_not_found"
    gone = client.delete(f"{SOURCES}/local", headers=other_auth)
    assert gone.status_code == 404
    assert client.get(SOURCES, headers=other_auth).json == []
    assert client.get(SOURCES).status_code == 401
    assert [s["name"] for s in client.get(SOURCES, headers=auth).json] == ["local"]


@pytest.mark.parametrize("name", ["../x", "a/b", "a\x00b", "a" * 300, "Upper", "-x", ""])
def test_a_bad_source_name_is_refused_and_nothing_is_stored(client, auth, name, litellm):
    answer = add(client, auth, name=name, base_url=f"{litellm.url}/v1")
    assert answer.status_code == 422, answer.json
    assert answer.json["code"] in ("source_invalid", "invalid_request")
    assert client.get(SOURCES, headers=auth).json == []


@pytest.mark.parametrize("path", ["..%2Fx", "a%00b", "a" * 300, "x%2F..%2F..%2Fetc"])
def test_a_bad_name_in_the_path_finds_no_source(client, auth, path):
    for method in ("get", "delete"):
        answer = getattr(client, method)(f"{SOURCES}/{path}", headers=auth)
        assert answer.status_code == 404, (method, path)
    assert client.get(f"{SOURCES}/{path}/models", headers=auth).status_code == 404


def test_wrong_shapes_and_oversize_bodies_are_refused(client, auth, litellm):
    for body in ([], "x", {"name": "a"}, {"name": 1, "base_url": f"{litellm.url}/v1"},
                 {"name": "a", "base_url": f"{litellm.url}/v1", "virtual_key": "yes"}):  # fmt: skip
        answer = client.post(SOURCES, headers=auth, json=body)
        assert answer.status_code == 422, body
    huge = {"name": "a", "base_url": f"{litellm.url}/v1", "api_key": "k" * 5_000_000}
    assert client.post(SOURCES, headers=auth, json=huge).status_code in (413, 422)
    assert client.get(SOURCES, headers=auth).json == []


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.7/v1", "http://169.254.169.254/v1", "http://localhost:11434/v1",
     "http://[::1]:8000/v1", "http://127.0.0.2/v1"],
)  # fmt: skip
def test_a_private_source_address_is_refused_unless_the_operator_allows_it(client, auth, url):
    answer = add(client, auth, name="inside", base_url=url, api_key="sk-x")
    assert answer.status_code == 422 and answer.json["code"] == "source_refused_address"
    assert "SKILLFLEET_EGRESS_ALLOW" in answer.json["message"]
    assert client.get(SOURCES, headers=auth).json == []


def test_a_source_lists_its_models_or_says_why_it_cannot(client, auth, litellm):
    litellm.static_keys.add("sk-good")
    add(client, auth, name="good", base_url=f"{litellm.url}/v1", api_key="sk-good")
    add(client, auth, name="bad-key", base_url=f"{litellm.url}/v1", api_key="sk-wrong")
    add(client, auth, name="down", base_url="http://127.0.0.1:9/v1")
    listed = client.get(f"{SOURCES}/good/models", headers=auth)
    assert listed.status_code == 200
    assert listed.json == {"source": "good", "models": sorted(MODELS), "error": None}
    refused = client.get(f"{SOURCES}/bad-key/models", headers=auth).json
    assert refused["models"] == [] and refused["error"]["code"] == "source_key_refused"
    assert "HTTP 401 (Unauthorized)" in refused["error"]["message"]
    assert "sk-wrong" not in json.dumps(refused)
    down = client.get(f"{SOURCES}/down/models", headers=auth).json
    assert down["error"] == {
        "code": "source_unreachable",
        "message": "The source at http://127.0.0.1:9/v1 can't be reached.",
    }
    litellm.models_body = b"<html>internal page</html>"
    odd = client.get(f"{SOURCES}/good/models", headers=auth).json
    assert odd["error"]["code"] == "source_bad_answer" and "internal" not in odd["error"]["message"]


def test_a_source_that_never_answers_fails_its_list_at_the_deadline():
    with trickling("head", every=0.5) as slow:
        with pytest.raises(Exception) as failed:
            list_models(f"{slow.url}/v1", None, Egress(["127.0.0.1"]), Deadline.after(1))
    assert failed.value.code == "source_unreachable"
    assert failed.value.message.endswith("did not answer within 1 seconds.")


def test_a_source_whose_address_is_no_longer_allowed_lists_nothing(litellm):
    with pytest.raises(Exception) as failed:
        list_models(f"{litellm.url}/v1", None, Egress())
    assert failed.value.code == "source_refused_address"
    assert "a loopback address" in failed.value.message


def test_a_litellm_source_mints_a_virtual_key_per_owner_and_mints_again_when_refused(
    client, auth, services, litellm
):
    added = add(client, auth, name="team", kind="litellm", virtual_key=True)
    assert added.status_code == 201, added.json
    assert (
        added.json["base_url"] == f"{litellm.url}/v1" and added.json["virtual_key_minted"] is False
    )
    listed = client.get(f"{SOURCES}/team/models", headers=auth).json
    assert listed["models"] == sorted(MODELS) and listed["error"] is None
    assert litellm.mints == [
        {"metadata": {"skillfleet_owner": "alice", "skillfleet_source": "team"}}
    ]
    assert client.get(f"{SOURCES}/team", headers=auth).json["virtual_key_minted"] is True
    # The same key serves again; once LiteLLM refuses it, a new one is minted once.
    client.get(f"{SOURCES}/team/models", headers=auth)
    assert len(litellm.mints) == 1
    litellm.revoke()
    assert client.get(f"{SOURCES}/team/models", headers=auth).json["error"] is None
    assert litellm.minted == ["sk-virtual-1", "sk-virtual-2"]
    # A proxy refusing every key: one more mint, then the refusal is said as such.
    litellm.refuse_everything = True
    refused = client.get(f"{SOURCES}/team/models", headers=auth).json
    assert refused["error"]["code"] == "source_key_refused" and len(litellm.minted) == 3
    everything = json.dumps([client.get(SOURCES, headers=auth).json, refused])
    assert MASTER_KEY not in everything and "sk-virtual" not in everything


def test_virtual_keys_are_only_for_the_operators_litellm(client, auth, litellm, services):
    elsewhere = add(client, auth, name="x", kind="litellm", virtual_key=True,
                    base_url="http://127.0.0.1:9/v1")  # fmt: skip
    assert elsewhere.status_code == 422 and elsewhere.json["code"] == "virtual_keys_unavailable"
    openai = add(client, auth, name="y", virtual_key=True, base_url=f"{litellm.url}/v1")
    assert openai.status_code == 422 and openai.json["code"] == "source_invalid"
    assert litellm.mints == [] and client.get(SOURCES, headers=auth).json == []


def test_the_default_model_names_a_source_of_the_owners(client, auth, agent_auth, litellm):
    add(client, auth, name="local", base_url=f"{litellm.url}/v1", api_key="sk-local")
    body = {
        "source": "local",
        "model": "gpt-5-mini",
        "reasoning_effort": "low",
        "context": "medium",
    }
    picked = client.put("/api/settings/model", headers=auth, json=body)
    assert picked.status_code == 200, picked.json
    assert picked.json == {
        "source": "local", "model": "gpt-5-mini", "reasoning_effort": "low", "context": "medium",
        "base_url": f"{litellm.url}/v1", "name": "gpt-5-mini", "api_key_set": True,
    }  # fmt: skip
    tokens = client.put("/api/settings/model", headers=auth, json={**body, "context": 50_000})
    assert tokens.json["context"] == 50_000
    bad = [
        ({**body, "source": "nowhere"}, "unknown_source"),
        ({**body, "reasoning_effort": "extreme"}, "invalid_request"),
        ({**body, "context": "huge"}, "invalid_setting"),
        ({**body, "context": 10}, "invalid_setting"),
        ({"source": "local"}, "invalid_request"),
        ({**body, "base_url": f"{litellm.url}/v1"}, "invalid_request"),
    ]
    for sent, code in bad:
        answer = client.put("/api/settings/model", headers=auth, json=sent)
        assert answer.status_code == 422 and answer.json["code"] == code, (sent, answer.json)
    refused = client.put("/api/settings/model", headers=agent_auth, json=body)
    assert refused.status_code == 403 and refused.json["code"] == "owner_only"
    assert client.get("/api/settings/model", headers=auth).json["context"] == 50_000
    in_use = client.delete(f"{SOURCES}/local", headers=auth)
    assert in_use.status_code == 409 and in_use.json["code"] == "source_in_use"
    assert "default model" in in_use.json["message"]


def test_a_job_names_its_own_model_or_is_refused(client, auth, litellm):
    add(client, auth, name="local", base_url=f"{litellm.url}/v1")
    job = {"name": "m", "cron": "0 7 * * *", "steps": [{"prompt": "hi"}]}
    unknown = client.post("/api/jobs", headers=auth, json={**job, "source": "x", "model": "m"})
    assert unknown.status_code == 422 and unknown.json["code"] == "unknown_source"
    alone = client.post("/api/jobs", headers=auth, json={**job, "source": "local"})
    assert alone.status_code == 422 and alone.json["code"] == "job_invalid"
    made = client.post(
        "/api/jobs", headers=auth,
        json={**job, "source": "local", "model": "gpt-5-mini", "reasoning_effort": "high",
              "context": 20_000},
    )  # fmt: skip
    assert made.status_code == 201, made.json
    shown = {k: made.json[k] for k in ("source", "model", "reasoning_effort", "context")}
    assert shown == {"source": "local", "model": "gpt-5-mini", "reasoning_effort": "high",
                     "context": 20_000}  # fmt: skip
    in_use = client.delete(f"{SOURCES}/local", headers=auth)
    assert in_use.status_code == 409 and "the job 'm'" in in_use.json["message"]
    plain = client.post("/api/jobs", headers=auth, json={**job, "name": "n"}).json
    assert plain["source"] is None and plain["context"] is None


def test_the_first_form_of_the_model_setting_writes_the_default_source_and_picks_it(
    client, auth, litellm
):
    first = {"base_url": f"{litellm.url}/v1", "name": "local-llama", "api_key": "sk-first"}
    answer = client.put("/api/settings/model", headers=auth, json=first)
    assert answer.status_code == 200, answer.json
    assert answer.json["source"] == "default" and answer.json["model"] == "local-llama"
    [source] = client.get(SOURCES, headers=auth).json
    assert (source["name"], source["kind"], source["api_key_set"]) == ("default", "openai", True)
    # The new form picks another model on it; the first form again keeps the tier.
    body = {"source": "default", "model": "gpt-5-mini", "context": "small"}
    assert client.put("/api/settings/model", headers=auth, json=body).status_code == 200
    again = client.put("/api/settings/model", headers=auth, json={**first, "name": "m2"}).json
    assert (again["model"], again["context"], again["api_key_set"]) == ("m2", "small", True)
    assert client.delete("/api/settings/model", headers=auth).status_code == 204
    assert client.get("/api/settings/model", headers=auth).json["source"] is None
    assert [s["name"] for s in client.get(SOURCES, headers=auth).json] == ["default"]


def test_an_owner_keeps_at_most_twenty_sources(client, auth, litellm):
    for number in range(MAX_MODEL_SOURCES):
        assert add(client, auth, name=f"s{number}", base_url=f"{litellm.url}/v1").status_code == 201
    refused = add(client, auth, name="one-more", base_url=f"{litellm.url}/v1")
    assert refused.status_code == 409 and refused.json["code"] == "too_many_sources"
    assert add(client, auth, name="s0", base_url=f"{litellm.url}/v2").status_code == 201  # replaced
    assert len(client.get(SOURCES, headers=auth).json) == MAX_MODEL_SOURCES
