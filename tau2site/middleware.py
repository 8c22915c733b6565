"""What every request and every page of the site share: a NUL guard and the security policy.

* :class:`RejectNulMiddleware` answers 400 to a NUL character in the path, the query string
  or a form field. Nothing legitimate sends one, and PostgreSQL's text and jsonb cannot
  hold it: a filter or a form reaching the database with one would fail as a 500.
* :class:`ContentSecurityPolicyMiddleware` gives every page one Content-Security-Policy:
  scripts, styles and connections from the site itself (WebSockets to its own host
  included), images also from ``https:`` (Hugging Face avatars), no plug-ins, and framing
  denied — or, inside a Hugging Face Space (``TAU2_EMBED_IN_SPACE``), allowed to
  ``TAU2_FRAME_ANCESTORS`` instead of ``X-Frame-Options``, which cannot name another origin.

Our own middleware rather than django-csp: the policy is one fixed string but for two
request-dependent parts (the WebSocket host and the Space's frame ancestors), needs no
nonces (no page has an inline script), and a dependency for it would be larger than it.
Inline ``style`` attributes are allowed (``style-src-attr``), ``<style>`` elements are not:
pages set data-driven widths and CSS variables on elements (progress bars, reward cells,
compare columns); htmx's own indicator ``<style>`` is turned off in ``base.html``.

Around the ASGI application (``tau2site.asgi``), outside Django's middleware:

* :class:`SameOriginWebsockets` accepts a WebSocket only from a page of this site: same
  scheme, host and port (Channels' ``AllowedHostsOriginValidator`` ignores the port).
* :class:`ApiSecurityHeaders` gives the OpenEnv API's responses ``nosniff``, frame denial
  and a referrer policy, as Django's ``SecurityMiddleware`` does for the pages.
"""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpResponseBadRequest

from apps.agents.playground import browser_session
from tau2_env.guard import GuardSettings

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


def content_security_policy(request) -> str:
    """The policy of a page served for ``request`` (see the module docstring)."""
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
        "style-src": ["'self'"],
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
            response.headers["Content-Security-Policy"] = content_security_policy(request)
            if settings.TAU2_EMBED_IN_SPACE:
                response.xframe_options_exempt = True
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
    (``tau2_env.guard``) and the site's own sockets, from Django's settings."""
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
    ``CSRF_TRUSTED_ORIGINS`` (:meth:`tau2_env.guard.GuardSettings.refusal`)."""
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
