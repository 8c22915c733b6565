"""Issue 34's "Done when", first half, as one test: from a shell with only a studio key,
the CI gate starts a 10-task × 2-trial evaluation of a connection's model, waits, and
exits 1 because it is worse than the pinned baseline, while a local webhook receiver gets
a signed "regressed" message.

The tasks are the train split's first ten whose expected actions write nothing and whose
customer needs to be told nothing: an agent that politely declines everything leaves the
database as τ² expects and scores 1 on them (the baseline); one that sends a certificate
nobody asked for changes it and scores 0 (the regression)."""

from __future__ import annotations

import json

import pytest

from apps.agents.services import api_key_create
from apps.evaluations.models import Baseline, Evaluation
from apps.notifications.models import Event
from tests.notifications.support import docs_verify, subscribed
from tests.support.ci_gate import gate, pin
from tests.support.connections import CONNECTION_KEY, CONNECTION_MODEL, openai_compatible_connection
from tests.support.llm_server import RecordedRequest, ScriptedLLM, text, tool_call
from tests.support.scripts import is_agent_request

DECLINE = "I'm sorry, I cannot change anything on this booking."
STRANGER = "ethan_martin_2396"  # a real customer of the airline's database


def read_only_tasks(count: int = 10) -> list[str]:
    """The first ``count`` train tasks whose expected actions change nothing (the task
    explorer's "read-only") and that leave the agent nothing it must say: τ²'s DB and
    COMMUNICATE checks both pass when nothing is done."""
    from apps.tasks.models import Task
    from tau2_env.engine import catalog

    read_only = set(
        Task.objects.filter(domain_id="airline", changes_db=False).values_list("task_id", flat=True)
    )
    found = [
        task_id
        for task_id in catalog.get_domain("airline").splits["train"]
        if task_id in read_only
        and not catalog.get_tau2_task("airline", task_id).evaluation_criteria.communicate_info
    ]
    assert len(found) >= count, found
    return found[:count]


def _said(request: RecordedRequest) -> str:
    return str((request.messages[-1] if request.messages else {}).get("content") or "")


def declining(llm: ScriptedLLM, *, meddling: bool) -> None:
    """The agent declines (after, with ``meddling``, sending a stranger a certificate);
    the customer asks once and leaves when declined."""

    def responder(request: RecordedRequest):
        if is_agent_request(request):
            sent = any(
                call["function"]["name"] == "send_certificate"
                for message in request.messages
                for call in message.get("tool_calls") or []
            )
            if meddling and not sent:
                return tool_call("send_certificate", user_id=STRANGER, amount=100)
            return text(DECLINE)
        if DECLINE in _said(request):
            return text("Okay, thanks anyway. ###STOP###")
        return text("Hi, I would like to change my reservation.")

    llm.responder = responder


@pytest.mark.slow
def test_the_gate_fails_a_regressed_evaluation_of_a_connections_model_and_a_hook_hears_it(
    celery_worker, asgi_server, llm_server, alice, subscriptions_cleared, receiver, tmp_path
):
    key = api_key_create(user=alice, name="ci", scope="start")[1]
    ours = openai_compatible_connection(llm_server, by=alice, owner=alice, name="Our vLLM")
    _, secret = subscribed(alice, receiver.url, events=[Event.REGRESSED])
    tasks = read_only_tasks()
    settings = tmp_path / "nightly.toml"
    settings.write_text(
        f'server = "{asgi_server.url}"\n'
        "timeout_minutes = 8\n\n"
        "[evaluation]\n"
        'domain = "airline"\n'
        'split = "train"\n'
        f"task_ids = {json.dumps(tasks)}\n"
        "num_trials = 2\n"
        f'agent_model = "@{ours.slug}/{CONNECTION_MODEL}"\n'
        'name = "nightly"\n'
    )

    declining(llm_server, meddling=False)
    first = gate(settings, key=key, run_id="1", timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "pass^1 = 1.000" in first.stdout and "pass^2 = 1.000" in first.stdout
    baseline = Evaluation.objects.get()
    assert pin(asgi_server, baseline.pk, key=key)["is_baseline"] is True

    declining(llm_server, meddling=True)
    second = gate(settings, key=key, run_id="2", timeout=600)

    assert second.returncode == 1, second.stdout + second.stderr
    assert "pass^1 = 0.000" in second.stdout
    assert "Verdict: WORSE" in second.stdout
    later = Evaluation.objects.exclude(pk=baseline.pk).get()
    assert (later.runs.count(), later.agent_connection_id) == (20, ours.pk)
    assert Baseline.objects.get().evaluation == baseline
    # The agent ran on the connection's key, never on a person's token.
    agent_tokens = {r.token for r in llm_server.chat_requests() if is_agent_request(r)}
    assert agent_tokens == {CONNECTION_KEY}
    [got] = receiver.wait_for(1)
    assert docs_verify()(secret, got.headers, got.body)
    assert got.headers["x-tau2-event"] == "evaluation.regressed"
    body = json.loads(got.body)
    assert body["evaluation"]["id"] == later.pk and body["verdict"]["outcome"] == "worse"
    assert body["verdict"]["baseline"] == baseline.pk
    assert sorted(body["verdict"]["regressed"]) == sorted(tasks)
    assert key not in got.body.decode() and CONNECTION_KEY not in got.body.decode()
