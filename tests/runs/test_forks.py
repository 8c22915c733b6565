"""Forks on the production path: a finished run forked at one of its messages goes on
from the exact environment state the messages before it left (τ² replays their tool
calls), sends the model exactly what τ²'s own agent would send given that prefix, and
keeps its lineage. PostgreSQL, a Celery worker on Redis, the scripted LLM over HTTP.

alice forks her runs; bob is on her team; charlie is anonymous.

The parent sends the $150 certificate on every τ²: on 0.2 that is airline/27's gold run
(reward 1); 1.x's task 27 owes no certificate, so there the parent and every fork after
the write score 0, which is how a fork shows it kept the prefix's write.
"""

import json
import re

import pytest
from django.test import Client

from apps.runs.models import Run
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from tau2_env.engine.evaluation import trial_seeds
from tests.runs.conftest import (
    AGENT_MODEL,
    GOLD_TASK,
    finished,
    gold_script,
    is_agent_request,
    wait_for,
)
from tests.support.llm_server import RecordedRequest, error, text, tool_call
from tests.support.scripts import GOLD_CERTIFICATE

pytestmark = pytest.mark.slow

OTHER_CUSTOMER = "Qwen/Qwen3-235B-A22B-Instruct-2507"
# The parent run of airline/27: τ²'s greeting, the customer, get_user_details and its
# result, send_certificate (a write) and its result, the agent's answer, the customer's stop.
AFTER_THE_WRITE = 6
# What a run with the certificate scores: 0.2's task 27 expects it, 1.x's does not.
CERTIFICATE_REWARD = 1.0 if GOLD_CERTIFICATE else 0.0


def certificate_script(llm) -> None:
    """The parent's script: airline/27 with the $150 certificate, on every τ²."""
    gold_script(llm, certificate=True)


def certificate_run(user) -> Run:
    """alice's finished run of airline/27 (the certificate sent at messages 4-5)."""
    from apps.tasks.models import Task

    task = Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1])
    run = run_create(
        user=user, task=task, spec=RunSpec(agent=Side(AGENT_MODEL), max_steps=30, seed=7)
    )
    run = wait_for(run, finished, what="the parent run")
    assert run.status == Run.Status.COMPLETED and run.reward == CERTIFICATE_REWARD, run.error
    kinds = list(run.events.order_by("seq").values_list("kind", flat=True))
    assert kinds[AFTER_THE_WRITE - 2 : AFTER_THE_WRITE + 1] == ["agent", "tool_result", "agent"]
    return run


def certificate_of(run: Run) -> str:
    """The certificate id the run's send_certificate returned."""
    result = run.events.get(seq=AFTER_THE_WRITE - 1).message["content"]
    return re.search(r"certificate_\w+", result).group(0)


def fork(client, run: Run, at, **data):
    return client.post(f"/runs/{run.pk}/fork/", {"at": at, **data})


def forked(response) -> Run:
    assert response.status_code == 302, response.content.decode()[:3000]
    return Run.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))


def lookup_again_then_stop(llm, requests_after: int):
    """The fork's script: the agent looks the customer up again and answers; the
    customer stops. Records nothing itself: the server records every request."""

    def responder(request: RecordedRequest):
        if is_agent_request(request):
            last = request.messages[-1]
            if last.get("role") == "tool" and "Certificate" in (last.get("content") or ""):
                return tool_call("get_user_details", user_id="ethan_martin_2396")
            if last.get("role") == "tool":
                return text("Your certificate is on your profile. Anything else?")
            return error(500, "scripted LLM: unexpected agent turn")
        return text("No, that's all. ###STOP###")

    llm.responder = responder


def _wire(message: dict) -> tuple:
    """A chat message as the provider reads it: role, content, tool calls, answered call."""
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    return (message["role"], message.get("content") or None, calls, message.get("tool_call_id"))


def tau2_agent_request(run: Run, prefix: list[dict]) -> list[tuple]:
    """What τ²'s own LLMAgent sends the model given ``prefix`` as its history (what
    ``tau2 run`` sends after that conversation): its system prompt, then the messages."""
    from tau2.agent.llm_agent import LLMAgent
    from tau2.utils.llm_utils import to_litellm_messages

    from tau2_env.engine import environments, episodes

    environment = environments.fresh_environment(run.domain)
    agent = LLMAgent(
        tools=environment.get_tools(), domain_policy=environment.get_policy(), llm=AGENT_MODEL
    )
    state = agent.get_init_state(message_history=episodes.messages_from_json(prefix))
    return [_wire(m) for m in to_litellm_messages(state.system_messages + state.messages)]


def test_a_fork_after_a_write_sees_the_write_and_sends_tau2s_own_prefix(
    celery_worker, llm_server, alice, alice_client
):
    certificate_script(llm_server)
    parent = certificate_run(alice)
    certificate = certificate_of(parent)
    # Before the write the customer had no such certificate.
    assert certificate not in parent.events.get(seq=3).message["content"]
    seen = len(llm_server.chat_requests())
    lookup_again_then_stop(llm_server, seen)

    child = forked(fork(alice_client, parent, AFTER_THE_WRITE, continue_with="seed", seed=11))
    child = wait_for(child, finished, what="the fork")

    assert child.status == Run.Status.COMPLETED, child.error
    assert (child.parent, child.fork_seq, child.evaluation) == (parent, AFTER_THE_WRITE, None)
    events = list(child.events.order_by("seq"))
    prefix = [e.message for e in parent.events.filter(seq__lt=AFTER_THE_WRITE).order_by("seq")]
    assert [e.message for e in events[:AFTER_THE_WRITE]] == prefix
    # The fork's own lookup, after the fork point, finds the prefix's certificate.
    lookup = events[AFTER_THE_WRITE + 1]
    assert lookup.kind == "tool_result"
    assert certificate in lookup.message["content"]
    # τ² scored the fork's final database: one certificate, as 0.2's task expects (1.x's
    # expects none: the prefix's write is what fails it there).
    assert child.reward == CERTIFICATE_REWARD
    assert child.reward_info["db_check"]["db_match"] is GOLD_CERTIFICATE

    # Its first model call carried exactly what τ²'s LLMAgent sends with that history.
    first = next(r for r in llm_server.chat_requests()[seen:] if is_agent_request(r))
    assert [_wire(m) for m in first.messages] == tau2_agent_request(parent, prefix)
    assert len(first.messages) == 1 + AFTER_THE_WRITE  # the system prompt, then the prefix
    assert first.body["model"] == AGENT_MODEL
    # "Another seed": trial 0 of seed 11, as `tau2 run --seed 11` derives it, on every call.
    assert child.seed == trial_seeds(11, 1)[0] != parent.seed
    assert {r.body.get("seed") for r in llm_server.chat_requests()[seen:]} == {child.seed}
    # Usage counts the fork's own calls only; the prefix's were the parent's.
    assert all(e.prompt_tokens == 0 for e in events[:AFTER_THE_WRITE])
    assert child.prompt_tokens == sum(e.prompt_tokens for e in events if e.kind == "agent") > 0
    assert child.n_messages == len(events)


def test_a_fork_at_the_customers_message_lets_another_customer_model_answer(
    celery_worker, llm_server, alice, alice_client
):
    certificate_script(llm_server)
    parent = certificate_run(alice)
    last = parent.events.order_by("seq").last()
    assert last.kind == "customer"
    seen = len(llm_server.chat_requests())

    child = forked(
        fork(
            alice_client, parent, last.seq, continue_with="seed", seed=3, user_model=OTHER_CUSTOMER
        )
    )
    child = wait_for(child, finished, what="the fork")

    assert child.status == Run.Status.COMPLETED, child.error
    assert child.user_model == OTHER_CUSTOMER and child.agent_model == AGENT_MODEL
    first = llm_server.chat_requests()[seen]
    assert not is_agent_request(first) and first.body["model"] == OTHER_CUSTOMER
    assert child.events.get(seq=last.seq).kind == "customer"


def test_the_run_page_and_the_export_show_the_lineage(
    celery_worker, llm_server, alice, alice_client, bob_client
):
    certificate_script(llm_server)
    parent = certificate_run(alice)
    lookup_again_then_stop(llm_server, 0)
    child = forked(fork(bob_client, parent, AFTER_THE_WRITE, continue_with="seed", seed=5))
    assert child.created_by.username == "bob"
    wait_for(child, finished, what="the fork")

    page = alice_client.get(f"/runs/{parent.pk}/").content.decode()
    assert page.count('data-testid="fork-here"') == 5  # agent and customer lines, not 0
    assert f'href="/runs/{parent.pk}/fork/?at={AFTER_THE_WRITE}"' in page
    assert f'href="/runs/{child.pk}/"' in page and f"at message {AFTER_THE_WRITE}" in page

    page = alice_client.get(f"/runs/{child.pk}/").content.decode()
    assert f'forked from <a href="/runs/{parent.pk}/">run {parent.pk}</a>' in page
    assert f"ids={parent.pk},{child.pk}&amp;from={AFTER_THE_WRITE}" in page

    listed = alice_client.get("/runs/").content.decode()
    assert listed.count('data-testid="fork-of"') == 1 and f"fork of #{parent.pk}" in listed

    exported = alice_client.get(f"/runs/{child.pk}.json").json()
    assert (exported["parent"], exported["fork_seq"]) == (parent.pk, AFTER_THE_WRITE)
    assert alice_client.get(f"/runs/{parent.pk}.json").json()["parent"] is None

    # Compared, parent and fork are aligned from the fork point: the shared calls (and
    # the expected actions they did) are left out; the fork's second lookup stands alone.
    compared = alice_client.get(f"/runs/compare/?ids={parent.pk},{child.pk}")
    assert b'data-testid="compare-from-fork"' in compared.content
    rows = [row for row in compared.context["rows"] if row["number"] is not None]
    assert [[cell["gap"] for cell in row["cells"]] for row in rows] == [[True, False]]
    assert rows[0]["cells"][1]["call"]["name"] == "get_user_details"

    # "Another agent model" needs one; with one, that model goes on from the fork point.
    refused = fork(alice_client, parent, AFTER_THE_WRITE, continue_with="model")
    assert refused.status_code == 400 and b"Pick the agent model" in refused.content
    gold_script(llm_server)
    qwen = "Qwen/Qwen3-32B:cerebras"
    other = forked(fork(alice_client, parent, 2, continue_with="model", agent_model=qwen))
    other = wait_for(other, finished, what="the fork by another model")
    assert (other.agent_model, other.fork_seq, other.reward) == (qwen, 2, 1.0), other.error
    assert {r.body["model"] for r in llm_server.chat_requests() if is_agent_request(r)} >= {qwen}

    form = alice_client.get(f"/runs/{parent.pk}/fork/?at={AFTER_THE_WRITE}")
    assert form.status_code == 200 and b'data-testid="fork-form"' in form.content


def test_a_fork_taken_over_as_play_lets_the_forker_act_on_the_prefixs_state(
    celery_worker, llm_server, alice, alice_client, bob_client
):
    certificate_script(llm_server)
    parent = certificate_run(alice)
    certificate = certificate_of(parent)

    response = fork(alice_client, parent, AFTER_THE_WRITE, continue_with="play")
    session = forked(response)
    assert response["Location"] == f"/play/{session.pk}/"
    assert session.kind == Run.Kind.HUMAN and session.created_by == alice
    assert session.play_phase == Run.PlayPhase.YOUR_TURN  # the agent's line is hers to say
    assert (session.parent, session.fork_seq) == (parent, AFTER_THE_WRITE)
    page = alice_client.get(f"/play/{session.pk}/").content.decode()
    opening = parent.events.get(seq=1).message["content"]
    assert opening in page  # the prefix is shown

    # bob may not act in alice's session.
    lookup = {"name": "get_user_details", "arguments": json.dumps({"user_id": "ethan_martin_2396"})}
    refused = bob_client.post(f"/play/{session.pk}/tool/", lookup, HTTP_ACCEPT="application/json")
    assert refused.status_code in (403, 404)
    assert session.events.count() == AFTER_THE_WRITE

    answer = alice_client.post(f"/play/{session.pk}/tool/", lookup, HTTP_ACCEPT="application/json")
    assert answer.status_code == 200, answer.content.decode()[:2000]
    result = session.events.get(seq=AFTER_THE_WRITE + 1)
    assert result.kind == "tool_result" and certificate in result.message["content"]

    # bob forking alice's run as play gets a session of his own, not hers.
    own = forked(fork(bob_client, parent, AFTER_THE_WRITE, continue_with="play"))
    assert own.created_by.username == "bob" and own.pk != session.pk


def test_a_fork_as_play_at_the_customers_line_lets_the_customer_answer_first(
    celery_worker, llm_server, alice, alice_client
):
    certificate_script(llm_server)
    parent = certificate_run(alice)
    last = parent.events.order_by("seq").last()
    llm_server.responder = lambda request: text("Actually, one more question.")

    session = forked(fork(alice_client, parent, last.seq, continue_with="play"))
    session = wait_for(
        session, lambda r: r.play_phase == Run.PlayPhase.YOUR_TURN, what="the customer's answer"
    )

    assert session.events.get(seq=last.seq).message["content"] == "Actually, one more question."


def test_a_fork_point_no_fork_may_start_at_is_refused_not_an_error(
    celery_worker, llm_server, alice, alice_client
):
    certificate_script(llm_server)
    parent = certificate_run(alice)

    # Past the end, negative, not a number, none, τ²'s greeting, a tool's result.
    for at in ("99", "-1", "x", "", "0", "3", "99999999999999999999"):
        for response in (
            alice_client.get(f"/runs/{parent.pk}/fork/", {"at": at}),
            fork(alice_client, parent, at, continue_with="seed", seed=1),
        ):
            assert response.status_code == 400, (at, response.content.decode()[:2000])
            assert b'data-testid="fork-refused"' in response.content
    assert not Run.objects.filter(parent=parent).exists()


def test_only_people_who_may_start_runs_fork_and_only_finished_runs(
    llm_server, alice, alice_client
):
    from tests.support.scripts import queued_run

    running = queued_run(alice)
    assert fork(alice_client, running, 1, continue_with="seed", seed=1).status_code == 400
    assert alice_client.get("/runs/999999/fork/?at=1").status_code == 404
    charlie = Client()
    response = charlie.post(f"/runs/{running.pk}/fork/", {"at": 1, "continue_with": "play"})
    assert response.status_code == 302 and "/accounts/sign-in/" in response["Location"]
    assert not Run.objects.filter(parent=running).exists()


def test_a_fork_is_no_sample_of_what_a_whole_run_costs(alice):
    from decimal import Decimal

    from apps.evaluations.estimates import evaluation_cost_estimate
    from tests.support.scripts import queued_run

    runs = [queued_run(alice) for _ in range(4)]
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(
        status=Run.Status.COMPLETED, prompt_tokens=100_000, completion_tokens=1_000
    )
    Run.objects.filter(pk=runs[3].pk).update(parent=runs[0], fork_seq=2, prompt_tokens=10)

    estimate = evaluation_cost_estimate(domain="airline", runs=1, prices=(Decimal(1), Decimal(1)))

    assert "last 3 completed runs" in estimate.basis
    assert estimate.low == estimate.high  # the three whole runs alike, the fork left out
