"""A reasoning model's reasoning, shown: collapsed under its message on the run page (as it
loads and live, over the run's socket), on compare, and counted and priced with the
tokens providers count it in.

alice runs airline/27 with both sides on her own OpenAI-compatible connection to the
scripted server (``Our vLLM``), whose replies carry ``reasoning_content`` as reasoning
models' do (a vLLM reasoning parser, DeepSeek, OpenAI-compatible hosts), run by the
real Celery worker; litellm and τ² are real on the wire.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from websockets.sync.client import connect

from apps.runs.models import Run, RunEvent
from apps.runs.presenters import reasoning_of
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.support.connections import (  # noqa: F401 - fixtures
    CONNECTION_KEY,
    CONNECTION_MODEL,
    connections_cleared,
    openai_compatible_connection,
    reasoning_effort_sent,
)
from tests.support.llm_server import text, tool_call, with_reasoning
from tests.support.scripts import GOLD_TASK, finished, is_agent_request, play, wait_for

pytestmark = pytest.mark.slow

PRICES = (Decimal("1"), Decimal("2"))  # USD per 1M input / output tokens, entered
M = Decimal(1_000_000)
AGENT_ARGS = {"temperature": 0.3, "reasoning_effort": "high"}
USER_ARGS = {"temperature": 0.0}
# Model output with markup in it: the page must show it, escaped, never run it.
HOSTILE = "The policy says <script>alert('reasoning')</script> & no certificate yet."
CUSTOMER_THOUGHT = "I am <Ethan> & I want compensation"


def script(llm_server) -> None:
    """Both sides reason: the customer's first message, the agent's tool call and its
    answer (400 reasoning tokens, counted in its completion tokens as providers do)."""
    play(
        llm_server,
        agent=[
            with_reasoning(
                tool_call("get_user_details", user_id="ethan_martin_2396"),
                "First look the customer up.",
            ),
            text("I see your reservations.", reasoning=HOSTILE, reasoning_tokens=400),
        ],
        customer=[
            text(
                "Hi, I'm ethan_martin_2396 and my flight was delayed.", reasoning=CUSTOMER_THOUGHT
            ),
            text("No, thanks. ###STOP###"),
        ],
        delay=0.2,
    )


@pytest.fixture
def connection(alice, llm_server, connections_cleared):  # noqa: F811
    return openai_compatible_connection(
        llm_server, by=alice, owner=alice, models=[(CONNECTION_MODEL, PRICES)]
    )


def start(alice, connection) -> Run:
    return run_create(
        user=alice,
        task=Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1]),
        spec=RunSpec(
            agent=Side(CONNECTION_MODEL, connection, AGENT_ARGS),
            customer=Side(CONNECTION_MODEL, connection, USER_ARGS),
            max_steps=30,
            seed=7,
        ),
        agent_prices=PRICES,
    )


def details_of(html: str) -> list[str]:
    """The opening tags of the reasoning's ``<details>``."""
    return re.findall(r'<details class="reasoning"[^>]*>', html)


def assert_escaped(html: str) -> None:
    assert "<script>alert(" not in html
    assert "&lt;script&gt;alert(&#x27;reasoning&#x27;)&lt;/script&gt; &amp; no certificate" in html
    assert "I am &lt;Ethan&gt; &amp; I want compensation" in html


def test_a_reasoning_models_reasoning_is_shown_collapsed_live_and_on_the_page_and_priced(
    asgi_server, celery_worker, llm_server, alice, alice_client, connection
):
    script(llm_server)
    run = start(alice, connection)
    cookie = f"sessionid={alice_client.cookies['sessionid'].value}"
    live: dict[int, str] = {}
    with connect(
        asgi_server.ws_url(f"/ws/runs/{run.pk}/?after=-1"),
        additional_headers={"Cookie": cookie, "Origin": asgi_server.url},
        open_timeout=10,
    ) as ws:
        for _ in range(200):
            frame = json.loads(ws.recv(timeout=30))
            if frame["type"] == "event":
                live[frame["seq"]] = frame["html"]
            elif frame["final"]:
                break
    run = wait_for(run, finished)
    assert run.status == Run.Status.COMPLETED, run.error

    # The requests carried each side's τ² llm_args, as tau2 run would pass them (on τ² 1.x
    # its litellm drops reasoning_effort for a model it does not know).
    agent_bodies = [r.body for r in llm_server.chat_requests() if is_agent_request(r)]
    customer_bodies = [r.body for r in llm_server.chat_requests() if not is_agent_request(r)]
    sent = {(b["temperature"], b.get("reasoning_effort")) for b in agent_bodies}
    assert sent == {(0.3, reasoning_effort_sent("high"))}
    assert {b["temperature"] for b in customer_bodies} == {0.0}

    events = list(run.events.order_by("seq"))
    reasoned = {e.seq: reasoning_of(e.message) for e in events if reasoning_of(e.message)}
    kinds = [next(e.kind for e in events if e.seq == seq) for seq in reasoned]
    assert kinds == ["customer", "agent", "agent"]
    assert list(reasoned.values()) == [CUSTOMER_THOUGHT, "First look the customer up.", HOSTILE]

    # Live: the socket's message partial has it, collapsed and escaped.
    assert set(live) == {e.seq for e in events}
    live_html = "".join(live[seq] for seq in reasoned)
    assert len(details_of(live_html)) == 3
    assert all(" open" not in tag for tag in details_of(live_html))
    assert_escaped(live_html)
    assert all(not details_of(live[e.seq]) for e in events if e.seq not in reasoned)

    # The page as it loads: the same, with each side's connection and arguments.
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert len(details_of(page)) == 3
    assert all(" open" not in tag for tag in details_of(page))
    assert_escaped(page)
    assert "Reasoning · 5 words" in page  # "First look the customer up."
    assert "Reasoning · 7 words" in page  # the customer's
    assert "reasoning included" in page
    side = re.search(r'data-testid="side-agent".*?</div>', page, re.S).group(0)
    assert "our-finetune-7b" in side and "Our vLLM (OpenAI-compatible endpoint)" in side
    assert "temperature 0.3 · reasoning_effort high" in side
    customer_side = re.search(r'data-testid="side-customer".*?</div>', page, re.S).group(0)
    assert "temperature 0" in customer_side and "(τ²'s default)" in customer_side
    assert CONNECTION_KEY not in page and "CANARY" not in page

    # Counted and priced: providers count reasoning in the completion tokens; τ² keeps
    # them in each message's usage and the run prices them.
    agent = [e for e in events if e.kind == RunEvent.Kind.AGENT and e.completion_tokens]
    assert [e.completion_tokens for e in agent] == [5 + 5, 5 + 400]
    assert (run.prompt_tokens, run.completion_tokens) == (20, 415)
    assert run.cost_usd == (20 * PRICES[0] + 415 * PRICES[1]) / M
    assert (run.user_prompt_tokens, run.user_completion_tokens) == (20, 5 + 7 + 5)
    assert run.user_cost_usd == (20 * PRICES[0] + 17 * PRICES[1]) / M
    assert page.count('data-testid="cost-reasoning"') == 2  # the agent's and the customer's
    assert "includes reasoning tokens" in page


def test_compare_shows_the_reasoning_and_where_each_run_ran(
    celery_worker, llm_server, alice, alice_client, connection
):
    script(llm_server)
    reasoning_run = wait_for(start(alice, connection), finished)
    assert reasoning_run.status == Run.Status.COMPLETED, reasoning_run.error
    # A run on the router at τ²'s default arguments (as before they could be chosen).
    other = Run.objects.create(
        task=reasoning_run.task,
        domain=reasoning_run.domain,
        created_by=alice,
        agent_model="org/model-b",
        user_model="org/customer",
        status=Run.Status.COMPLETED,
    )
    RunEvent.objects.create(
        run=other, seq=0, kind="agent", message={"role": "assistant", "content": "Hi!"}
    )

    page = alice_client.get(f"/runs/compare/?ids={reasoning_run.pk},{other.pk}").content.decode()

    assert 'data-aligned="true"' in page
    # The tool call's reasoning sits with the talk before the call; the answer's in its bubble.
    assert len(details_of(page)) == 3
    assert all(" open" not in tag for tag in details_of(page))
    assert "First look the customer up." in page
    assert_escaped(page)
    columns = page.split('data-testid="compare-column"')[1:]
    assert "Our vLLM (OpenAI-compatible endpoint)" in columns[0]
    assert "temperature 0.3 · reasoning_effort high" in columns[0]
    assert "Hugging Face Inference Providers" in columns[1] and "org/model-b" in columns[1]
    assert "(τ²'s default)" in columns[1]
    assert CONNECTION_KEY not in page


def _stored(alice, messages: list[dict]) -> Run:
    run = Run.objects.create(
        task=Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1]),
        domain=GOLD_TASK[0],
        created_by=alice,
        agent_model="org/model-a",
        user_model="org/customer",
        status=Run.Status.COMPLETED,
    )
    RunEvent.objects.bulk_create(
        RunEvent(
            run=run,
            seq=seq,
            kind="agent" if m["role"] == "assistant" else "customer",
            message=m,
            completion_tokens=50,
        )
        for seq, m in enumerate(messages)
    )
    return run


def _said(role: str, content: str, **reply) -> dict:
    return {
        "role": role,
        "content": content,
        "raw_data": {"message": {"content": content, **reply}},
    }


def test_anthropics_thinking_blocks_are_shown_and_a_reply_without_reasoning_shows_none(
    alice, alice_client
):
    run = _stored(
        alice,
        [
            _said("assistant", "Hello.", reasoning_content=None),
            _said("user", "Hi.", reasoning_content=""),
            _said(
                "assistant",
                "Let me check.",
                thinking_blocks=[
                    {
                        "type": "thinking",
                        "thinking": "The <user> wants a refund.",
                        "signature": "s",
                    },
                    {"type": "redacted_thinking", "data": "opaque"},
                ],
            ),
        ],
    )
    from apps.runs.presenters import reasoning_roles

    page = alice_client.get(f"/runs/{run.pk}/").content.decode()

    assert len(details_of(page)) == 1
    assert "The &lt;user&gt; wants a refund." in page
    assert "(1 thinking block redacted by the provider)" in page
    # Only litellm's reasoning_content says a role's tokens include reasoning (litellm
    # fills it from Anthropic's thinking too); an empty or null one is no reasoning.
    assert reasoning_roles(run) == []
    assert 'data-testid="cost-reasoning"' not in page


def test_reasoning_in_chinese_is_counted_in_characters(alice, alice_client):
    run = _stored(
        alice, [_said("assistant", "好的。", reasoning_content="用户想要退款，我先查一下订单。")]
    )

    page = alice_client.get(f"/runs/{run.pk}/").content.decode()

    assert "Reasoning · 15 characters" in page


def test_a_person_playing_the_agent_never_reads_the_customers_reasoning_until_the_end(
    alice, alice_client
):
    from apps.runs.presenters import event_html

    run = _stored(
        alice,
        [
            _said("assistant", "Hi! How can I help you today?"),
            _said("user", "I lost my bag.", reasoning_content="Do not give my user id yet."),
        ],
    )
    Run.objects.filter(pk=run.pk).update(kind=Run.Kind.HUMAN, status=Run.Status.RUNNING)
    customer = RunEvent.objects.get(run=run, seq=1)

    # The socket's partial and the run page: as τ²'s agent, nothing of it.
    assert "Do not give my user id yet." not in event_html(customer)
    assert (
        "Do not give my user id yet." not in alice_client.get(f"/runs/{run.pk}/").content.decode()
    )

    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED)
    customer = RunEvent.objects.get(run=run, seq=1)
    assert "Do not give my user id yet." in event_html(customer)
    assert "Do not give my user id yet." in alice_client.get(f"/runs/{run.pk}/").content.decode()
