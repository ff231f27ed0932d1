"""Owners sign in with GitHub's device flow, driven end to end against a local stand-in for
GitHub: console route calls → the stand-in → an owner token for the owner the rules name."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from github_signin_standin import CLIENT_ID, CLIENT_SECRET, Options, StandIn, serve
from sqlalchemy import func, select

from api import create_app
from api.bodies import MAX_BODY_BYTES
from api.services import Services
from relay import naming
from store.db import transaction
from store.models import ApiToken, GitHubSession
from store.settings import Settings, SettingsError, signin_rules
from store.tokens import Role, create_owner_token, create_token, token_digest

RULES = "user:583231=alice,org:acme=acme-team"
OCTOCAT, MONA, HUBOT = 583231, 9919, 4242


@pytest.fixture
def options() -> Options:
    return Options()


@pytest.fixture
def github(options: Options) -> Iterator[StandIn]:
    with serve(options) as server:
        yield server


def signin_settings(settings, github: StandIn, rules: str = RULES):
    return settings.with_overrides(
        github_url=github.base_url,
        github_api_url=github.base_url,
        github_client_id=CLIENT_ID,
        github_client_secret=CLIENT_SECRET,
        github_signin=signin_rules(rules),
    )


@pytest.fixture
def gh_services(settings, github) -> Iterator[Services]:
    built = Services.build(signin_settings(settings, github))
    built.redis.delete(naming.github_signin_starts("127.0.0.1"))
    yield built
    built.engine.dispose()


@pytest.fixture
def gh(gh_services):
    return create_app(services=gh_services).test_client()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def start(client) -> dict:
    started = client.post("/api/signin/github/start")
    assert started.status_code == 200, started.json
    return started.json


def poll_until_done(client, signin: str, seconds: float = 15.0):
    """Poll as the console does (here more often than asked) until the sign-in ends."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer = client.post("/api/signin/github/poll", json={"signin": signin})
        if answer.status_code != 200 or answer.json["status"] != "pending":
            return answer
        time.sleep(0.1)
    raise AssertionError("the sign-in never ended")


def sign_in(client, github: StandIn, user_id: int):
    started = start(client)
    github.enter(started["user_code"], user_id)
    return poll_until_done(client, started["signin"])


def token_count(services) -> int:
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(ApiToken)) or 0)


@pytest.mark.both_databases
def test_an_owner_signs_in_with_the_code_shown_and_gets_a_working_owner_token(gh, github):
    info = gh.get("/api/signin/github")
    assert info.status_code == 200 and info.json == {"enabled": True}
    started = start(gh)
    assert set(started) == {"signin", "user_code", "verification_uri", "expires_in", "interval"}
    assert started["verification_uri"] == f"{github.base_url}/login/device"
    assert started["interval"] == 1 and started["expires_in"] == 900

    first = gh.post("/api/signin/github/poll", json={"signin": started["signin"]})
    assert first.json == {"status": "pending", "interval": 1}
    assert github.answers() == []  # sooner than the interval: GitHub is not asked
    time.sleep(1.1)
    second = gh.post("/api/signin/github/poll", json={"signin": started["signin"]})
    assert second.json["status"] == "pending"
    assert github.answers() == ["authorization_pending"]

    github.enter(started["user_code"], OCTOCAT)
    done = poll_until_done(gh, started["signin"])

    assert done.status_code == 200, done.json
    assert done.json["status"] == "signed_in"
    assert done.json["owner"] == "alice" and done.json["github_login"] == "octocat"
    assert done.json["expires_at"]
    owner = bearer(done.json["token"])
    assert gh.get("/api/settings", headers=owner).status_code == 200
    listed = {t["id"]: t for t in gh.get("/api/tokens", headers=owner).json}
    mine = listed[done.json["token_id"]]
    assert mine["role"] == "owner" and mine["label"] == "GitHub sign-in: octocat"
    assert mine["expires_at"] is not None
    # Polled ten times a second, yet GitHub never had to say slow_down.
    assert "slow_down" not in github.answers()
    assert github.answers()[-1] == "access_token"
    again = gh.post("/api/signin/github/poll", json={"signin": started["signin"]})
    assert again.status_code == 404 and again.json["code"] == "signin_not_found"


def test_a_member_of_a_listed_organisation_signs_in_as_the_owner_its_rule_names(gh, github):
    done = sign_in(gh, github, MONA)

    assert done.status_code == 200, done.json
    assert done.json["owner"] == "acme-team" and done.json["github_login"] == "mona"
    assert "GET /orgs/acme/members/mona" in github.requests


def test_a_github_user_on_no_rule_gets_a_clear_error_and_nothing(gh, github, gh_services):
    before = token_count(gh_services)
    started = start(gh)
    github.enter(started["user_code"], HUBOT)
    refused = poll_until_done(gh, started["signin"])

    assert refused.status_code == 403
    assert refused.json["code"] == "github_user_not_allowed"
    assert "hubot (id 4242)" in refused.json["message"]
    assert "user:4242=<owner>" in refused.json["message"]
    assert token_count(gh_services) == before
    gone = gh.post("/api/signin/github/poll", json={"signin": started["signin"]})
    assert gone.status_code == 404


def test_a_code_cancelled_on_github_ends_the_sign_in_with_nothing_granted(gh, github, gh_services):
    started = start(gh)
    github.deny(started["user_code"])
    denied = poll_until_done(gh, started["signin"])

    assert denied.status_code == 403 and denied.json["code"] == "github_access_denied"
    assert token_count(gh_services) == 0


@pytest.mark.parametrize("options", [Options(code_seconds=1)])
def test_a_code_left_until_it_expires_gives_a_clear_error(gh, github, gh_services):
    started = start(gh)
    time.sleep(1.2)
    expired = poll_until_done(gh, started["signin"])

    assert expired.status_code == 410 and expired.json["code"] == "github_code_expired"
    assert "start the sign-in again" in expired.json["message"]
    assert github.answers() == ["expired_token"]
    assert token_count(gh_services) == 0


@pytest.mark.parametrize("options", [Options(slow_down_step=1)])
def test_slow_down_lengthens_the_interval_and_later_polls_keep_to_it(gh, github):
    started = start(gh)
    github.code(started["user_code"]).slow_downs = 1
    time.sleep(1.1)

    slowed = gh.post("/api/signin/github/poll", json={"signin": started["signin"]})
    assert slowed.json == {"status": "pending", "interval": 2}
    time.sleep(1.1)  # past the old interval, short of the new one: GitHub is not asked
    assert gh.post("/api/signin/github/poll", json={"signin": started["signin"]}).json == {
        "status": "pending",
        "interval": 2,
    }
    assert github.answers() == ["slow_down"]
    github.enter(started["user_code"], OCTOCAT)
    done = poll_until_done(gh, started["signin"])
    assert done.status_code == 200 and done.json["owner"] == "alice"
    assert github.answers() == ["slow_down", "access_token"]
    gaps = [b.at - a.at for a, b in zip(github.polls, github.polls[1:], strict=False)]
    assert all(gap >= 2 for gap in gaps)


@pytest.mark.parametrize("options", [Options(slow_down_says_interval=False)])
def test_slow_down_without_an_interval_adds_five_seconds_as_github_documents(gh, github):
    started = start(gh)
    github.code(started["user_code"]).slow_downs = 1
    time.sleep(1.1)

    slowed = gh.post("/api/signin/github/poll", json={"signin": started["signin"]})

    assert slowed.json == {"status": "pending", "interval": 6}


def test_two_polls_at_once_give_one_token(gh_services, github):
    clients = [create_app(services=gh_services).test_client() for _ in range(4)]
    clients[0].application.extensions["skillfleet"].redis.delete(
        naming.github_signin_starts("127.0.0.1")
    )
    started = start(clients[0])
    github.enter(started["user_code"], OCTOCAT)
    time.sleep(1.1)
    answers: list = []
    barrier = threading.Barrier(len(clients))

    def poll(client) -> None:
        barrier.wait()
        answers.append(client.post("/api/signin/github/poll", json={"signin": started["signin"]}))

    threads = [threading.Thread(target=poll, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    signed = [a for a in answers if a.status_code == 200 and a.json["status"] == "signed_in"]
    assert len(signed) == 1
    assert all(a.status_code in (200, 404) for a in answers)
    assert github.answers().count("access_token") == 1
    assert token_count(gh_services) == 1


@pytest.mark.both_databases
def test_refresh_renews_the_github_token_once_and_moves_the_expiry_on(gh, github, gh_services):
    done = sign_in(gh, github, OCTOCAT)
    owner = bearer(done.json["token"])
    with gh_services.sessions() as session:
        before = session.scalar(select(GitHubSession))
        sealed_refresh = before.refresh_token
    (old_refresh,) = github.refresh_tokens

    time.sleep(0.05)
    renewed = gh.post("/api/signin/github/refresh", headers=owner)

    assert renewed.status_code == 200, renewed.json
    assert renewed.json["owner"] == "alice" and renewed.json["token_id"] == done.json["token_id"]
    assert renewed.json["expires_at"] > done.json["expires_at"]
    assert "token" not in renewed.json  # the same token goes on
    assert old_refresh not in github.refresh_tokens and len(github.refresh_tokens) == 1
    with gh_services.sessions() as session:
        after = session.scalar(select(GitHubSession))
        assert after.refresh_token != sealed_refresh and after.refreshed_at is not None
    assert gh.get("/api/settings", headers=owner).status_code == 200


def test_two_refreshes_at_once_use_the_refresh_token_once(gh_services, github):
    clients = [create_app(services=gh_services).test_client() for _ in range(3)]
    done = sign_in(clients[0], github, OCTOCAT)
    owner = bearer(done.json["token"])
    answers: list = []
    barrier = threading.Barrier(len(clients))

    def refresh(client) -> None:
        barrier.wait()
        answers.append(client.post("/api/signin/github/refresh", headers=owner))

    threads = [threading.Thread(target=refresh, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    statuses = sorted(answer.status_code for answer in answers)
    assert statuses[0] == 200 and set(statuses) <= {200, 409}, [a.json for a in answers]
    busy = [a.json["code"] for a in answers if a.status_code == 409]
    assert busy == ["refresh_in_progress"] * len(busy)
    assert clients[0].get("/api/settings", headers=owner).status_code == 200
    assert len(github.refresh_tokens) == 1  # each refresh token was spent once, the last kept


def test_github_out_of_reach_ends_neither_a_sign_in_under_way_nor_a_signed_in_one(gh, github):
    started = start(gh)
    github.enter(started["user_code"], OCTOCAT)
    github.broken = True
    time.sleep(1.1)
    failed = gh.post("/api/signin/github/poll", json={"signin": started["signin"]})
    assert failed.status_code == 502 and failed.json["code"] == "github_unavailable"
    github.broken = False
    done = poll_until_done(gh, started["signin"])
    assert done.status_code == 200, done.json
    owner = bearer(done.json["token"])

    github.broken = True
    failed = gh.post("/api/signin/github/refresh", headers=owner)
    assert failed.status_code == 502 and failed.json["code"] == "github_unavailable"
    assert gh.get("/api/settings", headers=owner).status_code == 200
    github.broken = False
    assert gh.post("/api/signin/github/refresh", headers=owner).status_code == 200


def test_a_refresh_github_refuses_ends_the_sign_in(gh, github):
    done = sign_in(gh, github, OCTOCAT)
    owner = bearer(done.json["token"])
    github.refresh_tokens.clear()  # revoked on GitHub

    ended = gh.post("/api/signin/github/refresh", headers=owner)

    assert ended.status_code == 401 and ended.json["code"] == "github_session_ended"
    assert "bad_refresh_token" in ended.json["message"]
    assert gh.get("/api/settings", headers=owner).status_code == 401


def test_a_person_taken_off_the_rules_can_not_renew(gh_services, github, settings):
    gh = create_app(services=gh_services).test_client()
    done = sign_in(gh, github, MONA)
    owner = bearer(done.json["token"])
    github.orgs["acme"].clear()  # mona left the organisation

    ended = gh.post("/api/signin/github/refresh", headers=owner)

    assert ended.status_code == 403 and ended.json["code"] == "github_user_not_allowed"
    assert gh.get("/api/settings", headers=owner).status_code == 401


@pytest.mark.parametrize("options", [Options(token_seconds=None)])
def test_a_token_that_never_expires_is_checked_again_on_refresh(gh, github, gh_services):
    done = sign_in(gh, github, OCTOCAT)
    owner = bearer(done.json["token"])
    (access,) = github.tokens

    assert gh.post("/api/signin/github/refresh", headers=owner).status_code == 200
    github.expire_token(access)  # the person revoked the app on GitHub
    ended = gh.post("/api/signin/github/refresh", headers=owner)
    assert ended.status_code == 401 and ended.json["code"] == "github_session_ended"


@pytest.mark.parametrize("options", [Options(token_seconds=2)])
def test_a_sign_in_not_refreshed_in_time_expires(gh, github):
    done = sign_in(gh, github, OCTOCAT)
    owner = bearer(done.json["token"])
    assert gh.get("/api/settings", headers=owner).status_code == 200

    time.sleep(2.2)
    expired = gh.get("/api/settings", headers=owner)
    assert expired.status_code == 401 and expired.json["code"] == "unauthorized"


@pytest.mark.parametrize("options", [Options(token_seconds=1)])
def test_an_expired_sign_in_is_deleted_when_the_owner_gets_a_new_token(gh, github, gh_services):
    first = sign_in(gh, github, OCTOCAT)
    time.sleep(1.2)
    second = sign_in(gh, github, OCTOCAT)

    assert first.status_code == second.status_code == 200
    with gh_services.sessions() as session:
        hashes = set(session.scalars(select(ApiToken.token_hash)))
        sessions = session.scalar(select(func.count()).select_from(GitHubSession))
    # (SQLite may give the new token the old one's id: the hashes tell them apart.)
    assert hashes == {token_digest(second.json["token"])}
    assert sessions == 1


def test_refresh_is_for_github_sign_ins_and_needs_the_owner_token(gh, gh_services):
    with transaction(gh_services.sessions) as session:
        pasted = create_owner_token(session, "alice")
        agent = create_token(session, "alice", Role.AGENT)

    assert gh.post("/api/signin/github/refresh").status_code == 401
    by_agent = gh.post("/api/signin/github/refresh", headers=bearer(agent))
    assert by_agent.status_code == 403 and by_agent.json["code"] == "owner_only"
    by_pasted = gh.post("/api/signin/github/refresh", headers=bearer(pasted))
    assert by_pasted.status_code == 409 and by_pasted.json["code"] == "not_a_github_session"


def test_signing_out_deletes_the_sign_in(gh, github, gh_services):
    done = sign_in(gh, github, OCTOCAT)
    owner = bearer(done.json["token"])

    assert gh.delete(f"/api/tokens/{done.json['token_id']}", headers=owner).status_code == 204
    assert gh.get("/api/settings", headers=owner).status_code == 401
    with gh_services.sessions() as session:
        assert session.scalar(select(func.count()).select_from(GitHubSession)) == 0


@pytest.mark.parametrize(
    "body",
    [None, [], {}, {"signin": 7}, {"signin": "../x"}, {"signin": "a\x00b"}, {"signin": "a" * 300}],
)
def test_a_poll_of_the_wrong_shape_is_refused(gh, body):
    answer = gh.post("/api/signin/github/poll", json=body)
    assert answer.status_code == 422
    assert answer.json["code"] == "invalid_request", answer.json


def test_a_poll_for_an_unknown_sign_in_is_not_found(gh):
    answer = gh.post("/api/signin/github/poll", json={"signin": "nope"})
    assert answer.status_code == 404 and answer.json["code"] == "signin_not_found"


def test_a_poll_body_over_the_limit_is_refused(gh):
    answer = gh.post(
        "/api/signin/github/poll",
        data=b'{"signin": "' + b"a" * (MAX_BODY_BYTES + 1) + b'"}',
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 413, answer.json


def test_starts_from_one_address_are_limited(gh, github):
    answers = [gh.post("/api/signin/github/start").status_code for _ in range(11)]
    assert answers[:10] == [200] * 10
    assert answers[10] == 429


def test_without_a_client_id_github_sign_in_is_off(client):
    assert client.get("/api/signin/github").json == {"enabled": False}
    off = client.post("/api/signin/github/start")
    assert off.status_code == 404 and off.json["code"] == "github_signin_off"
    assert "Paste an owner token" in off.json["message"]


def test_a_wrong_client_id_is_named_in_the_error(settings, github):
    wrong = replace(signin_settings(settings, github), github_client_id="Iv1.wrong")
    built = Services.build(wrong)
    try:
        built.redis.delete(naming.github_signin_starts("127.0.0.1"))
        answer = create_app(services=built).test_client().post("/api/signin/github/start")
    finally:
        built.engine.dispose()
    assert answer.status_code == 502 and answer.json["code"] == "github_signin_failed"
    assert "incorrect_client_credentials" in answer.json["message"]


@pytest.mark.parametrize(
    "raw",
    [
        "alice",
        "user:octocat=alice",
        "user:12=",
        "org:=acme",
        "team:acme=acme",
        "user:12=../alice",
        "org:acme/../x=acme",
        "user:" + "9" * 30 + "=alice",
        "org:acme=a\x00b",
    ],
)
def test_a_malformed_sign_in_rule_stops_the_start_with_a_message(raw):
    with pytest.raises(SettingsError, match="SKILLFLEET_GITHUB_SIGNIN is a comma-separated"):
        Settings.from_env({"SKILLFLEET_GITHUB_SIGNIN": raw})


def test_sign_in_rules_are_read_in_order_and_org_names_without_case():
    raw = " user:0042=alice , org:ACME=acme-team,"
    rules = Settings.from_env({"SKILLFLEET_GITHUB_SIGNIN": raw})
    assert [(r.kind, r.subject, r.owner) for r in rules.github_signin] == [
        ("user", "42", "alice"),
        ("org", "acme", "acme-team"),
    ]
