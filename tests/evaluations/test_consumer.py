"""The live evaluation page's consumer, through the real ``tau2site.asgi.application`` with
Channels' ``WebsocketCommunicator`` and the production channel layer (channels_redis).

alice's evaluation has 2 tasks × 2 trials, all queued (every worker slot is taken, so
nothing reaches Celery); bob is on her team; charlie is anonymous. Runs are finished
straight in the database, and announced on the evaluation's group either by hand (to
say exactly which messages the consumer got) or by the services themselves.
"""

from __future__ import annotations

import re
from contextlib import asynccontextmanager

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db.models import Q
from django.test import Client
from django.utils import timezone

from apps.evaluations import services
from apps.evaluations.events import EvaluationMessage, group_name
from apps.evaluations.models import Evaluation
from apps.runs import lifecycle, queue
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tests.support.scripts import AGENT_MODEL
from tests.support.websockets import WebsocketCommunicator, session_headers

TIMEOUT = 10  # the consumer reads in a thread pool, on a possibly loaded 2-core machine


@pytest.fixture(autouse=True)
def workers_full(settings):
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0


@pytest.fixture
def evaluation(alice) -> Evaluation:
    return services.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL)),
        tasks=services.TaskChoice(domain="airline", task_ids=["27", "2"]),
        num_trials=2,
    )


def run_at(evaluation: Evaluation, task_id: str, trial: int) -> Run:
    return Run.objects.get(evaluation=evaluation, task__task_id=task_id, trial=trial)


@database_sync_to_async
def finish(evaluation: Evaluation, task_id: str, trial: int, *, reward: float = 1.0) -> int:
    """Complete one run with ``reward``; returns its id."""
    run = run_at(evaluation, task_id, trial)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.COMPLETED,
        reward=reward,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        termination_reason="user_stop",
        reward_info={"reward": reward, "reward_basis": ["DB"], "reward_breakdown": {"DB": reward}},
    )
    return run.pk


async def announce(evaluation: Evaluation, version: int) -> None:
    await get_channel_layer().group_send(
        group_name(evaluation.pk),
        EvaluationMessage(type="evaluation.update", evaluation_id=evaluation.pk, version=version),
    )


def communicator(pk: int, *, client: Client | None = None, version: int = 0):
    from tau2site.asgi import application

    return WebsocketCommunicator(
        application, f"/ws/evaluations/{pk}/?version={version}", headers=session_headers(client)
    )


@asynccontextmanager
async def watching(evaluation: Evaluation, *, client: Client | None = None):
    """An accepted socket on ``evaluation`` and the state it sent on connect."""
    socket = communicator(evaluation.pk, client=client)
    connected, code = await socket.connect(timeout=TIMEOUT)
    assert connected, f"the socket was closed with {code}"
    try:
        yield socket, await socket.receive_json_from(timeout=TIMEOUT)
    finally:
        await socket.disconnect(timeout=TIMEOUT)


async def refused_with(socket) -> int | None:
    connected, code = await socket.connect(timeout=TIMEOUT)
    return None if connected else code


# --- Who may watch ------------------------------------------------------------------------


async def test_charlie_anonymous_is_closed_with_4403(evaluation, settings):
    settings.TAU2_PUBLIC_RUNS = False
    assert await refused_with(communicator(evaluation.pk)) == 4403


async def test_an_evaluation_that_does_not_exist_is_closed_with_4403(evaluation, bob_client):
    missing = evaluation.pk
    await database_sync_to_async(evaluation.delete)()
    assert await refused_with(communicator(missing, client=bob_client)) == 4403


async def test_charlie_watches_when_runs_are_public(evaluation, settings):
    settings.TAU2_PUBLIC_RUNS = True
    async with watching(evaluation) as (_, state):
        assert state["type"] == "state" and state["evaluation_id"] == evaluation.pk


# --- On connect -----------------------------------------------------------------------------


async def test_bob_gets_the_whole_state_on_connect(evaluation, bob_client):
    async with watching(evaluation, client=bob_client) as (socket, state):
        assert await socket.receive_nothing(timeout=0.5)
    assert (state["version"], state["status"], state["final"]) == (0, "running", False)
    assert state["matrix"]["tasks"] == ["2", "27"] and state["matrix"]["k"] == 2
    assert [cell[1] for cell in state["matrix"]["cells"]] == ["q", "q", "q", "q"]
    assert "<strong>0</strong> of 4 runs finished" in state["progress_html"]
    assert "No run has been scored yet" in state["metrics_html"]
    assert state["charts"] == {"k": 2, "pass_hat_k": [], "reward_by_task": []}


async def test_runs_finished_while_the_page_was_away_come_with_the_state(evaluation, bob_client):
    await finish(evaluation, "27", 0)
    async with watching(evaluation, client=bob_client) as (_, state):
        pass
    # Task 27 is row 1 (tasks in natural order), trial 0.
    assert state["version"] == 1 and state["matrix"]["cells"][2][1:] == ["c", 1.0]


# --- Live updates ---------------------------------------------------------------------------


async def test_a_finished_run_is_sent_as_a_patch_of_its_cell(evaluation, bob_client):
    async with watching(evaluation, client=bob_client) as (socket, _):
        run_id = await finish(evaluation, "2", 1, reward=0.0)
        await announce(evaluation, 1)
        update = await socket.receive_json_from(timeout=TIMEOUT)
    assert update["version"] == 1 and "matrix" not in update
    assert update["patch"] == [[1, [run_id, "c", 0.0]]]  # task 2 (row 0), trial 1
    assert update["charts"]["reward_by_task"] == [[0, 0.0]]


async def test_a_repeated_or_late_update_sends_nothing(evaluation, bob_client):
    async with watching(evaluation, client=bob_client) as (socket, _):
        await finish(evaluation, "27", 0)
        await announce(evaluation, 1)
        first = await socket.receive_json_from(timeout=TIMEOUT)
        await announce(evaluation, 1)  # announced twice
        await announce(evaluation, 0)  # long seen
        second_id = await finish(evaluation, "27", 1)
        await announce(evaluation, 2)
        second = await socket.receive_json_from(timeout=TIMEOUT)
        assert await socket.receive_nothing(timeout=0.5)
    assert (first["version"], second["version"]) == (1, 2)
    assert second["patch"] == [[3, [second_id, "c", 1.0]]]  # task 27 (row 1), trial 1


async def test_one_update_brings_every_run_finished_since_the_last_state(evaluation, bob_client):
    async with watching(evaluation, client=bob_client) as (socket, _):
        for task_id, trial in (("27", 0), ("27", 1), ("2", 0)):
            await finish(evaluation, task_id, trial)
        await announce(evaluation, 1)  # the first run's message, read after all three
        update = await socket.receive_json_from(timeout=TIMEOUT)
        await announce(evaluation, 2)
        await announce(evaluation, 3)
        assert await socket.receive_nothing(timeout=0.5)
    assert update["version"] == 3 and [i for i, _ in update["patch"]] == [0, 2, 3]


async def test_a_pause_is_sent_though_no_run_finished(evaluation, alice, alice_client):
    async with watching(evaluation, client=alice_client) as (socket, _):
        await database_sync_to_async(services.evaluation_pause)(evaluation=evaluation)
        paused = await socket.receive_json_from(timeout=TIMEOUT)
    assert (paused["status"], paused["version"], paused["patch"]) == ("paused", 0, [])


async def test_the_state_says_final_with_tau2s_metrics_once_every_run_is_done(
    evaluation, bob_client
):
    async with watching(evaluation, client=bob_client) as (socket, _):
        for task_id, trial, reward in (("27", 0, 1.0), ("27", 1, 1.0), ("2", 0, 1.0)):
            await finish(evaluation, task_id, trial, reward=reward)
        last = await finish(evaluation, "2", 1, reward=0.0)
        # What the worker calls when a run of an evaluation ends: complete, publish.
        await database_sync_to_async(services.evaluation_run_settled)(run_id=last)
        done = await socket.receive_json_from(timeout=TIMEOUT)
    assert (done["status"], done["final"], done["version"]) == ("completed", True, 4)
    # τ²'s pass^k: task 27 2/2, task 2 1/2 → pass^1 = 0.75, pass^2 = (1 + 0) / 2.
    assert done["charts"]["pass_hat_k"] == [[1, 0.75], [2, 0.5]]
    assert 'data-testid="pass-2"' in done["metrics_html"]


async def test_a_retry_that_lowers_the_version_is_still_sent(evaluation, alice_client):
    for task_id, trial in (("27", 0), ("27", 1), ("2", 0)):
        await finish(evaluation, task_id, trial)

    @database_sync_to_async
    def lose_the_last_run():
        Run.objects.filter(pk=run_at(evaluation, "2", 1).pk).update(
            status=Run.Status.FAILED, failure=Run.Failure.INFRASTRUCTURE, error="database lost"
        )
        Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.Status.COMPLETED)

    await lose_the_last_run()
    async with watching(evaluation, client=alice_client) as (socket, state):
        assert (state["version"], state["status"], state["retryable"]) == (4, "completed", 1)
        await database_sync_to_async(services.evaluation_retry_failed)(evaluation=evaluation)
        retried = await socket.receive_json_from(timeout=TIMEOUT)
    assert (retried["version"], retried["status"], retried["final"]) == (3, "running", False)
    assert [cell[1] for _, cell in retried["patch"]] == ["q"]


async def test_an_evaluation_is_never_seen_completed_without_its_summary(evaluation):
    """The last run settling writes "completed" and the numbers in one statement: a
    reader between two writes (a page, a download) once saw a completed evaluation
    with no summary."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for task_id, trial in (("27", 0), ("27", 1), ("2", 0)):
        await finish(evaluation, task_id, trial)
    last = await finish(evaluation, "2", 1, reward=0.0)

    @database_sync_to_async
    def settle():
        with CaptureQueriesContext(connection) as queries:
            services.evaluation_run_settled(run_id=last)
        return [q["sql"] for q in queries.captured_queries]

    statements = await settle()
    completing = [s for s in statements if "evaluations_evaluation" in s and "'completed'" in s]
    completing = [s for s in completing if s.lstrip().upper().startswith("UPDATE")]
    assert completing and all('"summary"' in s for s in completing), completing
    stored = await database_sync_to_async(Evaluation.objects.get)(pk=evaluation.pk)
    assert stored.status == Evaluation.Status.COMPLETED and stored.summary["successes"] == 3


# --- The page equals its reload, and a quiet socket stays open ----------------------------


async def test_the_last_state_equals_a_reload_breakdowns_included(evaluation, bob_client):
    """Issue 33: the breakdowns stayed "n = 0 tasks, 0 runs" on the live page after
    the last run until a reload; they now come with every state."""
    async with watching(evaluation, client=bob_client) as (socket, first):
        for task_id, trial in (("27", 0), ("27", 1), ("2", 0)):
            await finish(evaluation, task_id, trial)
        last = await finish(evaluation, "2", 1, reward=0.0)
        await database_sync_to_async(services.evaluation_run_settled)(run_id=last)
        done = await socket.receive_json_from(timeout=TIMEOUT)
    reload = await database_sync_to_async(bob_client.get)(f"/evaluations/{evaluation.pk}/state/")
    page = await database_sync_to_async(bob_client.get)(f"/evaluations/{evaluation.pk}/")
    again = reload.json()
    assert done["final"] is True
    for field in ("version", "status", "progress_html", "metrics_html", "breakdowns_html"):
        assert done[field] == again[field], field
    assert done["breakdowns_html"] in page.content.decode()
    assert "n = 2 tasks, 4 runs" in done["breakdowns_html"]
    assert "n = 0 tasks" in first["breakdowns_html"]


async def test_a_quiet_socket_gets_keepalives_and_is_never_closed(
    evaluation, bob_client, monkeypatch
):
    """Issue 33: a page whose evaluation had nothing new for 30 s closed its socket (its
    watchdog) and reopened it — 30 reconnects in 17 minutes. The server now speaks every
    ``KEEPALIVE_SECONDS`` (shortened here), so the page's 30 s watchdog never trips; a
    quiet period several keepalives long passes on one socket."""
    from apps.evaluations.consumers import EvaluationConsumer

    monkeypatch.setattr(EvaluationConsumer, "KEEPALIVE_SECONDS", 0.3)
    async with watching(evaluation, client=bob_client) as (socket, _):
        frames = [await socket.receive_json_from(timeout=TIMEOUT) for _ in range(4)]
        assert {f["type"] for f in frames} == {"keepalive"}
        # A run ends and its message is lost (never announced): the next tick sends it.
        run_id = await finish(evaluation, "27", 0)
        while (frame := await socket.receive_json_from(timeout=TIMEOUT))["type"] != "state":
            pass
        assert frame["version"] == 1 and frame["patch"] == [[2, [run_id, "c", 1.0]]]
        assert (await socket.receive_json_from(timeout=TIMEOUT))["type"] == "keepalive"


async def test_once_the_final_state_is_sent_the_keepalives_stop(
    evaluation, bob_client, monkeypatch
):
    """The page closes its socket on the final state; a script that keeps it open gets no
    more ticks (apps.runs.keepalive, as the run socket's)."""
    from apps.evaluations.consumers import EvaluationConsumer

    monkeypatch.setattr(EvaluationConsumer, "KEEPALIVE_SECONDS", 0.3)
    async with watching(evaluation, client=bob_client) as (socket, first):
        assert first["final"] is False
        assert (await socket.receive_json_from(timeout=TIMEOUT))["type"] == "keepalive"
        for task_id, trial in (("27", 0), ("27", 1), ("2", 0)):
            await finish(evaluation, task_id, trial)
        last = await finish(evaluation, "2", 1, reward=0.0)
        await database_sync_to_async(services.evaluation_run_settled)(run_id=last)
        while not (frame := await socket.receive_json_from(timeout=TIMEOUT)).get("final"):
            pass
        assert frame["type"] == "state"
        # (The run's settling may announce the evaluation twice: a second final state.)
        after = []
        for _ in range(3):
            if await socket.receive_nothing(timeout=1.5):
                break
            after.append(await socket.receive_json_from(timeout=TIMEOUT))
        assert {(f["type"], f.get("final")) for f in after} <= {("state", True)}
        assert await socket.receive_nothing(timeout=1.5)


# --- Issue 33 item 6: every transition, not only a run's end --------------------------------


def counts(html: str) -> dict[str, str]:
    """The progress's counts as the page shows them (``count-<key>``, the waiting note)."""
    found = dict(re.findall(r'data-testid="count-(\w+)"><i [^>]*></i>([^<]*)<', html))
    waiting = re.search(r'data-testid="waiting-for-worker"[^>]*>([^<]*)<', html)
    found["waiting"] = waiting.group(1) if waiting else ""
    return found


async def test_the_pushed_counts_equal_the_reload_after_every_transition(
    alice, bob_client, settings, monkeypatch
):
    """Issue 33: the page read "2 done · 0 running · 4 queued" while 2 runs were running,
    and "0 running · 2 queued" between batches, while its reload showed the truth: only a
    run's end was announced. Now a dispatch, a worker taking a run (queued → running)
    and a run's end each push the state, and after each the pushed counts are the
    reload's; a run's end fills its freed slot at once (concurrency 2)."""
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 10
    # The test plays the workers: a real one (another test's, still consuming the queue)
    # must not take the dispatched runs. What is sent is kept instead.
    sent: list[tuple[str, list]] = []
    monkeypatch.setattr(
        queue.current_app, "send_task", lambda name, args: sent.append((name, args))
    )
    evaluation = await database_sync_to_async(services.evaluation_create)(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL)),
        tasks=services.TaskChoice(domain="airline", task_ids=["27", "2"]),
        num_trials=2,
        concurrency=2,
    )
    first_two = await database_sync_to_async(
        lambda: list(
            Run.objects.filter(evaluation=evaluation, dispatched_at__isnull=False)
            .order_by("trial", "id")
            .values_list("pk", flat=True)
        )
    )()

    async def pushed_equals_reload(socket, expected: dict[str, str]) -> None:
        state = await socket.receive_json_from(timeout=TIMEOUT)
        reload = await database_sync_to_async(bob_client.get)(
            f"/evaluations/{evaluation.pk}/state/"
        )
        page = await database_sync_to_async(bob_client.get)(f"/evaluations/{evaluation.pk}/")
        assert counts(state["progress_html"]) == counts(reload.json()["progress_html"])
        assert state["progress_html"] == reload.json()["progress_html"]
        assert state["progress_html"] in page.content.decode()
        shown = counts(state["progress_html"])
        assert {k: shown[k].split()[0] for k in expected} == expected, shown

    async with watching(evaluation, client=bob_client) as (socket, state):
        # Created, its first two runs handed to the workers (on commit) before the page.
        assert counts(state["progress_html"])["queued"].startswith("4 ")
        assert len(first_two) == 2
        assert sorted(a[0] for name, a in sent if name == queue.EXECUTE_RUN) == sorted(first_two)
        claimed = []
        for run_id in first_two:  # a worker takes each: queued → running
            run = await database_sync_to_async(lifecycle.run_claim)(run_id=run_id, worker="w1")
            claimed.append(run)
            await pushed_equals_reload(socket, {"running": str(len(claimed))})
        # One ends: its slot is filled at once (dispatched before the state is read).
        await database_sync_to_async(lifecycle.run_finish)(
            run=claimed[0],
            status=Run.Status.COMPLETED,
            worker="w1",
            termination_reason="user_stop",
            reward_info={"reward": 1.0, "reward_basis": ["DB"], "reward_breakdown": {"DB": 1.0}},
        )
        state = await socket.receive_json_from(timeout=TIMEOUT)
        while not await socket.receive_nothing(timeout=0.5):
            state = await socket.receive_json_from(timeout=TIMEOUT)
        reload = await database_sync_to_async(bob_client.get)(
            f"/evaluations/{evaluation.pk}/state/"
        )
        assert state["progress_html"] == reload.json()["progress_html"]
        shown = counts(state["progress_html"])
        assert shown["completed"].startswith("1 ") and shown["running"].startswith("1 ")
        assert shown["queued"].startswith("2 ") and shown["waiting"].startswith("(1 of them")
        in_flight = await database_sync_to_async(
            Run.objects.filter(evaluation=evaluation)
            .filter(Q(status=Run.Status.RUNNING) | Q(dispatched_at__isnull=False))
            .exclude(status__in=Run.FINAL)
            .count
        )()
        assert in_flight == 2  # the freed slot filled by the run's end, not by beat
        # A worker takes the new run: pushed too.
        third = await database_sync_to_async(
            lambda: Run.objects.filter(
                evaluation=evaluation, status=Run.Status.QUEUED, dispatched_at__isnull=False
            ).values_list("pk", flat=True)[0]
        )()
        await database_sync_to_async(lifecycle.run_claim)(run_id=third, worker="w2")
        await pushed_equals_reload(socket, {"running": "2", "queued": "1", "completed": "1"})
