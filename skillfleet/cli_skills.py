"""`skillfleet skills …`: the skill store through the API, and local validation."""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path
from typing import Any

import click

from skillfleet.client import Client, ClientError, cli_words
from skillfleet.shortids import Kind, resolve
from store.limits import CLI_WARNINGS_SHOWN
from store.names import AUTO, EXECUTIONS
from store.settings import ClientSettings
from store.visible import visible

# `skills execution NAME default`: no choice of the owner's, as SKILL.md says.
DEFAULT_EXECUTION = "default"


def _client() -> Client:
    return Client(ClientSettings.from_env())


def call_api(method: str, path: str, **kwargs: Any) -> Any:
    try:
        return _client().json(method, path, **kwargs)
    except ClientError as e:
        click.echo(f"Error ({e.code}): {e.message}", err=True)
        for problem in e.errors:
            click.echo(f"  - {problem}", err=True)
        sys.exit(1)


def full_id(kind: Kind, given: str) -> str:
    """The whole id `given` is or starts (skillfleet/shortids.py); a clear error and exit 1
    when none or several match."""
    try:
        return resolve(_client(), kind, given)
    except ClientError as e:
        click.echo(f"Error ({e.code}): {e.message}", err=True)
        sys.exit(1)


def call_list(path: str, params: dict[str, Any] | None = None, limit: int | None = None) -> Any:
    """A list route's items, following its pages up to `limit` (None: all of them); when more
    were left, a line on stderr says how to see them."""
    try:
        rows, more = _client().listing(path, params, limit)
    except ClientError as e:
        click.echo(f"Error ({e.code}): {e.message}", err=True)
        for problem in e.errors:
            click.echo(f"  - {problem}", err=True)
        sys.exit(1)
    if more:
        click.echo(f"(the newest {limit} are shown; --limit N shows more)", err=True)
    return rows


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """A plain text table with a header row; long cells are cut."""
    cells = [[_cell(row.get(key)) for key, _title in columns] for row in rows]
    titles = [title for _key, title in columns]
    widths = [max([len(t)] + [len(r[i]) for r in cells]) for i, t in enumerate(titles)]
    lines = ["  ".join(t.ljust(w) for t, w in zip(titles, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _cell(value: Any, limit: int = 60) -> str:
    text = shown(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(value: Any) -> str:
    """A value as the terminal shows it: yes/no, `-` for none, and text with control and
    format characters written as escapes (an agent's ESC or U+202E can't rewrite the screen)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    return visible(str(value))


@click.group()
def skills() -> None:
    """The skill store."""


@skills.command("list")
def list_cmd() -> None:
    """List installed skills."""
    rows = call_list("/api/skills")
    for row in rows:
        row["hash8"] = row["hash"][:8]
    columns = [
        ("name", "NAME"),
        ("enabled", "ENABLED"),
        ("source", "SOURCE"),
        ("execution", "RUNS ON"),
        ("tier", "TIER"),
        ("hash8", "HASH"),
        ("signed_by", "SIGNED BY"),
        ("description", "DESCRIPTION"),
    ]
    click.echo(table(rows, columns))


@skills.command("show")
@click.argument("name")
@click.option("--warnings", "all_warnings", is_flag=True, help="Print every review warning.")
def show(name: str, all_warnings: bool) -> None:
    """Show one skill, its files and its review warnings."""
    skill = call_api("GET", f"/api/skills/{name}")
    for key in (
        "name",
        "description",
        "enabled",
        "source",
        "origin",
        "author",
        "execution",
        "tier",
        "hash",
        "revision",
        "read_only",
        "updated_at",
    ):
        click.echo(f"{key + ':':<13}{_cell(skill.get(key), 200)}")
    click.echo(f"{'signature:':<13}{_signature(skill)}")
    if skill.get("declared_name"):
        click.echo(f"{'named:':<13}{_cell(skill['declared_name'], 200)} (in SKILL.md)")
    if skill.get("allowed_tools"):
        click.echo(
            f"{'tools:':<13}{_cell(skill['allowed_tools'], 200)} (allowed-tools; not a grant)"
        )
    if skill.get("unknown_keys"):
        keys = ", ".join(skill["unknown_keys"])
        click.echo(f"{'other keys:':<13}{_cell(keys, 200)} (kept, not read)")
    click.echo()
    click.echo(table(skill["files"], [("path", "FILE"), ("size", "BYTES")]))
    if skill.get("warnings"):
        click.echo()
        click.echo("Warnings from the import:")
        _echo_warnings(skill["warnings"])
    if skill.get("lint_warnings"):
        click.echo()
        _echo_review(skill["name"], skill["lint_warnings"], everything=all_warnings)


def _signature(skill: dict[str, Any]) -> str:
    """Who signed it, as the owner's trust has it, and whether it is held for that."""
    status = skill.get("signature_status") or "unsigned"
    said = {
        "trusted": f"signed by {shown(skill.get('signed_by'))}",
        "untrusted": f"signed by a key you don't trust ({shown(skill.get('signer_fingerprint'))})",
    }.get(status, "unsigned")
    held = " — held: enable it with --override-signature, or trust its signer's key"
    return said + (held if skill.get("signature_hold") else "")


@skills.command("import")
@click.argument("source")
@click.option("--replace", is_flag=True, help="Replace an owned skill of the same name.")
@click.option("--disabled", is_flag=True, help="Import without enabling it.")
@click.option("--name", default=None, help="Install a single skill under this name.")
@click.option(
    "--execution",
    type=click.Choice(EXECUTIONS),
    default=None,
    help="Where its scripts run, whatever its SKILL.md says (default: as it says, else the "
    "Spark while one serves, else a node).",
)
def import_cmd(
    source: str, replace: bool, disabled: bool, name: str | None, execution: str | None
) -> None:
    """Import a skill, or a folder of skills, from a folder, a .zip file or a GitHub folder URL."""
    params = {"replace": "true"} if replace else {}
    if name is not None:
        params["name"] = name
    if execution is not None:
        params["execution"] = execution
    if source.startswith(("https://", "http://")):
        body = {"github": source, "enable": not disabled}
        result = call_api("POST", "/api/skills", params=params, json=body)
    else:
        filename, data = _zip_source(Path(source))
        files = {"file": (filename, data, "application/zip")}
        form = {"enable": "false" if disabled else "true"}
        result = call_api("POST", "/api/skills", params=params, files=files, data=form)
    if "imported" in result:
        _report_bundle(result)
        return
    state = "enabled" if result["enabled"] else "disabled"
    click.echo(f"Imported {result['name']} ({len(result['files'])} files, {state}).")
    click.echo(f"hash: {result['hash']}")
    if result.get("signature_status", "unsigned") != "unsigned" or result.get("signature_hold"):
        click.echo(f"signature: {_signature(result)}")
    _echo_warnings(result.get("warnings", []))
    _echo_review(result["name"], result.get("lint_warnings", []))


def _report_bundle(result: dict[str, Any]) -> None:
    """One line per skill folder; exit 1 when any was refused."""
    for item in result["imported"]:
        state = "enabled" if item["enabled"] else "disabled"
        click.echo(
            f"Imported {item['name']} from {item['folder']} "
            f"({len(item['files'])} files, {state}, hash {item['hash'][:8]})."
        )
        _echo_warnings(item["warnings"])
        _echo_review(item["name"], item.get("lint_warnings", []))
    for item in result["refused"]:
        click.echo(f"Refused {item['folder']} ({item['code']}): {cli_words(item['message'])}")
        for problem in item["errors"]:
            click.echo(f"  - {problem}")
    click.echo(f"{len(result['imported'])} imported, {len(result['refused'])} refused.")
    if result["refused"]:
        sys.exit(1)


def _echo_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        click.echo(f"  warning: {shown(warning)}")


def _echo_review(name: str, warnings: list[str], everything: bool = False) -> None:
    """The review warnings' count and the first few (all of them with `everything`), and
    how to see the rest."""
    if not warnings:
        return
    click.echo(f"{len(warnings)} review warning(s), where to look before you enable or run it:")
    listed = warnings if everything else warnings[:CLI_WARNINGS_SHOWN]
    for warning in listed:
        click.echo(f"  review: {shown(warning)}")
    if len(listed) < len(warnings):
        more = len(warnings) - len(listed)
        click.echo(f"  … and {more} more: skillfleet skills show {name} --warnings")


def _zip_source(path: Path) -> tuple[str, bytes]:
    if path.is_dir():
        return f"{path.resolve().name}.zip", _zip_folder(path)
    if path.is_file():
        return path.name, path.read_bytes()
    raise click.ClickException(f"{path} is neither a folder nor a file.")


def _zip_folder(folder: Path) -> bytes:
    """The folder as a zip under its own name; links are refused, never followed."""
    # Following a link would upload whatever it points at (a key file, say), unnoticed:
    # the store would then see a regular file where the folder holds a link.
    top = folder.resolve().name
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise click.ClickException(
                    f"{folder} holds {relative}, which is not a regular file or folder "
                    "(skills may hold regular files only); nothing was uploaded."
                )
            if path.is_file():
                archive.write(path, f"{top}/{relative}")
    return buffer.getvalue()


@skills.command("validate")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option(
    "--strict", is_flag=True, help="Check the exact specification: every warning is a problem."
)
@click.option("--name", default=None, help="The name the import would be given.")
def validate(folder: Path, strict: bool, name: str | None) -> None:
    """Check a skill folder as an import would (no server needed); --strict for the exact spec."""
    from store.errors import SkillInvalid, SkillTooLarge
    from store.leniency import read_skill_dir
    from store.validation import validate_skill_dir

    if not folder.is_dir():
        click.echo(f"{folder} is not a folder.", err=True)
        sys.exit(1)
    root = folder.resolve()
    try:
        if strict:
            info = validate_skill_dir(root, expected_name=name)
        else:
            info = read_skill_dir(root, root.name, name)
    except (SkillInvalid, SkillTooLarge) as e:
        problems = e.errors or [e.message]
        click.echo(f"{folder} is not a valid skill ({len(problems)} problem(s)):")
        for problem in problems:
            click.echo(f"  - {problem}")
        sys.exit(1)
    if not info.warnings:
        click.echo(f"Valid skill: {info.name}")
        return
    click.echo(f"Valid skill: {info.name}, imported with {len(info.warnings)} warning(s):")
    _echo_warnings(list(info.warnings))


@skills.command("execution")
@click.argument("name")
@click.argument("where", type=click.Choice([*EXECUTIONS, DEFAULT_EXECUTION]))
def execution_cmd(name: str, where: str) -> None:
    """Choose where a skill's scripts run: node, spark, sandbox, or default (as its SKILL.md
    says, else the Spark while one serves, else a node). Its content and hash stay."""
    chosen = None if where == DEFAULT_EXECUTION else where
    skill = call_api("PUT", f"/api/skills/{name}/execution", json={"execution": chosen})
    if skill["execution"] == AUTO:
        runs = "the Spark while a Spark worker serves, else on the node a call names"
        how = "its SKILL.md says nothing"
    else:
        runs = skill["execution"]
        how = "your choice" if skill["execution_choice"] else "as its SKILL.md says"
    click.echo(f"{skill['name']} runs on {runs} ({how}); its hash is still {skill['hash'][:8]}.")


@skills.command("enable")
@click.argument("name")
@click.option("--hash", "expected", default=None, help="Only if the skill still has this hash.")
@click.option(
    "--override-signature",
    is_flag=True,
    help="Enable it although you require signatures and no key you trust signed it (recorded).",
)
def enable(name: str, expected: str | None, override_signature: bool) -> None:
    """Enable a skill."""
    body = {"enabled": True, "hash": expected, "override_signature": override_signature}
    skill = call_api("PUT", f"/api/skills/{name}/enabled", json=body)
    click.echo(f"Enabled {skill['name']} ({skill['hash'][:8]}).")


@skills.command("hash")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
def hash_cmd(folder: Path) -> None:
    """Print a skill folder's content hash: what an import gives it, and what authors sign."""
    from store.hashing import content_hash

    click.echo(content_hash(folder))


@skills.command("sign")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--key",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Your SSH private key (or its .pub, to sign with the key in ssh-agent).",
)
def sign_cmd(folder: Path, key: Path) -> None:
    """Sign FOLDER's content hash with your SSH key (ssh-keygen -Y sign -n skillfleet) into
    FOLDER/skillfleet.sig; the hash stays as it is. Sign after the last change."""
    from store.errors import StoreError
    from store.hashing import SIGNATURE_FILE, content_hash
    from store.signatures import message
    from store.sshkeygen import sign

    skill_hash = content_hash(folder)
    try:
        signature = sign(message(skill_hash), key)
    except StoreError as e:
        raise click.ClickException(e.message) from e
    (folder / SIGNATURE_FILE).write_bytes(signature)
    click.echo(f"Signed {skill_hash} into {folder / SIGNATURE_FILE}.")


@skills.command("disable")
@click.argument("name")
def disable(name: str) -> None:
    """Disable a skill."""
    skill = call_api("PUT", f"/api/skills/{name}/enabled", json={"enabled": False})
    click.echo(f"Disabled {skill['name']}.")


@skills.command("delete")
@click.argument("name")
def delete(name: str) -> None:
    """Delete an owned skill."""
    call_api("DELETE", f"/api/skills/{name}")
    click.echo(f"Deleted {name}.")


@skills.command("versions")
@click.argument("name")
def versions_cmd(name: str) -> None:
    """List a skill's versions, newest first; `*` marks the current one."""
    rows = call_list(f"/api/skills/{name}/versions")
    for row in rows:
        row["mark"] = "*" if row["current"] else ""
        row["hash8"] = row["hash"][:8]
        row["when"] = row["created_at"][:19].replace("T", " ")
    columns = [
        ("mark", ""),
        ("hash8", "HASH"),
        ("when", "WHEN (UTC)"),
        ("author", "BY"),
        ("source", "SOURCE"),
        ("signed_by", "SIGNED BY"),
        ("kept", "KEPT"),
        ("pinned", "PINNED"),
    ]
    click.echo(table(rows, columns))


@skills.command("rollback")
@click.argument("name")
@click.argument("version")
def rollback_cmd(name: str, version: str) -> None:
    """Make a kept version of a skill current again: its full hash, or the start of one
    (`skills versions NAME` lists them)."""
    skill_hash = _version_hash(name, version.strip().lower())
    skill = call_api("POST", f"/api/skills/{name}/rollback", json={"hash": skill_hash})
    click.echo(f"{skill['name']} is at {skill['hash'][:8]} again (revision {skill['revision']}).")


def _version_hash(name: str, given: str) -> str:
    """The full hash of the one version of `name` that `given` is or starts."""
    if len(given) == 64:
        return given
    found = [
        row["hash"]
        for row in call_list(f"/api/skills/{name}/versions")
        if given and row["hash"].startswith(given)
    ]
    if len(found) != 1:
        how = "no" if not found else "more than one"
        click.echo(
            f"Error (version_not_found): {how} version of {name} starts {given!r}.", err=True
        )
        sys.exit(1)
    return str(found[0])
