"""A local, scripted server speaking Anthropic's Messages API, for tests.

An ``anthropic`` connection (and ``tau2 run --agent-llm anthropic/<model>`` with
``api_base``) reaches it through litellm's own Anthropic route, so the request litellm
builds — ``x-api-key``, ``anthropic-version``, the system prompt apart, tools as
``input_schema``, tool results as ``tool_result`` blocks — is real; only the model is
scripted.

* ``POST /v1/messages`` (and ``/messages``): answers with the next reply of
  :attr:`AnthropicLLM.script`, or with what :attr:`AnthropicLLM.responder` returns for the
  request. A reply is text (``str`` or :func:`text`), :func:`tool_use` / :func:`tool_uses`
  (``tool_use`` content blocks, ``stop_reason`` ``"tool_use"``), optionally with
  :func:`thinking` before it, :func:`error` (Anthropic's error shape and an HTTP status)
  or :func:`raw` (any body, e.g. an HTML page). A key in :attr:`AnthropicLLM.refused_keys`
  is answered 401 as Anthropic answers it. ``usage`` is ``{input_tokens, output_tokens}``.
  A ``tool_use`` block's id follows from the request it answers, so the same
  conversation gets the same ids however often it is played.
* ``GET /v1/models``: :attr:`AnthropicLLM.models`, shaped like Anthropic's list.
* Every request is recorded (:attr:`AnthropicLLM.requests`): its headers, the exact bytes
  of its body and the body parsed.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Any

from tests.support.scripted_http import JSONHandler, ScriptedServer

__all__ = [
    "AnthropicLLM",
    "AnthropicReply",
    "AnthropicRequest",
    "error",
    "raw",
    "text",
    "thinking",
    "tool_use",
    "tool_uses",
]

ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class AnthropicReply:
    """One scripted answer: text and/or tool uses (after an optional thinking block), an
    HTTP error, or a raw body."""

    content: str | None = None
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    thinking: str | None = None
    status: int = 200
    error_message: str = ""
    body: bytes | None = None  # sent as it is (with ``content_type``)
    content_type: str = "application/json"
    usage: tuple[int, int] = (12, 6)  # input, output tokens


def text(content: str) -> AnthropicReply:
    return AnthropicReply(content=content)


def tool_use(name: str, /, **arguments: Any) -> AnthropicReply:
    return AnthropicReply(calls=((name, arguments),))


def tool_uses(*calls: tuple[str, dict[str, Any]]) -> AnthropicReply:
    return AnthropicReply(calls=tuple(calls))


def thinking(reply: AnthropicReply | str, reasoning: str) -> AnthropicReply:
    """``reply`` preceded by a thinking block saying ``reasoning``."""
    reply = text(reply) if isinstance(reply, str) else reply
    return replace(reply, thinking=reasoning)


def error(status: int, message: str = "scripted failure") -> AnthropicReply:
    return AnthropicReply(status=status, error_message=message)


def raw(body: bytes | str, *, status: int = 200, content_type: str = "text/html") -> AnthropicReply:
    data = body.encode() if isinstance(body, str) else body
    return AnthropicReply(status=status, body=data, content_type=content_type)


@dataclass
class AnthropicRequest:
    """What the server received: method, path, headers, the body's bytes and its JSON."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: dict[str, Any]
    received_at: float = field(default_factory=time.monotonic)

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None

    @property
    def api_key(self) -> str | None:
        return self.header("x-api-key")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages") or []

    @property
    def tool_names(self) -> list[str]:
        return [t.get("name") for t in self.body.get("tools") or []]

    def blocks(self, kind: str) -> list[dict[str, Any]]:
        """Every content block of type ``kind`` in the request's messages, in order."""
        found = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                found += [b for b in content if isinstance(b, dict) and b.get("type") == kind]
        return found

    def text(self) -> str:
        """All the text of the request's messages joined, for matching in responders."""
        parts = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [str(b.get("text") or "") for b in content if isinstance(b, dict)]
        return "\n".join(parts)


class AnthropicLLM(ScriptedServer[AnthropicReply, AnthropicRequest]):
    """The scripted server; :meth:`start`, :meth:`stop`, :meth:`reset` as ``ScriptedLLM``.

    With neither a script left nor a responder, it answers 500, so a test never silently
    gets an answer it did not plan.
    """

    thread_name = "scripted-anthropic"

    def __init__(self) -> None:
        super().__init__()
        self.models: list[str] = ["claude-sonnet-4-5", "claude-haiku-4-5"]
        self.refused_keys: set[str] = set()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: Anthropic's API root (litellm adds ``/v1/messages``)."""
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self.refused_keys.clear()

    def message_requests(self) -> list[AnthropicRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.split("?")[0].endswith("/messages")]

    def _handler(self) -> type[JSONHandler]:
        return _make_handler(self)

    def _as_reply(self, content: str) -> AnthropicReply:
        return text(content)

    def _no_reply(self) -> AnthropicReply:
        return error(500, "scripted Anthropic: no reply left in the script")


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = ANTHROPIC_ERRORS.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _message_body(reply: AnthropicReply, *, model: str, request: AnthropicRequest) -> dict:
    content: list[dict[str, Any]] = []
    if reply.thinking is not None:
        signature = hashlib.sha256(reply.thinking.encode()).hexdigest()
        content.append({"type": "thinking", "thinking": reply.thinking, "signature": signature})
    if reply.content is not None:
        content.append({"type": "text", "text": reply.content})
    for index, (name, arguments) in enumerate(reply.calls):
        seed = request.raw + f"|{index}".encode()
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{hashlib.sha256(seed).hexdigest()[:24]}",
                "name": name,
                "input": arguments,
            }
        )
    prompt, completion = reply.usage
    return {
        "id": f"msg_{hashlib.sha256(request.raw).hexdigest()[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if reply.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


def _make_handler(llm: AnthropicLLM) -> type[JSONHandler]:
    class Handler(JSONHandler):
        def _extra_headers(self) -> dict[str, str]:
            return {"request-id": f"req_{int(time.monotonic() * 1e6)}"}

        def _request(self, method: str) -> AnthropicRequest:
            data = self._read_raw()
            body = self._parsed(data)
            request = AnthropicRequest(method, self.path, dict(self.headers.items()), data, body)
            llm._record(request)
            return request

        def _refused(self, request: AnthropicRequest) -> bool:
            key = request.api_key
            if key and key not in llm.refused_keys:
                return False
            self._send_json(401, _error_body(401, "invalid x-api-key"))
            return True

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            request = self._request("GET")
            if self.path.split("?")[0].rstrip("/") not in ("/v1/models", "/models"):
                self._send_json(404, _error_body(404, f"no route {self.path}"))
                return
            if self._refused(request):
                return
            data = [
                {
                    "type": "model",
                    "id": name,
                    "display_name": name,
                    "created_at": "2026-01-01T00:00:00Z",
                }
                for name in llm.models
            ]
            self._send_json(
                200,
                {
                    "data": data,
                    "has_more": False,
                    "first_id": data[0]["id"] if data else None,
                    "last_id": data[-1]["id"] if data else None,
                },
            )

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            request = self._request("POST")
            if not self.path.split("?")[0].rstrip("/").endswith("/messages"):
                self._send_json(404, _error_body(404, f"no route {self.path}"))
                return
            if self._refused(request):
                return
            if request.body.get("stream"):
                self._send_json(400, _error_body(400, "scripted Anthropic: streaming unscripted"))
                return
            try:
                reply = llm._next_reply(request)
            except Exception as exc:  # a broken responder must show up in the test
                self._send_json(500, _error_body(500, f"responder failed: {exc!r}"))
                return
            if reply.body is not None:
                self._send(reply.status, reply.body, reply.content_type)
            elif reply.status != 200:
                self._send_json(reply.status, _error_body(reply.status, reply.error_message))
            else:
                model = str(request.body.get("model") or "scripted")
                self._send_json(200, _message_body(reply, model=model, request=request))

    return Handler
