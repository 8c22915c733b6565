"""Scripted models for runs and evaluations on the production path.

The scripted LLM plays both τ²'s agent and the customer: requests that carry the
domain's tools are the agent's, the others the customer's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

import pytest

from tau2_env.generations import tau2_generation
from tests.support.llm_server import RecordedRequest, Reply, ScriptedLLM, error, text, tool_call
from tests.support.nl_judge import is_judge_request, judge_reply

AGENT_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash:novita"
GOLD_TASK = ("airline", "27")  # get_user_details, then send_certificate (a write)
# τ² 0.2's airline/27 expects the $150 certificate; 1.0.1's expects none (the customer is
# not owed one), so there the gold conversation looks the customer up and says no.
GOLD_CERTIFICATE = tau2_generation() == "0.2"
# The agent's tool calls of the gold conversation, in order.
GOLD_CALLS: tuple[tuple[str, dict], ...] = (
    ("get_user_details", {"user_id": "ethan_martin_2396"}),
    *((("send_certificate", {"user_id": "ethan_martin_2396", "amount": 150}),) * GOLD_CERTIFICATE),
)
# The gold conversation's closing agent message's seq: after τ²'s greeting, the customer's
# opening and each call with its result (6 on τ² 0.2, 4 on 1.x).
GOLD_CLOSING_SEQ = 2 + 2 * len(GOLD_CALLS)
_SENT = "I have sent you a $150 certificate. Anything else?"
GOLD_CLOSING = (
    _SENT
    if GOLD_CERTIFICATE
    else "I'm sorry, your delay does not qualify for a certificate. Anything else?"
)


def is_agent_request(request: RecordedRequest) -> bool:
    return bool(request.body.get("tools")) and any(
        t["function"]["name"] == "get_user_details" for t in request.body["tools"]
    )


def play(
    llm: ScriptedLLM,
    *,
    agent: list[Reply | str],
    customer: list[Reply | str],
    delay: float = 0.0,
) -> None:
    """Script both sides: the agent's and the customer's replies, each in order."""
    agent_replies, customer_replies = list(agent), list(customer)

    def responder(request: RecordedRequest):
        if delay:
            time.sleep(delay)
        queue = agent_replies if is_agent_request(request) else customer_replies
        if not queue:
            return error(500, "scripted LLM: that side has no reply left")
        return queue.pop(0)

    llm.responder = responder


def gold_script(
    llm: ScriptedLLM, *, delay: float = 0.0, certificate: bool = GOLD_CERTIFICATE
) -> None:
    """Task airline/27 solved: the agent looks the customer up and sends the certificate
    (τ² 0.2) or says none is due (1.x). ``certificate=True`` sends the $150 certificate on
    either generation (on 1.x a write its task 27 does not expect).

    Stateless: each reply follows from the conversation in the request, so a hop that is
    asked again (a worker died before storing it) gets the same answer.
    """

    def responder(request: RecordedRequest):
        if delay:
            time.sleep(delay)
        if is_agent_request(request):
            called = [
                call["function"]["name"]
                for message in request.messages
                if message.get("role") == "assistant"
                for call in message.get("tool_calls") or []
            ]
            if "get_user_details" not in called:
                return tool_call("get_user_details", user_id="ethan_martin_2396")
            if certificate and "send_certificate" not in called:
                return tool_call("send_certificate", user_id="ethan_martin_2396", amount=150)
            return text(_SENT if certificate else GOLD_CLOSING)
        if "certificate" in request.text():
            return text("Thanks, that's all. ###STOP###")
        return text("Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396.")

    llm.responder = responder


# banking_knowledge's task the banking script solves (τ² 1.x): the customer applies for the
# card the agent recommends, scored on the database.
BANKING_TASK = ("banking_knowledge", "task_001")


def banking_agent_tools(llm: ScriptedLLM) -> set[str]:
    """Every tool offered to banking_knowledge's agent in ``llm``'s requests (the agent's
    requests are those that offer ``transfer_to_human_agents``)."""
    return {
        name
        for request in llm.chat_requests()
        if "transfer_to_human_agents" in request.tool_names
        for name in request.tool_names
    }


def banking_script(llm: ScriptedLLM) -> None:
    """banking_knowledge/task_001 solved, statelessly: the agent looks in the knowledge
    base with its configuration's tool, when it has one (``KB_search``, ``grep``), then
    recommends the Gold Rewards Card; the customer applies with their own tool and stops.
    The agent's requests are those that offer ``transfer_to_human_agents``; τ²'s NL judge
    (task_102's reward basis) finds every assertion met."""

    def responder(request: RecordedRequest):
        if is_judge_request(request):
            return judge_reply(request)
        said = [m for m in request.messages if m.get("role") != "system"]
        tools = set(request.tool_names)
        called = {
            call["function"]["name"]
            for m in said
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
        }
        if "transfer_to_human_agents" in tools:  # the agent
            if "KB_search" in tools and "KB_search" not in called:
                return tool_call("KB_search", query="credit card cash back annual fee")
            if "grep" in tools and "grep" not in called:
                return tool_call("grep", pattern="Rewards Card")
            return text("The Gold Rewards Card gives the most cash back with no annual fee.")
        if any(m.get("role") == "tool" for m in said):
            return text("Thanks, I applied. ###STOP###")
        if "apply_for_credit_card" not in called and "Gold Rewards" in json.dumps(said):
            return tool_call(
                "apply_for_credit_card",
                card_type="Gold Rewards Card",
                customer_name="Sarah Bosch",
                annual_income=100000,
                rho_bank_subscription=True,
            )
        return text("Hi, I'm looking for a credit card for my everyday purchases.")

    llm.responder = responder


def banking_gold_script(llm: ScriptedLLM, *, calls: Sequence[tuple[str, dict]]) -> None:
    """A banking_knowledge task whose expected actions are all the agent's, solved
    statelessly: the agent looks in the knowledge base with its configuration's tool,
    when it has one (``KB_search``, ``grep``), then makes ``calls`` (name, arguments) in
    order, then says it is done; the customer asks for help and stops once told so. The
    agent's requests are those that offer ``transfer_to_human_agents``."""
    closing = "Your request is done: everything is in place."

    def responder(request: RecordedRequest):
        tools = set(request.tool_names)
        if "transfer_to_human_agents" in tools:  # the agent
            made = [
                call["function"]["name"]
                for m in request.messages
                if m.get("role") == "assistant"
                for call in m.get("tool_calls") or []
            ]
            searched = [name for name in made if name in ("KB_search", "grep")]
            if "KB_search" in tools and not searched:
                return tool_call("KB_search", query="replace a credit card")
            if "grep" in tools and not searched:
                return tool_call("grep", pattern="replacement")
            done = len(made) - len(searched)
            if done < len(calls):
                name, arguments = calls[done]
                return tool_call(name, **arguments)
            return text(closing)
        if closing in request.text():
            return text("Thanks, that's all. ###STOP###")
        return text("Hi, I need help with my credit card, please.")

    llm.responder = responder


def wait_for(run, predicate: Callable, *, timeout: float = 60.0, what: str = "the run"):
    """Poll the run until ``predicate(run)``; fails with the run's state on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        run.refresh_from_db()
        if predicate(run):
            return run
        if time.monotonic() > deadline:
            pytest.fail(
                f"{what} did not happen: status={run.status} error={run.error!r} "
                f"events={run.events.count()}"
            )
        time.sleep(0.1)


def finished(run) -> bool:
    return run.is_final


def refresh_agent_models():
    """The Inference Providers catalogue, as the scripted router lists it."""
    from apps.inference.services import catalogue_refresh

    report = catalogue_refresh()
    assert report.source == "router", report.summary()
    return report


def queued_run(user, *, task: tuple[str, str] = GOLD_TASK, max_steps: int = 30):
    """A model run of ``task`` by ``user``, queued and not sent to any worker: a test
    hands it to a worker (or calls the runner) itself."""
    from apps.runs.models import Run
    from apps.tasks.models import Task

    row = Task.objects.get(domain_id=task[0], task_id=task[1])
    return Run.objects.create(
        task=row,
        domain=row.domain_id,
        created_by=user,
        agent_model=AGENT_MODEL,
        user_model="deepseek-ai/DeepSeek-V4.1-Flash",
        max_steps=max_steps,
    )


def run_start(client, *, task=GOLD_TASK, agent_model=AGENT_MODEL, max_steps=30, seed=7):
    """Start a model run as ``client``'s person through the run form; returns the run."""
    from apps.runs.models import Run

    response = client.post(
        "/runs/new/",
        {
            "domain": task[0],
            "task_id": task[1],
            "agent_model": agent_model,
            "user_model": "deepseek-ai/DeepSeek-V4.1-Flash",
            "max_steps": max_steps,
            "seed": seed,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    return Run.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
