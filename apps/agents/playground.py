"""The playground's credentials: a signed-in person's own browser session on OpenEnv's ``/ws``.

A page of this site cannot send an ``Authorization`` header on a WebSocket (the
browser's API has none), and a key handed to the page would be a secret that any script
on it can read and that a frame log would show. So instead a WebSocket to ``/ws`` whose
``Origin`` is this site's own — the check the site's own sockets get,
:func:`tau2site.middleware.websocket_origin_allowed`, which a page of another site cannot
pass — and that carries Django's session cookie of a signed-in person plays on that
person's Hugging Face token from the vault. Its sessions count against the person's cap
(client ``user:<id>``); nothing new is stored and no secret reaches the page. Like any
episode without a studio key, it is not recorded as a run.

A key or a token the client presents itself (``Authorization``, ``reset(hf_token=…)``)
wins over the session, as everywhere else.
"""

from __future__ import annotations

from contextvars import ContextVar
from http.cookies import CookieError, SimpleCookie
from importlib import import_module
from types import SimpleNamespace

from django.conf import settings

from tau2site.middleware import websocket_origin_allowed

__all__ = ["BrowserSessions", "browser_session_key", "session_owner_token"]

_browser_session: ContextVar[str | None] = ContextVar("tau2_browser_session", default=None)
OPENENV_SOCKET = "/ws"


def _session_cookie(scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"cookie":
            try:
                cookie = SimpleCookie(value.decode("latin-1"))
            except CookieError:
                return None
            morsel = cookie.get(settings.SESSION_COOKIE_NAME)
            return morsel.value if morsel and morsel.value else None
    return None


class BrowserSessions:
    """ASGI wrapper of the OpenEnv app: while a same-origin ``/ws`` connection is served,
    :func:`browser_session_key` is its session cookie (``None`` for anything else)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "websocket"
            or scope.get("path", "").rstrip("/") != OPENENV_SOCKET
            or not websocket_origin_allowed(scope)
        ):
            return await self.app(scope, receive, send)
        token = _browser_session.set(_session_cookie(scope))
        try:
            return await self.app(scope, receive, send)
        finally:
            _browser_session.reset(token)


def browser_session_key() -> str | None:
    """The Django session key of the same-origin ``/ws`` connection being served, if any."""
    return _browser_session.get()


def session_owner_token(session_key: str) -> tuple[int, str] | None:
    """(the person's id, their Hugging Face token) for a signed-in, active person's
    session, ``None`` for no such session (expired, signed out, anonymous). Raises the
    vault's ``SignInRequired`` when the person must sign in again. Reads the database."""
    from django.contrib.auth import get_user
    from django.db import close_old_connections

    from apps.accounts.vault import hf_token_for

    close_old_connections()
    engine = import_module(settings.SESSION_ENGINE)
    user = get_user(SimpleNamespace(session=engine.SessionStore(session_key)))
    if not (user.is_authenticated and user.is_active):
        return None
    return user.pk, hf_token_for(user=user)
