"""A local, scripted, OpenAI-compatible LLM server for tests.

Every LLM call of the product goes through ``tau2_env.llm.gateway`` and litellm; tests point them
here (``TAU2_HF_ROUTER_URL=http://127.0.0.1:<port>/v1``) so that litellm, HTTP and the
headers are real and only the model is scripted.

* ``POST /v1/chat/completions`` (and ``/chat/completions``): answers with the next reply
  of :attr:`ScriptedLLM.script`, or, when :attr:`ScriptedLLM.responder` is set, with what
  it returns for the request. A reply is text (``str``), :func:`tool_call` /
  :func:`tool_calls`, :func:`error` (an HTTP error status), optionally :func:`delayed`;
  ``text("…", reasoning="…")`` or :func:`with_reasoning` add a reasoning model's
  ``reasoning_content`` to the message, its tokens counted in ``completion_tokens`` (as
  providers count them) and in ``completion_tokens_details.reasoning_tokens``.
  ``stream=True`` is answered as server-sent events with a final usage chunk.
* ``GET /api/whoami-v2``: the Hub's answer about a token (``TAU2_HF_HUB_URL`` points
  here): a token starting ``hf_`` is a user's (:attr:`ScriptedLLM.hf_accounts` names it,
  else a name derived from it), unless it is in :attr:`ScriptedLLM.unknown_tokens`;
  anything else is 401;
* ``POST /v1/embeddings`` (and ``/embeddings``): OpenAI's embeddings API, each input's
  vector :func:`embedding_of` it (the same text, the same vector: a query finds the
  document that shares its words), ``usage.prompt_tokens`` its words counted, as
  ``encoding_format`` asks (``float`` or ``base64``); :attr:`ScriptedLLM.embeddings_reply`
  set to :func:`error` answers that instead.
* ``GET /v1/models``: :attr:`ScriptedLLM.catalogue`, shaped like the Hugging Face router's;
  set it to :func:`error` to answer an HTTP error, or to a ``str`` to answer that raw body.
* Every request is recorded (:attr:`ScriptedLLM.requests`) with its ``Authorization``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.support.scripted_http import JSONHandler, ScriptedServer

__all__ = [
    "DEFAULT_CATALOGUE",
    "RecordedRequest",
    "Reply",
    "ScriptedLLM",
    "delayed",
    "embedding_of",
    "error",
    "text",
    "tool_call",
    "tool_calls",
    "with_reasoning",
]

DEFAULT_CATALOGUE: dict[str, Any] = {
    "object": "list",
    "data": [
        {
            "id": "deepseek-ai/DeepSeek-V4.1-Flash",
            "object": "model",
            "owned_by": "deepseek-ai",
            "providers": [
                {
                    "provider": "novita",
                    "status": "live",
                    "context_length": 131072,
                    "pricing": {"input": 0.27, "output": 1.1},
                    "supports_tools": True,
                    "supports_structured_output": True,
                }
            ],
        },
        {
            "id": "Qwen/Qwen3-32B",
            "object": "model",
            "owned_by": "Qwen",
            "providers": [
                {
                    "provider": "cerebras",
                    "status": "live",
                    "context_length": 32768,
                    "supports_tools": True,
                },
                {"provider": "nscale", "status": "error", "supports_tools": False},
            ],
        },
    ],
}


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a text, tool calls, or an HTTP error; after ``delay`` seconds."""

    content: str | None = None
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    status: int = 200
    error_message: str = ""
    delay: float = 0.0
    usage: tuple[int, int] = (10, 5)  # prompt, completion tokens
    # A reasoning model's reasoning (``message.reasoning_content``) and how many of the
    # completion tokens it took (included in ``usage``'s completion tokens).
    reasoning: str | None = None
    reasoning_tokens: int = 0
    # An answer's exact JSON body, sent as it is (see :func:`answer`).
    body: str | None = None
    # An error's own headers (a 429's ``Retry-After``).
    headers: tuple[tuple[str, str], ...] = ()


def answer(body: str) -> Reply:
    """Answer the chat call with exactly this JSON body (status 200)."""
    return Reply(body=body)


def text(
    content: str,
    *,
    delay: float = 0.0,
    reasoning: str | None = None,
    reasoning_tokens: int | None = None,
) -> Reply:
    reply = Reply(content=content, delay=delay)
    return reply if reasoning is None else with_reasoning(reply, reasoning, tokens=reasoning_tokens)


def with_reasoning(reply: Reply | str, reasoning: str, *, tokens: int | None = None) -> Reply:
    """``reply`` with ``reasoning`` as its ``reasoning_content``; its ``tokens`` (default:
    one per word) are added to the completion tokens, as providers count them."""
    reply = text(reply) if isinstance(reply, str) else reply
    tokens = len(reasoning.split()) if tokens is None else tokens
    prompt, completion = reply.usage
    return Reply(
        **{
            **reply.__dict__,
            "reasoning": reasoning,
            "reasoning_tokens": tokens,
            "usage": (prompt, completion + tokens),
        }
    )


def tool_call(name: str, /, **arguments: Any) -> Reply:
    return Reply(calls=((name, arguments),))


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(calls=tuple(calls))


def error(
    status: int, message: str = "scripted failure", *, retry_after: str | None = None
) -> Reply:
    """An HTTP error; with ``retry_after``, its ``Retry-After`` header (seconds or a date)."""
    headers = () if retry_after is None else (("Retry-After", retry_after),)
    return Reply(status=status, error_message=message, headers=headers)


def delayed(reply: Reply | str, seconds: float) -> Reply:
    reply = text(reply) if isinstance(reply, str) else reply
    return Reply(**{**reply.__dict__, "delay": seconds})


@dataclass
class RecordedRequest:
    """What the server received: path, headers, the JSON body and the bearer token."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float = field(default_factory=time.monotonic)
    raw: bytes = field(default=b"", repr=False)  # the body's bytes as received

    @property
    def authorization(self) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == "authorization":
                return value
        return None

    @property
    def token(self) -> str | None:
        auth = self.authorization or ""
        return auth[len("Bearer ") :] if auth.startswith("Bearer ") else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages") or []

    @property
    def tool_names(self) -> list[str]:
        return [t.get("function", {}).get("name") for t in self.body.get("tools") or []]

    def text(self) -> str:
        """All message contents of the request joined, for matching in responders."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)


class ScriptedLLM(ScriptedServer[Reply, RecordedRequest]):
    """The scripted server; start with :meth:`start`, stop with :meth:`stop`.

    ``script`` is consumed in order; with ``responder`` set it decides instead (it may
    return a ``str`` or a :class:`Reply`). With neither, the server answers 500 so a test
    never silently gets an unplanned answer.
    """

    thread_name = "scripted-llm"

    def __init__(self) -> None:
        super().__init__()
        self.catalogue: dict[str, Any] | Reply | str = json.loads(json.dumps(DEFAULT_CATALOGUE))
        self.hf_accounts: dict[str, str] = {}  # token → the Hub account it belongs to
        self.unknown_tokens: set[str] = set()  # tokens the Hub refuses (made up, revoked)
        self.embeddings_reply: Reply | None = None  # an error to answer embeddings with

    # --------------------------------------------------------------- control

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` — what ``TAU2_HF_ROUTER_URL`` should be."""
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        """Forget the script, the responder, the recorded requests and the Hub's accounts."""
        super().reset()
        with self._lock:
            self.catalogue = json.loads(json.dumps(DEFAULT_CATALOGUE))
            self.hf_accounts.clear()
            self.unknown_tokens.clear()
            self.embeddings_reply = None

    @property
    def hub_url(self) -> str:
        """``http://127.0.0.1:<port>`` — what ``TAU2_HF_HUB_URL`` should be."""
        return f"http://127.0.0.1:{self.port}"

    def hf_account(self, token: str | None) -> str | None:
        """The Hub account ``token`` belongs to here, or ``None`` (refused)."""
        with self._lock:
            if not token or not token.startswith("hf_") or token in self.unknown_tokens:
                return None
            named = self.hf_accounts.get(token)
        return named or "user-" + hashlib.sha256(token.encode()).hexdigest()[:8]

    def embedding_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.split("?")[0].endswith("/embeddings")]

    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # -------------------------------------------------------------- internal

    def _handler(self) -> type[JSONHandler]:
        return _make_handler(self)

    def _as_reply(self, content: str) -> Reply:
        return text(content)

    def _no_reply(self) -> Reply:
        return error(500, "scripted LLM: no reply left in the script")


def _completion_body(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.calls:
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:20]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for name, arguments in reply.calls
        ]
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:20]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.calls else "stop",
            }
        ],
        "usage": _usage(reply),
    }


def _usage(reply: Reply) -> dict[str, Any]:
    prompt, completion = reply.usage
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    return usage


def _stream_chunks(reply: Reply, model: str) -> list[dict[str, Any]]:
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:20]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    chunks: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        delta = {"role": "assistant", "reasoning_content": reply.reasoning}
        chunks.append({**base, "choices": [{"index": 0, "delta": delta}]})
    if reply.calls:
        for index, (name, arguments) in enumerate(reply.calls):
            call = {
                "index": index,
                "id": f"call_{uuid.uuid4().hex[:20]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            delta = {"role": "assistant", "tool_calls": [call]}
            chunks.append({**base, "choices": [{"index": 0, "delta": delta}]})
    else:
        words = (reply.content or "").split(" ")
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            chunks.append({**base, "choices": [{"index": 0, "delta": {"content": piece}}]})
    finish = "tool_calls" if reply.calls else "stop"
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": _usage(reply)})
    return chunks


EMBEDDING_DIMENSIONS = 64
_WORDS = re.compile(r"[a-z0-9]+")


def embedding_of(text: str) -> list[float]:
    """The scripted vector of ``text``: its words hashed into
    :data:`EMBEDDING_DIMENSIONS` buckets, normalised (texts sharing words are close)."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in _WORDS.findall(text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % EMBEDDING_DIMENSIONS] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def _embeddings_body(body: dict[str, Any]) -> dict[str, Any]:
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        vector: Any = embedding_of(str(text))
        if as_base64:
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = sum(len(str(t).split()) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": str(body.get("model") or "scripted"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _make_handler(llm: ScriptedLLM) -> type[JSONHandler]:
    class Handler(JSONHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            llm._record(RecordedRequest("GET", self.path, dict(self.headers.items()), {}))
            if self.path.split("?")[0] == "/api/whoami-v2":
                request = RecordedRequest("GET", self.path, dict(self.headers.items()), {})
                account = llm.hf_account(request.token)
                if account is None:
                    self._send_json(401, {"error": "Invalid credentials in Authorization header"})
                else:
                    self._send_json(200, {"type": "user", "name": account})
            elif self.path.rstrip("/").split("?")[0] in ("/v1/models", "/models"):
                catalogue = llm.catalogue
                if isinstance(catalogue, Reply):
                    body = {"error": {"message": catalogue.error_message}}
                    self._send_json(catalogue.status, body)
                elif isinstance(catalogue, str):
                    self._send(200, catalogue.encode(), "text/html")
                else:
                    self._send_json(200, catalogue)
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self._read_raw()
            body = self._parsed(raw)
            request = RecordedRequest("POST", self.path, dict(self.headers.items()), body, raw=raw)
            llm._record(request)
            if self.path.split("?")[0].endswith("/embeddings"):
                failure = llm.embeddings_reply
                if failure is not None and failure.status != 200:
                    body_ = {"error": {"message": failure.error_message, "type": "scripted"}}
                    self._send_json(failure.status, body_, dict(failure.headers))
                else:
                    self._send_json(200, _embeddings_body(body))
                return
            if not self.path.split("?")[0].endswith("/chat/completions"):
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                reply = llm._next_reply(request)
            except Exception as exc:  # a broken responder must show up in the test
                self._send_json(500, {"error": {"message": f"responder failed: {exc!r}"}})
                return
            if reply.delay:
                time.sleep(reply.delay)
            if reply.status != 200:
                self._send_json(
                    reply.status,
                    {"error": {"message": reply.error_message, "type": "scripted_error"}},
                    dict(reply.headers),
                )
                return
            model = str(body.get("model") or "scripted")
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in _stream_chunks(reply, model):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True
                return
            if reply.body is not None:
                self._send(200, reply.body.encode(), "application/json")
                return
            self._send_json(200, _completion_body(reply, model))

    return Handler
