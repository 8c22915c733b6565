"""WebSocket routes served by Channels (everything under /ws/ except OpenEnv's /ws)."""

websocket_urlpatterns: list = []
