"""Asking the Hub whose a token is (``tau2_env.gate.hf_identity``) when connections drop.

The Hub here is a socket that drops the connections it is told to drop (reads the
request, closes without a word: what a kept connection the Hub closed meanwhile, or a
reset under load, looks like to the client) and answers the others as the Hub does.
"""

from __future__ import annotations

import json
import socket
import threading

import pytest

from tau2_env.gate import hf_identity

TOKEN = "hf_dropped_hub_token_0123456789"  # noqa: S105 - a made-up token


class DroppingHub:
    def __init__(self, *, drop: int) -> None:
        self.drop = drop  # how many connections to drop before answering
        self.asked = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                while True:
                    if not conn.recv(65536).endswith(b"\r\n\r\n"):
                        break  # a closed connection, or a head we do not expect
                    self.asked += 1
                    if self.drop:
                        self.drop -= 1
                        break
                    body = json.dumps({"type": "user", "name": "alice"}).encode()
                    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    conn.sendall(head + b"content-length: %d\r\n\r\n" % len(body) + body)

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def hub(monkeypatch):
    hubs = []

    def start(*, drop: int) -> DroppingHub:
        hubs.append(DroppingHub(drop=drop))
        monkeypatch.setenv("TAU2_HF_HUB_URL", hubs[-1].url)
        return hubs[-1]

    hf_identity.forget()
    hf_identity._client.cache_clear()  # no connection kept from another test's Hub
    yield start
    hf_identity.forget()
    for started in hubs:
        started.close()


def test_a_connection_dropped_without_an_answer_is_asked_again_once(hub):
    dropping = hub(drop=1)
    assert hf_identity.hf_account(TOKEN) == "alice"
    assert dropping.asked == 2


def test_a_hub_that_keeps_dropping_is_said_to_be_unreachable_after_two_asks(hub):
    dropping = hub(drop=5)
    with pytest.raises(hf_identity.TokenUnknown, match="could not be asked about the token"):
        hf_identity.hf_account(TOKEN)
    assert dropping.asked == 2
    # Not kept as the Hub's answer: the next reset asks again.
    dropping.drop = 0
    assert hf_identity.hf_account(TOKEN) == "alice"
