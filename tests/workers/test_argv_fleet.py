"""A public-style skill whose script reads sys.argv, run end to end on a real node worker.

The skill (tests/fixtures/argv-skills/pdf-forms) is written as skills for other agents are:
`python scripts/check_fillable_fields.py <file.pdf>`, no skillfleet metadata. Imported as it
is, an agent runs it with its command line as `args` and the PDF as a file; once the owner
declares `argv` in its parameters_schema instead, the API → broker → Celery → node worker →
subprocess path builds the command line from checked arguments, and refuses a value the script
would take for an option before anything runs.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from factories import zip_bytes
from fleet import Fleet, fleet, sqlite_settings

pytestmark = pytest.mark.fleet

FIXTURE = Path(__file__).parent.parent / "fixtures" / "argv-skills" / "pdf-forms"
SCRIPT = "scripts/check_fillable_fields.py"
NODE = f"argv-{uuid.uuid4().hex[:8]}"
# What the owner adds to the header: where it may run, and the script's command line.
DECLARED = """metadata:
  skillfleet.tier: read
  parameters_schema:
    scripts/check_fillable_fields.py:
      type: object
      properties:
        pdf:
          type: string
          description: The PDF's path on the server.
      required: [pdf]
      argv: [pdf]
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("argv")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=30)) as started:
        started.start_node(NODE)
        yield started


@pytest.fixture
def owner(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


def pdf(with_fields: bool) -> bytes:
    """A one-page PDF, with one text field in its AcroForm or none."""
    form = b" /AcroForm << /Fields [4 0 R] >>" if with_fields else b""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R" + form + b" >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>",
    ]
    if with_fields:
        objects.append(b"<< /FT /Tx /T (name) /Rect [10 10 190 40] >>")
    data, offsets = b"%PDF-1.7\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(data))
        data += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    table = len(data)
    data += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    data += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
    return data + trailer % (len(objects) + 1, table)


def import_as_published(client: httpx.Client) -> dict:
    files = {
        path.relative_to(FIXTURE).as_posix(): path.read_bytes()
        for path in sorted(FIXTURE.rglob("*"))
        if path.is_file()
    }
    data = zip_bytes(files, top="pdf-forms")
    response = client.post("/api/skills", files={"file": ("pdf-forms.zip", io.BytesIO(data))})
    assert response.status_code == 201, response.text
    return dict(response.json())


def declare_argv(client: httpx.Client) -> None:
    """The owner's edit: the header gains the tier and the script's command line."""
    text = (FIXTURE / "SKILL.md").read_text()
    header, _, body = text.partition("\n---\n")
    edited = f"{header}\n{DECLARED}---\n{body}"
    response = client.put("/api/skills/pdf-forms/files/SKILL.md", json={"content": edited})
    assert response.status_code == 200, response.text


def check(client: httpx.Client, path: object) -> dict:
    body = {
        "arguments": {
            "skill_name": "pdf-forms",
            "script": SCRIPT,
            "arguments": {"node": NODE, "pdf": path},
        },
        "chat_id": "forms",
    }
    response = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_published_argv_script_runs_with_its_command_line_and_its_pdf_as_a_file(owner: Fleet):
    names = ["tax form (2026).pdf", "$(touch pwned) `id`.pdf"]  # a shell would split or run them
    with owner.http() as client:
        import_as_published(client)
        published = client.get("/api/skills/pdf-forms").json()
        assert not any("command line" in w for w in published["lint_warnings"])
        answers = []
        for name, fields in zip(names, (True, False), strict=True):
            sent = client.post("/api/files", files={"file": (name, io.BytesIO(pdf(fields)))})
            body = {"arguments": {"skill_name": "pdf-forms", "script": SCRIPT, "node": NODE,
                                  "args": [name], "files": {name: sent.json()["id"]}},
                    "chat_id": "forms"}  # fmt: skip
            asked = client.post("/api/tools/run_skill_script", json=body).json()
            # A skill that declares no tier changes things: the owner approves each call.
            assert asked["status"] == "pending_approval", asked
            approval = client.get(f"/api/approvals/{asked['approval_id']}").json()
            assert f"Command line: python3 {SCRIPT} " in approval["warning"]
            answer = client.post(f"/api/approvals/{asked['approval_id']}",
                                 json={"decision": "approve"})  # fmt: skip
            assert answer.status_code == 200, answer.text
            answers.append(client.get(f"/api/calls/{asked['call_id']}", params={"wait": 30}).json())
    filled, empty = answers
    assert filled["status"] == "done", filled
    assert filled["result"]["stdout"] == "This PDF has fillable form fields\n"
    assert empty["result"]["stdout"].startswith("This PDF does not have fillable form fields")
    assert filled["result"]["files"] == []  # it wrote nothing


def test_a_script_that_reads_argv_gets_the_pdf_path_once_the_owner_declares_it(
    owner: Fleet, scratch: Path
):
    # Paths a shell would split or run: each reaches the script as one argument, untouched.
    form = scratch / "tax form (2026).pdf"  # where the run's uid may read it
    form.write_bytes(pdf(with_fields=True))
    plain = scratch / "$(touch pwned) `id`.pdf"
    plain.write_bytes(pdf(with_fields=False))
    with owner.http() as client:
        import_as_published(client)
        declare_argv(client)
        detail = client.get("/api/skills/pdf-forms").json()
        assert not any("reads its command line" in w for w in detail["lint_warnings"])

        filled = check(client, str(form))
        empty = check(client, str(plain))

    assert filled["status"] == "done", filled
    assert filled["result"]["stdout"] == "This PDF has fillable form fields\n"
    assert empty["status"] == "done", empty
    assert empty["result"]["stdout"].startswith("This PDF does not have fillable form fields")
    assert not list(scratch.glob("pwned")) and not (Path.cwd() / "pwned").exists()


def test_a_value_the_script_would_take_for_an_option_never_reaches_the_node(owner: Fleet):
    with owner.http() as client:
        import_as_published(client)
        declare_argv(client)
        refused = check(client, "--help")
        runs = client.get("/api/runs").json()

    assert refused["status"] == "failed"
    assert refused["error"]["code"] == "arguments_schema"
    assert refused["error"]["message"].startswith(
        f"HOST: arguments don't match {SCRIPT}'s parameters: '--help' does not match"
    )
    assert "run_id" not in refused
    assert runs == []
