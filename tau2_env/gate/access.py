"""Who an API client is, what its episodes run on, and who hears about them.

Both agent faces (OpenEnv's ``/ws`` ``/reset`` ``/step`` ``/mcp`` and the MCP server)
ask one function, :func:`resolve_credentials`, what a request may use: the customer's
token, the key that counts its sessions against the per-client cap, and the
:class:`EpisodeHooks` that hear about each episode it plays. The default resolver knows
Hugging Face tokens only; the web project plugs its own in with
:func:`set_credentials_resolver` (e.g. to accept its own API keys, or to require one).

Who may use a session: the credential that opened it (:attr:`Credentials.owner`: a key,
a token, a browser session; an anonymous client is its address) — another, or none,
finds no such session. Whose cap it counts against: :attr:`Credentials.client` (a
person with all their keys, a Hugging Face account, an address). A raw Hugging Face
token is asked of the Hub first (:mod:`tau2_env.gate.hf_identity`): a token the Hub does not
know is refused before it holds anything.

Nothing here imports Django, and no secret is ever put in a ``repr`` or a log line.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import parse_qs

from tau2_env import config
from tau2_env.gate import hf_identity

if TYPE_CHECKING:
    from tau2_env.engine.episodes import Episode

__all__ = [
    "ClientRequest",
    "credentials_used",
    "hearing_credentials",
    "resolve_credentials_async",
    "Credentials",
    "CredentialsRefused",
    "CredentialsUnavailable",
    "EpisodeBudget",
    "EVALUATION_HEADER",
    "EVALUATION_QUERY",
    "EpisodeHooks",
    "EpisodePlan",
    "EpisodeRefused",
    "TRAINING_SESSION_HEADER",
    "TRAINING_SESSION_QUERY",
    "bearer_token",
    "current_request",
    "default_resolver",
    "resolve_credentials",
    "serving",
    "set_credentials_resolver",
    "training_session_name",
]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")


class CredentialsRefused(Exception):
    """The request's credentials are not accepted; ``str()`` says why (no secret in it)."""


class CredentialsUnavailable(CredentialsRefused):
    """The credentials cannot be checked now (the database or the Hub is away): not a
    refusal of them — the faces answer 503 with ``Retry-After`` (:data:`RETRY_AFTER`)."""


RETRY_AFTER = 5  # seconds, for a CredentialsUnavailable

# A training session's name, as a client may give it (or as OpenEnv's
# ``reset(training_session=…)``, which wins): episodes a studio key plays under one name
# form one training session in the web project.
TRAINING_SESSION_HEADER = "x-tau2-training-session"
TRAINING_SESSION_QUERY = "training_session"
TRAINING_SESSION_MAX_LENGTH = 100

# The evaluation whose next episode a client asks for (or OpenEnv's
# ``reset(evaluation=…)``, MCP's ``start`` argument ``evaluation``, which win): an
# evaluation of an outside agent hands its episodes to the clients that pull them.
EVALUATION_HEADER = "x-tau2-evaluation"
EVALUATION_QUERY = "evaluation"
EVALUATION_MAX_LENGTH = 64


def evaluation_name(value: Any) -> str | None:
    """``value`` as an evaluation's id as a client gives it (text or an integer, at most
    :data:`EVALUATION_MAX_LENGTH` characters, stripped); ``None`` when empty or neither."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value).strip()
    return text[:EVALUATION_MAX_LENGTH] or None


def training_session_name(value: Any) -> str | None:
    """``value`` as a training session's name: printable, spaces collapsed, at most
    :data:`TRAINING_SESSION_MAX_LENGTH` characters; ``None`` when empty or not text."""
    if not isinstance(value, str):
        return None
    name = " ".join("".join(c for c in value if c.isprintable()).split())
    return name[:TRAINING_SESSION_MAX_LENGTH] or None


@dataclass(frozen=True)
class ClientRequest:
    """What a client presented: its HTTP ``headers`` (lower-case names), its network
    ``address``, the face it came through (``"openenv"`` or ``"mcp"``), at a reset the
    ``hf_token`` it gave in the request body, and its URL's ``query`` (last value of each
    name; e.g. ``agent``, the name it plays under). ``training_session``: the training
    session its episodes belong to (:data:`TRAINING_SESSION_HEADER`, else the
    :data:`TRAINING_SESSION_QUERY` parameter, else a reset's own argument), or ``None``.
    ``evaluation``: the evaluation whose episodes it pulls (:data:`EVALUATION_HEADER`,
    else the :data:`EVALUATION_QUERY` parameter), or ``None``."""

    headers: Mapping[str, str] = field(repr=False, default_factory=dict)
    address: str = ""
    face: str = ""
    hf_token: str | None = field(repr=False, default=None)
    query: Mapping[str, str] = field(repr=False, default_factory=dict)
    training_session: str | None = None
    evaluation: str | None = None

    @classmethod
    def from_scope(cls, scope: Mapping[str, Any], *, face: str) -> ClientRequest:
        """The request of an ASGI ``scope`` (HTTP or WebSocket)."""
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers") or ()
        }
        client = scope.get("client") or ("", 0)
        query = {
            name: values[-1]
            for name, values in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()
        }
        training = training_session_name(
            headers.get(TRAINING_SESSION_HEADER) or query.get(TRAINING_SESSION_QUERY)
        )
        evaluation = evaluation_name(headers.get(EVALUATION_HEADER) or query.get(EVALUATION_QUERY))
        return cls(
            headers=headers,
            address=str(client[0] or ""),
            face=face,
            query=query,
            training_session=training,
            evaluation=evaluation,
        )


class EpisodeHooks(Protocol):
    """Hears about the episodes one client plays (e.g. to record them as runs).

    Called from the thread that drove the episode, after the engine's work; an
    exception in a hook is logged and never reaches the agent.
    """

    def on_start(self, episode: Episode, *, face: str) -> None:
        """A new episode began (τ²'s greeting and the customer's opening are in it)."""

    def on_hop(self, episode: Episode, messages: list[dict[str, Any]]) -> None:
        """The agent acted: ``messages`` are the new ones (τ²'s JSON, ``turn_idx`` set)."""

    def on_done(self, episode: Episode) -> None:
        """The episode ended (scored, or ``episode.error`` says why not)."""


class EpisodeRefused(Exception):
    """An episode may not start (its customer's connection has no room in its budget,
    no price for the model, or all the runs in flight it allows; an evaluation with no
    episode to hand out); ``str()`` says why, ``status`` is the HTTP status it deserves
    (403, 404, 409, 410, or 429: it may later), ``retry_after`` the seconds to wait
    before asking again (429), ``data`` what a program reads of it (e.g. the
    evaluation's ``state``)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 403,
        retry_after: int | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.data = dict(data or {})


@dataclass(frozen=True)
class EpisodePlan:
    """One episode an evaluation handed to a client (:attr:`Credentials.claim`): the
    task and τ²'s trial seed, the customer's route and ``llm_args``, the NL judge's
    route (``None``: the customer's), τ²'s limits, ``labels`` the client is told in
    the opening (the evaluation, the trial, the run), a knowledge domain's retrieval
    configuration, and τ²'s wall-clock timeout (None: none)."""

    domain: str
    task_id: str
    seed: int | None
    user_llm: Any = field(repr=False)  # a tau2_env.llm.gateway.Route
    user_llm_args: Mapping[str, Any] | None = None
    judge_llm: Any = field(repr=False, default=None)
    max_steps: int | None = None
    max_errors: int | None = None
    labels: Mapping[str, Any] = field(default_factory=dict)
    retrieval_config: str = ""  # a knowledge domain's ("": its default)
    timeout: float | None = None  # τ²'s wall-clock limit in seconds (tau2 run --timeout)


class EpisodeBudget(Protocol):
    """What an episode's spend is counted against (the web project: a budgeted
    connection its customer, and so τ²'s NL judge, runs on).

    Called from the thread that drives the episode, and may block (a database).
    """

    def episode_admit(self, episode: Episode, *, face: str) -> None:
        """Before ``episode`` starts (before any call of its customer): raises
        :class:`EpisodeRefused` saying why it may not; returns when it may (then it
        holds whatever the budget reserves for it until it ends)."""

    def turn_refusal(self, episode: Episode) -> str | None:
        """Before each customer turn of an admitted ``episode``: why it may not be taken
        (the episode then ends with that reason), or ``None``."""


@dataclass(frozen=True)
class Credentials:
    """What a client's episodes run on, and whose they are.

    ``hf_token``: the customer's Hugging Face token (``None``: the server's configured
    provider and key). ``client``: the cap its sessions count against (never the token
    itself), at most ``limit`` sessions (``None``: the server's per-client cap; a
    studio key's own cap may exceed it, up to ``TAU2_SESSIONS_PER_KEY_MAX``).
    ``owner``: the credential its sessions belong to (default ``client``): only the
    same owner may use them. ``hooks``: told about its episodes, or ``None``.
    ``check``: asks again whether these credentials still stand (raises
    :class:`CredentialsRefused`: a revoked key, a signed-out session), called every few
    seconds while a session is open; ``None``: nothing can revoke them.
    ``customer``: the route of a customer model the client chose at reset (a picker id:
    ``org/model`` on the router, ``@connection/model``), raising ``ValueError`` with a
    reason for one it may not use; ``None``: the client cannot choose (no studio key),
    its customer is the server's.
    ``admit``: asked, before an episode of task ``task_id`` drawn from ``(domain,
    split)`` starts, whether it may (a training session's split guard): returns a line
    to add to the episode's opening (a warning) or ``None``; raises
    :class:`CredentialsRefused` to refuse the episode. ``None``: every episode may start.
    ``budget``: what its episodes' spend is counted against (:class:`EpisodeBudget`),
    asked before each starts and before each customer turn; ``None``: nothing limits it.
    ``claim``: hands the client the next episode of an evaluation of an outside agent,
    ``claim(evaluation, face)`` → :class:`EpisodePlan`, raising :class:`EpisodeRefused`
    (unknown, not the client's, paused, finished, full for now); ``None``: the client
    cannot pull an evaluation's episodes (no studio key).
    """

    client: str
    hf_token: str | None = field(repr=False, default=None)
    hooks: EpisodeHooks | None = field(repr=False, default=None)
    owner: str = ""
    limit: int | None = None
    check: Callable[[], None] | None = field(repr=False, default=None, compare=False)
    customer: Callable[[str], Any] | None = field(repr=False, default=None, compare=False)
    admit: Callable[[str, str, str], str | None] | None = field(
        repr=False, default=None, compare=False
    )
    budget: EpisodeBudget | None = field(repr=False, default=None, compare=False)
    claim: Callable[[str, str], EpisodePlan] | None = field(repr=False, default=None, compare=False)

    @property
    def holder(self) -> str:
        """Who the sessions belong to: ``owner``, else ``client``."""
        return self.owner or self.client


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or ``None``."""
    scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _fingerprint(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


def sessions_per_address() -> int | None:
    """``TAU2_SESSIONS_PER_ADDRESS``: sessions a client without a key or a known token
    may hold from one address, never more than the per-client cap; unset (``None``), the
    per-client cap. An OpenEnv client that gives its token only at ``reset`` is such a
    client while it connects."""
    if config.env_value("TAU2_SESSIONS_PER_ADDRESS") is None:
        return None
    return min(config._env_int("TAU2_SESSIONS_PER_ADDRESS", 1), config.sessions_per_client())


def default_resolver(request: ClientRequest) -> Credentials:
    """Hugging Face tokens only: the reset's ``hf_token`` wins over an ``Authorization:
    Bearer`` token; with neither, the server's own provider settings apply.

    A token is asked of the Hub (:func:`tau2_env.gate.hf_identity.hf_account`; refused if the
    Hub does not know it) and counts against its account's cap; without a token, or
    with the check off, sessions count against the address (``TAU2_SESSIONS_PER_ADDRESS``).
    Blocks for a Hub request on a new token: the faces call it off the event loop."""
    token = request.hf_token or bearer_token(request.headers)
    address = f"address:{request.address or 'unknown'}"
    if token is None:
        return Credentials(client=address, limit=sessions_per_address())
    owner = f"token:{_fingerprint(token)}"
    if not hf_identity.checking():
        return Credentials(
            client=address, owner=owner, hf_token=token, limit=sessions_per_address()
        )
    try:
        account = hf_identity.hf_account(token)
    except hf_identity.TokenUnknown as exc:
        raise CredentialsRefused(str(exc)) from None
    return Credentials(client=f"hf:{account}", owner=owner, hf_token=token)


_resolver: Callable[[ClientRequest], Credentials] = default_resolver


def set_credentials_resolver(resolver: Callable[[ClientRequest], Credentials] | None) -> None:
    """Make ``resolver`` the one that decides (``None``: back to :func:`default_resolver`).

    It may raise :class:`CredentialsRefused`; it must not block for long (it runs on
    the event loop).
    """
    global _resolver
    _resolver = resolver or default_resolver


def resolve_credentials(request: ClientRequest) -> Credentials:
    """The credentials of ``request``, as the installed resolver decides.

    Raises :class:`CredentialsRefused` when the resolver refuses them.
    """
    return _resolver(request)


# Resolving waits on a database or the Hub, not the CPU: more threads than asyncio's
# default pool (cores + 4), so that 64 clients connecting at once do not queue.
_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="tau2-credentials")


async def resolve_credentials_async(request: ClientRequest) -> Credentials:
    """:func:`resolve_credentials` in a worker thread (it may read a database or ask the
    Hub), with this task's context (the browser session a face bound, say)."""
    return await in_credentials_pool(resolve_credentials, request)


async def in_credentials_pool(func: Callable[..., _T], /, *args: Any) -> _T:
    """``func(*args)`` in the credentials' thread pool, in a copy of this context."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_pool, context.run, func, *args)


_heard: ContextVar[Callable[[Credentials], None] | None] = ContextVar(
    "tau2_credentials_heard", default=None
)


@contextmanager
def hearing_credentials(callback: Callable[[Credentials], None]) -> Iterator[None]:
    """While inside, :func:`credentials_used` tells ``callback`` (a face learns which
    credentials a session's reset chose, to check them again while it is open)."""
    token = _heard.set(callback)
    try:
        yield
    finally:
        _heard.reset(token)


def credentials_used(credentials: Credentials) -> None:
    """An episode is starting on ``credentials``: tell whoever is hearing."""
    callback = _heard.get()
    if callback is not None:
        callback(credentials)


def call_hook(hooks: EpisodeHooks | None, name: str, *args: Any, **kwargs: Any) -> None:
    """``hooks.<name>(...)`` if there are hooks; a failing hook is logged, not raised."""
    if hooks is None:
        return
    try:
        getattr(hooks, name)(*args, **kwargs)
    except Exception:
        logger.exception("Episode hook %s failed", name)


_current: ContextVar[ClientRequest | None] = ContextVar("tau2_client_request", default=None)


@contextmanager
def serving(request: ClientRequest) -> Iterator[ClientRequest]:
    """Make ``request`` the :func:`current_request` of this task (and of the tasks it
    starts) while the ``with`` block runs: the faces' ASGI wrappers set it."""
    token = _current.set(request)
    try:
        yield request
    finally:
        _current.reset(token)


def current_request() -> ClientRequest:
    """The request being served here (an empty one outside a request: in-process use)."""
    return _current.get() or ClientRequest()
