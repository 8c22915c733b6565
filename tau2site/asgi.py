"""One ASGI application for the whole product.

* OpenEnv's API (FastAPI, from ``tau2_env.faces.server``) at OpenEnv's own paths:
  ``/ws`` ``/reset`` ``/step`` ``/state`` ``/schema`` ``/metadata`` ``/health`` ``/mcp``,
  with its ``/openapi.json`` and ``/docs``;
* the MCP server for agents (``tau2_env.faces.mcp_server``, the official SDK's streamable
  HTTP transport) at ``/agent/mcp``, sharing the OpenEnv API's session slots;
* Channels WebSockets under ``/ws/…`` (live runs, play sessions);
* Django for every other page.

Both agent faces sit behind :class:`tau2_env.gate.guard.AgentFaceGuard`, which the pages'
Host check and CSRF do not reach: ``ALLOWED_HOSTS`` only, no browser Origin but the
site's own (or ``CSRF_TRUSTED_ORIGINS``), JSON bodies only and bounded; the MCP SDK's own
DNS-rebinding protection is on with the same hosts.

Lifespan events go to the OpenEnv app (its idle-session reaper starts there), run the MCP
server's session manager, and start the embedded Celery worker when there is no broker.

Serve with ``uvicorn tau2site.asgi:application``.
"""

from __future__ import annotations

import asyncio
import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tau2site.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_http = get_asgi_application()  # sets Django up before anything imports models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from apps.agents.recording import recordings_drain  # noqa: E402
from tau2_env.faces.mcp_server import McpApp  # noqa: E402
from tau2_env.faces.server import create_openenv_app  # noqa: E402
from tau2_env.gate import guard  # noqa: E402
from tau2_env.gate.shared_slots import session_slots_from_config  # noqa: E402
from tau2site import embedded_worker  # noqa: E402
from tau2site.middleware import (  # noqa: E402
    ApiSecurityHeaders,
    BrowserSessions,
    SameOriginWebsockets,
    UnavailableWebsockets,
    agent_face_settings,
)
from tau2site.routing import websocket_urlpatterns  # noqa: E402

# OpenEnv's routes, matched exactly so that /ws/runs/<id>/ stays with Channels.
OPENENV_PATHS = frozenset(
    {"/ws", "/reset", "/step", "/state", "/schema", "/metadata", "/health", "/mcp"}
    | {"/openapi.json", "/docs"}
)
MCP_AGENT_PATH = "/agent/mcp"
# How long a stopping process waits for agent episodes' recordings to be stored.
RECORDINGS_DRAIN_S = 30.0
# OpenEnv's Task API: /list_environments and /<environment name>/… (also the name of the
# original OpenEnv Space this studio grew from).
OPENENV_PREFIXES = ("/tau2/", "/tau2_env/", "/tau2-env/", "/list_environments")


class Application:
    """Routes each ASGI connection to OpenEnv, Channels or Django."""

    def __init__(self) -> None:
        # One pool for both agent faces; caps shared with every host's processes
        # (TAU2_SLOTS_URL), else with the other processes of one router (TAU2_SLOTS_LEDGER).
        slots = session_slots_from_config()
        swagger = f"{settings.STATIC_URL}drf_spectacular_sidecar/swagger-ui-dist"
        # Its lifespan goes to the app itself (the wrapper adds headers to HTTP only).
        # A signed-in person's page may open /ws on their session (the agents playground).
        openenv = BrowserSessions(create_openenv_app(slots, swagger_assets=swagger))
        self.openenv = ApiSecurityHeaders(
            guard.AgentFaceGuard(openenv, face=guard.OPENENV_FACE, settings=agent_face_settings)
        )
        self.mcp_app = McpApp(
            slots, transport_security=guard.transport_security(agent_face_settings())
        )
        self.mcp = ApiSecurityHeaders(
            guard.AgentFaceGuard(self.mcp_app, face=guard.MCP_FACE, settings=agent_face_settings)
        )
        # Outside the session lookup too: a database or Redis outage closes with 1013.
        self.channels_ws = SameOriginWebsockets(
            UnavailableWebsockets(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        )

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind == "lifespan":
            return await self._lifespan(scope, receive, send)
        path = scope.get("path", "")
        if path.rstrip("/") in OPENENV_PATHS or path.startswith(OPENENV_PREFIXES):
            return await self.openenv(scope, receive, send)
        if path.rstrip("/") == MCP_AGENT_PATH:
            return await self.mcp(scope, receive, send)
        if kind == "websocket":
            return await self.channels_ws(scope, receive, send)
        return await django_http(scope, receive, send)

    async def _lifespan(self, scope, receive, send):
        async def receive_and_start():
            message = await receive()
            await on_lifespan(message)
            return message

        async with self.mcp_app.run():
            await self.openenv(scope, receive_and_start, send)


async def on_lifespan(message: dict) -> None:
    """What this process does as it starts and stops, besides the agent faces' own."""
    # Off the event loop: Celery's Django fixup touches the database on start.
    if message["type"] == "lifespan.startup":
        await asyncio.to_thread(embedded_worker.start)
    elif message["type"] == "lifespan.shutdown":
        # The sessions are closed by now: what they recorded is stored first.
        await asyncio.to_thread(recordings_drain, timeout=RECORDINGS_DRAIN_S)
        await asyncio.to_thread(embedded_worker.stop)


application = Application()
# Everything imported so far (Django, τ², litellm, the catalogue: ~700,000 objects) lives
# as long as the process. Frozen, the collector no longer walks it: a full collection cost
# ~0.5 s of CPU with the GIL held — every session and socket of the process stopped — and
# ran now and then under load.
gc.freeze()
