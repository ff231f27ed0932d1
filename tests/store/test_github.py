"""GitHub import against a local HTTP server that answers like GitHub's contents API."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from github_standin import DEMO, REF, StandIn, serve

from store.errors import ArchiveUnsafe, ImportFailed, InvalidSource, SkillTooLarge, StoreError
from store.github import GitHubFolder, fetch_github_folder, parse_github_url


@pytest.fixture
def github() -> Iterator[StandIn]:
    with serve() as server:
        yield server


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    staging = tmp_path / "staging"
    staging.mkdir()
    return staging


def fetch(github: StandIn, url: str, dest: Path, token: str | None = None) -> Path:
    return fetch_github_folder(parse_github_url(url), dest, api_base=github.base_url, token=token)


def assert_refused(
    github: StandIn, url: str, dest: Path, error: type[StoreError], *words: str
) -> StoreError:
    with pytest.raises(error) as caught:
        fetch(github, url, dest)
    for word in words:
        assert word in caught.value.message, caught.value.message
    assert list(dest.iterdir()) == [], "a refused import must leave nothing behind"
    return caught.value


def tree(url: str) -> str:
    return f"https://github.com/octo/skills/tree/{REF}/{url}"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (tree("skills/demo"), GitHubFolder("octo", "skills", "main", "skills/demo")),
        (tree("skills/demo/"), GitHubFolder("octo", "skills", "main", "skills/demo")),
        ("https://github.com/octo/skills/tree/main", GitHubFolder("octo", "skills", "main", "")),
        ("https://github.com/o-1/r.e_p-o/tree/v1.2/a", GitHubFolder("o-1", "r.e_p-o", "v1.2", "a")),
        (tree("my%20skill"), GitHubFolder("octo", "skills", "main", "my skill")),
    ],
)
def test_github_folder_addresses_are_parsed(url: str, expected: GitHubFolder) -> None:
    assert parse_github_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/octo/skills/blob/main/skills/demo/SKILL.md",
        "https://raw.githubusercontent.com/octo/skills/main/skills/demo/SKILL.md",
        "http://github.com/octo/skills/tree/main/skills/demo",
        "https://gitlab.com/octo/skills/tree/main/skills/demo",
        "https://github.com.evil.example/octo/skills/tree/main/skills/demo",
        "https://user@github.com/octo/skills/tree/main/skills/demo",
        "https://github.com:8443/octo/skills/tree/main/skills/demo",
        "https://github.com/octo/skills",
        "https://github.com/octo/skills/tree",
        "https://github.com/octo/skills/tree/main/skills/demo?x=1",
        "https://github.com/octo/skills/tree/main/skills/demo#readme",
        "https://github.com/octo/skills/tree/main/skills/../secrets",
        "https://github.com/octo/skills/tree/main/skills//demo",
        "https://github.com/octo/skills/tree/main/a%2Fb",
        "https://github.com/-octo/skills/tree/main/skills",
        "https://github.com/octo/sk~ills/tree/main/skills",
        "https://github.com/octo/skills/tree/bad..ref/skills",
        "ftp://github.com/octo/skills/tree/main/skills",
        "not a url",
        "",
    ],
)
def test_addresses_other_than_github_folders_are_refused(url: str) -> None:
    with pytest.raises(InvalidSource) as caught:
        parse_github_url(url)
    assert caught.value.code == "invalid_source"
    assert caught.value.message.startswith("Only GitHub folder addresses like https://github.com/")


def test_import_reproduces_the_exact_files_of_the_folder(github: StandIn, dest: Path) -> None:
    root = fetch(github, tree("skills/demo"), dest)
    assert root == dest / "demo"
    got = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    want = {key.removeprefix("skills/demo/"): node.data for key, node in DEMO.items()}
    assert got == want


def test_import_of_a_repository_root_is_named_after_the_repository(
    github: StandIn, dest: Path
) -> None:
    root = fetch(github, "https://github.com/octo/rootskill/tree/main", dest)
    assert root == dest / "rootskill"
    assert (root / "scripts" / "a.sh").read_bytes() == b"echo a\n"


def test_import_requests_stay_on_the_base_url_and_name_skillfleet(
    github: StandIn, dest: Path
) -> None:
    fetch(github, tree("skills/demo"), dest)
    assert github.requests, "the stand-in must have been asked"
    assert {seen.user_agent for seen in github.requests} == {"skillfleet"}
    assert {seen.authorization for seen in github.requests} == {None}
    assert sorted(github.downloads()) == sorted(f"/repos/octo/skills/contents/{k}" for k in DEMO)


def test_import_with_a_token_sends_it_as_bearer(github: StandIn, dest: Path) -> None:
    fetch(github, tree("skills/demo"), dest, token="t0ken")
    assert {seen.authorization for seen in github.requests} == {"Bearer t0ken"}


@pytest.mark.parametrize(("folder", "kind"), [("linked", "symlink"), ("sub", "submodule")])
def test_folder_with_symlink_or_submodule_is_refused(
    github: StandIn, dest: Path, folder: str, kind: str
) -> None:
    assert_refused(github, tree(f"skills/{folder}"), dest, ArchiveUnsafe, kind)


def test_oversized_listing_is_refused_before_any_download(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/huge"), dest, SkillTooLarge, "big.bin", "1 MiB")
    assert github.downloads() == []


def test_folder_with_too_many_files_is_refused_before_any_download(
    github: StandIn, dest: Path
) -> None:
    assert_refused(github, tree("skills/many"), dest, SkillTooLarge, "200 files")
    assert github.downloads() == []


def test_file_larger_than_listed_is_refused_during_download(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/liar"), dest, ArchiveUnsafe, "small.txt", "larger")


def test_listing_entry_outside_the_folder_is_refused(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/escape"), dest, ArchiveUnsafe, "elsewhere/x.txt")


def test_folder_with_names_differing_only_in_case_is_refused(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/cased"), dest, ArchiveUnsafe, "differ only in case")


def test_unknown_folder_fails_with_a_clear_sentence(github: StandIn, dest: Path) -> None:
    error = assert_refused(github, tree("skills/nope"), dest, ImportFailed)
    assert error.code == "import_failed"
    assert error.message == "GitHub has no folder skills/nope at main in octo/skills."


def test_unknown_ref_fails_like_an_unknown_folder(github: StandIn, dest: Path) -> None:
    url = "https://github.com/octo/skills/tree/nobranch/skills/demo"
    assert_refused(github, url, dest, ImportFailed, "no folder skills/demo at nobranch")


def test_a_file_address_is_not_imported_as_a_folder(github: StandIn, dest: Path) -> None:
    assert_refused(github, tree("skills/demo/SKILL.md"), dest, ImportFailed, "not a folder")


def test_rate_limit_fails_with_a_clear_sentence(github: StandIn, dest: Path) -> None:
    url = "https://github.com/octo/limited/tree/main/skills/demo"
    assert_refused(github, url, dest, ImportFailed, "rate limit", "token")


def test_server_error_fails_without_a_stack_trace(github: StandIn, dest: Path) -> None:
    url = "https://github.com/octo/broken/tree/main/skills/demo"
    error = assert_refused(github, url, dest, ImportFailed, "HTTP 500")
    assert "Traceback" not in error.message


def test_unreachable_github_fails_with_import_failed(dest: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    folder = parse_github_url(tree("skills/demo"))
    with pytest.raises(ImportFailed) as caught:
        fetch_github_folder(folder, dest, api_base=f"http://127.0.0.1:{closed_port}")
    assert "could not be reached" in caught.value.message
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize("path", ["..", "skills/..", "/etc", "skills\\demo"])
def test_hand_made_folder_with_unsafe_path_is_refused_before_any_request(
    github: StandIn, dest: Path, path: str
) -> None:
    folder = GitHubFolder("octo", "skills", REF, path)
    with pytest.raises(InvalidSource):
        fetch_github_folder(folder, dest, api_base=github.base_url)
    assert github.requests == []
    assert list(dest.iterdir()) == []
