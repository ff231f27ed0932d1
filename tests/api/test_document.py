"""The API's document (OpenAPI) is made once a process and served whole by every app after."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from api import create_app
from api.services import Services


def spec_of(app):
    return app.extensions["flask-smorest"]["apis"][""]["ext_obj"].spec


def test_every_app_of_a_process_serves_the_same_whole_document(app, settings, tmp_path: Path):
    other_settings = replace(settings, data_dir=tmp_path / "other", cors_origins=("https://x",))
    other = Services.build(other_settings)
    try:
        second = create_app(services=other)
        documents = [a.test_client().get("/api/openapi.json").json for a in (app, second)]
    finally:
        other.engine.dispose()

    assert documents[0] == documents[1]
    assert spec_of(second) is spec_of(app)  # documented once, not again
    paths = documents[1]["paths"]
    assert {"/mcp", "/api/runs", "/api/tools/{tool}", "/api/files"} <= set(paths)
    assert "NEXT_PAGE_LINK" in documents[1]["components"]["headers"]
    tags = [tag["name"] for tag in documents[1]["tags"]]
    assert "mcp" in tags and "runs" in tags
    assert len(tags) == len(set(tags))  # no resource tagged twice
