"""Calling tools the way an agent does, for the authoring tests."""

from __future__ import annotations

from typing import Any


def tool(client: Any, auth: dict[str, str], name: str, arguments: Any, chat: str = "c1") -> Any:
    """POST /api/tools/<name> in chat `chat`; the envelope (HTTP 200 whatever the outcome)."""
    body = {"arguments": arguments, "chat_id": chat}
    response = client.post(f"/api/tools/{name}", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return response.json


def draft_arguments(name: str, **overrides: Any) -> dict[str, Any]:
    """draft_skill arguments for a small valid skill; `overrides` replace fields."""
    arguments: dict[str, Any] = {
        "name": name,
        "description": f"Checks things for {name} when the owner asks about them.",
        "body": "# Steps\n\nRead the owner's question, then answer it.\n",
        "files": {},
        "source_chats": [],
        "rationale": "The owner asked for this twice and the calls failed.",
    }
    arguments.update(overrides)
    return arguments
