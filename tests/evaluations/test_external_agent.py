"""An evaluation of the team's own agent: its episodes (tasks × trials, τ²'s seeds) are
pulled over MCP and OpenEnv by clients with a studio key, under the evaluation's
concurrency; each is played and scored exactly once, an abandoned one goes back to the
queue (at once when its client leaves, after its lease when it vanishes), and the
evaluation ends with pass^k like a model's."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from websockets.asyncio.client import connect

from apps.agents.credentials import install
from apps.agents.recording import agent_lease
from apps.agents.services import api_key_create
from apps.evaluations.external import episode_claim
from apps.evaluations.models import Evaluation
from apps.evaluations.services import (
    TaskChoice,
    evaluation_create,
    evaluation_pause,
    evaluation_resume,
)
from apps.runs.lifecycle import runs_reap
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tau2_env.gate.access import EpisodeRefused
from tests.support.llm_server import text
from tests.support.mcp_client import mcp_session

AGENT = "support-bot@2026-12-03"
CUSTOMER_LINE = "Hi, I need some help with my booking."


@pytest.fixture(autouse=True)
def studio_keys():
    install()


@pytest.fixture
def customer(llm_server):
    llm_server.responder = lambda request: text(CUSTOMER_LINE)
    return llm_server


@pytest.fixture
def alice_key(alice):
    return api_key_create(user=alice, name="ci")[1]


def _external(user, *, tasks: int, trials: int, concurrency: int = 4) -> Evaluation:
    from tau2_env.engine import catalog

    ids = list(catalog.get_domain("airline").splits["test"][:tasks])
    return evaluation_create(
        user=user,
        spec=RunSpec(agent=Side(AGENT, llm=False), customer=Side("scripted/customer")),
        tasks=TaskChoice(domain="airline", task_ids=ids),
        num_trials=trials,
        concurrency=concurrency,
        external_agent=True,
    )


def _runs(evaluation: Evaluation) -> list[Run]:
    return list(Run.objects.filter(evaluation=evaluation).order_by("pk"))


# ----------------------------------------------------------------- creating one


def test_an_external_agents_evaluation_queues_agent_runs_that_no_worker_takes(alice, customer):
    evaluation = _external(alice, tasks=3, trials=2)

    runs = _runs(evaluation)
    assert evaluation.external_agent and evaluation.agent_model == AGENT
    assert evaluation.spec.agent.llm is False
    assert evaluation.provenance["agent"]["external"] is True
    assert len(runs) == 6
    assert {(r.kind, r.status, r.dispatched_at) for r in runs} == {("agent", "queued", None)}
    assert [r.seed for r in runs] == [evaluation.trial_seeds[r.trial] for r in runs]
    assert runs[0].agent_llm_args is None and runs[0].agent_price_input is None


@pytest.mark.parametrize("name", ["", "two words", "-leading", "x" * 101])
def test_an_external_agent_needs_a_name_that_says_its_version(alice, customer, name):
    with pytest.raises(ValidationError) as refused:
        evaluation_create(
            user=alice,
            spec=RunSpec(agent=Side(name, llm=False), customer=Side("scripted/customer")),
            tasks=TaskChoice(domain="airline", task_ids=["0"]),
            external_agent=True,
        )
    assert "external_agent" in refused.value.message_dict


# ----------------------------------------------------------------- claims


def _claim(user, evaluation, worker: str = "agent:mcp:t"):
    return episode_claim(
        user_id=user.pk,
        evaluation=str(evaluation.pk),
        face="mcp",
        worker=worker,
        lease=agent_lease(),
    )


def test_claims_racing_on_threads_each_get_a_different_episode_within_the_concurrency(
    alice, customer, committed_db
):
    evaluation = _external(alice, tasks=5, trials=1, concurrency=8)
    barrier = threading.Barrier(8)
    won: list[int] = []
    refused: list[int] = []

    def ask(n: int) -> None:
        from django.db import connection

        barrier.wait()
        try:
            run, plan = _claim(alice, evaluation, worker=f"agent:mcp:{n}")
            won.append(run.pk)
        except EpisodeRefused as exc:
            refused.append(exc.status)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert len(won) == 5 and len(set(won)) == 5
    assert sorted(refused) == [429, 429, 429]  # all 5 taken, and they may come back
    assert Run.objects.filter(evaluation=evaluation, status="running").count() == 5


def test_a_claim_hands_out_the_evaluations_own_task_seed_customer_and_limits(alice, customer):
    evaluation = _external(alice, tasks=2, trials=2, concurrency=1)

    run, plan = _claim(alice, evaluation)

    assert (plan.domain, plan.task_id, plan.seed) == ("airline", run.task.task_id, run.seed)
    assert run.trial == 0 and plan.seed == evaluation.trial_seeds[0]
    assert plan.user_llm.model == "scripted/customer"
    assert (plan.max_steps, plan.max_errors) == (evaluation.max_steps, evaluation.max_errors)
    assert plan.labels == {
        "evaluation": evaluation.pk,
        "trial": 0,
        "run_id": run.pk,
        "agent": AGENT,
    }
    with pytest.raises(EpisodeRefused) as full:
        _claim(alice, evaluation)
    assert full.value.status == 429 and full.value.retry_after == 5
    assert full.value.data["episodes"] == {
        "queued": 3,
        "running": 1,
        "completed": 0,
        "failed": 0,
        "stopped": 0,
    }


def test_refusals_say_why_with_their_status(alice, bob, customer):
    evaluation = _external(alice, tasks=1, trials=1)

    def status_of(user, name) -> int:
        with pytest.raises(EpisodeRefused) as refused:
            episode_claim(
                user_id=user.pk, evaluation=name, face="mcp", worker="w", lease=agent_lease()
            )
        assert str(refused.value)
        return refused.value.status

    assert status_of(alice, "999999") == 404
    assert status_of(alice, "not-a-number") == 404
    assert status_of(bob, str(evaluation.pk)) == 403
    evaluation_pause(evaluation=evaluation)
    assert status_of(alice, str(evaluation.pk)) == 409
    evaluation_resume(evaluation=evaluation)
    Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.Status.COMPLETED)
    assert status_of(alice, str(evaluation.pk)) == 410


def test_a_model_evaluation_cannot_be_pulled(alice, customer):
    from tests.support.evaluations import stored_evaluation

    evaluation = stored_evaluation(alice, outcomes={"0": [1.0]}, status="running")
    with pytest.raises(EpisodeRefused) as refused:
        _claim(alice, evaluation)
    assert refused.value.status == 404


# ----------------------------------------------------------------- over the faces


async def _play(session, evaluation_id: int) -> dict | None:
    """Pull and play one episode (say one line, then done); its opening, or ``None``
    when nothing is left; waits on 429."""
    while True:
        started = await session.call_tool("start", {"evaluation": evaluation_id})
        if not started.isError:
            break
        data = started.structuredContent or {}
        if data.get("status") == 410:
            return None
        assert data.get("status") == 429, started.content[0].text
        await asyncio.sleep(0.2)
    opening = started.structuredContent
    await session.call_tool("respond_to_user", {"message": "How can I help you today?"})
    ended = await session.call_tool("done", {})
    assert ended.structuredContent["done"] is True
    return opening


async def _client(url: str, key: str, evaluation_id: int, played: list[int]) -> None:
    while True:
        async with mcp_session(url, token=key) as session:  # one MCP session per episode
            opening = await _play(session, evaluation_id)
        if opening is None:
            return
        played.append(opening["run_id"])


_KILLED_CLIENT = textwrap.dedent(
    """
    import asyncio, sys, time
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main(url, key, evaluation):
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, sid):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    started = await session.call_tool("start", {"evaluation": evaluation})
                    await session.call_tool("get_user_details", {"user_id": "nobody"})
                    print(started.structuredContent["run_id"], sid(), flush=True)
                    time.sleep(3600)  # killed here, mid-episode

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


@pytest.mark.slow
async def test_four_clients_one_killed_play_a_10x4_evaluation_each_episode_scored_once(
    asgi_server, customer, alice, alice_client, alice_key
):
    evaluation = await sync_to_async(_external)(alice, tasks=10, trials=4, concurrency=4)
    url = f"{asgi_server.url}/agent/mcp"
    killed = subprocess.Popen(  # a real client process, killed with SIGKILL mid-episode
        [sys.executable, "-c", _KILLED_CLIENT, url, alice_key, str(evaluation.pk)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        line = killed.stdout.readline().split()
        killed_run, killed_session = int(line[0]), line[1]
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
    played: list[list[int]] = [[], [], []]
    clients = [asyncio.create_task(_client(url, alice_key, evaluation.pk, mine)) for mine in played]

    def only_the_killed_one_left() -> bool:
        runs = _runs(evaluation)
        going = [r.pk for r in runs if not r.is_final]
        return going == [killed_run] and Run.objects.get(pk=killed_run).status == "running"

    # The others play everything else, then wait (429) for the killed client's episode …
    deadline = time.monotonic() + 240
    while not await sync_to_async(only_the_killed_one_left)():
        assert time.monotonic() < deadline, "the three clients did not play the rest"
        await asyncio.sleep(0.5)
    # … which goes back to the queue once its lease has run out (the reaper, on beat).
    lease_end = await sync_to_async(lambda: Run.objects.get(pk=killed_run).lease_expires_at)()
    await sync_to_async(runs_reap)(now=lease_end + timedelta(seconds=1))
    await asyncio.wait_for(asyncio.gather(*clients), 120)

    runs = await sync_to_async(_runs)(evaluation)
    evaluation = await sync_to_async(Evaluation.objects.get)(pk=evaluation.pk)
    everything = [pk for mine in played for pk in mine]
    assert sorted(everything) == sorted(r.pk for r in runs)  # every episode, each once
    assert killed_run in everything
    assert all(len(mine) > 0 for mine in played)  # the work was shared
    assert {r.status for r in runs} == {"completed"}
    assert all(r.reward_info and r.reward is not None for r in runs)
    (again,) = [r for r in runs if r.pk == killed_run]
    assert again.resumptions == ["agent_gone"] and again.attempts == 2
    said = await sync_to_async(lambda: [e.message for e in again.events.order_by("seq")])()
    assert "nobody" not in json.dumps(said)  # the killed attempt's tool call is gone
    assert [m.get("content") for m in said].count("How can I help you today?") == 1
    assert evaluation.status == "completed"
    # The dead client's session, closed late, leaves the episode played again alone.
    async with httpx.AsyncClient(timeout=30) as http:
        closed = await http.delete(
            url, headers={"Authorization": f"Bearer {alice_key}", "Mcp-Session-Id": killed_session}
        )
    assert closed.status_code == 200
    await asyncio.sleep(1)
    assert await sync_to_async(lambda: Run.objects.get(pk=killed_run).status)() == "completed"

    api = await sync_to_async(alice_client.get)(f"/api/evaluations/{evaluation.pk}/")
    assert sorted(api.json()["pass_hat_ks"]) == ["1", "2", "3", "4"]
    page = await sync_to_async(alice_client.get)(f"/evaluations/{evaluation.pk}/")
    html = page.content.decode()
    for k in range(1, 5):
        assert f"pass^{k}" in html
    assert AGENT in html


async def test_a_client_that_leaves_mid_episode_puts_it_back_at_once(
    asgi_server, customer, alice, alice_key
):
    evaluation = await sync_to_async(_external)(alice, tasks=1, trials=1)
    url = f"{asgi_server.url}/agent/mcp"
    async with mcp_session(url, token=alice_key) as session:
        started = await session.call_tool("start", {"evaluation": evaluation.pk})
        run_id = started.structuredContent["run_id"]
        await session.call_tool("respond_to_user", {"message": "One moment."})
    # The SDK closed its session mid-episode: the episode is queued again, messages gone.

    def requeued() -> Run | None:
        run = Run.objects.get(pk=run_id)
        return run if run.status == "queued" else None

    deadline = time.monotonic() + 30
    while (run := await sync_to_async(requeued)()) is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert run.resumptions == ["agent_gone"] and run.n_messages == 0
    assert not await sync_to_async(run.events.exists)()

    played: list[int] = []
    await _client(url, alice_key, evaluation.pk, played)
    assert played == [run_id]
    run = await sync_to_async(Run.objects.get)(pk=run_id)
    assert run.status == "completed"


async def test_openenv_reset_pulls_with_the_evaluation_header_and_says_410_at_the_end(
    asgi_server, customer, alice, alice_key
):
    evaluation = await sync_to_async(_external)(alice, tasks=1, trials=1)
    headers = {"Authorization": f"Bearer {alice_key}", "X-Tau2-Evaluation": str(evaluation.pk)}
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {}}))
        opening = json.loads(await ws.recv())["data"]["observation"]["metadata"]
        assert opening["evaluation"] == evaluation.pk and opening["trial"] == 0
        step = {"type": "call_tool", "tool_name": "done", "arguments": {}}
        await ws.send(json.dumps({"type": "step", "data": step}))
        ended = json.loads(await ws.recv())["data"]
        assert ended["done"] is True
        await ws.send(json.dumps({"type": "reset", "data": {}}))
        refusal = json.loads(await ws.recv())
    assert refusal["type"] == "error" and "(status 410)" in refusal["data"]["message"]

    def final() -> Run:
        (run,) = _runs(evaluation)
        return run

    deadline = time.monotonic() + 30
    while (run := await sync_to_async(final)()).status != "completed":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert run.pk == opening["run_id"] and run.reward_info


async def test_task_and_seed_cannot_be_chosen_with_an_evaluation_and_need_a_key(
    asgi_server, customer, alice, alice_key
):
    evaluation = await sync_to_async(_external)(alice, tasks=1, trials=1)
    url = f"{asgi_server.url}/agent/mcp"
    async with mcp_session(url, token=alice_key) as session:
        chosen = await session.call_tool("start", {"evaluation": evaluation.pk, "task_id": "3"})
    assert chosen.isError and "cannot be chosen with evaluation" in chosen.content[0].text
    assert chosen.structuredContent["status"] == 400
    queued = await sync_to_async(
        lambda: Run.objects.filter(evaluation=evaluation, status="queued").count()
    )()
    assert queued == 1


# ----------------------------------------------------------------- starting, reading


def test_the_api_starts_an_own_agent_evaluation_with_a_start_key(alice, customer):
    import json as json_module

    from django.test import Client

    key = api_key_create(user=alice, name="ci", scope="start")[1]
    body = {"domain": "airline", "split": "test", "task_ids": ["0", "1"], "num_trials": 3}

    def post(**extra):
        return Client().post(
            "/api/evaluations/",
            data=json_module.dumps({**body, **extra}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )

    started = post(external_agent=AGENT, user_model="scripted/customer")
    both = post(external_agent=AGENT, agent_model="scripted/agent")
    neither = post()
    badly_named = post(external_agent="my bot")
    ablation = post(external_agent=AGENT, mode="oracle_plan")

    assert started.status_code == 201, started.content.decode()
    evaluation = Evaluation.objects.get(pk=started.json()["id"])
    assert evaluation.external_agent and evaluation.agent_model == AGENT
    assert evaluation.runs.filter(kind="agent", status="queued").count() == 6
    assert both.status_code == 400 and "not both" in both.json()["external_agent"][0]
    assert neither.status_code == 400 and "name your own agent" in neither.json()["agent_model"][0]
    assert badly_named.status_code == 400 and "external_agent" in badly_named.json()
    assert ablation.status_code == 400 and "default mode only" in ablation.json()["mode"][0]
    assert Evaluation.objects.count() == 1


def test_the_form_starts_one_and_its_page_says_how_to_pull_it(alice, alice_client, customer):
    form = alice_client.get("/evaluations/new/").content.decode()
    assert 'name="external_agent"' in form

    posted = alice_client.post(
        "/evaluations/new/",
        {
            "domain": "airline",
            "split": "test",
            "task_ids": "0 1",
            "external_agent": AGENT,
            "user_model": "scripted/customer",
            "num_trials": 2,
            "seed": 300,
            "max_steps": 200,
            "max_errors": 10,
            "concurrency": 2,
        },
    )

    assert posted.status_code == 302, posted.content.decode()[:3000]
    evaluation = Evaluation.objects.get()
    page = alice_client.get(posted["Location"]).content.decode()
    assert 'data-testid="own-agent-chip"' in page
    assert f'<code data-testid="own-agent-id">{evaluation.pk}</code>' in page
    assert f"/agents/?evaluation={evaluation.pk}#own-agent" in page
    assert 'data-testid="waiting-for-agent"' in page
    listing = alice_client.get("/evaluations/").content.decode()
    assert 'data-testid="own-agent-chip"' in listing


def test_the_leaderboard_ranks_own_agents_in_a_custom_agent_group(alice, alice_client):
    from apps.evaluations.leaderboard import leaderboard
    from tau2_env.engine import catalog
    from tests.support.evaluations import stored_evaluation

    tasks = catalog.get_domain("airline").splits["test"]
    model = stored_evaluation(alice, outcomes={t: [1.0] for t in tasks}, agent_model="org/m")
    own = stored_evaluation(alice, outcomes={t: [0.0] for t in tasks}, agent_model=AGENT)
    Evaluation.objects.filter(pk=own.pk).update(external_agent=True)

    groups = leaderboard(domain="airline")

    by_kind = {g.custom_agent: g for g in groups}
    assert len(groups) == 2 and set(by_kind) == {False, True}  # never ranked together
    assert [r.agent_model for r in by_kind[True].rows] == [AGENT]
    assert [r.agent_model for r in by_kind[False].rows] == ["org/m"]
    assert by_kind[True].rows[0].agent_where == "its team's own program"
    apart = groups[1].reason
    assert "other agents (" in apart and "the teams' own programs" in apart
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert page.count('data-testid="custom-agent-group"') == 1
    assert model.pk != own.pk


def test_the_submission_of_an_own_agent_is_custom(alice, alice_client):
    from apps.evaluations import submission
    from tau2_env.engine import catalog
    from tests.support.evaluations import stored_evaluation

    own = stored_evaluation(
        alice,
        outcomes={t: [1.0] for t in catalog.get_domain("airline").splits["base"]},
        split="base",
        agent_model=AGENT,
        user_model="gpt-4.1",
    )
    Evaluation.objects.filter(pk=own.pk).update(external_agent=True, max_steps=200)

    plan = submission.submission_plan(user=alice, picks={"airline": str(own.pk)})
    draft = submission.submission_draft(plan)
    initial = submission.submission_initial(draft)

    assert initial["submission_type"] == "custom"
    assert "the team's own program" in initial["notes"]
    page = alice_client.post(
        f"/evaluations/submission/?airline={own.pk}",
        {
            **{k: v for k, v in initial.items() if v},
            "submission_type": "standard",
            "model_name": AGENT,
            "organization": "Acme",
            "email": "a@example.org",
            "action": "download",
        },
    )
    assert page.status_code == 400
    assert "custom submission" in page.content.decode()


def test_a_stopped_evaluations_episode_is_never_queued_again(alice, customer):
    from apps.evaluations.services import evaluation_stop
    from apps.runs.lifecycle import agent_run_requeue

    evaluation = _external(alice, tasks=2, trials=1)
    run, _ = _claim(alice, evaluation, worker="agent:mcp:left")

    evaluation_stop(evaluation=evaluation)
    requeued = agent_run_requeue(run=run, worker="agent:mcp:left", reason="client left")

    assert requeued is False
    statuses = {r.pk: r.status for r in _runs(evaluation)}
    assert statuses[run.pk] == "running"  # its hop or its end stops it (stop asked)
    assert Run.objects.get(pk=run.pk).stop_requested
    assert sorted(statuses.values()) == ["running", "stopped"]


def test_a_customer_on_a_limited_budgeted_connection_is_admitted_as_each_episode_is_claimed(
    alice, customer, staff
):
    from decimal import Decimal

    from tests.support.connections import openai_compatible_connection

    team = openai_compatible_connection(
        customer,
        by=staff,
        name="Team Sim",
        models=[("customer-sim", (Decimal("1"), Decimal("2")))],
        monthly_budget_usd=Decimal("5"),
        max_in_flight=1,
    )
    evaluation = evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT, llm=False), customer=Side("customer-sim", team)),
        tasks=TaskChoice(domain="airline", task_ids=["0", "1"]),
        num_trials=1,
        concurrency=4,
        external_agent=True,
    )

    first, plan = _claim(alice, evaluation, worker="agent:mcp:one")
    with pytest.raises(EpisodeRefused) as full:
        _claim(alice, evaluation, worker="agent:mcp:two")

    assert plan.user_llm.model == "customer-sim" and plan.user_llm.origin
    first.refresh_from_db()
    assert first.user_reserved_usd is not None and first.user_reserved_usd > 0
    assert full.value.status == 429 and full.value.retry_after == 5
    assert "allows 1 run at a time" in str(full.value)
    statuses = sorted(r.status for r in _runs(evaluation))
    assert statuses == ["queued", "running"]  # the refused claim took nothing
