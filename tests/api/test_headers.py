"""Every answer says `nosniff`; the API docs page runs only its own scripts."""

from __future__ import annotations

import base64
import hashlib
import io
import re

import pytest
from factories import skill_files, zip_bytes

NOSNIFF = "nosniff"


@pytest.fixture
def report(client, auth) -> dict:
    files = skill_files("disk-report")
    files["scripts/page.html.py"] = b"print('<html><script>alert(1)</script></html>')\n"
    response = client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top="disk-report")), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    return response.json


@pytest.mark.parametrize(
    ("method", "path", "status", "mimetype"),
    [
        ("GET", "/api/skills", 200, "application/json"),
        ("GET", "/api/skills/disk-report/files/SKILL.md", 200, "text/plain"),
        ("GET", "/api/skills/disk-report/files/scripts/page.html.py", 200, "text/plain"),
        ("GET", "/api/skills/nothing-here", 404, "application/json"),
        ("POST", "/api/tools/list_skills", 400, "application/json"),
        ("GET", "/api/no-such-route", 404, "application/json"),
        ("GET", "/", 200, "text/html"),
        ("GET", "/api/docs", 200, "text/html"),
        ("GET", "/api/docs/assets/swagger-ui-bundle.js", 200, "text/javascript"),
        ("GET", "/api/openapi.json", 200, "application/json"),
        ("GET", "/api/health", 200, "application/json"),
    ],
)
def test_every_answer_forbids_type_sniffing(client, auth, report, method, path, status, mimetype):
    headers = {**auth, "Content-Type": "application/json"}

    response = client.open(path, method=method, headers=headers, data="{not json")

    assert response.status_code == status, response.data[:200]
    assert response.mimetype == mimetype
    assert response.headers["X-Content-Type-Options"] == NOSNIFF


def test_an_answer_without_a_token_forbids_type_sniffing_too(client):
    response = client.get("/api/skills")

    assert response.status_code == 401
    assert response.headers["X-Content-Type-Options"] == NOSNIFF


def test_the_docs_page_allows_only_its_own_scripts_and_the_one_inline_start_script(client):
    response = client.get("/api/docs")
    page = response.get_data(as_text=True)
    policy = dict(
        directive.strip().split(" ", 1)
        for directive in response.headers["Content-Security-Policy"].split(";")
    )

    (inline,) = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
    assert policy["script-src"] == f"'self' 'sha256-{digest}'"
    assert policy["default-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in response.headers["Content-Security-Policy"]
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and all(url.startswith("/api/docs/assets/") for url in assets), assets
    for url in assets:
        assert client.get(url).status_code == 200, url


def test_only_the_docs_page_gets_the_docs_policy(client, auth):
    assert "Content-Security-Policy" not in client.get("/api/skills", headers=auth).headers
    console = client.get("/").headers["Content-Security-Policy"]
    assert "script-src 'self';" in console  # the console's own, unchanged


def test_a_skill_file_is_text_with_one_charset_or_bytes_no_browser_renders(client, auth):
    files = skill_files("typed")
    files["scripts/run.py"] = b"print('hi')\n"
    files["assets/logo.svg"] = b"<svg xmlns='http://www.w3.org/2000/svg'><script>1</script></svg>"
    files["assets/page.html"] = b"<html><script>alert(1)</script></html>"
    files["assets/blob.bin"] = b"\x00\x01\x02"
    upload = {"file": (io.BytesIO(zip_bytes(files, top="typed")), "s.zip")}
    imported = client.post(
        "/api/skills", headers=auth, data=upload, content_type="multipart/form-data"
    )
    assert imported.status_code == 201, imported.json

    types = {
        path: client.get(f"/api/skills/typed/files/{path}", headers=auth).headers["Content-Type"]
        for path in (
            "SKILL.md",
            "scripts/run.py",
            "assets/page.html",
            "assets/logo.svg",
            "assets/blob.bin",
        )
    }

    assert types == {
        "SKILL.md": "text/plain; charset=utf-8",
        "scripts/run.py": "text/plain; charset=utf-8",
        "assets/page.html": "text/plain; charset=utf-8",
        "assets/logo.svg": "application/octet-stream",
        "assets/blob.bin": "application/octet-stream",
    }
