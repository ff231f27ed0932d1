"""Tool results are redacted, capped at 48 KB with a note, and failures say nothing private."""

import datetime
import json

import pytest

from broker.errors import ArgumentError, BrokerError, UnknownTool
from broker.results import UNEXPECTED, shape_result, tool_failure
from store.errors import SkillNotFound
from store.limits import RESULT_CAP

REDACTED = "[redacted]"


def size(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.DEF-123_xyz=", f"Authorization: Bearer {REDACTED}"),
        ("token ghp_" + "a1B2" * 9, f"token {REDACTED}"),
        ("gho_" + "Z" * 36 + " expires", f"{REDACTED} expires"),
        ("github_pat_11AAAA_" + "b" * 40, REDACTED),
        ("key AKIAIOSFODNN7EXAMPLE used", f"key {REDACTED} used"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.sflKxwRJSMeKKF2QT4", f"jwt {REDACTED}"),
        ("owner token sf_" + "k3y" * 8, f"owner token {REDACTED}"),
        ("password=hunter2 user=bob", f"password={REDACTED} user=bob"),
        ("GITHUB_TOKEN=abc123&x=1", f"GITHUB_TOKEN={REDACTED}&x=1"),
        ('{"client_secret": "s3cr3t"}', f'{{"client_secret": "{REDACTED}"}}'),
        ("api-key: 12345", f"api-key: {REDACTED}"),
        ("postgres://app:pa55@db/app", f"postgres://app:{REDACTED}@db/app"),
    ],
)
def test_credential_looking_text_is_redacted(text: str, expected: str) -> None:
    assert shape_result(text) == expected


def test_a_private_key_block_is_redacted_whole() -> None:
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\nNzaC1\n-----END OPENSSH PRIVATE KEY-----"

    assert shape_result(f"key:\n{pem}\ndone") == f"key:\n{REDACTED}\ndone"


def test_a_private_key_cut_off_before_its_end_line_is_still_redacted() -> None:
    assert shape_result("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA") == REDACTED


def test_ordinary_text_is_left_alone() -> None:
    text = "max_tokens: 2048, token_type=bearer, 3 secrets found, see https://example.com/a:b"

    assert shape_result(text) == text


@pytest.mark.parametrize(
    "name",
    ["password", "Passwd", "SECRET", "token", "api_key", "API-KEY", "apiKey", "access_key",
     "private-key", "client_secret", "Authorization", "credentials", "db_password",
     "refresh_token"],
)  # fmt: skip
def test_a_known_secret_field_is_redacted_at_any_depth(name: str) -> None:
    result = {"outer": [{"inner": {name: "value", "keep": "this"}}]}

    assert shape_result(result) == {"outer": [{"inner": {name: REDACTED, "keep": "this"}}]}


def test_a_secret_field_holding_a_structure_is_redacted_whole() -> None:
    assert shape_result({"credentials": {"user": "u", "pass": "p"}}) == {"credentials": REDACTED}


def test_a_secret_field_that_is_null_stays_null() -> None:
    assert shape_result({"token": None, "max_tokens": 5}) == {"token": None, "max_tokens": 5}


def test_a_small_result_is_returned_as_json_ready_data() -> None:
    when = datetime.date(2025, 1, 2)
    result = {"ok": True, "n": 3, "ratio": 0.5, "rows": ("a", "b"), 7: b"bytes", "when": when}

    assert shape_result(result) == {
        "ok": True,
        "n": 3,
        "ratio": 0.5,
        "rows": ["a", "b"],
        "7": "bytes",
        "when": "2025-01-02",
    }


def test_a_non_finite_number_becomes_text_so_the_result_stays_valid_json() -> None:
    assert shape_result([float("nan"), float("inf")]) == ["nan", "inf"]


def test_a_cyclic_result_is_cut_instead_of_looping() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)

    json.dumps(shape_result(cyclic))


def test_a_long_string_is_cut_to_48_kb_with_a_note_line() -> None:
    result = shape_result("line\n" * 20_000)

    assert isinstance(result, str)
    assert size(result) <= RESULT_CAP
    assert size(result) > RESULT_CAP - 64
    assert result.startswith("line\nline\n")
    assert result.splitlines()[-1].startswith("[skillfleet: the result was cut at 48 KB")


def test_a_long_structured_result_keeps_its_start_as_text_with_a_note() -> None:
    rows = [{"name": f"app-{i}", "status": "running", "note": "é" * 40} for i in range(2_000)]

    result = shape_result({"rows": rows})

    assert isinstance(result, dict)
    assert result["truncated"] is True
    assert "cut at 48 KB" in result["note"]
    assert result["text"].startswith('{"rows":[{"name":"app-0","status":"running"')
    assert RESULT_CAP - 64 < size(result) <= RESULT_CAP


def test_a_result_of_exactly_48_kb_is_not_cut() -> None:
    text = "x" * (RESULT_CAP - 2)

    assert shape_result(text) == text


def test_a_secret_is_redacted_before_the_cut_so_no_half_of_it_survives() -> None:
    token = "ghp_" + "Q" * 36
    text = "x" * (RESULT_CAP - 30) + token + "y" * 100

    result = shape_result(text)

    assert isinstance(result, str)
    assert "ghp_" not in result
    assert "QQQQ" not in result


def test_our_own_errors_pass_their_code_and_message() -> None:
    assert tool_failure(UnknownTool("No tool is called frob.")) == (
        "unknown_tool",
        "No tool is called frob.",
    )
    assert tool_failure(ArgumentError("HOST: x")) == ("invalid_arguments", "HOST: x")


def test_errors_are_recognised_by_type_not_by_having_a_code() -> None:
    class Lookalike(Exception):
        code = "skill_not_found"

        def __init__(self, message: str) -> None:
            super().__init__(message)
            self.message = message

    assert tool_failure(SkillNotFound("No skill is called x.")) == (
        "skill_not_found",
        "No skill is called x.",
    )
    assert tool_failure(Lookalike("/etc/secret path")) == UNEXPECTED


def test_an_unexpected_exception_says_nothing_about_itself() -> None:
    error = FileNotFoundError(2, "No such file", "/srv/skillfleet/secret/path.txt")

    code, message = tool_failure(error)

    assert (code, message) == ("tool_failed", "The tool failed unexpectedly.")
    assert "/srv" not in message


def test_an_exception_with_a_non_string_code_is_unexpected() -> None:
    error = OSError(13, "Permission denied")  # OSError has errno, and no string code

    assert tool_failure(error) == ("tool_failed", "The tool failed unexpectedly.")
    assert tool_failure(BrokerError("root")) == ("broker_error", "root")


def test_a_long_result_is_judged_by_its_own_text_every_time_it_comes_back() -> None:
    # Long texts have their secret scan remembered: the same text must get the same answer,
    # and a text that differs only in a secret must not get the clean one's.
    clean = {"skills": [{"name": f"skill-{i}", "description": "Lists files."} for i in range(200)]}
    leaky = {"skills": [*clean["skills"][:-1], {"name": "x", "description": "token=abcdef123"}]}

    for _ in range(2):
        assert shape_result(clean) is clean
        shaped = shape_result(leaky)
        assert shaped is not leaky
        assert shaped["skills"][-1]["description"] == "token=[redacted]"  # type: ignore[index]
