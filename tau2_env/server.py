"""The OpenEnv HTTP/WebSocket application of the engine.

:func:`create_openenv_app` builds openenv's FastAPI app (``/ws``, ``/reset``, ``/step``,
``/state``, ``/schema``, ``/metadata``, ``/health``, ``/mcp``) over
:class:`~tau2_env.openenv_env.Tau2Environment`. The project's ASGI application mounts it
beside Django and must forward lifespan events to it: openenv starts its idle-session
reaper on startup.

Standalone: ``uvicorn tau2_env.server:app`` (the module attribute ``app`` is built on
first access, so importing this module stays cheap).
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction

from tau2_env import config
from tau2_env.openenv_env import Tau2Environment, Tau2ToolObservation

__all__ = ["create_openenv_app"]


def create_openenv_app() -> Any:
    """A new FastAPI app serving OpenEnv's API for τ²-bench.

    ``MAX_CONCURRENT_ENVS`` (default 64) bounds the WebSocket sessions; ``TAU2_DOMAIN``
    and ``TAU2_SPLIT`` are read at each reset, so one server serves every domain. Starts
    without any credentials configured (``reset`` then explains what is missing).
    """
    return create_app(
        Tau2Environment,
        CallToolAction,
        Tau2ToolObservation,
        env_name="tau2",
        max_concurrent_envs=config.max_concurrent_envs(),
    )


_app: Any = None


def __getattr__(name: str) -> Any:
    # ``app`` for ``uvicorn tau2_env.server:app``; built once, on first use.
    global _app
    if name == "app":
        if _app is None:
            _app = create_openenv_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
