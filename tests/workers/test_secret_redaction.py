"""A script's output never carries a secret's value: each is replaced by [secret:NAME], even
when the value arrives split across reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.secrets import Redactor

SECRETS = {"API_TOKEN": "s3cr3t-value-42", "SHORT": "abc", "OTHER": "zzzz"}


def fed(chunks: list[bytes], secrets: dict[str, str] = SECRETS) -> bytes:
    redactor = Redactor(secrets)
    return b"".join(redactor.feed(chunk) for chunk in chunks) + redactor.release()


def test_a_value_in_one_read_is_replaced_by_its_name() -> None:
    assert fed([b"token=s3cr3t-value-42\n"]) == b"token=[secret:API_TOKEN]\n"


def test_a_value_split_across_reads_is_replaced_all_the_same() -> None:
    assert fed([b"token=s3cr", b"3t-va", b"lue-42 and zz", b"zz\n"]) == (
        b"token=[secret:API_TOKEN] and [secret:OTHER]\n"
    )


def test_a_value_shorter_than_four_characters_is_left_as_it_is() -> None:
    assert fed([b"abc\n"]) == b"abc\n"


def test_output_that_only_began_a_value_goes_out_at_the_end() -> None:
    redactor = Redactor(SECRETS)
    assert redactor.feed(b"ends with s3cr") == b"ends with "
    assert redactor.release() == b"s3cr"


def test_without_secrets_nothing_is_held_or_changed() -> None:
    redactor = Redactor({})
    assert not redactor
    assert redactor.feed(b"s3cr3t") == b"s3cr3t"


@given(st.binary(max_size=60), st.binary(max_size=60), st.lists(st.integers(0, 200), max_size=6))
def test_however_the_output_is_cut_no_value_survives(
    before: bytes, after: bytes, cuts: list[int]
) -> None:
    text = before + b"s3cr3t-value-42" + after
    points = sorted({min(cut, len(text)) for cut in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert b"s3cr3t-value-42" not in fed(chunks)
    assert b"[secret:API_TOKEN]" in fed(chunks)
