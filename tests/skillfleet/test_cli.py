"""The `skillfleet` command line against one real `skillfleet up`, run as a user would run it;
and an MCP host signing in to that same `skillfleet up` through OAuth."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from factories import write_skill
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation
from oauthhost import Host
from test_up import SKILLFLEET, Running, clean_env, free_port, up_env

pytestmark = pytest.mark.fleet

CLI_LIMIT = 60.0
TOKEN = re.compile(r"sf_[A-Za-z0-9_-]+")


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    home = tmp_path_factory.mktemp("up")
    data_dir = home / "var"
    port = free_port()
    running = Running(data_dir, port, up_env(data_dir, port), home / "stderr.log")
    try:
        running.wait_for_token()
        yield running
        assert running.ctrl_c() == 0
        assert running.leftovers() == {}
    finally:
        running.close()


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    return tmp_path / "skills"


def skillfleet(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SKILLFLEET, *args], env=env, capture_output=True, text=True, timeout=CLI_LIMIT
    )


def cli(*args: str, url: str, token: str | None, **values: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(SKILLFLEET_URL=url, **values)
    if token is not None:
        env["SKILLFLEET_TOKEN"] = token
    return skillfleet(*args, env=env)


def as_owner(up: Running, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, url=up.url, token=up.token)


def table_row(output: str, name: str) -> list[str]:
    """The cells of the table row that starts with `name` (cells are 2+ spaces apart)."""
    for line in output.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == name:
            return cells
    raise AssertionError(f"no row for {name!r} in:\n{output}")


def create_token(up: Running, *args: str) -> subprocess.CompletedProcess[str]:
    data_dir = str(up.data_dir)
    return cli("tokens", "create", *args, url=up.url, token=None, SKILLFLEET_DATA_DIR=data_dir)


def test_tokens_create_prints_the_token_alone_on_the_last_line_and_it_works(
    up: Running,
) -> None:
    result = create_token(up, "--owner", "bob", "--role", "owner")

    assert result.returncode == 0, result.stderr
    last_line = result.stdout.splitlines()[-1]
    assert TOKEN.fullmatch(last_line)
    assert "Token for owner 'bob', role owner" in result.stderr
    assert last_line != up.token
    answer = httpx.get(
        f"{up.url}/api/settings", headers={"Authorization": f"Bearer {last_line}"}, timeout=10
    )
    assert answer.status_code == 200
    assert cli("skills", "list", url=up.url, token=last_line).returncode == 0
    # The operator's token is the first record of bob's audit trail.
    trail = httpx.get(
        f"{up.url}/api/audit", headers={"Authorization": f"Bearer {last_line}"}, timeout=10
    ).json()
    assert [(r["kind"], r["actor"], r["facts"]["change"]) for r in trail] == [
        ("token.changed", "operator", "created")
    ]
    verified = cli("audit", "verify", url=up.url, token=last_line)
    assert verified.returncode == 0 and "holds: 1 records" in verified.stdout, verified.stderr


def test_an_agent_token_from_the_cli_lists_skills_but_cannot_delete_one(up: Running) -> None:
    result = create_token(up, "--owner", "carol", "--role", "agent", "--label", "chat agent")
    assert result.returncode == 0, result.stderr
    agent = result.stdout.splitlines()[-1]
    assert TOKEN.fullmatch(agent)

    assert cli("skills", "list", url=up.url, token=agent).returncode == 0
    refused = cli("skills", "delete", "skill-authoring", url=up.url, token=agent)

    assert refused.returncode == 1
    assert refused.stderr.startswith("Error (owner_only): Only the owner's own token can do this")


def test_tokens_create_needs_a_role_and_refuses_an_unknown_one(up: Running) -> None:
    missing = create_token(up, "--owner", "dave")
    unknown = create_token(up, "--owner", "dave", "--role", "root")
    too_long = create_token(up, "--owner", "dave", "--role", "agent", "--label", "x" * 201)

    assert missing.returncode == 2 and "Missing option '--role'" in missing.stderr
    assert unknown.returncode == 2 and "'root' is not one of 'agent', 'owner'" in unknown.stderr
    assert too_long.returncode == 1
    assert "at most 200 are allowed" in too_long.stderr
    assert "" == missing.stdout == unknown.stdout == too_long.stdout


def test_tokens_create_on_an_unmigrated_data_dir_says_to_run_db_upgrade(tmp_path: Path) -> None:
    empty = tmp_path / "var"
    empty.mkdir()

    result = skillfleet(
        "tokens", "create", "--owner", "bob", "--role", "agent",
        env=clean_env(SKILLFLEET_DATA_DIR=str(empty)),
    )  # fmt: skip

    assert result.returncode == 1
    assert result.stdout == ""
    assert "run `skillfleet db upgrade` (or `make up`) first." in result.stderr
    assert "Traceback" not in result.stderr


def test_skills_validate_accepts_a_valid_folder_and_exits_0(skills_dir: Path) -> None:
    folder = write_skill(skills_dir, "pdf-tools")

    result = skillfleet("skills", "validate", str(folder), env=clean_env())

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "Valid skill: pdf-tools\n"


def test_skills_validate_strict_prints_each_of_three_problems_and_exits_1(
    skills_dir: Path,
) -> None:
    header = "---\nname: other-name\ncolour: blue\n---\n\n# Broken\n"
    folder = write_skill(skills_dir, "broken-skill", {"SKILL.md": header.encode()})

    result = skillfleet("skills", "validate", "--strict", str(folder), env=clean_env())

    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("  - ")]
    assert problems == [
        '  - The name "other-name" must equal the skill\'s folder name "broken-skill".',
        "  - The header has no description; add one that says what the skill does and when "
        "to use it.",
        '  - Unknown header key "colour"; put your own keys under metadata.',
    ]
    assert f"{folder} is not a valid skill (3 problem(s)):" in result.stdout


def test_skills_validate_shows_what_an_import_would_do_and_exits_0(skills_dir: Path) -> None:
    header = "---\nname: PDF Tools\ndescription: Reads PDFs.\nversion: 1.0.0\n---\n\n# PDF\n"
    folder = write_skill(skills_dir, "pdf", {"SKILL.md": header.encode()})

    result = skillfleet("skills", "validate", str(folder), env=clean_env())

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Valid skill: pdf-tools, imported with 2 warning(s):"
    assert lines[1].startswith('  warning: The header key "version" is not in the Agent Skills')
    assert lines[2].startswith('  warning: The name "PDF Tools" is not a valid skill name')


def test_skills_import_with_a_name_installs_the_skill_under_it(
    up: Running, skills_dir: Path
) -> None:
    header = "---\nname: Report Maker\ndescription: Makes reports.\n---\n\nMake one.\n"
    folder = write_skill(skills_dir, "report", {"SKILL.md": header.encode()})

    result = as_owner(up, "skills", "import", str(folder), "--name", "reports")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "Imported reports (1 files, enabled)."
    assert '  warning: Installed as "reports", the name given at import' in result.stdout
    shown = as_owner(up, "skills", "show", "reports")
    assert shown.returncode == 0, shown.stderr
    assert "named:       Report Maker (in SKILL.md)" in shown.stdout.splitlines()
    assert "Warnings from the import:" in shown.stdout


def test_skills_import_of_a_folder_of_skills_reports_each_and_exits_1_if_any_is_refused(
    up: Running, skills_dir: Path
) -> None:
    repo = skills_dir / "collection"
    write_skill(repo / "skills", "alpha-notes")
    write_skill(repo / "skills", "beta_notes", {"SKILL.md": b"---\nname: beta_notes\n---\n"})
    (repo / "README.md").write_text("# Collection\n")

    result = as_owner(up, "skills", "import", str(repo))

    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Imported alpha-notes from collection/skills/alpha-notes (3 files")
    assert "Refused collection/skills/beta_notes (skill_invalid): " in result.stdout
    assert lines[-1] == "1 imported, 1 refused."


def test_skills_import_then_list_shows_the_skill_in_a_table_with_a_header_row(
    up: Running, skills_dir: Path
) -> None:
    imported = as_owner(up, "skills", "import", str(write_skill(skills_dir, "csv-report")))

    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.splitlines()[0] == "Imported csv-report (3 files, enabled)."
    listed = as_owner(up, "skills", "list")
    assert listed.returncode == 0, listed.stderr
    header = re.split(r"\s{2,}", listed.stdout.splitlines()[0])
    assert header == [
        "NAME", "ENABLED", "SOURCE", "RUNS ON", "TIER", "HASH", "SIGNED BY", "DESCRIPTION"
    ]  # fmt: skip
    assert table_row(listed.stdout, "csv-report")[1:5] == ["yes", "upload", "auto", "change"]
    assert table_row(listed.stdout, "skill-authoring")[2] == "builtin"


def test_skills_show_prints_the_skill_and_its_files(up: Running, skills_dir: Path) -> None:
    folder = write_skill(skills_dir, "disk-usage")
    as_owner(up, "skills", "import", str(folder))

    shown = as_owner(up, "skills", "show", "disk-usage")

    assert shown.returncode == 0, shown.stderr
    assert "name:        disk-usage" in shown.stdout.splitlines()
    assert "source:      upload" in shown.stdout.splitlines()
    assert re.split(r"\s{2,}", shown.stdout.split("\n\n")[1].splitlines()[0]) == ["FILE", "BYTES"]
    for rel in ("SKILL.md", "references/guide.md", "scripts/hello.py"):
        size = (folder / rel).stat().st_size
        assert table_row(shown.stdout, rel) == [rel, str(size)]


PUBLIC_SHAPED = Path(__file__).resolve().parents[1] / "fixtures" / "public-shaped"


def test_skills_import_and_show_print_the_review_warnings_and_how_to_see_them_all(
    up: Running, skills_dir: Path
) -> None:
    files = {"SKILL.md": b"---\nname: many-steps\ndescription: Runs many steps.\n---\n\nGo.\n"}
    for step in range(1, 8):  # seven scripts that reach the network: a warning each
        files[f"scripts/step{step}/run.rb"] = b'puts "step"\n'
        files[f"scripts/run{step}.sh"] = f"curl -s https://step{step}.example.com\n".encode()
    folder = write_skill(skills_dir, "many-steps", files)

    imported = as_owner(up, "skills", "import", str(folder))

    assert imported.returncode == 0, imported.stderr
    lines = imported.stdout.splitlines()
    count = next(line for line in lines if "review warning(s)" in line)
    total = int(count.split()[0])
    assert total > 5
    assert count == f"{total} review warning(s), where to look before you enable or run it:"
    shown = [line for line in lines if line.startswith("  review: ")]
    assert len(shown) == 5
    assert shown[0] == (
        "  review: scripts/run1.sh reaches the network (curl) but the skill declares no "
        "skillfleet.allowed-domains."
    )
    assert lines[-1] == f"  … and {total - 5} more: skillfleet skills show many-steps --warnings"
    brief = as_owner(up, "skills", "show", "many-steps").stdout.splitlines()
    assert [line for line in brief if line.startswith("  review: ")] == shown
    every = as_owner(up, "skills", "show", "many-steps", "--warnings").stdout.splitlines()
    reviews = [line for line in every if line.startswith("  review: ")]
    assert len(reviews) == total
    assert any(
        r.startswith("  review: scripts/step1/run.rb, scripts/step2/run.rb,") for r in reviews
    )


def test_a_docx_like_skill_imports_without_false_review_warnings(up: Running) -> None:
    # Its scripts read their command line and import what the standard environment holds, its
    # XML names namespaces (not the network) and its helper modules are no scripts.
    imported = as_owner(up, "skills", "import", str(PUBLIC_SHAPED / "office-docs"))

    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.splitlines() == [
        "Imported office-docs (14 files, enabled).",
        imported.stdout.splitlines()[1],
    ]
    assert imported.stdout.splitlines()[1].startswith("hash: ")


def test_skills_execution_chooses_where_a_skill_runs_and_keeps_its_hash(
    up: Running, skills_dir: Path
) -> None:
    imported = as_owner(up, "skills", "import", str(write_skill(skills_dir, "pdf-forms")))
    hash8 = imported.stdout.splitlines()[1].removeprefix("hash: ")[:8]

    spark = as_owner(up, "skills", "execution", "pdf-forms", "spark")
    listed = as_owner(up, "skills", "list")
    back = as_owner(up, "skills", "execution", "pdf-forms", "default")
    wrong = as_owner(up, "skills", "execution", "pdf-forms", "gpu")

    assert spark.returncode == 0, spark.stderr
    assert spark.stdout == f"pdf-forms runs on spark (your choice); its hash is still {hash8}.\n"
    assert table_row(listed.stdout, "pdf-forms")[3] == "spark"
    assert back.stdout == (
        "pdf-forms runs on the Spark while a Spark worker serves, else on the node a call "
        f"names (its SKILL.md says nothing); its hash is still {hash8}.\n"
    )
    assert wrong.returncode == 2 and "'gpu' is not one of" in wrong.stderr


def test_skills_import_with_an_execution_runs_the_skill_there(
    up: Running, skills_dir: Path
) -> None:
    folder = write_skill(skills_dir, "xlsx-tools")

    result = as_owner(up, "skills", "import", str(folder), "--execution", "sandbox")

    assert result.returncode == 0, result.stderr
    assert table_row(as_owner(up, "skills", "list").stdout, "xlsx-tools")[3] == "sandbox"


def test_skills_disable_and_enable_change_the_state_that_list_shows(
    up: Running, skills_dir: Path
) -> None:
    as_owner(up, "skills", "import", str(write_skill(skills_dir, "port-scan")))

    disabled = as_owner(up, "skills", "disable", "port-scan")
    assert disabled.returncode == 0, disabled.stderr
    assert disabled.stdout == "Disabled port-scan.\n"
    assert table_row(as_owner(up, "skills", "list").stdout, "port-scan")[1] == "no"

    enabled = as_owner(up, "skills", "enable", "port-scan")
    assert enabled.returncode == 0, enabled.stderr
    assert enabled.stdout.startswith("Enabled port-scan (")
    assert table_row(as_owner(up, "skills", "list").stdout, "port-scan")[1] == "yes"


def test_importing_the_same_folder_again_exits_1_with_the_skill_exists_message(
    up: Running, skills_dir: Path
) -> None:
    folder = write_skill(skills_dir, "twice-told")
    assert as_owner(up, "skills", "import", str(folder)).returncode == 0

    again = as_owner(up, "skills", "import", str(folder))

    assert again.returncode == 1
    assert again.stderr == (
        "Error (skill_exists): A skill named 'twice-told' is already installed; "
        "pass --replace to replace it.\n"
    )
    assert as_owner(up, "skills", "import", "--replace", str(folder)).returncode == 0


def test_a_folder_of_skills_imported_again_names_the_cli_options_in_each_refusal(
    up: Running, skills_dir: Path
) -> None:
    repo = skills_dir / "shelf"
    write_skill(repo, "gamma-notes")
    write_skill(repo, "delta-notes")
    assert as_owner(up, "skills", "import", str(repo)).returncode == 0

    again = as_owner(up, "skills", "import", str(repo))

    assert again.returncode == 1
    refusals = [line for line in again.stdout.splitlines() if line.startswith("Refused")]
    assert len(refusals) == 2, again.stdout
    assert all(line.endswith("pass --replace to replace it.") for line in refusals), again.stdout
    assert "replace=true" not in again.stdout


def test_importing_again_under_another_name_says_to_choose_one_with_the_cli_options(
    up: Running, skills_dir: Path
) -> None:
    folder = write_skill(skills_dir, "epsilon-notes")
    renamed = ("skills", "import", "--name", "epsilon-copy", str(folder))
    assert as_owner(up, *renamed).returncode == 0

    again = as_owner(up, *renamed)

    assert again.returncode == 1
    assert again.stderr == (
        "Error (skill_exists): SKILL.md names the skill 'epsilon-notes', which would be installed "
        "as 'epsilon-copy', and a skill named 'epsilon-copy' is already installed; choose another "
        "name (--name) or pass --replace to replace it.\n"
    )


def test_skills_import_refuses_a_folder_holding_a_link_and_uploads_nothing(
    up: Running, skills_dir: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY\n")
    folder = write_skill(skills_dir, "linked-notes")
    (folder / "notes.txt").symlink_to(secret)

    result = as_owner(up, "skills", "import", str(folder))

    assert result.returncode == 1
    assert result.stderr == (
        f"Error: {folder} holds notes.txt, which is not a regular file or folder "
        "(skills may hold regular files only); nothing was uploaded.\n"
    )
    assert as_owner(up, "skills", "show", "linked-notes").returncode == 1


def test_skills_delete_removes_the_skill(up: Running, skills_dir: Path) -> None:
    as_owner(up, "skills", "import", str(write_skill(skills_dir, "short-lived")))

    deleted = as_owner(up, "skills", "delete", "short-lived")

    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == "Deleted short-lived.\n"
    assert "short-lived" not in as_owner(up, "skills", "list").stdout
    shown = as_owner(up, "skills", "show", "short-lived")
    assert shown.returncode == 1
    assert shown.stderr == "Error (skill_not_found): No skill is named 'short-lived'.\n"


def test_deleting_the_builtin_skill_exits_1_with_the_read_only_message(up: Running) -> None:
    result = as_owner(up, "skills", "delete", "skill-authoring")

    assert result.returncode == 1
    assert result.stderr == (
        "Error (skill_builtin): 'skill-authoring' is a read-only builtin skill.\n"
    )
    assert "skill-authoring" in as_owner(up, "skills", "list").stdout


API_COMMANDS = [
    ["skills", "list"],
    ["skills", "show", "skill-authoring"],
    ["skills", "import", "FOLDER"],
    ["skills", "enable", "skill-authoring"],
    ["skills", "disable", "skill-authoring"],
    ["skills", "delete", "skill-authoring"],
    ["tokens", "list"],
    ["tokens", "revoke", "7"],
    ["runs", "show", "0f1e2d3c"],  # a short id: looked for in the list first
    ["approvals", "approve", "0f1e2d3c"],
]


def with_folder(command: list[str], folder: Path) -> list[str]:
    return [str(folder) if arg == "FOLDER" else arg for arg in command]


@pytest.mark.parametrize("command", API_COMMANDS, ids=" ".join)
def test_every_command_with_a_wrong_token_exits_1_saying_the_token_is_not_valid(
    up: Running, skills_dir: Path, command: list[str]
) -> None:
    folder = write_skill(skills_dir, "never-imported")

    result = cli(*with_folder(command, folder), url=up.url, token="sf_not_a_real_token")

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        "Error (unauthorized): SKILLFLEET_TOKEN is not a valid token here: export "
        "SKILLFLEET_TOKEN=… (the owner token `make up` printed, on its `export` line).\n"
    )


def test_a_command_without_a_token_exits_1_saying_how_to_give_one(up: Running) -> None:
    result = cli("skills", "list", url=up.url, token=None)

    assert result.returncode == 1
    assert result.stderr == (
        "Error (unauthorized): No token: export SKILLFLEET_TOKEN=… (the owner token "
        "`make up` printed, on its `export` line), then try again.\n"
    )


@pytest.mark.parametrize("command", API_COMMANDS, ids=" ".join)
def test_with_no_server_listening_every_command_says_it_cannot_reach_skillfleet(
    skills_dir: Path, command: list[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    folder = write_skill(skills_dir, "never-imported")

    result = cli(*with_folder(command, folder), url=url, token="sf_any")

    assert result.returncode == 1
    assert result.stderr.startswith(f"Error (unreachable): Can't reach skillfleet at {url}")
    assert "Is `skillfleet up` running?" in result.stderr
    assert "Traceback" not in result.stderr


# -- an MCP host signing in ----------------------------------------------------------------


def test_an_mcp_host_signs_in_through_oauth_and_calls_a_tool_of_skillfleet_up(up: Running) -> None:
    # The MCP SDK's OAuthClientProvider against `skillfleet up` as `make up` runs it (gunicorn
    # and its workers): a 401 that points to the metadata, registration, the console's consent
    # page (the owner signs in with the owner token the banner printed and presses Allow), the
    # code, the token, then tools/call with it.
    host = Host(up.url, up.token, name="Cursor (test)")

    async def scenario() -> tuple[list[str], bool, str]:
        http = httpx2.AsyncClient(auth=host.provider(), timeout=httpx2.Timeout(60.0))
        transport = streamable_http_client(f"{up.url}/mcp", http_client=http)
        info = Implementation(name=host.name, version="1")
        async with Client(transport, client_info=info) as client:
            listed = await client.list_tools()
            called = await client.call_tool("list_skills", {})
        return [tool.name for tool in listed.tools], called.is_error, str(called.content)

    names, failed, content = asyncio.run(scenario())

    assert "list_skills" in names and "run_skill_script" in names
    assert not failed, content
    assert "skill-authoring" in content  # the built-in skill every owner sees
    assert len(host.authorizations) == 1
    tokens = httpx.get(
        f"{up.url}/api/tokens", headers={"Authorization": f"Bearer {up.token}"}, timeout=30
    ).json()
    mine = [token for token in tokens if token["label"] == host.name]
    assert [(t["role"], t["resource"]) for t in mine] == [("agent", f"{up.url}/mcp")]


def test_skills_versions_lists_each_version_and_rollback_makes_one_current_again(
    up: Running, skills_dir: Path
) -> None:
    folder = write_skill(skills_dir, "log-digest")
    first = as_owner(up, "skills", "import", str(folder))
    hash8 = first.stdout.splitlines()[1].removeprefix("hash: ")[:8]
    (folder / "references" / "guide.md").write_text("# Guide\n\nRead me twice.\n")
    as_owner(up, "skills", "import", str(folder), "--replace")

    listed = as_owner(up, "skills", "versions", "log-digest")
    rolled = as_owner(up, "skills", "rollback", "log-digest", hash8)
    again = as_owner(up, "skills", "versions", "log-digest")
    unknown = as_owner(up, "skills", "rollback", "log-digest", "0" * 64)

    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()[1:]
    assert len(rows) == 2 and rows[0].startswith("*") and hash8 in rows[1]
    assert rolled.returncode == 0, rolled.stderr
    assert rolled.stdout == f"log-digest is at {hash8} again (revision 3).\n"
    assert again.stdout.splitlines()[2].startswith(f"*  {hash8}")
    assert unknown.returncode == 1 and "version_not_found" in unknown.stderr
