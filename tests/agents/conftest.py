"""The agents pages' tests: studio keys plugged into the agent faces, and a customer that
always says ``customer_line``."""

from __future__ import annotations

import pytest

from apps.agents.credentials import install
from tests.support.llm_server import text


@pytest.fixture(autouse=True)
def studio_keys():
    install()


@pytest.fixture
def customer_line() -> str:
    return "Hi, I need some help with my booking."


@pytest.fixture
def customer(llm_server, customer_line):
    """The scripted LLM, answering every customer turn with ``customer_line``."""
    llm_server.responder = lambda request: text(customer_line)
    return llm_server
