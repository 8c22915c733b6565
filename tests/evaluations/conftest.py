"""Evaluations on the production path: the Celery worker, PostgreSQL, the scripted LLM."""

from __future__ import annotations

import pytest

from tests.support.scripts import refresh_agent_models


@pytest.fixture(autouse=True)
def agent_models(committed_db, llm_server):
    return refresh_agent_models()
