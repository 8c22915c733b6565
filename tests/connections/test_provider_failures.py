"""Bad input on a connection: each ends the run with what happened and what to do.

Every case is a real model run on a connection, driven by the real Celery worker, with
litellm on the wire: an endpoint nobody listens on, a refused key, a model that cannot
call tools, a 429 storm, a reply that is not JSON (a web page). Each run ends FAILED —
never stuck running — with a reason that names the connection and says what to do on the
Connections page, never "Internal error", never the key; what a retry cannot cure is
asked once.

alice runs on her own connection and sees the reason on the run's page.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils.html import escape

from apps.connections.services import ConnectionFields, connection_create
from apps.runs.models import Run
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tau2_env.llm import gateway
from tests.support import anthropic_server
from tests.support.anthropic_server import AnthropicLLM
from tests.support.connections import CONNECTION_KEY, CONNECTION_MODEL
from tests.support.llm_server import error, text
from tests.support.scripts import GOLD_TASK, finished, is_agent_request, wait_for

# The worker's own retries of a transiently failed hop (tests/conftest.py,
# start_celery_worker: TAU2_RUN_TRANSIENT_RETRIES=1), each a call litellm tries
# llm.RETRIES more times for a rate limit.
WORKER_HOP_RETRIES = 1
NAME = "Lab vLLM"
CUSTOMER_OPENING = "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396."


def _closed_port() -> int:
    """A local port nobody listens on: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _WebPage:
    """An HTTP server that answers every request with a web page (200, text/html): what
    a base URL pointing at a site, or at a proxy's welcome page, gets back."""

    PAGE = b"<!doctype html><html><body><h1>Welcome to nginx!</h1></body></html>"

    def __init__(self) -> None:
        self.posts: list[str] = []
        page, posts = self.PAGE, self.posts

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # noqa: A002 - quiet
                return

            def _page(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def do_GET(self):  # noqa: N802
                self._page()

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                posts.append(self.path)
                self._page()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def web_page() -> Iterator[_WebPage]:
    server = _WebPage()
    yield server
    server.stop()


@pytest.fixture
def anthropic_llm() -> Iterator[AnthropicLLM]:
    server = AnthropicLLM().start()
    yield server
    server.stop()


def lab_connection(alice, *, base_url: str, kind: str = "openai_compatible", name: str = NAME):
    return connection_create(
        by=alice,
        owner=alice,
        kind=kind,
        fields=ConnectionFields(
            name=name, base_url=base_url, api_key=CONNECTION_KEY, models=[CONNECTION_MODEL]
        ),
    )


def run_on(alice, connection, *, model: str = CONNECTION_MODEL) -> Run:
    """A model run of airline 27 with both sides on ``connection``, to its end."""
    run = run_create(
        user=alice,
        task=Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1]),
        spec=RunSpec(agent=Side(model, connection), customer=Side(model, connection), max_steps=20),
    )
    return wait_for(run, finished, timeout=90)


def assert_failed_readably(run: Run, client, *, words: str, failure: str) -> None:
    """The run failed for ``failure`` with ``words`` in its reason, which names its
    connection and shows on its page; no key, no internal error, nothing still running."""
    assert run.status == Run.Status.FAILED, (run.status, run.error)
    assert run.failure == failure, (run.failure, run.error)
    assert run.finished_at is not None and run.lease_expires_at is None
    assert words in run.error, run.error
    assert f"'{run.agent_connection.name}'" in run.error or (
        f"{run.agent_connection.name}:" in run.error
    )
    for bad in ("Internal error", "Traceback", CONNECTION_KEY, "CANARY"):
        assert bad not in run.error, run.error
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert escape(words) in page
    assert CONNECTION_KEY not in page and "CANARY" not in page
    assert not Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING).exists()


def test_an_unreachable_endpoint_fails_the_run_saying_to_check_its_base_url(
    celery_worker, llm_server, alice, alice_client
):
    lab = lab_connection(alice, base_url=f"http://127.0.0.1:{_closed_port()}/v1")

    run = run_on(alice, lab)

    assert_failed_readably(
        run,
        alice_client,
        words=(
            "refused the connection: check its base URL on the Connections page, and that "
            "the server is running"
        ),
        failure=Run.Failure.TRANSIENT,  # a server restarting comes back: retryable
    )
    assert f"the endpoint of the connection '{NAME}' (http://127.0.0.1:" in run.error
    assert "TAU2_HF_ROUTER_URL" not in run.error and "OPENAI_BASE_URL" not in run.error


@pytest.mark.parametrize("kind", ["openai_compatible", "anthropic"])
def test_a_refused_key_fails_the_run_at_once_saying_to_check_the_key(
    celery_worker, llm_server, anthropic_llm, alice, alice_client, kind
):
    if kind == "anthropic":
        anthropic_llm.refused_keys.add(CONNECTION_KEY)
        lab = lab_connection(alice, base_url=anthropic_llm.base_url, kind=kind)

        def asked():
            return anthropic_llm.message_requests()
    else:
        # OpenAI's 401 quotes the key it refused: the reason must not.
        llm_server.responder = lambda request: error(
            401, f"Incorrect API key provided: {request.token}"
        )
        lab = lab_connection(alice, base_url=llm_server.base_url, kind=kind)

        def asked():
            return llm_server.chat_requests()

    run = run_on(alice, lab)

    assert_failed_readably(
        run,
        alice_client,
        words=(
            f"the credentials were refused (HTTP 401): the API key was rejected. Check the "
            f"key of the connection '{NAME}' (rotate it on the Connections page)"
        ),
        failure=Run.Failure.PROVIDER,
    )
    # Asked once: neither litellm nor the worker retried what a retry cannot fix.
    assert len(asked()) == 1


@pytest.mark.parametrize(
    "refusal",
    [
        "registry.ollama.ai/library/our-finetune-7b does not support tools",  # Ollama
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
        "to be set",  # vLLM
        "tools is not supported in this model.",  # OpenAI
    ],
    ids=["ollama", "vllm", "openai"],
)
def test_a_model_that_cannot_call_tools_fails_the_run_saying_so(
    celery_worker, llm_server, alice, alice_client, refusal
):
    # The customer (no tools) talks; the agent's first request (with tools) is refused.
    llm_server.responder = lambda request: (
        error(400, refusal) if is_agent_request(request) else text(CUSTOMER_OPENING)
    )
    lab = lab_connection(alice, base_url=llm_server.base_url)

    run = run_on(alice, lab)

    assert_failed_readably(
        run,
        alice_client,
        words=(
            f"the model '{CONNECTION_MODEL}' cannot call tools (HTTP 400): τ²'s agent works "
            "through tools, so choose a model that calls tools, or turn tool calling on in "
            "the server (vLLM: --enable-auto-tool-choice and a --tool-call-parser)"
        ),
        failure=Run.Failure.CONVERSATION,  # not retryable: the same model refuses again
    )
    assert run.error.startswith("The agent's model call failed: ")
    assert len([r for r in llm_server.chat_requests() if is_agent_request(r)]) == 1


def test_a_429_storm_is_retried_a_bounded_number_of_times_then_fails_retryably(
    celery_worker, llm_server, alice, alice_client
):
    llm_server.responder = lambda request: error(429, "Rate limit reached for requests")
    lab = lab_connection(alice, base_url=llm_server.base_url)

    run = run_on(alice, lab)

    assert_failed_readably(
        run,
        alice_client,
        words=(
            "rate limited (HTTP 429), still after retries: wait a minute and try again; if "
            "it keeps happening, lower the connection's runs in flight on the Connections "
            "page"
        ),
        failure=Run.Failure.TRANSIENT,  # "retry the failed runs" may try it again later
    )
    # litellm's retries of each call, times the worker's tries of the hop; then it stops.
    assert len(llm_server.chat_requests()) == (gateway.RETRIES + 1) * (WORKER_HOP_RETRIES + 1)
    assert run.events.filter(kind="customer").count() == 0  # no customer turn was made up


def test_a_reply_that_is_not_json_fails_the_run_at_once_saying_to_check_its_base_url(
    celery_worker, llm_server, alice, alice_client, web_page
):
    lab = lab_connection(alice, base_url=web_page.base_url)

    run = run_on(alice, lab)

    assert_failed_readably(
        run,
        alice_client,
        words=(
            "answered with an HTML page instead of an OpenAI-compatible reply: check its "
            "base URL on the Connections page; it must be the API's root (most "
            "OpenAI-compatible servers serve it under /v1), not a web page or a proxy's"
        ),
        failure=Run.Failure.CONVERSATION,
    )
    assert web_page.posts == ["/v1/chat/completions"]  # a web page stays one: asked once


def test_an_anthropic_reply_that_is_not_json_is_named_as_such(
    celery_worker, llm_server, anthropic_llm, alice, alice_client
):
    anthropic_llm.responder = lambda request: anthropic_server.raw(
        "<html><body>502 Bad Gateway</body></html>"
    )
    claude = lab_connection(
        alice, base_url=anthropic_llm.base_url, kind="anthropic", name="Team Claude"
    )

    run = run_on(alice, claude, model=CONNECTION_MODEL)

    assert_failed_readably(
        run,
        alice_client,
        words=(
            "answered with an HTML page instead of an Anthropic Messages reply: check its "
            "base URL on the Connections page; it must be the API's root"
        ),
        failure=Run.Failure.CONVERSATION,
    )
    assert "(most OpenAI-compatible servers" not in run.error
    assert len(anthropic_llm.message_requests()) == 1


# The same explanations without a worker: providers' own words, litellm real on the wire.


@pytest.mark.parametrize(
    ("status", "words", "kind"),
    [
        (400, "registry.ollama.ai/library/gemma:2b does not support tools", "no_tools"),
        (400, "tool calling is not supported with this model", "no_tools"),  # Groq
        (404, "No endpoints found that support tool use.", "no_tools"),  # OpenRouter
        (400, "This model does not support function calling", "no_tools"),
        (400, "temperature must be at most 1", "bad_request"),
        (404, "The model `our-finetune-7b` does not exist", "unknown_model"),
        (402, "Insufficient credits", "no_credits"),
        (403, "Project does not have access to model", "forbidden"),
        (503, "Service Unavailable", "provider_error"),
    ],
)
def test_each_refusal_of_a_connection_is_named_in_its_words(llm_server, status, words, kind):
    llm_server.responder = lambda request: error(status, words)
    route = gateway.Route(
        provider="openai_compatible",
        model=CONNECTION_MODEL,
        base_url=llm_server.base_url,
        api_key=CONNECTION_KEY,
        label=NAME,
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]

    with gateway.conversation(user=route), pytest.raises(gateway.LLMCallError) as caught:
        gateway.routed_completion(messages=[{"role": "user", "content": "Hi"}], tools=tools)

    failure = caught.value
    assert failure.kind == kind, str(failure)
    assert str(failure).startswith(f"{NAME}:{CONNECTION_MODEL} failed: ")
    assert words.rstrip(".") in str(failure)
    assert "huggingface.co" not in str(failure) and "/models/" not in str(failure)
    assert CONNECTION_KEY not in str(failure)
    if kind in ("no_tools", "bad_request", "unknown_model", "no_credits", "forbidden"):
        assert failure.transient is False


def test_a_reply_of_another_shape_is_a_bad_reply_not_a_lost_connection(anthropic_llm):
    # litellm raises its own APIConnectionError for a reply it cannot map: nothing was
    # lost on the way, so it is not "unreachable" (which would be retried).
    anthropic_llm.responder = lambda request: anthropic_server.raw(
        '{"hello": "world"}', content_type="application/json"
    )
    route = gateway.Route(
        provider="anthropic",
        model="claude-sonnet-4-5",
        base_url=anthropic_llm.base_url,
        api_key=CONNECTION_KEY,
        label="Team Claude",
    )

    with gateway.conversation(user=route), pytest.raises(gateway.LLMCallError) as caught:
        gateway.routed_completion(messages=[{"role": "user", "content": "Hi"}])

    assert caught.value.kind == "bad_reply" and caught.value.transient is False
    assert "answered with a reply of another shape instead of an Anthropic" in str(caught.value)
    assert "Traceback" not in str(caught.value)
    assert len(anthropic_llm.message_requests()) == 1


def test_the_router_keeps_its_own_words():
    """A route that is not a connection's still says what the server's settings are."""
    explained = gateway.explain_error(
        ConnectionRefusedError("refused"),
        route=gateway.hf_route(model="org/model", token="hf_token_0123456789"),
    )

    assert explained.kind == "unreachable"
    assert "is TAU2_HF_ROUTER_URL right, and is it running?" in explained.message
    assert "Connections page" not in explained.message
