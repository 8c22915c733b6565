"""Reusable pytest fixtures: the scripted LLM and a live ASGI server.

The root ``tests/conftest.py`` imports them, so every test directory has them.

* ``llm_server``: a :class:`~tests.support.llm_server.ScriptedLLM`, emptied for the test,
  with every provider pointed at it (``TAU2_HF_ROUTER_URL``, ``OPENAI_BASE_URL``,
  ``ANTHROPIC_BASE_URL``) and no credential in the environment — set ``HF_TOKEN`` with
  ``monkeypatch`` when a test wants a server-side token.
* ``asgi_server``: a :class:`LiveServer`, a real uvicorn serving the project's ASGI
  application (``tau2site.asgi:application``: Django pages, Channels, OpenEnv, MCP) on a
  thread of this process, at ``.url`` (``http://127.0.0.1:<port>``). Session-scoped; it
  shares this process's settings and test database, and settings are read per request
  and per episode, so ``settings`` and ``monkeypatch`` still apply.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tau2_env.gate import hf_identity
from tests.support.llm_server import ScriptedLLM
from tests.support.processes import free_port

__all__ = ["LiveServer", "asgi_server", "llm_server", "scripted_llm_session"]

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
    """The scripted LLM, empty, with all providers (and the Hub's whoami) pointed at it
    and no credentials set."""
    scripted_llm_session.reset()
    for name in _PROVIDER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAU2_HF_ROUTER_URL", scripted_llm_session.base_url)
    monkeypatch.setenv("TAU2_HF_HUB_URL", scripted_llm_session.hub_url)
    hf_identity.forget()
    monkeypatch.setenv("OPENAI_BASE_URL", scripted_llm_session.base_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{scripted_llm_session.port}")
    monkeypatch.setenv("TAU2_LLM_TIMEOUT", "30")
    return scripted_llm_session


@dataclass(frozen=True)
class LiveServer:
    """A server listening at ``url`` (``http://127.0.0.1:<port>``)."""

    url: str

    def ws_url(self, path: str) -> str:
        """The WebSocket URL of ``path`` on this server (``ws://127.0.0.1:<port><path>``)."""
        return self.url.replace("http://", "ws://", 1) + path


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def asgi_server(django_db_setup, django_db_blocker) -> Iterator[LiveServer]:
    """``uvicorn tau2site.asgi:application`` on a thread, up once ``/health`` answers.

    The server's threads read and write the test database whatever the test in progress
    asked for, so database access stays unblocked while it runs.
    """
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            "tau2site.asgi:application",
            host="127.0.0.1",
            port=port,
            lifespan="on",
            log_level="warning",
            ws="websockets-sansio",
        )
    )
    url = f"http://127.0.0.1:{port}"
    with django_db_blocker.unblock():
        thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not (server.started and _healthy(url)):
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"tau2site.asgi:application did not start on port {port}")
            time.sleep(0.05)
        try:
            yield LiveServer(url=url)
        finally:
            server.should_exit = True
            thread.join(timeout=15)
