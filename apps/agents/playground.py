"""The playground's credentials: a signed-in person's own browser session on OpenEnv's ``/ws``.

A page of this site cannot send an ``Authorization`` header on a WebSocket (the
browser's API has none), and a key handed to the page would be a secret that any script
on it can read and that a frame log would show. So instead a WebSocket to ``/ws`` whose
``Origin`` is this site's own — the check the site's own sockets get, which a page of
another site cannot pass (``tau2site.middleware.BrowserSessions`` makes it and binds
the session with :func:`browser_session`) — and that carries Django's session cookie
of a signed-in person plays for that person: a customer they pick on one of their
connections runs on its key, one on Hugging Face's router (or the server's default
customer) on their own Hugging Face token from the vault — a person without a usable
Hugging Face sign-in (a laptop's developer sign-in) plays with customers on connections
only (:class:`Owner`). Its sessions belong to that browser session and count against the
person's cap (with their keys); signing out ends them. Nothing new is stored and no
secret reaches the page. Like any episode without a studio key, it is not recorded as a
run.

A key or a token the client presents itself (``Authorization``, ``reset(hf_token=…)``)
wins over the session, as everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from importlib import import_module
from types import SimpleNamespace

from django.conf import settings
from django.contrib.auth import get_user
from django.db import close_old_connections

from apps.accounts.vault import SignInRequired, hf_credential_check, hf_token_for

__all__ = [
    "Owner",
    "browser_session",
    "browser_session_key",
    "owner_of",
    "session_check",
    "session_owner",
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


def session_check(session_key: str, *, hf: bool = True) -> None:
    """Whether a browser session still plays (its person signed in and, with ``hf``,
    their Hugging Face sign-in standing: a session opened without one does not depend on
    it); raises the vault's ``SignInRequired``. Reads the database."""
    user_id = session_user_id(session_key)
    if user_id is None:
        raise SignInRequired("You signed out (or your session expired).")
    if hf:
        hf_credential_check(user_id=user_id)


@dataclass(frozen=True)
class Owner:
    """The person an agent face plays for: ``user_id``, and their Hugging Face token —
    ``None`` when they have no usable Hugging Face sign-in (a developer sign-in, a
    revoked one), ``no_token`` then saying why (the vault's message): their customer may
    run on their connections only."""

    user_id: int
    hf_token: str | None = field(repr=False)
    no_token: str = ""


def owner_of(user) -> Owner:
    """``user`` as an :class:`Owner`: with their Hugging Face token when the vault gives
    one (refreshing it if due), else why not. Reads the database, may call Hugging Face."""
    try:
        return Owner(user_id=user.pk, hf_token=hf_token_for(user=user))
    except SignInRequired as exc:
        return Owner(user_id=user.pk, hf_token=None, no_token=str(exc))


def session_owner(session_key: str) -> Owner | None:
    """The :class:`Owner` of a signed-in, active person's session, ``None`` for no such
    session (expired, signed out, anonymous). Reads the database."""
    user = _session_user(session_key)
    return None if user is None else owner_of(user)
