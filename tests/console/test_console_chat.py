"""The Chat page, its model picker and Settings' model sources, in a real browser against a real
fleet: the API, a control worker running the turns, a node worker running the scripts, and a
model stand-in on 127.0.0.1 (allowed as an operator allows a local model server).

A prompt's answer streams onto the page; a call that needs approval is answered in place; Retry
replaces the answer; reopening a chat picks up an answer still streaming; the picker lists a
source's models and says why another can't list them. Each test works as an owner of its own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browsing import (  # fixtures and helpers
    CHANGE_NODE,
    DESKTOP,
    PHONE,
    TICKER,
    browser,
    page,
    signed_in,
)
from fleet import Fleet, fleet, sqlite_settings
from litellm_standin import litellm_standin
from model_standin import model_standin, slow, text, thinking, tools

from relay import naming

__all__ = ["browser", "page"]

pytestmark = pytest.mark.timeout(240)
NODE = f"chat-{uuid.uuid4().hex[:6]}"
UNREACHABLE = "http://127.0.0.1:9/v1"
SCREENSHOTS = os.environ.get("SKILLFLEET_SCREENSHOTS")  # `make screenshots` sets it


@pytest.fixture(scope="module")
def chatting(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("chat")
    settings = sqlite_settings(root, sqlite_template, run_timeout=60, egress_allow=("127.0.0.1",))
    with fleet(settings) as started:
        started.start_node(NODE)
        started.start("control", "worker", "control")
        started.wait_for_queue(naming.CONTROL, "control")
        yield started


def owner_on(chatting: Fleet, url: str) -> Fleet:
    """An owner of its own whose default model is the stand-in at `url`."""
    owner = chatting.with_new_owner()
    body = {"base_url": url, "name": "standin", "api_key": "sk-standin"}
    with owner.http() as client:
        response = client.put("/api/settings/model", json=body)
    assert response.status_code == 200, response.text
    return owner


def open_chat(page: Any, owner: Fleet, chat: str | None = None) -> None:
    signed_in(page, owner)
    page.goto(f"{owner.url}/#/chat" + (f"/{chat}" if chat else ""))
    page.wait_for_selector("main[data-ready=chat] #chat-prompt")


def ask(page: Any, words: str) -> None:
    page.fill("#chat-prompt", words)
    page.get_by_role("button", name="Send").click()


def chat_id_of(page: Any) -> str:
    page.wait_for_function("location.hash.startsWith('#/chat/')")
    return str(page.evaluate("decodeURIComponent(location.hash.slice('#/chat/'.length))"))


def history_of(owner: Fleet, chat: str) -> list[dict[str, Any]]:
    with owner.http() as client:
        response = client.get(f"/api/chats/{chat}")
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


def test_a_prompt_streams_its_answer_with_reasoning_folded_and_usage_and_the_chat_keeps_it(
    page: Any, chatting: Fleet
) -> None:
    reply = thinking("The owner says hello.", "Hello from the stand-in.", prompt_tokens=1840,
                     completion_tokens=12)  # fmt: skip
    with model_standin([reply]) as model:
        owner = owner_on(chatting, model.url)
        open_chat(page, owner)
        ask(page, "Hi there")
        answer = page.locator(".message-assistant")
        answer.locator(".text", has_text="Hello from the stand-in.").wait_for()
        answer.locator(".usage", has_text="1,840 tokens in · 12 out").wait_for()
    reasoning = answer.locator("details.reasoning")
    assert reasoning.get_attribute("open") is None  # folded
    assert reasoning.locator(".text").text_content() == "The owner says hello."
    assert page.locator(".message-user").inner_text() == "Hi there"
    answer.get_by_role("button", name="Retry").wait_for()  # the last answer, ended: Retry
    chat = chat_id_of(page)
    held = history_of(owner, chat)
    assert [m["role"] for m in held] == ["user", "assistant"]
    assert held[1]["parts"] == [{"type": "text", "text": "Hello from the stand-in."}]

    page.reload()  # the chat's page shows its history
    page.wait_for_selector("main[data-ready=chat] .message-assistant .text")
    assert page.locator(".message-assistant .text").inner_text() == "Hello from the stand-in."
    assert page.locator(f".chat-list a.active:has-text('{chat}')").count() == 1


def test_text_arrives_as_it_streams_and_an_answer_still_streaming_is_resumed_on_reopening(
    page: Any, chatting: Fleet
) -> None:
    with model_standin([slow(10, 0.4)]) as model:
        owner = owner_on(chatting, model.url)
        open_chat(page, owner)
        ask(page, "Count slowly")
        page.locator(".message-assistant .text", has_text="word1").wait_for()
        assert "word9" not in page.inner_text(".message-assistant")  # still coming
        assert page.get_by_role("button", name="Stop").is_visible()
        chat = chat_id_of(page)

        page.reload()  # mid-answer: the page picks the answer up from its start
        page.locator(".message-assistant .text", has_text="word9").wait_for(timeout=30000)
    assert page.locator(".message-assistant").count() == 1
    said = page.inner_text(".message-assistant .text").split()
    assert said == [f"word{index}" for index in range(10)]
    page.get_by_role("button", name="Retry").wait_for()
    assert history_of(owner, chat)[1]["metadata"]["status"] == "succeeded"


def test_a_stream_cut_off_mid_answer_is_picked_up_again_and_read_from_the_history_once_ended(
    page: Any, chatting: Fleet
) -> None:
    def cut(route: Any) -> None:
        """The answer's stream broken off after its first words (no finish, no [DONE])."""
        response = route.fetch()
        frames = response.text().split("\n\n")[:4]  # start, start-step, text-start, a delta
        route.fulfill(response=response, body="\n\n".join(frames) + "\n\n")

    resumed: list[str] = []
    page.on("request", lambda request: resumed.append(request.url) if request.url.endswith(
        "/stream") else None)  # fmt: skip
    with model_standin([text("Hello, picked up again.")]) as model:
        owner = owner_on(chatting, model.url)
        open_chat(page, owner)
        resumed.clear()  # opening a chat of no turns asks nothing
        page.route("**/api/chat", cut)
        ask(page, "Hi")
        answer = page.locator(".message-assistant .text", has_text="Hello, picked up again.")
        answer.wait_for(timeout=30000)
    assert resumed == [f"{owner.url}/api/chat/{chat_id_of(page)}/stream"]
    assert page.locator(".message-assistant").count() == 1
    page.get_by_role("button", name="Retry").wait_for()


def test_stop_ends_the_answer_and_says_it_was_stopped(page: Any, chatting: Fleet) -> None:
    with model_standin([slow(100, 0.2)]) as model:
        owner = owner_on(chatting, model.url)
        open_chat(page, owner)
        ask(page, "Talk for a long time")
        page.locator(".message-assistant .text", has_text="word1").wait_for()
        page.get_by_role("button", name="Stop").click()
        page.locator(".message-assistant .status-stopped").wait_for(timeout=30000)
    assert "word99" not in page.inner_text(".message-assistant")
    assert page.locator(".message-assistant .chat-error").count() == 0  # a stop is no error
    page.get_by_role("button", name="Retry").wait_for()


def test_an_unreachable_model_shows_an_error_part_and_no_model_gives_the_prompt_back(
    page: Any, chatting: Fleet
) -> None:
    owner = chatting.with_new_owner()
    open_chat(page, owner)
    ask(page, "Anyone there?")
    page.wait_for_selector("#error:has-text('no_model')")
    assert page.input_value("#chat-prompt") == "Anyone there?"  # refused: nothing kept
    assert page.locator(".message").count() == 0

    with owner.http() as client:
        body = {"base_url": UNREACHABLE, "name": "standin"}
        assert client.put("/api/settings/model", json=body).status_code == 200
    page.get_by_role("button", name="Send").click()
    error = page.locator(".message-assistant .chat-error")
    error.wait_for(timeout=30000)
    assert error.inner_text() == f"The model at {UNREACHABLE} can't be reached."
    assert page.locator(".message-user").inner_text() == "Anyone there?"
    page.get_by_role("button", name="Retry").wait_for()


def changer_call(count: int = 1) -> tuple[str, dict[str, Any]]:
    arguments = {"skill_name": "changer", "script": "scripts/tick.py",
                 "arguments": {"node": NODE, "count": count}}  # fmt: skip
    return ("run_skill_script", arguments)


def test_a_call_that_needs_approval_is_approved_in_place_and_its_output_shown(
    page: Any, chatting: Fleet
) -> None:
    script = [tools(changer_call()), text("It ran."), tools(changer_call()), text("Not run.")]
    with model_standin(script) as model:
        owner = owner_on(chatting, model.url)
        owner.import_skill("changer", CHANGE_NODE, {"scripts/tick.py": TICKER})
        open_chat(page, owner)
        ask(page, "Run the changer")
        block = page.locator(".tool[data-tool='run_skill_script']").first
        block.get_by_role("button", name="Approve", exact=True).wait_for()
        assert block.get_by_role("button", name="Deny").is_visible()
        assert '"skill_name": "changer"' in block.locator(".tool-input").inner_text()
        block.get_by_role("button", name="Approve", exact=True).click()
        block.locator(".tool-output").wait_for(timeout=60000)
        page.locator(".message-assistant .text", has_text="It ran.").wait_for()
        assert "line 0" in block.locator(".tool-output").inner_text()
        assert block.get_by_role("button", name="Approve", exact=True).count() == 0

        # The next call is denied with a reason, which the block shows and the agent is told.
        ask(page, "Run it again")
        second = page.locator(".message-assistant").nth(1).locator(".tool")
        second.get_by_role("button", name="Deny").click()
        second.get_by_label("Why (optional; the agent is told)").fill("Not today.")
        second.get_by_role("button", name="Deny call").click()
        second.locator(".status-denied").wait_for()
        page.locator(".message-assistant .text", has_text="Not run.").wait_for()
        assert "Not today." in second.inner_text()
        assert page.locator(".history-notice").count() == 0  # the page sent the server's history
    told = model.requests[-1]["messages"][-1]
    assert told["role"] == "tool" and "Not today." in told["content"]


def test_retry_replaces_the_last_answer(page: Any, chatting: Fleet) -> None:
    script = [text("First answer."), text("Second answer."), text("Third answer.")]
    with model_standin(script) as model:
        owner = owner_on(chatting, model.url)
        open_chat(page, owner)
        ask(page, "Say something")
        first = page.locator(".message-assistant .text", has_text="First answer.")
        first.wait_for()
        page.get_by_role("button", name="Retry").click()
        page.locator(".message-assistant .text", has_text="Second answer.").wait_for()
        first.wait_for(state="detached")
        assert page.locator(".message-assistant").count() == 1
        assert page.locator(".message-user").count() == 1
        chat = chat_id_of(page)
        held = history_of(owner, chat)
        assert [m["parts"] for m in held if m["role"] == "assistant"] == [
            [{"type": "text", "text": "Second answer."}]
        ]

        page.reload()  # an answer from the history is retried as well
        page.locator(".message-assistant .text", has_text="Second answer.").wait_for()
        page.get_by_role("button", name="Retry").click()
        page.locator(".message-assistant .text", has_text="Third answer.").wait_for()
    assert page.locator(".message-assistant").count() == 1
    assert page.locator(".history-notice").count() == 0  # the page's messages were the server's
    assert [m["parts"] for m in history_of(owner, chat) if m["role"] == "assistant"] == [
        [{"type": "text", "text": "Third answer."}]
    ]


def test_the_model_picker_lists_a_sources_models_says_why_another_cant_and_saves_a_choice(
    page: Any, chatting: Fleet
) -> None:
    owner = chatting.with_new_owner()
    with litellm_standin() as proxy:
        proxy.static_keys.add("sk-good")
        with owner.http() as client:
            for body in ({"name": "proxy", "base_url": proxy.url + "/v1", "api_key": "sk-good"},
                         {"name": "down", "base_url": UNREACHABLE}):  # fmt: skip
                assert client.post("/api/model-sources", json=body).status_code == 201
        open_chat(page, owner)
        page.wait_for_selector("#model-picker[data-loaded]")
        options = page.locator("#model-choice optgroup[label='proxy'] option").all_inner_texts()
        assert options == ["gpt-5-mini", "local-llama"]
        why = page.locator(".source-problems li[data-source='down']").inner_text()
        assert "can't be reached" in why and "source_unreachable" in why
        page.select_option("#model-choice", label="local-llama")
        page.wait_for_selector(".saved:has-text('Saved: local-llama on proxy')")
        page.select_option("#reasoning-effort", "low")
        page.wait_for_selector(".saved:has-text('reasoning effort low')")
        page.select_option("#context-tier", "medium")
        page.wait_for_selector(".saved:has-text('context medium')")
    with owner.http() as client:
        chosen = client.get("/api/settings/model").json()
    assert (chosen["source"], chosen["model"], chosen["reasoning_effort"], chosen["context"]) == (
        "proxy", "local-llama", "low", "medium",
    )  # fmt: skip


def test_model_sources_are_added_and_removed_on_the_settings_page(
    page: Any, chatting: Fleet
) -> None:
    owner = chatting.with_new_owner()
    signed_in(page, owner)
    page.goto(f"{owner.url}/#/settings")
    page.wait_for_selector("main[data-ready=settings] #source-form")
    assert not page.is_visible("#source-virtual")  # litellm only
    page.select_option("#source-kind", "litellm")
    assert page.is_visible("#source-virtual")
    page.select_option("#source-kind", "openai")
    page.fill("#source-name", "local")
    page.fill("#source-url", UNREACHABLE)
    page.fill("#source-key", "sk-secret-value")
    page.get_by_role("button", name="Add source").click()
    row = page.locator("#sources tr[data-source='local']")
    row.wait_for()
    assert "kept (never shown)" in row.inner_text()
    assert "sk-secret-value" not in page.content()
    with owner.http() as client:
        listed = client.get("/api/model-sources").json()
    assert [(s["name"], s["base_url"], s["api_key_set"]) for s in listed] == [
        ("local", UNREACHABLE, True)
    ]

    said: list[str] = []

    def answer(accept: bool) -> None:
        def reply(dialog: Any) -> None:
            said.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        page.once("dialog", reply)

    answer(False)
    row.get_by_role("button", name="Remove").click()
    assert said == ["Remove the model source local? Its key is deleted with it."]
    with owner.http() as client:
        assert client.get("/api/model-sources/local").status_code == 200  # dismissed: kept
    answer(True)
    row.get_by_role("button", name="Remove").click()
    row.wait_for(state="detached")
    page.wait_for_selector(".notice:has-text('Removed the model source local.')")
    with owner.http() as client:
        assert client.get("/api/model-sources/local").status_code == 404


def fits(tab: Any, viewport: dict[str, int], name: str | None = None) -> None:
    """Nothing overflows sideways; under `make screenshots`, the page is kept as `name`."""
    width = tab.evaluate("document.documentElement.scrollWidth")
    assert width <= viewport["width"], f"the chat is {width} px wide"
    if SCREENSHOTS and name:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(Path(SCREENSHOTS) / name), full_page=True)


def test_the_chat_page_fits_a_phones_width_with_a_call_waiting(
    page: Any, browser: Any, chatting: Fleet
) -> None:
    script = [thinking("A greeting.", "Hello! I can run your skills.", prompt_tokens=1840,
                       completion_tokens=12), tools(changer_call(2)), text("Done.")]  # fmt: skip
    with model_standin(script) as model:
        owner = owner_on(chatting, model.url)
        owner.import_skill("changer", CHANGE_NODE, {"scripts/tick.py": TICKER})
        open_chat(page, owner)
        ask(page, "Hi")
        page.locator(".message-assistant .usage").wait_for()
        ask(page, "Run the changer on the node")
        page.get_by_role("button", name="Approve", exact=True).wait_for()
        fits(page, DESKTOP, "console-chat.png")

        context = browser.new_context(viewport=PHONE, is_mobile=True)
        phone = context.new_page()
        try:
            open_chat(phone, owner, chat_id_of(page))
            phone.get_by_role("button", name="Approve", exact=True).wait_for()  # resumed
            fits(phone, PHONE)
            phone.get_by_role("button", name="Approve", exact=True).click()
        finally:
            context.close()
        page.locator(".message-assistant .text", has_text="Done.").wait_for(timeout=60000)
