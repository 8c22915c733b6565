"""What every request and every page of the site share: a NUL guard, the security policy, and
a plain "try again in a moment" while the database or the channel layer cannot be reached.

* :class:`RejectNulMiddleware` answers 400 to a NUL character in the path, the query string
  or a form field. Nothing legitimate sends one, and PostgreSQL's text and jsonb cannot
  hold it: a filter or a form reaching the database with one would fail as a 500.
* :class:`ContentSecurityPolicyMiddleware` gives every page one Content-Security-Policy:
  scripts, styles and connections from the site itself (WebSockets to its own host
  included), images also from ``https:`` (Hugging Face avatars), no plug-ins, and framing
  denied — or, inside a Hugging Face Space (``TAU2_EMBED_IN_SPACE``), allowed to
  ``TAU2_FRAME_ANCESTORS`` instead of ``X-Frame-Options``, which cannot name another origin.
* :class:`DatabaseUnavailableMiddleware` answers 503 with ``Retry-After`` when a view meets
  the database unreachable (:func:`database_unreachable`: a restart, a lost connection),
  in JSON or as a short page; any other database error stays the 500 it is.

Our own middleware rather than django-csp: the policy is one fixed string but for two
request-dependent parts (the WebSocket host and the Space's frame ancestors), needs no
nonces (no page has an inline script), and a dependency for it would be larger than it.
Inline ``style`` attributes are allowed (``style-src-attr``), ``<style>`` elements are not:
pages set data-driven widths and CSS variables on elements (progress bars, reward cells,
compare columns); htmx's own indicator ``<style>`` is turned off in ``base.html``.
With DEBUG off a 404 or 500 is the site's own page (``templates/404.html``, ``500.html``).
With DEBUG on it is Django's technical page, whose styles are one ``<style>`` element:
that response alone may use inline styles (:func:`debug_error_page`), scripts still not;
the developer keeps what Django tells (the URL patterns tried, the traceback), readable.

Around the ASGI application (``tau2site.asgi``), outside Django's middleware:

* :class:`SameOriginWebsockets` accepts a WebSocket only from a page of this site: same
  scheme, host and port (Channels' ``AllowedHostsOriginValidator`` ignores the port).
* :class:`ApiSecurityHeaders` gives the OpenEnv API's responses ``nosniff``, frame denial
  and a referrer policy, as Django's ``SecurityMiddleware`` does for the pages.
* :class:`UnavailableWebsockets` closes a socket whose consumer (or the session lookup
  before it) met the database or the channel layer unreachable with 1013 "Try Again
  Later", accepting it first if need be: a failed handshake (HTTP 500) never reaches a page.
"""

from __future__ import annotations

import logging
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

import psycopg
import redis
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, HttpResponseBadRequest, JsonResponse

from apps.agents.playground import browser_session
from tau2_env.gate.guard import GuardSettings

logger = logging.getLogger(__name__)

NUL = "\x00"
NUL_REFUSED = "Bad request: a NUL character (%00) is not accepted in a URL or a form."
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _holds_nul(data) -> bool:
    return any(NUL in key or any(NUL in v for v in values) for key, values in data.lists())


class RejectNulMiddleware:
    """400 for a NUL character in the path, the query string or a form field."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        form = request.method == "POST" and request.content_type in FORM_TYPES
        if (
            NUL in request.path_info
            or _holds_nul(request.GET)
            or (form and _holds_nul(request.POST))
        ):
            return HttpResponseBadRequest(NUL_REFUSED, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def debug_error_page(response) -> bool:
    """True for Django's technical 404 or 500 page (DEBUG on): an HTML 404 or 500, which
    with DEBUG on only Django's exception handling answers (no view renders one)."""
    return (
        settings.DEBUG
        and response.status_code in (404, 500)
        and response.get("Content-Type", "").startswith("text/html")
    )


def content_security_policy(request, *, inline_styles: bool = False) -> str:
    """The policy of a page served for ``request`` (see the module docstring);
    ``inline_styles`` lets a ``<style>`` element style it (Django's debug pages only)."""
    connect = ["'self'"]
    try:
        host = request.get_host()
    except DisallowedHost:  # already answered 400; the page needs no WebSocket
        host = ""
    if host:
        # CSP3 browsers match ws(s) to 'self'; older ones need the origin spelled out.
        connect.append(f"{'wss' if request.is_secure() else 'ws'}://{host}")
    form_action = ["'self'"]
    provider = urlsplit(settings.OPENID_PROVIDER_URL)
    if provider.scheme and provider.netloc:  # sign-in redirects there after our form
        form_action.append(f"{provider.scheme}://{provider.netloc}")
    if settings.TAU2_EMBED_IN_SPACE:
        ancestors = ["'self'", *settings.TAU2_FRAME_ANCESTORS]
    else:
        ancestors = ["'none'"]
    directives = {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"] if inline_styles else ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:", "https:"],
        "connect-src": connect,
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": form_action,
        "frame-ancestors": ancestors,
    }
    return "; ".join(f"{name} {' '.join(values)}" for name, values in directives.items())


class ContentSecurityPolicyMiddleware:
    """Sets the Content-Security-Policy of every response that has none of its own.

    Listed after ``XFrameOptionsMiddleware``, so it sees the response first: inside a
    Space it exempts the response from ``X-Frame-Options`` (``frame-ancestors`` says who
    may frame it).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:  # a view's own policy stands
            response.headers["Content-Security-Policy"] = content_security_policy(
                request, inline_styles=debug_error_page(response)
            )
            if settings.TAU2_EMBED_IN_SPACE:
                response.xframe_options_exempt = True
        return response


# --- A dependency restarting: 503 for pages, 1013 for sockets -------------------------------

# Seconds a client is asked to wait: PostgreSQL and Redis restart in 2-4 s.
RETRY_AFTER_SECONDS = 5
DATABASE_UNAVAILABLE = (
    "The database cannot be reached right now (it may be restarting). Try again in a few seconds."
)
# Beside class 08 (connection exceptions), the SQLSTATEs of a server going, gone or full.
# Any other (a deadlock, a serialisation failure, a statement timeout, a full disk) is a
# fault of the request or of the server, no outage to wait out.
OUTAGE_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown: "terminating connection due to administrator command"
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: "the database system is shutting down / starting up"
        "53300",  # too_many_connections
    }
)


def _causes(error: BaseException):
    """``error`` and what it was raised from (Django wraps psycopg's errors)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__


def database_unreachable(error: BaseException) -> bool:
    """True when ``error`` says the database cannot be reached or the connection to it was
    lost: an ``OperationalError`` from libpq itself (refused, closed, reset: no SQLSTATE),
    of SQLSTATE class 08 or one of :data:`OUTAGE_SQLSTATES`, or an ``InterfaceError`` about
    the connection. An ``IntegrityError``, a ``DataError`` or a deadlock is a bug: False."""
    for cause in _causes(error):
        if isinstance(cause, psycopg.OperationalError):
            state = cause.sqlstate
            return state is None or state.startswith("08") or state in OUTAGE_SQLSTATES
        if isinstance(cause, psycopg.InterfaceError):
            return "connection" in str(cause)  # "the cursor is closed" is a bug
    # Django's own, with no psycopg error under it (a closed connection it refuses to use).
    return isinstance(error, OperationalError | InterfaceError) and "connection" in str(error)


def channel_layer_unreachable(error: BaseException) -> bool:
    """True when ``error`` is Redis (the channel layer) unreachable: refused, reset, timed
    out or still loading its data after a restart."""
    return any(
        isinstance(cause, redis.ConnectionError | redis.TimeoutError) for cause in _causes(error)
    )


def unreachable(error: BaseException) -> str | None:
    """Which dependency ``error`` says is unreachable ("database", "channel layer"), or
    ``None`` for any other error."""
    if database_unreachable(error):
        return "database"
    if channel_layer_unreachable(error):
        return "channel layer"
    return None


# Answered in JSON: the JSON API, the .json downloads and the live pages' /state/ reads.
JSON_PATH_PREFIXES = ("/api/",)
JSON_PATH_SUFFIXES = (".json", "/state/")

UNAVAILABLE_PAGE = f"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Unavailable for a moment · τ²-bench studio</title></head>
<body>
<h1>Unavailable for a moment</h1>
<p>{DATABASE_UNAVAILABLE}</p>
</body>
</html>
"""


def _wants_json(request) -> bool:
    path = request.path_info
    if path.startswith(JSON_PATH_PREFIXES) or path.endswith(JSON_PATH_SUFFIXES):
        return True
    return request.get_preferred_type(["text/html", "application/json"]) == "application/json"


class DatabaseUnavailableMiddleware:
    """503 with ``Retry-After`` for a view that met the database unreachable
    (:func:`database_unreachable`): ``{"detail": …}`` for JSON (:func:`_wants_json`), a
    short page that needs no database otherwise. Any other error goes on to Django's 500.

    It answers from ``process_exception``, so what a view raised (rendering included)
    while the database restarts; the response then passes every middleware as usual.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not database_unreachable(exception):
            return None
        logger.warning("%s %s: database unreachable (%s)", request.method, request.path, exception)
        if _wants_json(request):
            response = JsonResponse({"detail": DATABASE_UNAVAILABLE}, status=503)
        else:
            response = HttpResponse(UNAVAILABLE_PAGE, status=503)
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        response.headers["Cache-Control"] = "no-store"
        return response


# --- ASGI: around the WebSockets and the OpenEnv API (tau2site.asgi) -------------------------


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def _allowed_hosts() -> list[str]:
    # As HttpRequest.get_host(): with DEBUG on and no ALLOWED_HOSTS, the loopback names.
    if settings.ALLOWED_HOSTS:
        return settings.ALLOWED_HOSTS
    return [".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else []


def agent_face_settings() -> GuardSettings:
    """The site's hosts, trusted origins and TLS proxy header for the agent faces' guard
    (``tau2_env.gate.guard``) and the site's own sockets, from Django's settings."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:  # ("HTTP_X_FORWARDED_PROTO", "https"), as HttpRequest.is_secure() reads it
        name, expected = proxy
        proxy = (name.removeprefix("HTTP_").replace("_", "-").lower(), expected)
    return GuardSettings(
        allowed_hosts=tuple(_allowed_hosts()),
        trusted_origins=tuple(settings.CSRF_TRUSTED_ORIGINS),
        max_body_bytes=settings.TAU2_AGENT_API_MAX_BODY_BYTES,
        proxy_ssl_header=proxy,
    )


def websocket_origin_allowed(scope) -> bool:
    """True when a WebSocket comes from a page of this site, as Django's CSRF check decides
    for a form: it has an ``Origin``, and that is the scheme, host and port the socket was
    opened to (``http``/``https`` for ``ws``/``wss``, behind a TLS proxy as
    ``SECURE_PROXY_SSL_HEADER`` says), on an allowed host, or one of
    ``CSRF_TRUSTED_ORIGINS`` (:meth:`tau2_env.gate.guard.GuardSettings.refusal`)."""
    return _header(scope, b"origin") is not None and agent_face_settings().refusal(scope) is None


class SameOriginWebsockets:
    """Refuses (403) a WebSocket whose ``Origin`` is not this site's own
    (:func:`websocket_origin_allowed`); everything else passes to ``app``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not websocket_origin_allowed(scope):
            from channels.security.websocket import WebsocketDenier

            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)


# RFC 6455 close code 1013 "Try Again Later" (IANA's registry): the server is fine, a
# dependency of it is not; a page's socket helper reopens after its backoff.
TRY_AGAIN_LATER = 1013
SOCKET_REASONS = {
    "database": "The database cannot be reached right now; try again in a few seconds.",
    "channel layer": "Live updates cannot reach Redis right now; try again in a few seconds.",
}


class UnavailableWebsockets:
    """Wraps the site's Channels sockets (``app``): when handling one raises an error that
    says the database or the channel layer is unreachable (:func:`unreachable`) — joining
    the group on connect, the session's user, a read, the channel layer's receive — the
    socket is closed with :data:`TRY_AGAIN_LATER` and a reason, accepted first if it had
    not been, so the client sees a close it reopens after, never a handshake answered 500.
    Nothing is sent to a client already gone. Any other error propagates as before.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        accepted = closed = False

        async def sending(message):
            nonlocal accepted, closed
            if message["type"] == "websocket.accept":
                accepted = True
            elif message["type"] == "websocket.close":
                closed = True
            await send(message)

        async def receiving():
            nonlocal closed
            message = await receive()
            if message["type"] == "websocket.disconnect":
                closed = True
            return message

        try:
            return await self.app(scope, receiving, sending)
        except Exception as error:
            dependency = unreachable(error)
            if dependency is None:
                raise
            path = scope.get("path")
            logger.warning("WebSocket %s: %s unreachable (%s)", path, dependency, error)
            if closed:
                return None
            try:
                if not accepted:
                    await send({"type": "websocket.accept"})
                await send(
                    {
                        "type": "websocket.close",
                        "code": TRY_AGAIN_LATER,
                        "reason": SOCKET_REASONS[dependency],
                    }
                )
            except OSError:  # the client went away meanwhile (uvicorn's ClientDisconnected)
                pass
            return None


API_SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
)


class ApiSecurityHeaders:
    """Adds :data:`API_SECURITY_HEADERS` to every HTTP response of ``app`` (the OpenEnv
    API, a FastAPI app outside Django's middleware) that does not set them itself."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {key.lower() for key, _ in headers}
                headers += [(k, v) for k, v in API_SECURITY_HEADERS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


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
    the agents playground's ``browser_session_key()`` is its session cookie (``None`` for
    anything else), so it plays on the signed-in person's token (``apps.agents.playground``)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "websocket"
            or scope.get("path", "").rstrip("/") != OPENENV_SOCKET
            or not websocket_origin_allowed(scope)
        ):
            return await self.app(scope, receive, send)
        with browser_session(_session_cookie(scope)):
            return await self.app(scope, receive, send)
