"""The one door every LLM call goes through.

τ² calls litellm from ``tau2.utils.llm_utils.generate`` through that module's global
``completion``; the simulated customer (``UserSimulator``), τ²'s own agent (``LLMAgent``)
and the natural-language judge (a fixed model from ``tau2.config``, with no key of its
own) all end up there. ``tau2_env.llm.compat.install()`` replaces that global with
:func:`routed_completion`, which takes the provider, model and key from the
*conversation* being served, kept in a ``contextvars.ContextVar`` set by
:func:`conversation` (and turns litellm's cache off). So:

* each conversation's customer and judge run on that conversation's credentials, and
  concurrent conversations (threads or tasks) never see each other's;
* a call made outside any conversation fails instead of falling back to the server's
  environment keys (litellm does that when ``api_key`` is ``None``);
* every call has the caller's LLM arguments (τ²'s ``llm_args``: temperature, top_p,
  ``reasoning_effort``… exactly as ``tau2 run --agent-llm-args`` passes them), a
  timeout, litellm's cache off, and retries for rate limits, timeouts and 503s only
  (never for 401/402), made here one attempt at a time so that each is told to the
  observers (:class:`CallNotice`) and kept (:class:`Attempt`); a 429's or 503's
  ``Retry-After`` is waited before the next (:func:`retry_after`, at most
  ``TAU2_LLM_RETRY_AFTER_MAX``; a provider asking for longer ends the call; within a
  :func:`waits_bounded` block — an episode's — those waits add up to at most its
  :class:`WaitBudget`, ``TAU2_LLM_RETRY_AFTER_RUN_MAX``), and a retry sends the same
  bytes.

A route's ``provider`` is the kind of endpoint (:data:`LITELLM_PREFIXES`): Hugging
Face's router, OpenAI, Anthropic, Google Gemini, Mistral, OpenRouter, Together,
Fireworks or any OpenAI-compatible server (vLLM, TGI, SGLang, Ollama…), each reached
with litellm's own route for it (``openai/<model>`` with ``api_base`` for the last).

Tests point :class:`Route` at a local scripted server through ``TAU2_HF_ROUTER_URL`` (or
``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL``), so litellm and the wire stay real.
"""

from __future__ import annotations

import contextvars
import email.utils
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import cachetools

# isort: off
# _tau2 must come before litellm: it sets LITELLM_LOCAL_MODEL_COST_MAP, without which
# importing litellm tries (and, offline, retries for seconds) to download its price list.
from tau2_env.llm._tau2 import registry  # noqa: F401
import litellm
import openai
from litellm.llms.custom_httpx.http_handler import HTTPHandler
from litellm.types.router import RetryPolicy
from litellm.utils import get_num_retries_from_retry_policy

# isort: on
from tau2_env import config, versions
from tau2_env.llm import outbound
from tau2_env.llm.llm_args import ROLE_KEY, ROUTE_KEYS

__all__ = [
    "ATTEMPTS",
    "LITELLM_PREFIXES",
    "ROLE_KEY",
    "Attempt",
    "CallNotice",
    "Explained",
    "LLMCallError",
    "MissingCredentialsError",
    "Route",
    "Usage",
    "UsageMeter",
    "conversation",
    "count_usage",
    "current_route",
    "explain_error",
    "hf_route",
    "litellm_kwargs",
    "metered",
    "observe_calls",
    "provider_words",
    "redact",
    "redact_in_logs",
    "resolve_route",
    "retry_after",
    "routed_completion",
    "use_sender",
]

# ROLE_KEY: the extra keyword our callers put in τ²'s ``llm_args`` to say whose call it
# is (tau2_env.llm.llm_args). It is removed before litellm sees the call. A call without it
# is the NL-assertion judge's.
ROLE_USER = "user"
ROLE_AGENT = "agent"
ROLE_JUDGE = "judge"
# A knowledge domain's embeddings (banking_knowledge's embedding retrieval configurations):
# called by tau2_env.llm.embeddings, not by litellm, on the conversation's embedder route.
ROLE_EMBEDDER = "embedder"

# Retries for transient failures only. 401 (AuthenticationError) and 402
# (PaymentRequiredError, a BadRequestError) are never retried: a retry cannot fix them
# and each one costs the visitor a request. The policy is read here, per failed attempt,
# with litellm's own reading of it (``get_num_retries_from_retry_policy``), and litellm
# gets none: it makes one attempt per call, and :func:`routed_completion` the others, as
# litellm's ``completion_with_retries`` made them (at once, no wait between), unless the
# provider said how long to wait (Retry-After).
RETRIES = 2
ATTEMPTS = RETRIES + 1  # at most, per call
RETRY_WAIT = 0.0  # seconds between attempts: litellm's "constant_retry" waits none
_RETRY_POLICY = RetryPolicy(
    RateLimitErrorRetries=RETRIES,
    TimeoutErrorRetries=RETRIES,
    ServiceUnavailableErrorRetries=RETRIES,
    AuthenticationErrorRetries=0,
    BadRequestErrorRetries=0,
    ContentPolicyViolationErrorRetries=0,
    InternalServerErrorRetries=0,
    NotFoundErrorRetries=0,
    DefaultRetries=0,
)


_TOKEN_PATTERNS = re.compile(r"\b(hf_[A-Za-z0-9_]{6,}|sk-[A-Za-z0-9_\-]{8,})")
# A URL's query may carry a key (``?api_key=…``, ``?token=…``): never shown.
_URL_QUERY = re.compile(r"(\bhttps?://[^\s?#]*)\?[^\s#]*")


class MissingCredentialsError(RuntimeError):
    """No credential for the customer's provider; the message says what to do."""


class LLMCallError(RuntimeError):
    """An LLM call failed; ``str()`` is a readable reason with no secret in it."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        transient: bool = False,
        kind: str = "error",
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.kind = kind  # what happened: one of :func:`explain_error`'s kinds
        # Worth trying again later: a rate limit, a provider's 5xx, a timeout or a
        # connection that failed. Never 401/402/403/404 or a bad request.
        self.transient = transient


# The kinds of endpoint a route may go to, and litellm's prefix for each: the model
# string litellm gets is ``<prefix>/<model>``, as ``tau2 run --agent-llm`` would name it.
LITELLM_PREFIXES: dict[str, str] = {
    "hf": "openai",  # Hugging Face's router speaks OpenAI's API
    "openai": "openai",
    "openai_compatible": "openai",  # vLLM, TGI, SGLang, Ollama, LM Studio, HF Endpoints
    "anthropic": "anthropic",
    "gemini": "gemini",
    "mistral": "mistral",
    "openrouter": "openrouter",
    "together": "together_ai",
    "fireworks": "fireworks_ai",
}


@dataclass(frozen=True)
class Route:
    """Where one role's calls go: provider, model, endpoint and the key to use.

    ``api_key`` and ``extra_headers`` (a connection's, which may hold secrets too) never
    show in ``repr``; a Route cannot be built without a key. ``label`` names where the
    calls go for people (a connection's name), never how to reach it.
    """

    provider: str
    model: str
    base_url: str | None
    api_key: str = field(repr=False)
    timeout: float = 120.0
    extra_headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    label: str = ""
    # How pickers and APIs name this route (``@connection/model``), for records; "" for
    # the router and the server's own provider.
    origin: str = ""

    def __post_init__(self) -> None:
        if self.provider not in LITELLM_PREFIXES:
            raise ValueError(f"Unknown provider {self.provider!r}")
        if not self.api_key:
            # litellm would fall back to HF_TOKEN/OPENAI_API_KEY from the environment.
            raise ValueError("A Route needs an api_key")

    @property
    def litellm_model(self) -> str:
        """The model name as litellm wants it (``openai/<org>/<model>`` for the router,
        ``anthropic/<model>``, ``openai/<model>`` for an OpenAI-compatible server…)."""
        prefix = LITELLM_PREFIXES[self.provider]
        return self.model if self.model.startswith(f"{prefix}/") else f"{prefix}/{self.model}"

    def secrets(self) -> tuple[str, ...]:
        """What must never be shown of this route: its key and its headers' values."""
        return (self.api_key, *self.extra_headers.values())

    def describe(self) -> str:
        """``provider:model`` (or ``label:model``) for messages and logs."""
        return f"{self.label or self.provider}:{self.model}"


def hf_route(*, model: str, token: str) -> Route:
    """The route to ``model`` on Hugging Face's router with ``token`` (the one place a
    router route is built: endpoint and timeout from the settings)."""
    return Route(
        provider="hf",
        model=model,
        base_url=config.hf_router_url(),
        api_key=token,
        timeout=config.llm_timeout(),
    )


def resolve_route(*, hf_token: str | None = None) -> Route:
    """The customer's route for a new conversation, from the server's settings.

    A token given for the conversation wins and runs on Hugging Face's router (with
    ``TAU2_USER_MODEL`` when the provider is ``hf``, else the hf default model); the
    server's own ``HF_TOKEN`` is then never used. Otherwise the configured provider's
    server-side key is used. Raises :class:`MissingCredentialsError` when there is none.
    """
    settings = config.provider_settings()
    timeout = config.llm_timeout()
    token = (hf_token or "").strip()
    if token:
        model = settings.model if settings.provider == "hf" else config.DEFAULT_MODELS["hf"]
        return hf_route(model=model, token=token)
    if settings.server_credential:
        return Route(
            provider=settings.provider,
            model=settings.model,
            base_url=settings.base_url,
            api_key=settings.server_credential,
            timeout=timeout,
        )
    raise MissingCredentialsError(
        "No credentials for the simulated customer: pass your Hugging Face token with "
        "reset(hf_token=...), or set HF_TOKEN on the server, or choose another provider "
        f"with TAU2_USER_PROVIDER (hf, openai, anthropic) and set its key "
        f"({settings.credential_var} for {settings.provider!r} is not set)."
    )


def litellm_kwargs(route: Route) -> dict[str, Any]:
    """The keyword arguments that send a litellm ``completion`` along ``route``.

    Always: the route's key, endpoint and extra headers, a timeout, no OpenAI-SDK
    retries of its own and no litellm cache (its key may ignore ``api_key``). No retry
    policy and no ``num_retries``: litellm makes one attempt (``num_retries`` it would
    also hand to the OpenAI SDK as ``max_retries``, which retries 5xx behind the
    policy's back); :func:`routed_completion` retries. The sampling arguments
    (temperature, …) are the caller's: τ²'s ``llm_args``.
    """
    kwargs: dict[str, Any] = {
        "model": route.litellm_model,
        "api_key": route.api_key,
        "timeout": route.timeout,
        "max_retries": 0,
        "caching": False,
    }
    if route.base_url:
        kwargs["api_base"] = route.base_url
    if route.extra_headers:
        kwargs["extra_headers"] = dict(route.extra_headers)
    if LITELLM_PREFIXES[route.provider] in _OPENAI_CLIENT_PROVIDERS:
        _use_outbound_session()
    else:
        # litellm sends these with its own HTTP handler: the outbound policy's client.
        kwargs["client"] = _http_handler()
    return kwargs


# The providers the installed litellm sends with its OpenAI client (versions.py says why).
_OPENAI_CLIENT_PROVIDERS = versions.OPENAI_CLIENT_PROVIDERS.get(
    versions.installed_version("litellm") or "", frozenset({"openai"})
)


def _use_outbound_session() -> None:
    """litellm's OpenAI clients (every ``openai/…`` route: the router, OpenAI, any
    OpenAI-compatible server) send through the outbound policy's client: litellm's
    public ``client_session``, which it gives each OpenAI client it makes. A
    ``client=`` per call would do too, but would take those calls off the direct path."""
    session = outbound.client()
    if litellm.client_session is not session:
        litellm.client_session = session


_handler: list[HTTPHandler] = []
_handler_lock = threading.Lock()


def _http_handler() -> HTTPHandler:
    """litellm's HTTP handler around :func:`tau2_env.llm.outbound.client` (one per process)."""
    with _handler_lock:
        if not _handler or _handler[0].client is not outbound.client():
            _handler[:] = [HTTPHandler(client=outbound.client())]
        return _handler[0]


class _LogRedactor(logging.Filter):
    """Takes the keys and header values of the routes called lately out of the log records
    of litellm and the HTTP clients under it.

    At DEBUG litellm logs every request as a curl command with the call's arguments,
    ``extra_headers`` in the clear (it masks the key, not a connection's headers, which may
    carry secrets too). The project's LOGGING keeps litellm at WARNING; whoever turns it
    up still sees no secret. Secrets stay in this process's memory only, the latest
    :attr:`KEEP` of them (the routes of a worker's runs in flight).
    """

    KEEP = 512
    LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "openai", "httpx", "httpcore")

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._secrets: cachetools.LRUCache[str, None] = cachetools.LRUCache(maxsize=self.KEEP)

    def remember(self, route: Route) -> None:
        with self._lock:
            for secret in route.secrets():
                if secret:
                    self._secrets[secret] = None  # the latest KEEP, by their last use

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            secrets = tuple(self._secrets)
        if not secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: as it is
            return True
        if any(secret in message for secret in secrets):
            record.msg, record.args = redact(message, *secrets), None
        return True


_log_redactor = _LogRedactor()
for _name in _LogRedactor.LOGGERS:
    logging.getLogger(_name).addFilter(_log_redactor)


def redact_in_logs(route: Route) -> None:
    """Keep ``route``'s key and header values out of the HTTP clients' log records (a
    call made on it elsewhere than :func:`routed_completion`: the embeddings')."""
    _log_redactor.remember(route)


_routes: contextvars.ContextVar[Mapping[str, Route] | None] = contextvars.ContextVar(
    "tau2_llm_routes", default=None
)


@contextmanager
def conversation(
    *,
    user: Route,
    judge: Route | None = None,
    agent: Route | None = None,
    embedder: Route | None = None,
) -> Iterator[None]:
    """Within the block, τ²'s LLM calls of this thread/task use these routes.

    The judge defaults to the customer's route (the issue's rule: same provider, model
    and credentials as the conversation's user). ``embedder``: where a knowledge
    domain's embeddings go (``tau2_env.llm.embeddings``); none, and they are refused.
    """
    routes: dict[str, Route] = {ROLE_USER: user, ROLE_JUDGE: judge or user}
    if agent is not None:
        routes[ROLE_AGENT] = agent
    if embedder is not None:
        routes[ROLE_EMBEDDER] = embedder
    token = _routes.set(routes)
    try:
        yield
    finally:
        _routes.reset(token)


class WaitBudget:
    """What one episode (a run) may spend in all waiting on providers' ``Retry-After``
    (``TAU2_LLM_RETRY_AFTER_RUN_MAX`` by default): each wait is taken from it before it
    starts, and one that does not fit is refused. Safe across threads (a run's customer,
    agent and judge may call from several)."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = config.llm_retry_after_run_max() if seconds is None else seconds
        self.waited = 0.0
        self._lock = threading.Lock()

    def take(self, wait: float) -> bool:
        """Count ``wait`` as waited if it fits in what is left; False (nothing counted)
        when it does not."""
        with self._lock:
            if self.waited + wait > self.seconds:
                return False
            self.waited += wait
            return True


_wait_budget: contextvars.ContextVar[WaitBudget | None] = contextvars.ContextVar(
    "tau2_llm_wait_budget", default=None
)


@contextmanager
def waits_bounded(budget: WaitBudget) -> Iterator[WaitBudget]:
    """Within the block, this thread's (or task's) ``Retry-After`` waits are taken from
    ``budget``; past it a call ends, saying so."""
    token = _wait_budget.set(budget)
    try:
        yield budget
    finally:
        _wait_budget.reset(token)


def current_route(role: str) -> Route | None:
    """The route ``role``'s calls take in this thread/task (:func:`conversation`), or
    ``None`` outside one (or when it gives that role none)."""
    routes = _routes.get()
    return routes.get(role) if routes else None


@dataclass(frozen=True)
class Usage:
    """Tokens of one role's calls, as the provider reported them (``usage``)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class UsageMeter:
    """The tokens of the calls made within :func:`metered`, per role (``judge``, ``user``,
    ``agent``). Reading the answers only: a meter never changes what is sent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_role: dict[str, Usage] = {}

    def add(self, role: str, response: Any) -> None:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        with self._lock:
            was = self._by_role.get(role, Usage())
            self._by_role[role] = Usage(
                prompt_tokens=was.prompt_tokens + prompt,
                completion_tokens=was.completion_tokens + completion,
                calls=was.calls + 1,
            )

    def of(self, role: str) -> Usage:
        """What ``role``'s calls used (an empty :class:`Usage` when it made none)."""
        with self._lock:
            return self._by_role.get(role, Usage())


# The meters open around the current call (innermost last): each call counts in all.
_meters: contextvars.ContextVar[tuple[UsageMeter, ...]] = contextvars.ContextVar(
    "tau2_llm_meters", default=()
)


@contextmanager
def metered(meter: UsageMeter | None = None) -> Iterator[UsageMeter]:
    """Within the block, this thread's (or task's) calls through :func:`routed_completion`
    (and :func:`count_usage`'s) are counted on the meter it yields — ``meter``, to go on
    counting on one, else a new one — per role; the calls themselves are unchanged."""
    meter = meter if meter is not None else UsageMeter()
    token = _meters.set((*_meters.get(), meter))
    try:
        yield meter
    finally:
        _meters.reset(token)


def count_usage(role: str, response: Any) -> None:
    """Count ``response``'s ``usage`` as a call of ``role`` on every open meter (a call
    made elsewhere than :func:`routed_completion`: the embeddings')."""
    for meter in _meters.get():
        meter.add(role, response)


@dataclass(frozen=True)
class Attempt:
    """One attempt of an LLM call and how it ended: ``outcome`` is ``"answered"`` or the
    failure's kind (:func:`explain_error`'s: ``timeout``, ``rate_limited``,
    ``provider_error``…), ``said`` the same in a few words ("timed out after 120 s"),
    ``seconds`` the attempt's own time, ``role`` whose call it was."""

    role: str
    outcome: str
    seconds: float
    said: str

    def as_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "outcome": self.outcome,
            "seconds": round(self.seconds, 3),
            "said": self.said,
        }


@dataclass(frozen=True)
class CallNotice:
    """One LLM call's progress, told to :func:`observe_calls`' observers.

    ``phase`` is ``"waiting"`` as it is sent, ``"retrying"`` after each attempt that
    failed and will be tried again, then ``"answered"`` or ``"failed"``; ``seconds`` is
    the call's time so far (all its attempts and the waits between); ``timeout`` is each
    attempt's bound. ``attempt`` is the attempt now under way (for ``"retrying"``: the
    one about to be made) of at most ``attempts``; ``reason`` says why the last one
    failed ("timed out after 120 s"), ``wait`` the seconds before the next (a
    provider's ``Retry-After``, else :data:`RETRY_WAIT`); ``tries``
    are the attempts made so far, in order.
    """

    role: str
    phase: str
    seconds: float
    timeout: float
    attempt: int = 1
    attempts: int = 1
    reason: str = ""
    wait: float = 0.0
    tries: tuple[Attempt, ...] = ()


_observers: contextvars.ContextVar[tuple[Callable[[CallNotice], None], ...]] = (
    contextvars.ContextVar("tau2_llm_observers", default=())
)


@contextmanager
def observe_calls(observer: Callable[[CallNotice], None]) -> Iterator[None]:
    """Within the block, this thread's (or task's) calls through :func:`routed_completion`
    are told to ``observer`` as they start and end; the calls themselves are unchanged.
    An observer that raises is logged and never fails the call."""
    token = _observers.set((*_observers.get(), observer))
    try:
        yield
    finally:
        _observers.reset(token)


def _tell(notice: CallNotice) -> None:
    for observer in _observers.get():
        try:
            observer(notice)
        except Exception:  # a page's status line must never fail a conversation
            logging.getLogger(__name__).exception("An LLM call observer failed")


def _litellm_completion(call: dict[str, Any]) -> Any:
    return litellm.completion(**call)


# What makes a routed call: litellm, or what tau2_env.llm.compat.install() puts in its place
# (its direct path, which answers as litellm would).
_send: Callable[[dict[str, Any]], Any] = _litellm_completion


def use_sender(send: Callable[[dict[str, Any]], Any] | None) -> None:
    """Make routed calls with ``send(call)`` (``call``: litellm.completion's keyword
    arguments) instead of ``litellm.completion``; ``None`` restores litellm."""
    global _send
    _send = send or _litellm_completion


def routed_completion(*args: Any, **kwargs: Any) -> Any:
    """Drop-in for ``litellm.completion`` that sends the call along the current route.

    Raises :class:`LLMCallError` (readable, key-free) when the call fails, and
    :class:`MissingCredentialsError` when called outside :func:`conversation`.
    """
    if args:
        raise TypeError("routed_completion takes keyword arguments only")
    role = kwargs.pop(ROLE_KEY, ROLE_JUDGE)
    routes = _routes.get()
    route = routes.get(role) if routes else None
    if route is None:
        raise MissingCredentialsError(
            f"LLM call for {role!r} made outside a conversation with credentials; refused "
            "rather than falling back to the server's environment keys"
        )
    call = {k: v for k, v in kwargs.items() if k not in ROUTE_KEYS}
    call.update(litellm_kwargs(route))
    _log_redactor.remember(route)
    started = time.monotonic()
    tries: list[Attempt] = []

    def tell(phase: str, **more: Any) -> None:
        _tell(
            CallNotice(
                role=role,
                phase=phase,
                seconds=time.monotonic() - started,
                timeout=route.timeout,
                tries=tuple(tries),
                **more,
            )
        )

    tell("waiting", attempt=1, attempts=ATTEMPTS)
    while True:
        began = time.monotonic()
        try:
            response = _send(call)
            break
        except Exception as exc:
            kind, message = explain_error(exc, route=route)
            tries.append(
                Attempt(role, kind, time.monotonic() - began, attempt_words(exc, kind, route))
            )
            # What waiting cannot cure (a stop, a reply τ² cannot read) is never retried.
            allowed = 1 if kind in PERMANENT_KINDS else 1 + retries_for(exc)
            if len(tries) < allowed:
                # A 429 or 503 may say how long to wait (Retry-After): waited, up to
                # TAU2_LLM_RETRY_AFTER_MAX; a provider that asks for longer ends the call,
                # and so does one more wait than the run's budget has left.
                asked = retry_after(exc)
                wait = max(RETRY_WAIT, asked or 0.0)
                longest = config.llm_retry_after_max()
                budget = _wait_budget.get()
                refused = ""
                if asked is not None and asked > longest:
                    refused = (
                        f"asks to wait {asked:.0f} s before trying again, longer than a call "
                        f"waits ({longest:g} s, TAU2_LLM_RETRY_AFTER_MAX)"
                    )
                elif asked is not None and budget is not None and not budget.take(wait):
                    refused = (
                        f"asks to wait {asked:.0f} s more; this run has waited "
                        f"{budget.waited:.0f} s on providers' Retry-After already, and a run "
                        f"waits at most {budget.seconds:g} s in all (TAU2_LLM_RETRY_AFTER_RUN_MAX)"
                    )
                if refused:
                    tell("failed", attempt=len(tries), attempts=allowed, reason=tries[-1].said)
                    raise LLMCallError(
                        f"{route.describe()} failed: {tries[-1].said}, and {_where(route)} "
                        f"{refused}: try again later",
                        status_code=getattr(exc, "status_code", None),
                        kind=kind,
                    ) from None
                tell(
                    "retrying",
                    attempt=len(tries) + 1,
                    attempts=allowed,
                    reason=tries[-1].said,
                    wait=wait,
                )
                if wait and not outbound.pause(wait):
                    stopped = "stopped while waiting to try again"
                    tell("failed", attempt=len(tries), attempts=allowed, reason=stopped)
                    raise LLMCallError(
                        f"{route.describe()} failed: the conversation was {stopped}",
                        kind="interrupted",
                    ) from None
                continue
            tell("failed", attempt=len(tries), attempts=allowed, reason=tries[-1].said)
            tried = ""
            if len(tries) > 1:
                took = time.monotonic() - started
                tried = f" ({len(tries)} attempts in {took:.1f} s)"
            raise LLMCallError(
                f"{route.describe()} failed: {message.rstrip()}{tried}",
                status_code=getattr(exc, "status_code", None),
                transient=is_transient(exc) and kind not in PERMANENT_KINDS,
                kind=kind,
            ) from None
    took = time.monotonic() - began
    missing = _unreadable(response)
    if missing is not None:
        unreadable = "a reply τ² cannot read"
        tries.append(Attempt(role, "bad_reply", took, unreadable))
        tell("failed", attempt=len(tries), attempts=len(tries), reason=unreadable)
        raise LLMCallError(
            f"{route.describe()} failed: {_where(route)} answered with a reply τ² cannot read "
            f"({missing}): it must be a chat completion of the provider's API; check the "
            "endpoint",
            kind="bad_reply",
        )
    tries.append(Attempt(role, "answered", took, "answered"))
    tell("answered", attempt=len(tries), attempts=len(tries))
    for meter in _meters.get():
        meter.add(role, response)
    return response


def retries_for(exc: BaseException) -> int:
    """How many retries the policy grants a call whose attempt failed with ``exc``: as
    litellm's ``completion`` decided it (only for the OpenAI SDK's errors, which litellm
    maps every provider's to; 2 for a timeout, a rate limit or a 503, else 0)."""
    if not isinstance(exc, openai.APIError | openai.APITimeoutError | openai.APIConnectionError):
        return 0
    assert isinstance(exc, Exception)
    granted = get_num_retries_from_retry_policy(exception=exc, retry_policy=_RETRY_POLICY)
    if granted is None and isinstance(exc, litellm.ServiceUnavailableError):
        # litellm 1.82 (τ² 1.x's) has no ServiceUnavailableErrorRetries in its policy:
        # without this a 503 would never be retried there.
        granted = RETRIES
    return granted or 0


# The statuses whose Retry-After is honoured (RFC 9110 §10.2.3: a 503's, and RFC 6585's 429).
_RETRY_AFTER_STATUSES = frozenset({429, 503})


def retry_after(exc: BaseException, *, now: float | None = None) -> float | None:
    """The seconds a provider's 429 or 503 asks to wait before the next attempt: its
    ``Retry-After`` header, in seconds or as an HTTP date (RFC 9110 §10.2.3), or OpenAI's
    ``retry-after-ms``; ``None`` when the answer asks nothing (or is another status).
    A date in the past asks for no wait (0)."""
    if getattr(exc, "status_code", None) not in _RETRY_AFTER_STATUSES:
        return None
    for cause in _causes(exc):
        headers = getattr(getattr(cause, "response", None), "headers", None)
        headers = headers or getattr(cause, "litellm_response_headers", None)
        if not headers:
            continue
        found = {str(k).lower(): str(v).strip() for k, v in headers.items()}
        if "retry-after-ms" in found:
            try:
                return max(0.0, float(found["retry-after-ms"]) / 1000)
            except ValueError:
                pass
        raw = found.get("retry-after")
        if raw is None:
            continue
        if raw.isdigit():
            return float(raw)
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None  # neither seconds nor a date: as if none were given
        if when.tzinfo is None:
            return None  # RFC 9110's HTTP-date is always GMT; anything else is unreadable
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return None


def attempt_words(exc: BaseException, kind: str, route: Route) -> str:
    """How an attempt failed, in a few words for a status line and a tooltip."""
    status = getattr(exc, "status_code", None)
    if kind == "timeout":
        return f"timed out after {route.timeout:g} s"
    if kind == "rate_limited" or status == 429:
        return "rate limited (HTTP 429)"
    if status == 503:
        return "provider unavailable (HTTP 503)"
    if isinstance(status, int) and status >= 400:
        return f"{kind.replace('_', ' ')} (HTTP {status})"
    return kind.replace("_", " ")


def _unreadable(response: Any) -> str | None:
    """What a chat completion lacks that τ²'s ``generate`` reads (None: nothing): its
    ``model`` (for the price), a first choice with an assistant message, and tool calls
    with a name and JSON arguments. Without this check τ² fails on them with a
    ``TypeError`` or a ``JSONDecodeError``: an internal error, not the endpoint's."""
    if not isinstance(getattr(response, "model", None), str):
        return "no model name"
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        return "no choices"
    message = getattr(choices[0], "message", None)
    if message is None or getattr(message, "role", None) != "assistant":
        return "no assistant message"
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        if not isinstance(name, str):
            return "a tool call without a name"
        arguments: Any = getattr(function, "arguments", None)  # whatever the answer held
        try:
            json.loads(arguments)
        except (TypeError, ValueError):
            return f"the arguments of the tool call {name[:60]!r} are not JSON"
    return None


def is_transient(exc: BaseException) -> bool:
    """True for a failure that waiting may cure: 408/429/5xx, a timeout, a lost connection."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and (status in (408, 409, 429) or status >= 500):
        return True
    return isinstance(
        exc,
        litellm.Timeout
        | litellm.RateLimitError
        | litellm.ServiceUnavailableError
        | litellm.InternalServerError
        | litellm.APIConnectionError,
    )


class Explained(NamedTuple):
    """What :func:`explain_error` says about a failure: its kind and a readable message."""

    kind: str
    message: str


# Kinds that waiting will not cure, whatever status litellm gave them: a reply that could
# not be read (litellm calls it a 500) and a model that cannot call tools come back the
# same next time, so a run fails at once instead of retrying.
PERMANENT_KINDS = frozenset({"bad_reply", "no_tools", "not_allowed", "too_large", "interrupted"})

# The status codes a provider answers, named for what happened and what to do. 401/402
# are never retried (see _RETRY_POLICY); 429 and 5xx were, before the call gave up.
# _CONNECTION_HINTS says it for a connection's route (a team's or a person's own key and
# endpoint, set on the Connections page) where it differs from the router's words.
_STATUS_HINTS: dict[int, tuple[str, str]] = {
    401: (
        "unauthorized",
        "the credentials were refused (HTTP 401): {who} was rejected. {fix_credentials}",
    ),
    402: (
        "no_credits",
        "the account has no credits left (HTTP 402): add credits or a payment method at "
        "https://huggingface.co/settings/billing, or choose a cheaper model",
    ),
    403: (
        "forbidden",
        "the token may not call this model (HTTP 403): sign in again allowing Inference "
        "Providers, or choose another model or provider",
    ),
    404: (
        "unknown_model",
        "the model {model!r} was not found (HTTP 404): choose one listed on /models/ "
        "(staff can refresh the list), or check {base_var}",
    ),
    429: (
        "rate_limited",
        "rate limited (HTTP 429), still after retries: wait a minute and try again, or "
        "choose another provider",
    ),
}
_CONNECTION_HINTS: dict[int, str] = {
    402: (
        "the account behind the connection {name!r} has no credits left (HTTP 402): add "
        "credits with the provider, or choose another model"
    ),
    403: (
        "the key of the connection {name!r} may not call {model!r} (HTTP 403): check what "
        "the account may use with the provider, or choose another model"
    ),
    404: (
        "{where} does not know the model {model!r} (HTTP 404): check the model's name "
        "among the connection's models, and its base URL, on the Connections page"
    ),
    429: (
        "rate limited (HTTP 429), still after retries: wait a minute and try again; if it "
        "keeps happening, lower the connection's runs in flight on the Connections page, "
        "or raise the account's limit with the provider"
    ),
}

_BASE_VARS = {
    "hf": "TAU2_HF_ROUTER_URL",
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
}
# What a connection's person checks instead of a server setting.
_CONNECTION_URL = "check its base URL on the Connections page"

# What a reply should have been, for the kinds whose API is not OpenAI's.
_API_REPLIES = {"anthropic": "an Anthropic Messages reply", "gemini": "a Gemini reply"}

# httpx's and the OpenAI SDK's names for a connection that could not be made or was lost
# (litellm's own APIConnectionError is not one: it also wraps errors it cannot map, such
# as a reply it could not read).
_CONNECTION_ERRORS = frozenset({"ConnectError", "RemoteProtocolError", "APIConnectionError"})

# litellm's words for a reply it could not read: not JSON, or JSON of another shape.
_BAD_REPLY = re.compile(
    r"Empty or invalid response from LLM endpoint|Invalid response object"
    r"|response with no 'choices'|Unable to get json response|Received response - <APIResponse"
    r"|provider returned '\w+' that is not|Raw keys:"
)

# A provider's words for "this model cannot call tools" (Ollama: "… does not support
# tools"; vLLM: "auto" tool choice requires --enable-auto-tool-choice …; OpenAI: "tools
# is not supported in this model"; OpenRouter: "No endpoints found that support tool use").
_TOOLS_WORDS = (
    r"(?:tools?|tool[ _-]?(?:calls?|calling|use|choice)|function[ _-]?(?:calls?|calling)|functions)"
)
_NO_TOOLS = re.compile(
    r"enable-auto-tool-choice"
    rf"|(?:not|n't)\s+support(?:s|ed)?\s+(?:the\s+)?{_TOOLS_WORDS}\b"
    rf"|found\s+that\s+supports?\s+{_TOOLS_WORDS}\b"
    rf"|\b{_TOOLS_WORDS}\s+(?:is|are)\s+not\s+(?:supported|available|enabled)"
    rf"|\b{_TOOLS_WORDS}\s+(?:are\s+|is\s+)?unsupported",
    re.IGNORECASE,
)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during (litellm wraps openai wraps httpx)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_connection_error(exc: BaseException) -> bool:
    if type(exc).__module__.startswith("litellm"):
        return False
    return isinstance(exc, ConnectionError) or type(exc).__name__ in _CONNECTION_ERRORS


def _endpoint(route: Route) -> str:
    """The endpoint as ``scheme://host:port``: no user, path or query (a key may hide there)."""
    base = route.base_url or ("https://api.anthropic.com" if route.provider == "anthropic" else "")
    parts = urlsplit(base or "https://api.openai.com")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or '?'}{port}"


def _where(route: Route | None) -> str:
    """Where the call went, for people: the router, a connection by its name, or a
    provider's API, each with its endpoint (never a path or query: a key may hide there)."""
    if route is None:
        return "the provider"
    if route.provider == "hf":
        return f"the router at {_endpoint(route)}"
    if route.label:
        return f"the endpoint of the connection {route.label!r} ({_endpoint(route)})"
    return f"the {route.provider} API at {_endpoint(route)}"


def explain_error(
    exc: BaseException, *, route: Route | None = None, secrets: tuple[str | None, ...] = ()
) -> Explained:
    """What went wrong in a call (or a worker) and what to do, for the person who sees it.

    ``kind`` is one of ``unreachable`` (refused, or no such host), ``timeout``,
    ``unauthorized`` (401), ``no_credits`` (402), ``forbidden`` (403), ``unknown_model``
    (404), ``rate_limited`` (429), ``provider_error`` (5xx), ``no_tools`` (the model
    cannot call tools), ``bad_reply`` (an answer that is not the API's JSON: a web page,
    a proxy's, another API), ``bad_request`` (another 4xx), ``missing_credentials`` or
    ``error`` (anything else: a bug, said as an internal error). An
    :class:`LLMCallError` was explained when raised: its own kind and message.

    A connection's route (one with a ``label``) is named by its connection, and what to
    do is said in the Connections page's words (its key, its base URL, its models), not
    as a server setting. The message never holds the route's key or headers, the given
    ``secrets``, anything shaped like a token, nor a URL's query.
    """
    provider = route.provider if route is not None else "hf"
    base_var = _BASE_VARS.get(provider, "the provider's URL")
    if isinstance(exc, LLMCallError):
        kind, message = exc.kind, str(exc)
    elif isinstance(exc, MissingCredentialsError):
        kind, message = "missing_credentials", str(exc)
    else:
        kind, message = _explain_call(exc, route=route, base_var=base_var)
    return Explained(kind, redact(message, *(route.secrets() if route else ()), *secrets))


def _explain_call(exc: BaseException, *, route: Route | None, base_var: str) -> tuple[str, str]:
    causes = list(_causes(exc))
    status = getattr(exc, "status_code", None)
    timeout = route.timeout if route is not None else None
    named = route is not None and bool(route.label) and route.provider != "hf"
    where = _where(route)
    bounded = next((c for c in causes if isinstance(c, outbound.OutboundError)), None)
    if isinstance(bounded, outbound.DeadlineExceeded) and not bounded.received:
        bounded = None  # not a byte came: a plain timeout, said as one below
    if bounded is not None:
        return _explain_outbound(bounded, where=where, named=named, base_var=base_var)
    if any(isinstance(c, litellm.Timeout | TimeoutError) for c in causes):
        within = f" within {timeout:g} s" if timeout else ""
        if named:
            return "timeout", (
                f"no answer{within} from {where}: the server is slow, overloaded or still "
                "loading the model; try again later"
            )
        return "timeout", (
            f"no answer{within} from {where}: the provider is slow or overloaded; "
            "try again later, or choose a faster provider"
        )
    if any(isinstance(c, socket.gaierror) for c in causes):
        fix = f"{_CONNECTION_URL}." if named else f"is {base_var} right?"
        return "unreachable", f"{where} could not be found (no such host): {fix}"
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        fix = (
            f"{_CONNECTION_URL}, and that the server is running."
            if named
            else f"is {base_var} right, and is it running?"
        )
        return "unreachable", f"{where} refused the connection: {fix}"
    if any(_is_connection_error(c) for c in causes):
        fix = f"{_CONNECTION_URL}." if named else f"check {base_var}"
        return "unreachable", (
            f"the connection to {where} failed: try again later; if it keeps failing, {fix}"
        )
    detail = _provider_words(exc, causes, named=named)
    if _is_bad_reply(exc, causes, status):
        provider = route.provider if route is not None else "hf"
        api = _API_REPLIES.get(provider, "an OpenAI-compatible reply")
        text = str(exc)
        if "<html" in text.lower():
            what = "an HTML page"
        elif any(isinstance(c, json.JSONDecodeError) for c in causes) or "json" in text.lower():
            what = "something that is not JSON"
        else:
            what = "a reply of another shape"
        root = "the API's root"
        if provider not in _API_REPLIES:
            root += " (most OpenAI-compatible servers serve it under /v1)"
        fix = (
            f"{_CONNECTION_URL}; it must be {root}, not a web page or a proxy's"
            if named
            else f"is {base_var} right? It must be {root}, not a web page or a proxy's"
        )
        # Not a word of what it sent: the endpoint is whatever someone typed.
        return "bad_reply", f"{where} answered with {what} instead of {api}: {fix}."
    if isinstance(status, int) and 400 <= status < 500 and _NO_TOOLS.search(str(exc)):
        model = route.model if route is not None else "?"
        fix = "choose a model that calls tools"
        if route is not None and route.provider == "openai_compatible":
            fix += (
                ", or turn tool calling on in the server (vLLM: --enable-auto-tool-choice "
                "and a --tool-call-parser)"
            )
        elif route is None or route.provider == "hf":
            fix += " (/models/ lists those whose providers do)"
        return "no_tools", (
            f"the model {model!r} cannot call tools (HTTP {status}): τ²'s agent works "
            f"through tools, so {fix}. {detail}"
        )
    if isinstance(status, int) and status in _STATUS_HINTS:
        kind, hint = _STATUS_HINTS[status]
        if named and status in _CONNECTION_HINTS:
            hint = _CONNECTION_HINTS[status]
        hf = route is None or route.provider == "hf"
        message = hint.format(
            who="your Hugging Face token" if hf else "the API key",
            fix_credentials=(
                "Sign out and sign in again."
                if hf
                else f"Check the key of the connection {route.label!r} (rotate it on the "
                "Connections page)."
                if named and route is not None
                else "Check the key set for this provider on the server."
            ),
            model=route.model if route is not None else "?",
            base_var=base_var,
            name=route.label if route is not None else "",
            where=where,
        )
        return kind, f"{message.rstrip('.')}. {detail}"
    if isinstance(status, int) and status >= 500:
        if named:
            return "provider_error", (
                f"{where} failed (HTTP {status}): usually temporary; try again later, and "
                f"if it keeps failing, check the server. {detail}"
            )
        return "provider_error", (
            f"the provider failed (HTTP {status}): usually temporary; try again later, or "
            f"choose another provider. {detail}"
        )
    if isinstance(status, int) and 400 <= status < 500:
        if named:
            return "bad_request", (
                f"{where} refused the request (HTTP {status}): check the model's name on the "
                f"Connections page and the run's LLM arguments (a provider may refuse one "
                f"of them). {detail}"
            )
        return "bad_request", f"the provider refused the request (HTTP {status}). {detail}"
    return "error", f"Internal error: {type(exc).__name__}: {detail}"


def _explain_outbound(
    exc: outbound.OutboundError, *, where: str, named: bool, base_var: str
) -> tuple[str, str]:
    """What the outbound policy ended, in its words, and what to do."""
    if isinstance(exc, outbound.DestinationRefused):
        fix = "use the endpoint's public address" if named else f"check {base_var}"
        return "not_allowed", f"{where} was not called: {exc}; {fix}."
    if isinstance(exc, outbound.DeadlineExceeded):
        return "timeout", (
            f"{where} did not finish its answer in time ({exc}): the server is slow, "
            "overloaded or stalled; try again later"
        )
    if isinstance(exc, outbound.ReplyTooLarge):
        return "too_large", (
            f"{where} sent too large an answer ({exc}): a chat completion is a few KiB, "
            "so this is not a model's answer; check the endpoint"
        )
    return exc.kind, f"the call to {where} ended: {exc}"


def provider_words(exc: BaseException, *, route: Route | None) -> str:
    """What the provider said about a failed call, short and without secrets, as
    :func:`explain_error` quotes it (for an endpoint someone typed: only its JSON
    error's ``message``)."""
    named = route is not None and bool(route.label) and route.provider != "hf"
    words = _provider_words(exc, list(_causes(exc)), named=named)
    return redact(words, *(route.secrets() if route else ()))


def _provider_words(exc: BaseException, causes: list[BaseException], *, named: bool) -> str:
    """What the provider said, short, for the message: litellm's words for the
    operator's providers; for an endpoint someone typed (a connection), only the
    ``message`` field of its JSON error, never the rest of its body (OWASP: an
    endpoint's answer is not echoed back)."""
    if not named:
        # litellm appends a traceback to some of its messages.
        return " ".join(str(exc).split("Traceback (most recent call last)")[0].split())[:200]
    for cause in causes:
        body = getattr(cause, "body", None)
        if isinstance(body, dict):
            said = body.get("error", body)
            said = said.get("message") if isinstance(said, dict) else said
            if isinstance(said, str) and said.strip():
                return " ".join(said.split())[:200]
    return ""


def _is_bad_reply(exc: BaseException, causes: list[BaseException], status: object) -> bool:
    """True when the endpoint answered but litellm could not read the answer (it says
    500 for it, or an APIConnectionError of its own with no connection trouble)."""
    if isinstance(status, int) and 400 <= status < 500:
        return False
    if any(isinstance(c, json.JSONDecodeError) for c in causes):
        return True
    if any(getattr(c, "status_code", None) == 200 for c in causes):
        return True  # litellm's provider error for a 200 it could not use
    if _BAD_REPLY.search(str(exc)):
        return True
    # litellm's own APIConnectionError wraps what it could not map (a KeyError on a reply
    # of the wrong shape); the real connection errors were recognised above.
    return isinstance(exc, litellm.APIConnectionError)


def redact(text: str, *secrets: str | None) -> str:
    """``text`` without the given secrets nor anything shaped like an HF/OpenAI token."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    text = _URL_QUERY.sub(r"\1?[redacted]", text)
    return _TOKEN_PATTERNS.sub("[redacted]", text)
