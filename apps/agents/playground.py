"""The playground's credentials: a signed-in person's own browser session on OpenEnv's ``/ws``.

A page of this site cannot send an ``Authorization`` header on a WebSocket (the
browser's API has none), and a key handed to the page would be a secret that any script
on it can read and that a frame log would show. So instead a WebSocket to ``/ws`` whose
``Origin`` is this site's own — the check the site's own sockets get, which a page of
another site cannot pass (``tau2site.middleware.BrowserSessions`` makes it and binds
the session with :func:`browser_session`) — and that carries Django's session cookie
of a signed-in person plays on that person's Hugging Face token from the vault. Its
sessions belong to that browser session and count against the person's cap (with their
keys); signing out ends them. Nothing new is stored and no secret reaches the page.
Like any episode without a studio key, it is not recorded as a run.

A key or a token the client presents itself (``Authorization``, ``reset(hf_token=…)``)
wins over the session, as everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import import_module
from types import SimpleNamespace

from django.conf import settings
from django.contrib.auth import get_user
from django.db import close_old_connections

from apps.accounts.vault import SignInRequired, hf_credential_check, hf_token_for

__all__ = [
    "browser_session",
    "browser_session_key",
    "session_check",
    "session_owner_token",
    "session_user_id",
]

_browser_session: ContextVar[str | None] = ContextVar("tau2_browser_session", default=None)


@contextmanager
def browser_session(session_key: str | None) -> Iterator[None]:
    """While inside, :func:`browser_session_key` is ``session_key``: the ASGI wrapper of
    OpenEnv's ``/ws`` (``tau2site.middleware.BrowserSessions``) binds a same-origin
    connection's session cookie for the time it is served."""
    token = _browser_session.set(session_key)
    try:
        yield
    finally:
        _browser_session.reset(token)


def browser_session_key() -> str | None:
    """The Django session key of the same-origin ``/ws`` connection being served, if any."""
    return _browser_session.get()


def _session_user(session_key: str):
    """The signed-in, active person of a session, else ``None``. Reads the database."""
    close_old_connections()
    engine = import_module(settings.SESSION_ENGINE)
    user = get_user(SimpleNamespace(session=engine.SessionStore(session_key)))
    return user if user.is_authenticated and user.is_active else None


def session_user_id(session_key: str) -> int | None:
    """The id of the signed-in, active person of a session, ``None`` for no such session
    (expired, signed out, anonymous). Reads the database."""
    user = _session_user(session_key)
    return user.pk if user is not None else None


def session_check(session_key: str) -> None:
    """Whether a browser session still plays (its person signed in, their Hugging Face
    sign-in standing); raises the vault's ``SignInRequired``. Reads the database."""
    user_id = session_user_id(session_key)
    if user_id is None:
        raise SignInRequired("You signed out (or your session expired).")
    hf_credential_check(user_id=user_id)


def session_owner_token(session_key: str) -> tuple[int, str] | None:
    """(the person's id, their Hugging Face token) for a signed-in, active person's
    session, ``None`` for no such session (expired, signed out, anonymous). Raises the
    vault's ``SignInRequired`` when the person must sign in again. Reads the database."""
    user = _session_user(session_key)
    return None if user is None else (user.pk, hf_token_for(user=user))
