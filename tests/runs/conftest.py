"""People, scripted models and helpers for run tests on the production path.

alice and bob are signed-in members with Hugging Face tokens in the vault; charlie is
anonymous. The scripted LLM plays both τ²'s agent and the customer: requests that carry
the domain's tools are the agent's, the others the customer's.
"""

from __future__ import annotations

import pytest

from tests.support.people import ALICE_TOKEN, BOB_TOKEN  # noqa: F401 - used by the tests
from tests.support.scripts import (  # noqa: F401 - used by the tests
    AGENT_MODEL,
    GOLD_TASK,
    finished,
    gold_script,
    is_agent_request,
    play,
    refresh_agent_models,
    wait_for,
)


@pytest.fixture(autouse=True)
def agent_models(committed_db, llm_server):
    """The Inference Providers catalogue, as the scripted router lists it."""
    return refresh_agent_models()
