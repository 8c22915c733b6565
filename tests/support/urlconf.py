"""Every URL of the project, read from the URLconf, for tests that must cover them all."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Route", "fill", "routes", "websocket_routes"]


@dataclass(frozen=True)
class Route:
    """One URL pattern: its full ``route`` (``runs/<int:pk>/stop/``), name and parameters."""

    route: str
    name: str | None
    params: tuple[str, ...]
    regex: bool  # a re_path (admin's catch-all): parameters are named groups


_PARAM = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>[^>]+)>")
_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>[^)]*\)")


def _walk(patterns, prefix: str = "", namespace: str | None = None):
    from django.urls import URLResolver

    for pattern in patterns:
        text = str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            inner = namespace
            if pattern.namespace:
                inner = f"{namespace}:{pattern.namespace}" if namespace else pattern.namespace
            yield from _walk(pattern.url_patterns, prefix + text, inner)
        else:
            name = pattern.name and (f"{namespace}:{pattern.name}" if namespace else pattern.name)
            yield prefix + text, name


def _route(text: str, name: str | None) -> Route:
    regex = text.startswith("^") or "(?P<" in text or text.endswith("$")
    finder = _GROUP if regex else _PARAM
    return Route(text, name, tuple(m["name"] for m in finder.finditer(text)), regex)


def routes() -> list[Route]:
    """Every HTTP URL pattern (the admin's included), in URLconf order."""
    from django.urls import get_resolver

    return [_route(text, name) for text, name in _walk(get_resolver().url_patterns)]


def websocket_routes() -> list[Route]:
    """Every WebSocket URL pattern served by Channels (``tau2site.routing``)."""
    from tau2site.routing import websocket_urlpatterns

    return [_route(text, name) for text, name in _walk(websocket_urlpatterns)]


def fill(route: Route, values: dict[str, str]) -> str:
    """``route`` as a path (with a leading slash), each parameter replaced by ``values``."""
    if route.regex:
        text = _GROUP.sub(lambda m: values[m["name"]], route.route)
        text = text.replace("^", "").replace("$", "").replace("\\", "")
    else:
        text = _PARAM.sub(lambda m: values[m["name"]], route.route)
    return "/" + text
