"""`skillfleet models sources add|list|remove`, `models list`, `models use`, run as a user
would run them against a LiteLLM stand-in on 127.0.0.1 (which the operator allows)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet import Fleet, fleet, sqlite_settings
from litellm_standin import MODELS, LiteLLMStandin, litellm_standin
from test_up import SKILLFLEET, clean_env

CLI_LIMIT = 60.0
KEY = "sk-cli-static-key"


@pytest.fixture(scope="module")
def proxy() -> Iterator[LiteLLMStandin]:
    with litellm_standin() as standin:
        standin.static_keys.add(KEY)
        yield standin


@pytest.fixture(scope="module")
def api(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path, proxy: LiteLLMStandin
) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("cli-models")
    settings = sqlite_settings(folder, sqlite_template, egress_allow=("127.0.0.1",))
    with fleet(settings) as running:
        yield running


def models(api: Fleet, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = clean_env(SKILLFLEET_URL=api.url, SKILLFLEET_TOKEN=api.owner_token)
    return subprocess.run(
        [SKILLFLEET, "models", *args],
        env=env, input=stdin, capture_output=True, text=True, timeout=CLI_LIMIT,
    )  # fmt: skip


def test_add_a_source_list_its_models_use_one_and_remove_it(api: Fleet, proxy: LiteLLMStandin):
    owner = api.with_new_owner()
    added = models(owner, "sources", "add", "proxy", f"{proxy.url}/v1", "--key", stdin=KEY)
    assert added.returncode == 0, added.stderr
    assert added.stdout == f"proxy (openai) at {proxy.url}/v1, a key kept.\n"
    listed = models(owner, "sources", "list")
    assert "proxy" in listed.stdout and KEY not in listed.stdout + listed.stderr

    found = models(owner, "list", "proxy")
    assert found.returncode == 0 and found.stdout.split() == sorted(MODELS)

    used = models(owner, "use", "proxy", "gpt-5-mini", "--reasoning-effort", "low",
                  "--context", "32000")  # fmt: skip
    assert used.returncode == 0, used.stderr
    assert used.stdout == (
        f"Default model: gpt-5-mini on proxy ({proxy.url}/v1); reasoning effort low; "
        "context 32000.\n"
    )
    in_use = models(owner, "sources", "remove", "proxy")
    assert in_use.returncode == 1 and "source_in_use" in in_use.stderr


def test_a_source_that_cannot_list_says_why_and_exits_1(api: Fleet):
    owner = api.with_new_owner()
    assert models(owner, "sources", "add", "down", "http://127.0.0.1:9/v1").returncode == 0
    down = models(owner, "list", "down")
    assert down.returncode == 1
    assert down.stderr == (
        "Error (source_unreachable): The source at http://127.0.0.1:9/v1 can't be reached.\n"
    )
    assert models(owner, "sources", "remove", "down").stdout == "down is removed.\n"
    missing = models(owner, "list", "down")
    assert missing.returncode == 1 and "source_not_found" in missing.stderr
