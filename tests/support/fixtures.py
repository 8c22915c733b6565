"""Reusable pytest fixtures: the scripted LLM and a live ASGI server.

Import them into a ``conftest.py`` with ``from tests.support.fixtures import *``.

* ``llm_server``: a :class:`~tests.support.llm_server.ScriptedLLM`, emptied for the test,
  with every provider pointed at it (``TAU2_HF_ROUTER_URL``, ``OPENAI_BASE_URL``,
  ``ANTHROPIC_BASE_URL``) and no credential in the environment — set ``HF_TOKEN`` with
  ``monkeypatch`` when a test wants a server-side token.
* ``asgi_server``: the base URL (``http://127.0.0.1:<port>``) of a real uvicorn serving
  the project's ASGI app (``tau2site.asgi:application``), or ``tau2_env.server:app`` when
  that cannot be imported; ``TAU2_TEST_ASGI_APP`` forces one. Session-scoped; settings
  are read per episode, so ``monkeypatch`` still applies.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.llm_server import ScriptedLLM

__all__ = ["asgi_server", "asgi_server_app", "llm_server", "scripted_llm_session"]

PROJECT_APP = "tau2site.asgi:application"
OPENENV_APP = "tau2_env.server:app"

_PROVIDER_VARS = (
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TAU2_USER_PROVIDER",
    "TAU2_USER_MODEL",
    "TAU2_NL_JUDGE",
    "TAU2_DOMAIN",
    "TAU2_SPLIT",
)


@pytest.fixture(scope="session")
def scripted_llm_session() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


@pytest.fixture
def llm_server(scripted_llm_session: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> ScriptedLLM:
    """The scripted LLM, empty, with all providers pointed at it and no credentials set."""
    scripted_llm_session.reset()
    for name in _PROVIDER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAU2_HF_ROUTER_URL", scripted_llm_session.base_url)
    monkeypatch.setenv("OPENAI_BASE_URL", scripted_llm_session.base_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{scripted_llm_session.port}")
    monkeypatch.setenv("TAU2_LLM_TIMEOUT", "30")
    return scripted_llm_session


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _choose_app() -> str:
    forced = os.environ.get("TAU2_TEST_ASGI_APP")
    if forced:
        return forced
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tau2site.settings")
    try:
        module = importlib.import_module(PROJECT_APP.split(":")[0])
        getattr(module, PROJECT_APP.split(":")[1])
    except Exception:
        return OPENENV_APP
    return PROJECT_APP


def _healthy(base_url: str) -> bool:
    with (
        contextlib.suppress(Exception),
        urllib.request.urlopen(f"{base_url}/health", timeout=2) as response,
    ):
        return response.status == 200
    return False


@pytest.fixture(scope="session")
def asgi_server_app() -> str:
    """The import string of the ASGI app ``asgi_server`` serves."""
    return _choose_app()


@pytest.fixture(scope="session")
def asgi_server(asgi_server_app: str) -> Iterator[str]:
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            asgi_server_app,
            host="127.0.0.1",
            port=port,
            lifespan="on",
            log_level="warning",
            ws_ping_interval=None,
        )
    )
    thread = threading.Thread(target=server.run, name="live-asgi", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not (server.started and _healthy(base_url)):
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{asgi_server_app} did not start on port {port}")
        time.sleep(0.05)
    yield base_url
    server.should_exit = True
    thread.join(timeout=10)
