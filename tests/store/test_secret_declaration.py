"""A skill declares the owner's secrets its scripts need (skillfleet.secrets)."""

from __future__ import annotations

from typing import Any

import pytest

from store.errors import SkillInvalid
from store.limits import MAX_SECRETS
from store.validation import validate_header

DESCRIPTION = "Calls an API. Use when the owner asks for it."


def header(**metadata: Any) -> dict[str, Any]:
    return {"name": "demo", "description": DESCRIPTION, "metadata": metadata}


def problems(**metadata: Any) -> list[str]:
    with pytest.raises(SkillInvalid) as error:
        validate_header(header(**metadata), "", "demo")
    return error.value.errors or []


def test_declared_secrets_are_read_in_order_space_or_comma_separated_once_each() -> None:
    info = validate_header(
        header(**{"skillfleet.secrets": "API_TOKEN, OTHER  API_TOKEN"}), "", "demo"
    )
    assert info.secrets == ("API_TOKEN", "OTHER")


def test_a_skill_without_the_key_needs_no_secret_and_the_seed_alias_is_read() -> None:
    assert validate_header(header(), "", "demo").secrets == ()
    assert validate_header(header(**{"lucia.secrets": "KEY"}), "", "demo").secrets == ("KEY",)


@pytest.mark.parametrize("name", ["api_token", "1TOKEN", "../X", "A-B", "A" * 65, "_X"])
def test_a_name_that_is_no_environment_variable_is_an_import_problem(name: str) -> None:
    found = problems(**{"skillfleet.secrets": f"GOOD {name}"})
    assert len(found) == 1
    assert found[0].startswith('The metadata key "skillfleet.secrets" holds ')
    assert "can't name a secret" in found[0]


def test_more_secrets_than_the_limit_are_refused() -> None:
    names = " ".join(f"S{i}" for i in range(MAX_SECRETS + 1))
    assert problems(**{"skillfleet.secrets": names}) == [
        f'The metadata key "skillfleet.secrets" lists {MAX_SECRETS + 1} secrets; '
        f"the limit is {MAX_SECRETS} secrets."
    ]
