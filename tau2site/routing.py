"""WebSocket routes served by Channels (everything under /ws/ except OpenEnv's /ws)."""

from apps.evaluations.routing import websocket_urlpatterns as evaluations_websockets
from apps.runs.routing import websocket_urlpatterns as runs_websockets

websocket_urlpatterns: list = [*runs_websockets, *evaluations_websockets]
