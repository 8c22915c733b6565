"""Training sessions: episodes a studio key plays under one name — given as the
``X-Tau2-Training-Session`` header, the ``training_session`` query parameter or OpenEnv's
``reset(training_session=…)`` — are agent runs gathered in one session, with a page of
their reward curve; the split guard warns (in the opening and on the page) or refuses
training on a split one of the team's evaluations uses."""

from __future__ import annotations

import json
from html import escape

import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect

from apps.agents.services import api_key_create
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from apps.tasks.models import Task
from apps.training.models import TrainingEpisode, TrainingSession
from tests.support.agents import agent_runs_of
from tests.support.mcp_client import mcp_session
from tests.support.scripts import GOLD_CALLS, GOLD_CLOSING, gold_script
from tests.support.training import training_episodes, ws_reset

GOLD_USER = "ethan_martin_2396"
SESSION_HEADER = "X-Tau2-Training-Session"


@pytest.fixture
def alice_key(alice):
    return api_key_create(user=alice, name="grpo", max_sessions=64)


def _bearer(raw: str, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {raw}", **more}


def _evaluation(user, *, split: str, domain: str = "airline") -> Evaluation:
    return Evaluation.objects.create(
        name="the benchmark",
        created_by=user,
        domain=domain,
        split=split,
        agent_model="org/model",
        user_model="org/customer",
        status=Evaluation.Status.COMPLETED,
    )


# --- episodes into sessions ------------------------------------------------------------


async def test_a_golden_episode_named_by_header_is_an_agent_run_of_the_session(
    asgi_server, llm_server, alice, alice_key
):
    gold_script(llm_server)
    key, raw = alice_key
    headers = _bearer(raw, **{SESSION_HEADER: "grpo run 1"})
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:

        async def send(kind, data):
            await ws.send(json.dumps({"type": kind, "data": data}))
            return json.loads(await ws.recv())

        opening = await send("reset", {"task_id": "27", "split": "train"})
        for name, arguments in (*GOLD_CALLS, ("respond_to_user", {"message": GOLD_CLOSING})):
            step = await send(
                "step", {"type": "call_tool", "tool_name": name, "arguments": arguments}
            )

    assert step["data"]["reward"] == 1.0
    assert "training_warning" not in opening["data"]["observation"]["metadata"]
    (episode,) = await sync_to_async(training_episodes)(count=1)
    (run,) = await sync_to_async(agent_runs_of)(alice)
    session = episode.session
    assert (session.name, session.owner_id, session.key_id) == ("grpo run 1", alice.pk, key.pk)
    assert episode.run_id == run.pk and (run.kind, run.reward) == ("agent", 1.0)
    assert (episode.domain, episode.split, episode.warned) == ("airline", "train", False)
    assert session.splits == ["airline/train"] and session.last_episode_at is not None


async def test_the_query_parameter_names_the_session_and_each_reset_is_one_more_episode(
    asgi_server, llm_server, alice, alice_key
):
    gold_script(llm_server)
    _, raw = alice_key
    path = "/ws?training_session=sweep%202"
    async with connect(asgi_server.ws_url(path), additional_headers=_bearer(raw)) as ws:
        for task_id in ("27", "0"):
            await ws.send(
                json.dumps({"type": "reset", "data": {"task_id": task_id, "split": "train"}})
            )
            await ws.recv()

    first, second = await sync_to_async(training_episodes)(count=2)
    assert first.session_id == second.session_id and first.session.name == "sweep 2"
    assert [first.run.task.task_id, second.run.task.task_id] == ["27", "0"]
    assert await sync_to_async(TrainingSession.objects.count)() == 1


async def test_the_reset_argument_names_the_session_and_wins_over_the_header(
    asgi_server, llm_server, alice, alice_key
):
    gold_script(llm_server)
    _, raw = alice_key
    headers = _bearer(raw, **{SESSION_HEADER: "from the header"})

    answer = await ws_reset(
        asgi_server,
        headers=headers,
        data={"task_id": "27", "split": "train", "training_session": "from the adapter"},
    )

    assert answer["type"] == "observation", answer
    (episode,) = await sync_to_async(training_episodes)(count=1)
    assert episode.session.name == "from the adapter"


async def test_an_mcp_episode_named_by_its_urls_query_joins_the_session_too(
    asgi_server, llm_server, alice, alice_key
):
    gold_script(llm_server)
    _, raw = alice_key
    url = f"{asgi_server.url}/agent/mcp?task_id=27&split=train&training_session=grpo"
    async with mcp_session(url, token=raw) as session:
        opening = await session.call_tool("start", {})
        await session.call_tool("done", {})

    assert not opening.isError, opening.content
    (episode,) = await sync_to_async(training_episodes)(count=1)
    assert episode.session.name == "grpo" and episode.run.provenance["agent"]["face"] == "mcp"


async def test_episodes_without_a_name_or_without_a_key_form_no_session(
    asgi_server, llm_server, alice, alice_key
):
    gold_script(llm_server)
    _, raw = alice_key

    await ws_reset(asgi_server, headers=_bearer(raw), data={"task_id": "27", "split": "train"})
    await ws_reset(
        asgi_server,
        headers={SESSION_HEADER: "anonymous"},
        data={"task_id": "27", "split": "train"},
    )

    await sync_to_async(agent_runs_of)(alice)  # the keyed one is recorded, as ever
    assert await sync_to_async(TrainingSession.objects.count)() == 0


# --- the split guard -------------------------------------------------------------------


async def test_training_on_a_split_an_evaluation_uses_warns_in_the_opening_and_on_the_page(
    asgi_server, llm_server, alice, alice_key, alice_client
):
    gold_script(llm_server)
    _, raw = alice_key
    evaluation = await sync_to_async(_evaluation)(alice, split="test")
    headers = _bearer(raw, **{SESSION_HEADER: "leaky"})

    warned = await ws_reset(asgi_server, headers=headers, data={"task_id": "2", "split": "test"})
    clean = await ws_reset(asgi_server, headers=headers, data={"task_id": "27", "split": "train"})

    metadata = warned["data"]["observation"]["metadata"]
    assert metadata["training_warning"] == (
        "[tau2 training] Warning: training session 'leaky' plays airline task 2 (split "
        f"'test'), which the team's evaluation #{evaluation.pk} (split 'test') evaluates on: "
        "train on `train`, evaluate on `test`, so training does not leak into the benchmark."
    )
    assert metadata["user_message"] and metadata["policy"]  # τ²'s own, as ever
    assert "training_warning" not in clean["data"]["observation"]["metadata"]
    first, second = await sync_to_async(training_episodes)(count=2)
    assert (first.warned, second.warned) == (True, False)
    page = (await sync_to_async(alice_client.get)(f"/training/{first.session_id}/")).content
    text = page.decode()
    assert 'data-testid="split-warning"' in text and "airline/test" in text
    assert f'href="/evaluations/{evaluation.pk}/"' in text


async def test_a_task_of_a_split_an_evaluation_uses_is_caught_whatever_split_was_asked(
    asgi_server, llm_server, alice, alice_key
):
    gold_script(llm_server)
    _, raw = alice_key
    evaluation = await sync_to_async(_evaluation)(alice, split="base")  # holds every task

    answer = await ws_reset(
        asgi_server,
        headers=_bearer(raw, **{SESSION_HEADER: "sneaky"}),
        data={"task_id": "27", "split": "train"},
    )

    warning = answer["data"]["observation"]["metadata"]["training_warning"]
    assert f"evaluation #{evaluation.pk} (split 'base')" in warning
    (episode,) = await sync_to_async(training_episodes)(count=1)
    assert episode.warned


async def test_the_refusing_guard_refuses_the_reset_in_words_and_records_nothing(
    asgi_server, llm_server, alice, alice_key, settings
):
    gold_script(llm_server)
    settings.TAU2_TRAINING_SPLIT_GUARD = "refuse"
    _, raw = alice_key
    evaluation = await sync_to_async(_evaluation)(alice, split="test")
    headers = _bearer(raw, **{SESSION_HEADER: "leaky"})

    refused = await ws_reset(asgi_server, headers=headers, data={"task_id": "2", "split": "test"})
    allowed = await ws_reset(asgi_server, headers=headers, data={"task_id": "27", "split": "train"})

    assert refused["type"] == "error", refused
    message = json.dumps(refused["data"])
    assert "may not train on airline task 2 (split 'test')" in message
    assert f"evaluation #{evaluation.pk}" in message and "TAU2_TRAINING_SPLIT_GUARD" in message
    assert allowed["type"] == "observation"
    (episode,) = await sync_to_async(training_episodes)(count=1)
    assert episode.run.task.task_id == "27"
    assert await sync_to_async(Run.objects.filter(task__task_id="2").count)() == 0


# --- the pages -------------------------------------------------------------------------


def _session_with_rewards(owner, key, rewards: list[float | None]) -> TrainingSession:
    """A session of scored runs (``None``: one still playing), as the recorder leaves them."""
    session = TrainingSession.objects.create(
        owner=owner, key=key, name="curve", splits=["airline/train"]
    )
    for n, reward in enumerate(rewards):
        task = Task.objects.get(domain_id="airline", task_id=("27", "0")[n % 2])
        run = Run.objects.create(
            kind=Run.Kind.AGENT,
            status=Run.Status.RUNNING if reward is None else Run.Status.COMPLETED,
            task=task,
            domain="airline",
            created_by=owner,
            agent_model="grpo",
            user_model="org/customer",
            reward=reward,
            user_prompt_tokens=100,
            user_completion_tokens=20,
        )
        TrainingEpisode.objects.create(session=session, run=run, domain="airline", split="train")
    return session


def test_the_page_shows_the_curve_with_its_moving_average_reward_by_task_and_the_runs(
    alice, alice_key, alice_client
):
    session = _session_with_rewards(alice, alice_key[0], [1.0, 0.0, 1.0, None])

    page = alice_client.get(f"/training/{session.pk}/").content.decode()
    live = alice_client.get(f"/training/{session.pk}/live/").content.decode()

    runs = list(session.episodes.values_list("run_id", flat=True))
    chart = {
        "episodes": [1, 2, 3],
        "rewards": [1.0, 0.0, 1.0],
        "averages": [1.0, 0.5, 0.6667],
        "runs": runs[:3],
        "window": 10,
    }
    assert f'data-chart="{escape(json.dumps(chart))}"' in page
    assert f'data-chart="{escape(json.dumps(chart))}"' in live
    assert 'data-testid="reward-curve"' in page and "vendor/chartjs/chart.umd.min.js" in page
    assert 'data-task-id="27"' in live and 'data-task-id="0"' in live
    assert all(f'href="/runs/{run_id}/"' in live for run_id in runs)
    assert '<dd data-testid="stat-tokens">480</dd>' in live  # 4 × (100 + 20)
    assert "airline/train" in live and "(1 playing)" in live


def test_alice_sees_the_teams_sessions_and_charlie_is_refused(
    alice, alice_key, alice_client, client
):
    session = _session_with_rewards(alice, alice_key[0], [1.0])

    listing = alice_client.get("/training/").content.decode()
    charlie_list = client.get("/training/")
    charlie_page = client.get(f"/training/{session.pk}/")
    charlie_live = client.get(f"/training/{session.pk}/live/")

    assert f'data-session-id="{session.pk}"' in listing and "curve" in listing
    assert charlie_list.status_code == 302 and "/accounts/sign-in/" in charlie_list["Location"]
    assert charlie_page.status_code == 302
    assert charlie_live.status_code == 403
    assert alice_client.get("/training/999999/").status_code == 404
