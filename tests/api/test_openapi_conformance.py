"""schemathesis against every operation of the OpenAPI document, with an owner token.

Any 5xx, or an answer that breaks the document (status, content type, body schema), fails.
Examples per operation are bounded so the whole document runs in about a minute.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES_PER_OPERATION = 25
# An event stream never ends: schemathesis reads it until its timeout passes and the next chunk
# (a keep-alive, every 15 s on a quiet feed) arrives, so each example of one takes that long.
STREAM_EXAMPLES = 2
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_operation_answers_within_the_document_and_never_5xx(
    app: Any, auth: dict[str, str]
) -> None:
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", app)
    failures: dict[str, str] = {}
    operations = 0
    calls: list[int] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        streams = operation.path.endswith("/events")

        @given(case=operation.as_strategy())
        @settings(
            max_examples=STREAM_EXAMPLES if streams else EXAMPLES_PER_OPERATION,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def exercise(case: Any) -> None:
            answer = case.call_and_validate(headers=auth, checks=CHECKS, timeout=1)
            calls.append(answer.status_code)

        try:
            exercise()
        except (Exception, FailureGroup) as e:  # every operation's failures are reported together
            failures[operation.label] = str(e)[:1500]
    assert operations >= 25
    assert sum(200 <= status < 300 for status in calls) >= operations  # not only refusals
    assert failures == {}, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())
