"""run_skill_script arguments: read once by the seed's rules, checked against the schema."""

from __future__ import annotations

import io
import json

import pytest
from factories import skill_files, skill_folder, zip_bytes
from prometheus_client import REGISTRY

READER = {"skillfleet.tier": "read", "skillfleet.execution": "node"}


def install(client, auth, name: str, metadata: dict[str, object], extra=None):
    files = skill_files(name, metadata=metadata)
    files.update(extra or {})
    data = {"file": (io.BytesIO(zip_bytes(files, top=name)), "s.zip")}
    response = client.post(
        "/api/skills", headers=auth, data=data, content_type="multipart/form-data"
    )
    assert response.status_code == 201, response.json


def run(client, auth, arguments, name="reader", **top):
    body = {
        "arguments": {
            "skill_name": name,
            "script": "scripts/hello.py",
            "arguments": arguments,
            **top,
        }
    }
    response = client.post("/api/tools/run_skill_script", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return response.json


@pytest.fixture
def reader(client, auth):
    install(client, auth, "reader", READER)


def coerced(kind: str) -> float:
    value = REGISTRY.get_sample_value("skillfleet_skill_arguments_coerced_total", {"kind": kind})
    return value or 0.0


def dispatched(envelope):
    """The node the run would go to and the arguments its script would get."""
    assert envelope["status"] == "done", envelope
    would = envelope["result"]["would_dispatch"]
    return would["node"], would["arguments"]


def test_the_node_picks_the_server_and_the_rest_goes_to_the_script(client, auth, reader):
    assert dispatched(run(client, auth, {"node": "web01", "n": 1})) == ("web01", {"n": 1})


def test_text_holding_an_object_runs_and_is_counted(client, auth, reader):
    before = coerced("string")
    assert dispatched(run(client, auth, json.dumps({"node": "web01"}))) == ("web01", {})
    assert coerced("string") == before + 1


def test_a_top_level_node_is_moved_inside_and_counted(client, auth, reader):
    before = coerced("node")
    assert dispatched(run(client, auth, {"n": 2}, node="web02")) == ("web02", {"n": 2})
    assert coerced("node") == before + 1


@pytest.mark.parametrize(
    ("arguments", "top", "message"),
    [
        ([1, 2], {}, 'HOST: arguments was an array; send an object with a "node" key.'),
        ("[1]", {}, 'HOST: arguments was an array; send an object with a "node" key.'),
        (7, {}, "HOST: arguments was a number; send a JSON object."),
        (
            "not json",
            {},
            "HOST: arguments was a string that isn't valid JSON; send a JSON object, "
            "not a quoted string.",
        ),
        (
            {"node": "a"},
            {"node": "b"},
            'HOST: arguments.node ("a") and node ("b") disagree; name the server once, '
            "inside arguments.",
        ),
        (
            {"node": 5},
            {},
            "HOST: arguments.node must be the server's name as a string, as list_nodes names "
            'it (or "spark" or "sandbox").',
        ),
        (
            None,
            {},
            'HOST: arguments has no "node" key; add the server to run on, such as '
            '{"node": "a", ...}; none of your nodes is running now (a, b, db01, local, '
            "lucialab01, n, web01, web02, x; list_nodes shows them).",
        ),
    ],
)
def test_unreadable_arguments_fail_with_the_exact_host_message(
    client, auth, reader, arguments, top, message
):
    envelope = run(client, auth, arguments, **top)
    assert envelope["status"] == "failed"
    assert envelope["error"] == {"code": "invalid_arguments", "message": message}


def test_arguments_are_checked_against_the_declared_schema_before_dispatch(client, auth):
    schema = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
    install(client, auth, "counter", {**READER, "parameters_schema": json.dumps(schema)})
    envelope = run(client, auth, {"node": "web01", "count": "many"}, name="counter")
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "arguments_schema"
    assert "'many' is not of type 'integer'" in envelope["error"]["message"]
    assert dispatched(run(client, auth, {"node": "web01", "count": 3}, name="counter")) == (
        "web01",
        {"count": 3},
    )


def test_a_script_the_skill_does_not_have_is_refused(client, auth, reader):
    body = {"arguments": {"skill_name": "reader", "script": "scripts/nope.py", "arguments": {}}}
    envelope = client.post("/api/tools/run_skill_script", headers=auth, json=body).json
    assert envelope["error"]["code"] == "script_not_found"
    assert "scripts/hello.py" in envelope["error"]["message"]


def test_text_over_32_kib_is_refused(client, auth, reader):
    text = json.dumps({"node": "web01", "pad": "x" * (33 * 1024)})
    envelope = run(client, auth, text)
    assert envelope["error"]["code"] == "invalid_arguments"
    assert "32 KiB" in envelope["error"]["message"]


def test_the_coerced_counter_is_exposed_at_metrics(client, auth, reader):
    run(client, auth, json.dumps({"node": "web01"}))
    metrics = client.get("/metrics").data.decode()
    assert 'skillfleet_skill_arguments_coerced_total{kind="string"}' in metrics


def test_results_are_redacted(client, auth):
    secret = "ghp_" + "a" * 36
    install(
        client,
        auth,
        "leaky",
        READER,
        {"references/creds.md": f"token: {secret}\npassword=hunter2\n".encode()},
    )
    body = {"arguments": {"skill_name": "leaky", "path": "references/creds.md"}}
    envelope = client.post("/api/tools/read_skill_resource", headers=auth, json=body).json
    content = envelope["result"]["content"]
    assert secret not in content and "hunter2" not in content
    assert "[redacted]" in content


def test_results_over_48_kb_are_cut_with_a_note(client, auth):
    install(client, auth, "wordy", READER, {"references/long.md": b"word " * 30_000})
    body = {"arguments": {"skill_name": "wordy", "path": "references/long.md"}}
    envelope = client.post("/api/tools/read_skill_resource", headers=auth, json=body).json
    assert len(json.dumps(envelope["result"]).encode()) <= 49 * 1024
    assert "cut at 48 KB" in json.dumps(envelope["result"])


def test_an_unexpected_failure_is_tool_failed_without_a_path(client, auth, services):
    install(client, auth, "fragile", READER)
    (skill_folder(services, "fragile") / "SKILL.md").unlink()
    body = {"arguments": {"skill_name": "fragile"}}
    envelope = client.post("/api/tools/load_skill", headers=auth, json=body).json
    assert envelope["status"] == "failed"
    assert envelope["error"] == {"code": "tool_failed", "message": "The tool failed unexpectedly."}


@pytest.mark.parametrize("script", ["scripts/check.sh", "scripts/Tool.cs"])
def test_a_sandbox_skill_refuses_a_script_it_cannot_run_before_anything_is_queued(
    client, auth, services, script
):
    sandboxed = {"skillfleet.tier": "read", "skillfleet.execution": "sandbox"}
    install(
        client,
        auth,
        "boxed",
        sandboxed,
        {script: b"echo hi\n" if script.endswith(".sh") else b"class T {}\n"},
    )
    body = {"arguments": {"skill_name": "boxed", "script": script, "arguments": {}}}

    envelope = client.post("/api/tools/run_skill_script", headers=auth, json=body).json

    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "script_not_supported"
    assert ".py, .js and .mjs scripts only" in envelope["error"]["message"]
    assert "run_id" not in envelope


# -- argv: values that go on the script's command line --------------------------------------

ARGV_SCHEMA = {
    "type": "object",
    "properties": {
        "pdf": {"type": "string"},
        "pages": {"type": "integer"},
        "more": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["pdf"],
    "argv": [{"option": "--pages", "property": "pages"}, "pdf", "--", "more"],
}


@pytest.fixture
def forms(client, auth):
    install(
        client, auth, "forms", {**READER, "parameters_schema": {"scripts/hello.py": ARGV_SCHEMA}}
    )


def test_command_line_values_run_and_the_script_gets_them_in_its_arguments_too(client, auth, forms):
    arguments = {"node": "web01", "pdf": "form.pdf", "pages": 2, "more": ["-x"]}
    assert dispatched(run(client, auth, arguments, name="forms")) == (
        "web01",
        {"pdf": "form.pdf", "pages": 2, "more": ["-x"]},
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"pdf": "-rf"},
        {"pdf": "--output=/etc/passwd"},
        {"pdf": "form.pdf", "pages": -3},
        {"pdf": "form\u0000.pdf"},
        {"pdf": "form.pdf", "more": ["ok", "nul\u0000"]},
    ],
)
def test_a_value_the_command_line_would_misread_fails_before_anyone_is_asked(
    client, auth, services, forms, arguments
):
    envelope = run(client, auth, {"node": "web01", **arguments}, name="forms")
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "arguments_schema"
    assert envelope["error"]["message"].startswith(
        "HOST: arguments don't match scripts/hello.py's parameters: "
    )
    assert "approval_id" not in envelope and "run_id" not in envelope


def test_a_skill_whose_argv_names_an_undeclared_property_is_refused_at_import(client, auth):
    schema = {**ARGV_SCHEMA, "argv": ["pdf", "output"]}
    files = skill_files("broken", metadata={**READER, "parameters_schema": schema})
    data = {"file": (io.BytesIO(zip_bytes(files, top="broken")), "s.zip")}
    response = client.post(
        "/api/skills", headers=auth, data=data, content_type="multipart/form-data"
    )
    assert response.status_code == 422
    assert response.json["code"] == "skill_invalid"
    assert response.json["errors"] == [
        'The parameters_schema puts "output" on the command line, but its properties do not '
        "declare it."
    ]
    assert client.get("/api/skills/broken", headers=auth).status_code == 404


def test_load_skill_shows_the_agent_which_arguments_go_on_the_command_line(client, auth, forms):
    body = {"arguments": {"skill_name": "forms"}, "chat_id": "c1"}
    loaded = client.post("/api/tools/load_skill", headers=auth, json=body).json
    assert loaded["status"] == "done", loaded
    assert '"argv"' in json.dumps(loaded["result"])
    assert "(?!-)" in json.dumps(loaded["result"])  # the rule the call is checked against


def test_a_later_positional_without_an_earlier_one_fails_before_anyone_is_asked(client, auth):
    schema = {
        "type": "object",
        "properties": {"source": {"type": "string"}, "target": {"type": "string"}},
        "argv": ["source", "target"],
    }
    install(client, auth, "copier", {**READER, "parameters_schema": {"scripts/hello.py": schema}})
    envelope = run(client, auth, {"node": "web01", "target": "out.txt"}, name="copier")
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "arguments_schema"
    assert '"target" without "source"' in envelope["error"]["message"]
    assert "approval_id" not in envelope and "run_id" not in envelope


# -- a command line as the call gives it (`args`) -------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ("in.pdf out.json", "'args' must be a list of strings"),
        ([1, 2], "'args' must be a list of strings"),
        (["a\x00b"], "holds a NUL character"),
        (["x"] * 300, "at most 256 are taken"),
        (["x" * 40_000], "at most 32,768 are taken"),
    ],
)
def test_a_malformed_args_fails_before_anyone_is_asked(client, auth, reader, args, said):
    envelope = run(client, auth, {"node": "web01"}, args=args)
    assert (envelope["status"], envelope["error"]["code"]) == ("failed", "invalid_call")
    assert said in envelope["error"]["message"]


def test_args_and_a_declared_argv_are_not_given_together(client, auth, forms):
    envelope = run(client, auth, {"node": "web01", "pdf": "a.pdf"}, name="forms", args=["b.pdf"])
    assert (envelope["status"], envelope["error"]["code"]) == ("failed", "invalid_call")
    assert "builds its command line from 'arguments'" in envelope["error"]["message"]


def test_args_reach_the_run_as_given_options_and_spaces_included(client, auth, reader):
    args = ["--pages", "1-3", "tax form (2026).pdf", "$(id)", "-"]
    envelope = run(client, auth, {"node": "web01"}, args=args)
    assert envelope["status"] == "done", envelope
    assert envelope["result"]["would_dispatch"]["args"] == args
