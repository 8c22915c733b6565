"""The JSON API fuzzed against its own OpenAPI schema (schemathesis, in process): whatever
it is sent — in the schema's shape or not — it never answers 5xx.

alice owns an evaluation, and asks with her studio key that may read and start (so the
team's evaluations answer, and starting and controlling one is fuzzed too; no worker slot
is free, so what starts stays queued). Examples
per operation are few (``max_examples``), so that the whole run stays under a minute on
two cores. Hypothesis drives each operation directly: schemathesis's own pytest
integration does not run under this pytest.
"""

from __future__ import annotations

from itertools import product

import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error

from apps.agents.services import api_key_create
from tests.support.evaluations import stored_evaluation

pytestmark = pytest.mark.slow

EXAMPLES = 60  # per operation and mode (valid, then invalid input); ~25 s on 2 cores


def test_the_api_never_answers_5xx(alice, settings):
    from tau2site.wsgi import application

    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0
    stored_evaluation(alice, outcomes={"0": [1.0], "1": [0.0]})
    key = api_key_create(user=alice, name="fuzz")[1]
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/api/tasks/", "/api/evaluations/{id}/"}
    asked = []

    for operation, mode in product(operations, schemathesis.GenerationMode):

        @given(case=operation.as_strategy(mode))
        @hypothesis_settings(
            max_examples=EXAMPLES,
            derandomize=True,  # the same examples on every run: CI never flakes
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def never_5xx(case):
            asked.append(case.path)
            case.call_and_validate(
                headers={"Authorization": f"Bearer {key}"}, checks=[not_a_server_error]
            )

        try:
            never_5xx()
        except Unsatisfiable:  # no parameter to break: nothing negative to send
            assert mode is schemathesis.GenerationMode.NEGATIVE
    assert len(asked) >= len(operations) * 5
