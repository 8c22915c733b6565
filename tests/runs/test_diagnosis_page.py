"""The diagnosis of a scored run on its page, in its JSON export and on compare.

alice runs airline/27 on the production path (form, Celery worker, scripted models):
once as expected, once with a $149 certificate: on τ² 0.2 instead of the $150 one the
task expects, on 1.x where it expects none (an extra write). bob, on her team, sees the
same diagnosis; a run without a score has none.
"""

from __future__ import annotations

import json
import re

from apps.runs.models import Run
from tests.support.llm_server import text, tool_call
from tests.support.scripts import (
    AGENT_MODEL,
    GOLD_CALLS,
    GOLD_CERTIFICATE,
    GOLD_TASK,
    finished,
    gold_script,
    play,
    wait_for,
)

USER = "ethan_martin_2396"
# The $149 certificate's step: 0.2's task 27 expects $150 (different arguments, and the
# expected one never sent); 1.x's expects none (an extra write, nothing missing).
WRONG = "wrong_args" if GOLD_CERTIFICATE else "extra_write"
# The worker's first run waits for it to start; on a machine shared with other suites
# that has taken over a minute.
WAIT = 180.0


def _start(client) -> Run:
    response = client.post(
        "/runs/new/",
        {
            "domain": GOLD_TASK[0],
            "task_id": GOLD_TASK[1],
            "agent_model": AGENT_MODEL,
            "user_model": "deepseek-ai/DeepSeek-V4.1-Flash",
            "max_steps": 30,
            "seed": 7,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    return Run.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))


def _wrong_amount_run(llm_server, client) -> Run:
    play(
        llm_server,
        agent=[
            tool_call("get_user_details", user_id=USER),
            tool_call("send_certificate", user_id=USER, amount=149),
            text("I have sent you a certificate."),
        ],
        customer=[
            text(f"My flight was delayed; I'm {USER}."),
            text("Thanks. ###STOP###"),
        ],
    )
    run = wait_for(_start(client), finished, timeout=WAIT)
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.reward == 0.0
    return run


def _badges(page: str) -> list[str]:
    return re.findall(r'data-testid="trace-badge" data-kind="([a-z_]+)"', page)


def test_a_failed_run_shows_the_wrong_field_and_the_first_divergent_write(
    celery_worker, llm_server, alice, alice_client, bob_client
):
    run = _wrong_amount_run(llm_server, alice_client)

    for client in (alice_client, bob_client):
        page = client.get(f"/runs/{run.pk}/").content.decode()
        assert 'data-testid="diagnosis"' in page
        [path] = re.findall(r'data-testid="db-change" data-path="([^"]+)"', page)
        assert path.startswith(f"users.{USER}.payment_methods.certificate_")
        assert path.endswith(".amount") == GOLD_CERTIFICATE
        assert f'data-kind="{"changed" if GOLD_CERTIFICATE else "added"}"' in page
        divergent = re.search(r'data-testid="first-divergent">(.*?)</p>', page, re.S).group(1)
        assert "send_certificate" in divergent
        # 0.2 names the argument that differs; 1.x has no expected certificate to differ from.
        assert ("amount" in divergent) == GOLD_CERTIFICATE
        assert _badges(page) == ["match", WRONG]
        if GOLD_CERTIFICATE:
            assert "write with different arguments" in page
            assert 'data-kind="missing"' in page  # the expected $150 certificate, never sent
        else:
            assert "extra write" in page and 'data-kind="missing"' not in page
        assert "css/diagnosis.css" in page and "<script>" not in page


def test_the_json_export_carries_the_diagnosis_and_the_tau2_export_does_not(
    celery_worker, llm_server, alice, alice_client
):
    run = _wrong_amount_run(llm_server, alice_client)

    payload = json.loads(alice_client.get(f"/runs/{run.pk}.json").content)
    diagnosis = payload["diagnosis"]
    assert diagnosis["db_match"] is False and diagnosis["db_scored"] is True
    [change] = diagnosis["changes"]
    if GOLD_CERTIFICATE:
        assert (change["kind"], change["expected"], change["actual"]) == ("changed", 150.0, 149.0)
        assert change["path"].endswith(".amount")
    else:
        assert (change["kind"], change["expected"]) == ("added", None)
        assert change["actual"]["amount"] == 149.0
    divergent = diagnosis["first_divergent_write"]
    assert (divergent["name"], divergent["kind"]) == ("send_certificate", WRONG)
    assert divergent["differing_args"] == (["amount"] if GOLD_CERTIFICATE else [])
    steps = ["match", WRONG, *["missing"] * GOLD_CERTIFICATE]
    assert [s["kind"] for s in diagnosis["steps"]] == steps

    tau2 = json.loads(alice_client.get(f"/runs/{run.pk}.json?format=tau2").content)
    assert "diagnosis" not in json.dumps(tau2)


def test_a_golden_run_has_no_change_and_compare_counts_each_runs_changes(
    celery_worker, llm_server, alice, alice_client
):
    wrong = _wrong_amount_run(llm_server, alice_client)
    gold_script(llm_server)
    gold = wait_for(_start(alice_client), finished, timeout=WAIT)
    assert gold.reward == 1.0

    page = alice_client.get(f"/runs/{gold.pk}/").content.decode()
    assert 'data-testid="db-diff-empty"' in page
    assert _badges(page) == ["match"] * len(GOLD_CALLS)
    assert 'data-testid="first-divergent"' not in page

    compare = alice_client.get(f"/runs/compare/?ids={gold.pk},{wrong.pk}").content.decode()
    counts = re.findall(r'data-testid="compare-db-changes"[^>]*>([^<]+)<', compare)
    assert counts == [
        "0 differences from the expected DB",
        "1 difference from the expected DB",
    ]
    firsts = re.findall(r'data-testid="compare-first-divergent">([^<]+)<', compare)
    assert firsts == ["no divergent write", "send_certificate"]


def test_a_run_without_a_score_has_no_diagnosis(alice, alice_client):
    from apps.tasks.models import Task

    run = Run.objects.create(
        task=Task.objects.get(domain_id="airline", task_id="27"),
        domain="airline",
        created_by=alice,
        agent_model="org/model",
        user_model="u/m",
        status=Run.Status.FAILED,
        error="The agent's provider refused the call.",
    )
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'data-testid="diagnosis"' not in page
    assert json.loads(alice_client.get(f"/runs/{run.pk}.json").content)["diagnosis"] is None


def test_a_played_run_is_diagnosed_like_a_model_run(celery_worker, llm_server, alice, alice_client):
    """alice plays airline/27: looks a reservation up too (an extra read), then sends $149."""
    play(
        llm_server,
        agent=[],
        customer=[text(f"My flight was delayed; I'm {USER}."), text("Thanks.")],
    )
    response = alice_client.post(
        "/play/new/", {"domain": "airline", "task_id": "27", "split": "base"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
    wait_for(
        run,
        lambda r: r.events.filter(kind="customer").exists() and not r.worker,
        timeout=WAIT,
    )

    def tool(name, **arguments):
        response = alice_client.post(
            f"/play/{run.pk}/tool/",
            {"name": name, "arguments": json.dumps(arguments)},
            HTTP_ACCEPT="application/json",
        )
        assert response.status_code == 200, response.content

    tool("get_user_details", user_id=USER)
    tool("get_reservation_details", reservation_id="NO6JO3")
    tool("send_certificate", user_id=USER, amount=149)
    alice_client.post(f"/play/{run.pk}/end/", HTTP_ACCEPT="application/json")
    run = wait_for(run, finished, timeout=WAIT)
    assert run.kind == Run.Kind.HUMAN and run.reward == 0.0, run.error

    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert _badges(page) == ["match", "extra_read", WRONG]
    [path] = re.findall(r'data-testid="db-change" data-path="([^"]+)"', page)
    assert path.endswith(".amount") == GOLD_CERTIFICATE
