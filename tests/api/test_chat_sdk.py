"""The AI SDK itself drives POST /api/chat: the `ai` package from npm (installed once into
pytest's cache), its DefaultChatTransport and readUIMessageStream, against the API over HTTP
with a real control worker and the model stand-in.

Without node and npm the test is skipped, saying so; in CI (CI=true) it fails instead.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REDIS_URL, missing_service
from fleet import fleet
from model_standin import model_standin, thinking, tools

from relay import naming
from store.settings import Settings

pytestmark = pytest.mark.fleet
AI_SDK = "ai@7"
DRIVER = Path(__file__).with_name("chatsdk") / "drive.mjs"
NPM_SECONDS = 300


@pytest.fixture(scope="module")
def ai_sdk(request: pytest.FixtureRequest) -> Path:
    """A folder whose node_modules holds the `ai` package, with the driver script beside it."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing_service("node and npm (the AI SDK test runs the `ai` package)")
    folder = Path(request.config.cache.mkdir("ai-sdk"))
    if not (folder / "node_modules" / "ai" / "package.json").exists():
        installed = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), AI_SDK],
            capture_output=True, text=True, timeout=NPM_SECONDS, check=False,
        )  # fmt: skip
        if installed.returncode != 0:
            missing_service(f"npm's registry (npm install {AI_SDK}: {installed.stderr[-300:]})")
    shutil.copy(DRIVER, folder / DRIVER.name)
    return folder


def test_the_ai_sdks_transport_gets_tool_reasoning_and_text_parts_regenerates_and_resumes(
    tmp_path: Path, database_url: str, ai_sdk: Path
):
    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL,
        egress_allow=("127.0.0.1",),
    )  # fmt: skip
    script = [
        tools(("list_skills", {})),
        thinking("A list came back.", "I can use the skill-authoring skill.",
                 prompt_tokens=40, completion_tokens=9),
        thinking("Again.", "Skill authoring, again.", prompt_tokens=30, completion_tokens=4),
    ]  # fmt: skip
    with model_standin(script) as model, fleet(settings) as running:
        running.start("control", "worker", "control")
        running.wait_for_queue(naming.CONTROL)
        with running.http() as client:
            body = {"base_url": model.url, "name": "standin"}
            assert client.put("/api/settings/model", json=body).status_code == 200
            driven = subprocess.run(
                ["node", str(ai_sdk / DRIVER.name), running.url, running.owner_token],
                capture_output=True, text=True, timeout=120, cwd=ai_sdk, check=False,
            )  # fmt: skip
            history = client.get("/api/chats/sdk-chat").json()
    assert driven.returncode == 0, driven.stderr + running.log_tail("control")
    steps = {line["step"]: line for line in map(json.loads, driven.stdout.splitlines())}
    assert "error" not in steps, steps["error"]
    first, second = steps["submit"]["message"], steps["regenerate"]["message"]
    assert first["role"] == "assistant"
    assert [p["type"] for p in first["parts"]] == [
        "step-start", "dynamic-tool", "step-start", "reasoning", "text"
    ]  # fmt: skip
    tool = first["parts"][1]
    assert (tool["toolName"], tool["state"], tool["input"]) == (
        "list_skills",
        "output-available",
        {},
    )
    assert "skill-authoring" in json.dumps(tool["output"])
    assert first["parts"][3]["text"] == "A list came back."
    assert first["parts"][4]["text"] == "I can use the skill-authoring skill."
    assert first["metadata"]["usage"] == {"inputTokens": 40, "outputTokens": 9, "totalTokens": 49}
    assert first["metadata"]["status"] == "succeeded"
    # Regenerate: a new answer, and the chat keeps only it.
    assert second["id"] != first["id"]
    assert second["parts"][-1] == {"type": "text", "text": "Skill authoring, again.",
                                   "state": "done"}  # fmt: skip
    assert [m["id"] for m in history["messages"]] == ["u1", second["id"]]
    # Nothing streams any more: the reconnect finds no active stream (204).
    assert steps["reconnect"] == {"step": "reconnect", "active": False}
