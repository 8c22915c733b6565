"""Play sessions on the production path: PostgreSQL, a real Celery worker on Redis, the
scripted customer over real HTTP, τ²'s own environment, customer and evaluator.

alice plays; bob is on her team; charlie is anonymous.
"""

import json

import pytest
from django.test import Client
from django.urls import reverse

from apps.runs.models import Run, RunEvent
from tests.play.conftest import customer_says
from tests.runs.conftest import ALICE_TOKEN, finished, wait_for
from tests.support.llm_server import delayed, error
from tests.support.scripts import GOLD_CERTIFICATE, GOLD_CLOSING

pytestmark = pytest.mark.slow

JSON = {"HTTP_ACCEPT": "application/json"}
OPENING = "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396."


def start(client, *, domain="airline", task="27") -> Run:
    response = client.post("/play/new/", {"domain": domain, "task_id": task, "split": "base"})
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
    assert response["Location"] == f"/play/{run.pk}/"
    return run


def kinds(run) -> list[str]:
    return list(run.events.order_by("seq").values_list("kind", flat=True))


def customer_answered(count: int):
    return lambda run: (
        run.events.filter(kind=RunEvent.Kind.CUSTOMER).count() >= count and (run.worker == "")
    )


def tool(client, run, name, **arguments):
    return client.post(
        f"/play/{run.pk}/tool/", {"name": name, "arguments": json.dumps(arguments)}, **JSON
    )


def test_alice_plays_task_27_to_reward_one_on_her_own_token(
    celery_worker, llm_server, alice, alice_client
):
    customer_says(llm_server, OPENING, "Great, thank you!")
    run = start(alice_client)
    assert run.kind == Run.Kind.HUMAN and run.status == Run.Status.RUNNING
    assert run.created_by == alice and run.agent_model == "human"

    run = wait_for(run, customer_answered(1), what="the customer's opening message")
    assert kinds(run) == ["agent", "customer"]  # τ²'s greeting, then the customer
    assert run.events.get(seq=1).message["content"] == OPENING

    response = tool(alice_client, run, "get_user_details", user_id="ethan_martin_2396")
    assert response.status_code == 200, response.content
    body = response.json()
    assert [e["seq"] for e in body["events"]] == [2, 3]
    assert "ethan_martin_2396" in body["events"][1]["html"]
    assert body["state"]["phase"] == "your_turn"

    if GOLD_CERTIFICATE:  # τ² 0.2's task 27 owes the $150 certificate; 1.x's none
        response = tool(
            alice_client, run, "send_certificate", user_id="ethan_martin_2396", amount=150
        )
        assert response.status_code == 200, response.content

    response = alice_client.post(f"/play/{run.pk}/say/", {"text": GOLD_CLOSING}, **JSON)
    assert response.status_code == 200
    assert response.json()["events"][0]["seq"] == 4 + 2 * GOLD_CERTIFICATE
    run = wait_for(run, customer_answered(2), what="the customer's reply")

    response = alice_client.post(f"/play/{run.pk}/end/", **JSON)
    assert response.status_code == 200
    assert response.json()["state"]["phase"] in ("scoring", "ended")
    run = wait_for(run, finished)

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.reward == 1.0
    assert run.termination_reason == "agent_stop"
    assert run.reward_info["db_check"]["db_match"] is True
    calls = 1 + GOLD_CERTIFICATE  # the lookup, and (0.2) the certificate
    assert kinds(run) == [
        "agent",
        "customer",
        *["agent", "tool_result"] * calls,
        "agent",
        "customer",
        "agent",  # the agent's stop
    ]
    assert run.events.order_by("-seq").first().message["content"] == "###STOP###"
    assert run.n_tool_calls == calls
    requests = llm_server.chat_requests()
    assert len(requests) == 2  # the customer's two turns; airline/27 needs no judge
    assert all(r.token == ALICE_TOKEN for r in requests)
    assert ALICE_TOKEN not in json.dumps(run.provenance) + json.dumps(run.reward_info)

    page = alice_client.get(f"/play/{run.pk}/").content.decode()
    assert 'data-testid="reward"' in page and "1.00" in page
    # Ended: no controls, and the player's done() is a mark, not an "Agent: STOP" bubble.
    assert 'data-testid="play-controls"' not in page and 'data-testid="say"' not in page
    assert "The agent ended the conversation" in page and "###STOP###" not in page
    # The customer's two turns ran on alice's token: they are counted (priced or not).
    run.refresh_from_db()
    customer = run.events.filter(kind="customer")
    assert run.user_prompt_tokens == sum(e.prompt_tokens for e in customer) > 0
    export = alice_client.get(f"/runs/{run.pk}.json")
    assert export.status_code == 200


def test_a_tool_error_is_the_tools_answer_and_the_conversation_goes_on(
    celery_worker, llm_server, alice, alice_client
):
    customer_says(llm_server, OPENING, "Let me check my id.")
    run = wait_for(start(alice_client), customer_answered(1))

    response = tool(alice_client, run, "get_user_details", user_id="nobody_0000")

    assert response.status_code == 200
    result = run.events.get(seq=3)
    assert result.kind == RunEvent.Kind.TOOL_RESULT and result.message["error"] is True
    assert "tool error" in response.json()["events"][1]["html"]
    assert response.json()["state"]["phase"] == "your_turn"
    response = alice_client.post(f"/play/{run.pk}/say/", {"text": "Could you check it?"}, **JSON)
    assert response.status_code == 200
    wait_for(run, customer_answered(2))


def test_ill_typed_or_missing_arguments_are_refused_and_nothing_is_stored(
    celery_worker, llm_server, alice, alice_client
):
    customer_says(llm_server, OPENING)
    run = wait_for(start(alice_client), customer_answered(1))

    bad_type = tool(alice_client, run, "send_certificate", user_id="ethan_martin_2396", amount="a")
    missing = tool(alice_client, run, "send_certificate", amount=150)
    unknown = tool(alice_client, run, "launch_rocket")
    not_json = alice_client.post(
        f"/play/{run.pk}/tool/", {"name": "get_user_details", "arguments": "{user"}, **JSON
    )

    assert bad_type.status_code == 400
    assert bad_type.json()["errors"] == {"amount": "Must be an integer."}
    assert missing.status_code == 400 and missing.json()["errors"] == {"user_id": "Required."}
    assert unknown.status_code == 400 and "launch_rocket" in unknown.json()["errors"]["name"]
    assert not_json.status_code == 400 and "arguments" in not_json.json()["errors"]
    run.refresh_from_db()
    assert run.events.count() == 2 and run.n_tool_calls == 0
    assert run.worker == ""


def test_actions_wait_for_the_customer_and_stop_after_the_end(
    celery_worker, llm_server, alice, alice_client
):
    customer_says(llm_server, OPENING, delayed("One moment…", 1.5))
    run = wait_for(start(alice_client), customer_answered(1))

    first = alice_client.post(f"/play/{run.pk}/say/", {"text": "Your user id?"}, **JSON)
    again = alice_client.post(f"/play/{run.pk}/say/", {"text": "Hello?"}, **JSON)
    tool_meanwhile = tool(alice_client, run, "get_user_details", user_id="ethan_martin_2396")

    assert first.status_code == 200
    assert again.status_code == 409
    assert again.json()["message"] == "The customer is still answering; wait for their reply."
    assert tool_meanwhile.status_code == 409
    assert again.json()["state"]["phase"] == "customer"
    run = wait_for(run, customer_answered(2))
    assert kinds(run) == ["agent", "customer", "agent", "customer"]

    alice_client.post(f"/play/{run.pk}/end/", **JSON)
    run = wait_for(run, finished)
    # Nothing done: 0.2's task 27 owed a certificate (0); 1.x's owes none (1).
    assert run.status == Run.Status.COMPLETED and run.reward == (0.0 if GOLD_CERTIFICATE else 1.0)
    count = run.events.count()
    for path, data in (("say", {"text": "Still there?"}), ("end", {}), ("retry", {})):
        response = alice_client.post(f"/play/{run.pk}/{path}/", data, **JSON)
        assert response.status_code == 409, path
        assert response.json()["message"] == "This conversation has ended."
    response = tool(alice_client, run, "get_user_details", user_id="ethan_martin_2396")
    assert response.status_code == 409
    assert run.events.count() == count


def test_a_failed_customer_turn_is_shown_and_can_be_asked_again(
    celery_worker, llm_server, alice, alice_client
):
    customer_says(llm_server, error(402, "no credits"), OPENING)
    run = start(alice_client)
    run = wait_for(run, lambda r: r.worker == "" and r.error, what="the failed turn")
    assert run.status == Run.Status.RUNNING and run.events.count() == 0
    assert "credits" in run.error and ALICE_TOKEN not in run.error
    page = alice_client.get(f"/play/{run.pk}/").content.decode()
    assert 'data-testid="retry"' in page

    response = alice_client.post(f"/play/{run.pk}/retry/", **JSON)

    assert response.status_code == 200
    run = wait_for(run, customer_answered(1))
    assert kinds(run) == ["agent", "customer"] and run.error == ""


def test_only_the_player_acts_on_a_session(
    celery_worker, llm_server, alice, alice_client, bob_client
):
    customer_says(llm_server, OPENING)
    run = wait_for(start(alice_client), customer_answered(1))

    for path, data in (("say", {"text": "hi"}), ("end", {}), ("retry", {}), ("state", None)):
        response = (
            bob_client.get(f"/play/{run.pk}/{path}/")
            if data is None
            else bob_client.post(f"/play/{run.pk}/{path}/", data, **JSON)
        )
        assert response.status_code == 403, path
    assert tool(bob_client, run, "get_user_details", user_id="x").status_code == 403
    # bob follows it read-only on the run page
    response = bob_client.get(f"/play/{run.pk}/")
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert bob_client.get(f"/runs/{run.pk}/").status_code == 200
    assert run.events.count() == 2


def test_charlie_is_sent_to_sign_in(alice, alice_client, llm_server):
    charlie = Client()
    for response in (
        charlie.get("/play/"),
        charlie.get("/play/new/?domain=airline&task=27"),
        charlie.post("/play/new/", {"domain": "airline", "task_id": "27", "split": "base"}),
        charlie.post("/play/1/say/", {"text": "hi"}),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("accounts:signin"))
    assert not Run.objects.exists()


def test_the_play_page_lists_open_sessions_and_resumes_them(
    celery_worker, llm_server, alice, alice_client
):
    customer_says(llm_server, OPENING)
    run = wait_for(start(alice_client), customer_answered(1))

    index = alice_client.get("/play/").content.decode()
    page = alice_client.get(f"/play/{run.pk}/").content.decode()

    assert f'href="/play/{run.pk}/"' in index
    assert OPENING.split(",")[0] in page
    assert 'data-last-seq="1"' in page
    assert "get_user_details" in page  # the tool form's schemas
    assert 'data-testid="policy"' in page


def test_a_random_task_is_picked_reproducibly_from_a_split(
    celery_worker, llm_server, alice, alice_client
):
    customer_says(llm_server, OPENING, OPENING)
    first = alice_client.post("/play/new/", {"domain": "airline", "split": "test", "seed": 11})
    second = alice_client.post("/play/new/", {"domain": "airline", "split": "test", "seed": 11})
    runs = list(Run.objects.order_by("pk"))
    assert first.status_code == second.status_code == 302
    assert runs[0].task_id == runs[1].task_id
    assert runs[0].task.splits.filter(name="test").exists()
    for run in runs:
        wait_for(run, customer_answered(1))
