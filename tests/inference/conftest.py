"""The router is the scripted LLM server (``llm_server``) serving a recorded catalogue."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.support.processes import free_port

DATA = Path(__file__).resolve().parent.parent / "data" / "hf_router_models.json"
RECORDED = json.loads(DATA.read_text(encoding="utf-8"))


@pytest.fixture
def payload() -> dict:
    """A fresh copy of the recorded ``GET /v1/models`` answer (tests may edit it)."""
    return copy.deepcopy(RECORDED)


@pytest.fixture
def router(llm_server, payload):
    """The scripted server answering ``/v1/models`` with the recorded catalogue.

    ``TAU2_HF_ROUTER_URL`` points at it (``llm_server`` sets it); ``router.catalogue``
    can be changed, set to ``error(...)`` or to a raw string.
    """
    llm_server.catalogue = payload
    return llm_server


@pytest.fixture
def router_down(monkeypatch):
    """``TAU2_HF_ROUTER_URL`` on a local port where nothing listens."""
    monkeypatch.setenv("TAU2_HF_ROUTER_URL", f"http://127.0.0.1:{free_port()}/v1")


@pytest.fixture
def refreshed(router, db):
    """The recorded catalogue, stored."""
    from apps.inference.services import catalogue_refresh

    report = catalogue_refresh()
    assert report.source == "router"
    return report
