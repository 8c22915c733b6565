"""The Test button: one tiny tool-calling request to a model of a connection, and what
happened, in words.

The request goes where a run's would (``routes.route_for``, ``tau2_env.llm.gateway.litellm_kwargs``:
the same key, endpoint, headers and litellm route), asks the model to call a one-tool
``tools=[…]`` with ``tool_choice="auto"`` as τ²'s agent does, at temperature 0 with a few
tokens, within ``TAU2_CONNECTION_TEST_TIMEOUT`` seconds and without a single retry: a
Test says what the endpoint does now, and a refused key or an unknown model will never
work by asking again.

Its outcome (:class:`TestOutcome`) is kept as the connection's ``last_test``: ``ok``, a
``kind`` (:data:`KINDS`), a ``message`` saying what happened and what to do (never the
key, nor a header's value), the ``model`` and when (``at``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from apps.connections.llm_routes import ConnectionUnavailable, route_for
from apps.connections.models import Connection
from apps.connections.selectors import endpoint_host
from apps.connections.services import connection_test_record
from tau2_env.llm import gateway

__all__ = ["KINDS", "TEST_TOOL", "TestOutcome", "connection_test"]

logger = logging.getLogger(__name__)

# What a Test can find, each said on the page by apps.connections.selectors.
KINDS = (
    "works",  # it answered and called the tool
    "no_tool_calling",  # it answered without calling the tool, or said tools are unsupported
    "refused_key",  # 401 / 403
    "unknown_model",  # 404
    "rate_limited",  # 429
    "no_credits",  # 402
    "unreachable",  # connection refused, no such host
    "not_allowed",  # a private, loopback or metadata address (tau2_env.llm.outbound)
    "timeout",  # no complete answer within TAU2_CONNECTION_TEST_TIMEOUT
    "too_large",  # an answer past TAU2_LLM_MAX_REPLY_BYTES
    "not_json",  # a reply that is not JSON
    "provider_error",  # 5xx
    "bad_request",  # another 4xx
    "unavailable",  # deleted, no longer allowed, key unreadable
    "error",
)

TOOL_NAME = "report_connection_test"
TEST_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Reports that this connection works. Call it when asked to.",
        "parameters": {
            "type": "object",
            "properties": {"status": {"type": "string", "description": "Always 'ok'."}},
            "required": ["status"],
        },
    },
}
TEST_MESSAGES = (
    {
        "role": "system",
        "content": "You are checking a connection. Reply only by calling the tool you are given.",
    },
    {"role": "user", "content": f'Call the tool {TOOL_NAME} with status "ok" now.'},
)
# Enough for a reasoning model to think a little before the call; small enough to cost
# next to nothing.
TEST_MAX_TOKENS = 256


@dataclass(frozen=True)
class TestOutcome:
    """What one Test found (the connection's ``last_test``, as JSON)."""

    ok: bool
    kind: str
    message: str
    model: str
    at: str  # ISO 8601
    tool_called: bool = False
    seconds: float | None = None

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def connection_test(*, connection: Connection, model: str, user) -> TestOutcome:
    """Test ``model`` of ``connection`` for ``user`` (who may use it), keep the outcome
    as the connection's ``last_test`` and return it. Returns within about
    ``TAU2_CONNECTION_TEST_TIMEOUT`` seconds; never raises for what the endpoint does."""
    outcome = _probe(connection=connection, model=model, user=user)
    connection_test_record(connection=connection, outcome=outcome.as_json())
    logger.info(
        "connection %s tested on %s: %s", connection.slug, model, outcome.kind
    )  # the kind only: a message quotes the provider
    return outcome


def _probe(*, connection: Connection, model: str, user) -> TestOutcome:
    def said(kind: str, message: str, *, secrets=(), **extra) -> TestOutcome:
        return TestOutcome(
            ok=kind == "works",
            kind=kind,
            message=gateway.redact(message, *secrets),
            model=model,
            at=timezone.now().isoformat(),
            **extra,
        )

    try:
        route = route_for(connection=connection, model=model, user=user)
    except ConnectionUnavailable as exc:
        return said("unavailable", str(exc))
    timeout = float(settings.TAU2_CONNECTION_TEST_TIMEOUT)
    route = dataclasses.replace(route, timeout=timeout)
    call = gateway.litellm_kwargs(route)
    # Not one retry (litellm_kwargs gives litellm none): the Test says what happens now.
    started = time.monotonic()
    try:
        response = gateway.litellm.completion(
            messages=[dict(m) for m in TEST_MESSAGES],
            tools=[TEST_TOOL],
            tool_choice="auto",
            temperature=0,
            max_tokens=TEST_MAX_TOKENS,
            **call,
        )
    except Exception as exc:  # every failure is an outcome to say, none a crash
        kind, message = _failure(exc, route=route, connection=connection)
        return said(kind, message, secrets=route.secrets())
    seconds = round(time.monotonic() - started, 2)
    kind, message, called = _answer(response, model=model, seconds=seconds)
    return said(kind, message, secrets=route.secrets(), tool_called=called, seconds=seconds)


def _answer(response, *, model: str, seconds: float) -> tuple[str, str, bool]:
    try:
        choice = response.choices[0]
        message = choice.message
    except (AttributeError, IndexError, TypeError):
        return (
            "not_json",
            "It answered, but not with a chat completion: is this its chat API?",
            False,
        )
    calls = getattr(message, "tool_calls", None) or []
    names = [getattr(getattr(call, "function", None), "name", None) for call in calls]
    if TOOL_NAME in names:
        return (
            "works",
            f"Works: {model} answered in {seconds:g} s and called the tool it was given, "
            "as τ²'s agent needs.",
            True,
        )
    if names:
        return (
            "works",
            f"Works: {model} answered in {seconds:g} s and called a tool, but not the one it "
            f"was told to ({', '.join(str(n) for n in names)}).",
            True,
        )
    if getattr(choice, "finish_reason", None) == "length":
        return (
            "works",
            f"{model} answered in {seconds:g} s but used the Test's {TEST_MAX_TOKENS} tokens "
            "before calling the tool (a reasoning model thinks first): it is reachable, "
            "tool calling is not confirmed.",
            False,
        )
    said = " ".join(str(getattr(message, "content", "") or "").split())[:120]
    return (
        "no_tool_calling",
        f"{model} answered without calling the tool it was told to call"
        + (f" (it said “{said}”)" if said else "")
        + ": τ²'s agent works through tools, so pick a model that calls them (on vLLM, "
        "start it with --enable-auto-tool-choice and a --tool-call-parser).",
        False,
    )


# explain_error's kinds that are the Test's under another name; the others it shares.
_TEST_KIND = {
    "unauthorized": "refused_key",
    "forbidden": "refused_key",
    "no_tools": "no_tool_calling",
    "bad_reply": "not_json",
}


def _failure(
    exc: BaseException, *, route: gateway.Route, connection: Connection
) -> tuple[str, str]:
    """The Test's kind and message for a failed call: ``tau2_env.llm.gateway.explain_error``'s
    (what runs say too), but for what the Test says better — it retried nothing, and
    it knows when the connection has no key at all."""
    kind, message = gateway.explain_error(exc, route=route)
    kind = _TEST_KIND.get(kind, kind)
    status = getattr(exc, "status_code", None)
    where = endpoint_host(connection) or "the endpoint"
    # The provider's own words only from its JSON error's message, never the rest of
    # what the endpoint sent.
    detail = gateway.provider_words(exc, route=route)
    if status == 401:
        fix = (
            "this connection has no key: add one (Edit)."
            if not connection.api_key_enc
            else "check it, or rotate it (Edit)."
        )
        message = f"{where} refused the key (HTTP 401): {fix} {detail}"
    elif kind == "rate_limited":
        message = (
            f"Rate limited by {where} (HTTP 429): the key's quota or the endpoint's limit is "
            f"reached. Wait a minute and test again. {detail}"
        )
    return (kind if kind in KINDS else "error"), message
