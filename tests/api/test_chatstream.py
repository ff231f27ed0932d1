"""The translation of a turn's stream events into UI message chunks, event by event: the
outcomes the chat tests with a model do not reach (a declined approval, a policy refusal,
arguments that were not JSON, a question, a stopped turn)."""

from __future__ import annotations

from api.chatstream import Translation, end_of
from relay.streams import Event
from store.models import Turn


def translated(*events: tuple[str, dict]) -> list[dict]:
    translation = Translation("t1")
    chunks = translation.opening()
    for number, (kind, data) in enumerate(events):
        chunks.extend(translation.chunks(Event(f"1-{number}", kind, data)))
    return chunks


CALL = {"tool_call_id": "call_0", "tool": "run_skill_script"}


def test_an_approval_the_owner_declined_ends_the_tool_part_denied_with_the_reason():
    denied = {"code": "owner_denied", "message": "The owner declined: not today."}
    chunks = translated(
        ("step", {}),
        ("tool_call", {**CALL, "arguments": {"skill_name": "wiper"}}),
        ("approval", {**CALL, "call_id": "c1", "approval_id": "a1"}),
        ("tool_result", {**CALL, "call_id": "c1", "status": "denied", "error": denied}),
    )
    assert chunks[-3:] == [
        {"type": "tool-approval-request", "approvalId": "a1", "toolCallId": "call_0"},
        {"type": "tool-approval-response", "approvalId": "a1", "approved": False,
         "reason": "The owner declined: not today."},
        {"type": "tool-output-denied", "toolCallId": "call_0"},
    ]  # fmt: skip


def test_a_call_the_policy_refused_is_an_output_error_with_its_message_and_code():
    refused = {"code": "policy_denied", "message": "Plan mode changes nothing."}
    chunks = translated(
        ("tool_call", {**CALL, "arguments": {}}),
        ("tool_result", {**CALL, "call_id": "c1", "status": "denied", "error": refused}),
    )
    assert chunks[-1] == {"type": "tool-output-error", "toolCallId": "call_0",
                          "errorText": "Plan mode changes nothing. (policy_denied)",
                          "dynamic": True}  # fmt: skip


def test_arguments_that_were_not_json_are_an_input_error_after_the_open_text_ends():
    error = {"code": "arguments_not_json", "message": "HOST: the arguments were not a JSON object."}
    chunks = translated(
        ("text", {"text": "Let me try."}),
        ("tool_result", {**CALL, "status": "failed", "error": error}),
    )
    assert chunks[1:] == [
        {"type": "text-start", "id": "text-1"},
        {"type": "text-delta", "id": "text-1", "delta": "Let me try."},
        {"type": "text-end", "id": "text-1"},
        {"type": "tool-input-error", "toolCallId": "call_0", "toolName": "run_skill_script",
         "input": None, "errorText": f"{error['message']} (arguments_not_json)", "dynamic": True},
    ]  # fmt: skip


def test_a_question_to_the_owner_is_a_data_part_and_a_stopped_turn_finishes_other():
    chunks = translated(
        ("step", {}),
        ("tool_call", {"tool_call_id": "call_0", "tool": "ask_owner", "arguments": {}}),
        ("question", {"tool_call_id": "call_0", "call_id": "q1", "question_id": "q1"}),
        ("end", {"status": "stopped", "error": {"code": "stopped", "message": "Stopped."}}),
    )
    assert chunks[3] == {
        "type": "data-question",
        "id": "q1",
        "data": {"questionId": "q1", "callId": "q1", "toolCallId": "call_0"},
    }
    assert [c["type"] for c in chunks[4:]] == ["finish-step", "finish"]  # a stop is no error
    assert chunks[-1] == {"type": "finish", "finishReason": "other",
                          "messageMetadata": {"turnId": "t1", "status": "stopped"}}  # fmt: skip


def test_reasoning_then_text_close_each_other_and_a_lost_end_comes_from_the_row():
    chunks = translated(("reasoning", {"text": "Hm."}), ("text", {"text": "Yes."}),
                        ("reasoning", {"text": "More."}))  # fmt: skip
    assert [c["type"] for c in chunks[1:]] == [
        "reasoning-start", "reasoning-delta", "reasoning-end", "text-start", "text-delta",
        "text-end", "reasoning-start", "reasoning-delta",
    ]  # fmt: skip
    row = Turn(id="t1", status="failed", error_code="model_failed", error_message="Gone.")
    assert end_of(row).data == {
        "status": "failed",
        "error": {"code": "model_failed", "message": "Gone."},
    }
