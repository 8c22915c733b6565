"""Studio API keys on the agent faces: the credentials resolver this project plugs into
``tau2_env.gate.access`` (:func:`install`, called by ``AgentsConfig.ready``).

A client that presents a key (``Authorization: Bearer tau2s_…`` on either face, or the
key as OpenEnv's ``reset(hf_token=…)``) plays for the key's owner: a customer it picks
on one of their connections (``reset(user_model="@connection/model")``) on that
connection's key, one on Hugging Face's router (or the server's default customer) on
their Hugging Face token from the vault — an owner without a usable Hugging Face sign-in
plays with customers on connections only (:class:`ConnectionsOnly`). Its sessions belong
to that key and count against its owner's cap (all their keys and browser sessions
together) — or, for a key made with a cap of its own (``ApiKey.max_sessions``), against
that cap alone — and its episodes are recorded as runs of kind "agent via API"
(``apps.agents.recording``), in the training session its request names
(``X-Tau2-Training-Session``, ``?training_session=``, or OpenEnv's
``reset(training_session=…)``) if any; the recorder is also their budget: an episode
whose customer is on a connection with a budget or a limit of runs in flight is admitted
and stopped as a model run is. While a session is open its key is checked again every
few seconds: revoking it (or, for a session opened with one, the owner's Hugging Face
sign-in being revoked) ends the session. Without a key a client goes on as before (its
own Hugging Face token, else the server's) — unless ``TAU2_AGENT_API_REQUIRE_KEY`` is
on: then it is refused, and the server's ``HF_TOKEN`` is never spent for it.

The resolver runs on the event loop: its database reads (an indexed key lookup, the
vault's row) go to a small thread pool and it waits for them, a few milliseconds. The
vault's token is never logged, nor put in a ``repr``, an argument list or a frame.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import InterfaceError, OperationalError, close_old_connections

from apps.accounts.vault import SignInRequired, hf_credential_check
from apps.agents.playground import (
    Owner,
    browser_session_key,
    owner_of,
    session_check,
    session_owner,
)
from apps.agents.services import API_KEY_PREFIX, ApiKeyRefused, api_key_check, api_key_resolve
from tau2_env.gate import access

if TYPE_CHECKING:
    from tau2_env.engine.episodes import Episode

__all__ = [
    "KEY_REQUIRED",
    "ConnectionsOnly",
    "agent_name",
    "install",
    "presented_key",
    "studio_credentials",
]

KEY_REQUIRED = (
    "This server serves agents with a studio API key only: create one on its "
    "/accounts/keys/ page and send it as `Authorization: Bearer tau2s_…`."
)
AGENT_VIA_API = "agent via API"
AGENT_HEADER = "x-tau2-agent"

_T = TypeVar("_T")
_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="api-keys")


def presented_key(request: access.ClientRequest) -> str | None:
    """The studio key ``request`` carries (as a Bearer token, or as the reset's
    ``hf_token``), or ``None``. Anything else there is a Hugging Face token."""
    for candidate in (access.bearer_token(request.headers), request.hf_token):
        if candidate and candidate.startswith(API_KEY_PREFIX):
            return candidate
    return None


def agent_name(request: access.ClientRequest) -> str:
    """The name the client plays under (``X-Tau2-Agent`` header or ``agent`` query
    parameter, printable, at most 100 characters), else "agent via API"."""
    given = request.headers.get(AGENT_HEADER) or request.query.get("agent") or ""
    name = " ".join("".join(c for c in given if c.isprintable()).split())[:100]
    return name or AGENT_VIA_API


def _key_owner(raw: str) -> tuple[Owner, str, int | None]:
    """(the key's owner, key id, the key's own session cap) of the key ``raw``; raises
    :class:`~tau2_env.gate.access.CredentialsRefused`. Runs off the event loop."""
    close_old_connections()
    try:
        key = api_key_resolve(raw=raw)
    except ApiKeyRefused as exc:
        raise access.CredentialsRefused(str(exc)) from None
    if not key.may_start:
        raise access.CredentialsRefused(
            "This API key may only read the JSON API: an episode needs a key that may "
            "read and start (make one on /accounts/keys/)."
        )
    return owner_of(key.user), key.key_id, key.max_sessions


@dataclass(frozen=True)
class ConnectionsOnly:
    """The :class:`~tau2_env.gate.access.EpisodeBudget` of a person without a usable
    Hugging Face sign-in (:attr:`Owner.no_token` says why): an episode whose customer is
    not on one of their connections is refused before it starts — without a token of
    theirs it would run on the server's own key — with the vault's reason and what to do
    instead; any other is ``inner``'s to admit (``None``: nothing limits it)."""

    no_token: str
    inner: access.EpisodeBudget | None = None

    def episode_admit(self, episode: Episode, *, face: str) -> None:
        if not episode.user_llm.origin:  # the router or the server's provider: no connection
            raise access.EpisodeRefused(
                f"{self.no_token} Without it, choose a customer on one of your connections: "
                'reset(user_model="@connection/model"), or the playground\'s customer picker.'
            )
        if self.inner is not None:
            self.inner.episode_admit(episode, face=face)

    def turn_refusal(self, episode: Episode) -> str | None:
        return self.inner.turn_refusal(episode) if self.inner is not None else None


def _budget_for(owner: Owner, inner: access.EpisodeBudget | None) -> access.EpisodeBudget | None:
    """``inner``, or, for an owner without a Hugging Face token, :class:`ConnectionsOnly`
    around it."""
    return inner if owner.hf_token else ConnectionsOnly(no_token=owner.no_token, inner=inner)


def _off_loop(func: Callable[..., _T], *args) -> _T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a plain thread (in-process use): the database is ours
        return func(*args)
    return _pool.submit(func, *args).result()


def studio_credentials(request: access.ClientRequest) -> access.Credentials:
    """The credentials of ``request`` (see the module docstring); raises
    :class:`~tau2_env.gate.access.CredentialsRefused` for an unknown or revoked key, a key
    whose owner must sign in again, or no key where one is required, and
    :class:`~tau2_env.gate.access.CredentialsUnavailable` while the database cannot be reached
    (its reads are a key's row and the vault's: any connection error is an outage)."""
    try:
        return _studio_credentials(request)
    except (OperationalError, InterfaceError):
        close_old_connections()
        raise access.CredentialsUnavailable(
            "The studio's database cannot be reached to check these credentials; "
            f"retry in {access.RETRY_AFTER} s."
        ) from None


def _studio_credentials(request: access.ClientRequest) -> access.Credentials:
    raw = presented_key(request)
    if raw is None:
        signed_in = _browser_credentials(request)
        if signed_in is not None:
            return signed_in
        if settings.TAU2_AGENT_API_REQUIRE_KEY:
            raise access.CredentialsRefused(KEY_REQUIRED)
        return access.default_resolver(request)
    owner, key_id, max_sessions = _off_loop(_key_owner, raw)
    user_id = owner.user_id
    recorder = _recording().AgentRunRecorder(
        user_id=user_id,
        key_id=key_id,
        agent=agent_name(request),
        training_session=request.training_session,
    )
    return access.Credentials(
        # A key with a cap of its own counts against it alone; others share their owner's.
        client=f"key:{key_id}" if max_sessions else f"person:{user_id}",
        limit=min(max_sessions, settings.TAU2_SESSIONS_PER_KEY_MAX) if max_sessions else None,
        owner=f"key:{key_id}",
        hf_token=owner.hf_token,
        hooks=recorder,
        check=functools.partial(_key_check, key_id, hf=owner.hf_token is not None),
        customer=functools.partial(customer_route, user_id),
        admit=recorder.admit if request.training_session else None,
        budget=_budget_for(owner, recorder),
        claim=recorder.claim,
    )


def customer_route(user_id: int, value: str):
    """The route of the customer model ``value`` (a picker id: ``org/model`` on the
    router, ``@connection/model``) that a keyed or signed-in client chose at reset, on
    its owner's credentials; raises ``ValueError`` saying why it may not be used (an
    unknown model, a connection not theirs). Runs in the episode's worker thread."""
    # On first use, not at start-up: the routes import the engine's LLM door (litellm).
    from apps.connections.llm_routes import ConnectionUnavailable, route_for, route_resolve

    close_old_connections()
    user = get_user_model().objects.get(pk=user_id)
    chosen = route_resolve(value, user=user, role="customer")
    try:
        return route_for(connection=chosen.connection, model=chosen.model, user=user)
    except (SignInRequired, ConnectionUnavailable) as exc:
        raise ValueError(str(exc)) from None


def _key_check(key_id: str, *, hf: bool = True) -> None:
    """Whether the key (and, with ``hf``, its owner's Hugging Face sign-in) still stands;
    raises :class:`~tau2_env.gate.access.CredentialsRefused`. Runs in a worker thread."""
    close_old_connections()
    try:
        user_id = api_key_check(key_id=key_id)
        if hf:
            hf_credential_check(user_id=user_id)
    except ApiKeyRefused as exc:
        raise access.CredentialsRefused(str(exc)) from None
    except SignInRequired as exc:
        raise access.CredentialsRefused(f"The owner of this API key: {exc}") from None


def _session_check(session_key: str, *, hf: bool = True) -> None:
    """Whether the browser session still plays; raises ``CredentialsRefused``."""
    try:
        session_check(session_key, hf=hf)
    except SignInRequired as exc:
        raise access.CredentialsRefused(str(exc)) from None


def _browser_credentials(request: access.ClientRequest) -> access.Credentials | None:
    """A signed-in person's own session on the playground's same-origin ``/ws``
    (``apps.agents.playground``), when the client presents no token of its own."""
    session_key = browser_session_key()
    if not session_key or access.bearer_token(request.headers) or request.hf_token:
        return None
    owner = _off_loop(session_owner, session_key)
    if owner is None:
        return None
    fingerprint = hashlib.sha256(session_key.encode()).hexdigest()[:16]
    return access.Credentials(
        client=f"person:{owner.user_id}",
        owner=f"browser:{fingerprint}",
        hf_token=owner.hf_token,
        check=functools.partial(_session_check, session_key, hf=owner.hf_token is not None),
        customer=functools.partial(customer_route, owner.user_id),
        budget=_budget_for(owner, _recording().UnrecordedBudget()),
    )


def _recording():
    """``apps.agents.recording``, imported with the first episode, not at start-up (this
    module's resolver is installed by AgentsConfig.ready): it imports τ²'s engine and
    litellm (seconds)."""
    from apps.agents import recording  # on first use: see the docstring

    return recording


def install() -> None:
    """Make :func:`studio_credentials` the agent faces' resolver."""
    access.set_credentials_resolver(studio_credentials)
