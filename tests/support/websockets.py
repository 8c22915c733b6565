"""Channels' ``WebsocketCommunicator`` for consumer tests, on the real ASGI application."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import channels

__all__ = ["HOST", "ORIGIN", "WebsocketCommunicator", "session_headers"]

ORIGIN = b"http://testserver"  # the page's own origin: scheme, host and port of HOST
HOST = b"testserver"  # in ALLOWED_HOSTS


def _channels_websocket_communicator() -> type:
    """Channels' own ``WebsocketCommunicator``, importable without daphne.

    ``channels/testing/__init__.py`` also imports the live-server test case, which needs
    daphne (django/channels#1942, still open). We serve with uvicorn and use only the
    communicator, so without daphne its module is loaded under a bare ``channels.testing``.
    """
    if importlib.util.find_spec("daphne") is None and "channels.testing" not in sys.modules:
        package = types.ModuleType("channels.testing")
        package.__path__ = [str(Path(channels.__file__).parent / "testing")]
        sys.modules["channels.testing"] = package
    return importlib.import_module("channels.testing.websocket").WebsocketCommunicator


WebsocketCommunicator = _channels_websocket_communicator()


def session_headers(
    client=None, *, origin: bytes = ORIGIN, host: bytes = HOST
) -> list[tuple[bytes, bytes]]:
    """The headers of a socket opened by ``client``'s person (anonymous without one), from
    a page at ``origin`` to ``host`` (as a browser sends them)."""
    headers = [(b"host", host), (b"origin", origin)]
    if client is not None:
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers
