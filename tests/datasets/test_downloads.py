"""Datasets out: the team's runs as SFT conversations and DPO pairs, JSON Lines and Parquet.

alice ran airline/27 a few times (scored by τ², stored as the runner stores them); bob is
another member; charlie is anonymous. Downloads are read back with ``datasets`` and
compared with the stored runs.
"""

from __future__ import annotations

import asyncio
import json
import warnings

import datasets
import pytest
from django.template.loader import render_to_string
from django.test import AsyncClient, Client

from apps.accounts.models import HFCredential
from apps.agents.services import api_key_create
from apps.datasets import selectors
from apps.datasets.conversation import system_prompt
from apps.runs import review
from apps.runs.models import Run
from apps.runs.runner import run_execute
from apps.training.models import TrainingEpisode, TrainingSession
from tau2_env.engine import catalog
from tests.support.connections import CONNECTION_KEY, openai_compatible_connection
from tests.support.evaluations import stored_evaluation
from tests.support.people import ALICE_TOKEN, BOB_TOKEN, signed_in
from tests.support.review import staff_member
from tests.support.scored_runs import GOLD, LOOKUP, certificate, stored_run
from tests.support.scripts import GOLD_CALLS, gold_script, is_agent_request, queued_run

SOLVES = GOLD  # airline/27 as each τ² expects (1.x owes no certificate)
FAILS = [LOOKUP, certificate(100)]  # a wrong certificate on 0.2, an unowed one on 1.x


@pytest.fixture
def runs(alice, llm_server):
    """alice's four finished runs of airline/27: two solved, two not, in this order."""
    made = [
        stored_run(alice, llm_server, SOLVES, model="org/model-a"),
        stored_run(alice, llm_server, FAILS, model="org/model-a"),
        stored_run(alice, llm_server, SOLVES, model="org/model-b"),
        stored_run(alice, llm_server, FAILS, model="org/model-b"),
    ]
    assert [r.reward for r in made] == [1.0, 0.0, 1.0, 0.0]
    return made


def download(client: Client, query: str) -> bytes:
    response = client.get(f"/datasets/download/?{query}")
    assert response.status_code == 200, response.content[:500]
    return b"".join(response.streaming_content)


def loaded(tmp_path, data: bytes, fmt: str) -> list[dict]:
    path = tmp_path / f"data.{fmt}"
    path.write_bytes(data)
    builder = "json" if fmt == "jsonl" else "parquet"
    dataset = datasets.load_dataset(
        builder, data_files=str(path), split="train", cache_dir=str(tmp_path / "cache")
    )
    return dataset.to_list()


def seen_by_agent(run: Run) -> list[dict]:
    """The stored messages τ²'s agent saw (not the customer's phone), in order."""
    messages = [e.message for e in run.events.order_by("seq")]
    return [
        m
        for m in messages
        if m["role"] == "assistant"
        or (m["role"] == "user" and not m.get("tool_calls"))
        or (m["role"] == "tool" and m.get("requestor", "assistant") == "assistant")
    ]


def assert_row_is_the_run(row: dict, run: Run) -> None:
    assert (row["run_id"], row["domain"], row["task_id"]) == (run.pk, "airline", "27")
    assert (row["reward"], row["model"], row["kind"]) == (run.reward, run.agent_model, "model")
    assert json.loads(row["tools"]) == [t.schema for t in catalog.get_domain("airline").tools]
    system, *rest = row["messages"]
    assert system["role"] == "system" and catalog.get_domain("airline").policy in system["content"]
    stored = seen_by_agent(run)
    assert len(rest) == len(stored)
    for message, original in zip(rest, stored, strict=True):
        assert set(message) == {"role", "content", "tool_calls", "tool_call_id"}
        assert message["role"] == original["role"]
        assert message["content"] == original.get("content")
        calls = original.get("tool_calls") or []
        assert [
            (c["id"], c["type"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message["tool_calls"] or []
        ] == [(c["id"], "function", c["name"], c["arguments"]) for c in calls]
        assert message["tool_call_id"] == (original["id"] if original["role"] == "tool" else None)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_sft_download_reads_back_through_datasets_as_the_runs_conversations(
    runs, alice_client, tmp_path, fmt
):
    data = download(alice_client, f"type=sft&format={fmt}&domain=airline")
    rows = loaded(tmp_path, data, fmt)
    assert [r["run_id"] for r in rows] == [r.pk for r in runs]
    for row, run in zip(rows, runs, strict=True):
        assert_row_is_the_run(row, run)
    # Tool calls and their results are there, as the agent made and got them.
    calls = [c["function"]["name"] for m in rows[0]["messages"] for c in m["tool_calls"] or []]
    assert calls == [name for name, _ in GOLD_CALLS]
    # τ²'s agent greets first, then the customer says why they call.
    assert [m["role"] for m in rows[0]["messages"]][:3] == ["system", "assistant", "user"]


def test_both_formats_hold_the_same_rows(runs, alice_client, tmp_path):
    jsonl = loaded(tmp_path, download(alice_client, "format=jsonl"), "jsonl")
    parquet = loaded(tmp_path, download(alice_client, "format=parquet"), "parquet")
    assert jsonl == parquet
    # And the lines of the file are the rows as written, before any reader.
    lines = [json.loads(line) for line in download(alice_client, "format=jsonl").splitlines()]
    assert lines == jsonl


def test_a_row_is_what_tau2s_agent_sent_the_model_and_what_it_answered(
    alice, alice_client, llm_server, tmp_path
):
    gold_script(llm_server)
    run = queued_run(alice)
    assert run_execute(run_id=run.pk, worker="dataset-test") == Run.Status.COMPLETED
    last = [r for r in llm_server.chat_requests() if is_agent_request(r)][-1]
    (row,) = loaded(tmp_path, download(alice_client, f"model={run.agent_model}"), "jsonl")

    sent = last.body["messages"]
    assert row["messages"][0] == {
        "role": "system",
        "content": system_prompt("airline"),
        "tool_calls": None,
        "tool_call_id": None,
    }
    assert sent[0] == {"role": "system", "content": system_prompt("airline")}
    # Every message the model was sent, then its answer (and the customer's goodbye).
    for ours, theirs in zip(row["messages"], sent, strict=False):
        assert ours["role"] == theirs["role"]
        assert ours["content"] == theirs.get("content")
        assert ours["tool_call_id"] == theirs.get("tool_call_id")
        assert [(c["id"], c["function"]) for c in ours["tool_calls"] or []] == [
            (c["id"], c["function"]) for c in theirs.get("tool_calls") or []
        ]
    answer = row["messages"][len(sent)]
    assert answer["role"] == "assistant" and "certificate" in answer["content"]
    assert json.loads(row["tools"]) == last.body["tools"]


def test_preference_pairs_are_a_passing_and_a_failing_conversation_of_the_same_task(
    runs, alice_client, tmp_path
):
    rows = loaded(tmp_path, download(alice_client, "type=preference&pairs=one"), "jsonl")
    # One per task: its first passing run against its first failing run.
    assert [(r["chosen_run_id"], r["rejected_run_id"]) for r in rows] == [(runs[0].pk, runs[1].pk)]
    sft = {
        r["run_id"]: r["messages"] for r in loaded(tmp_path, download(alice_client, ""), "jsonl")
    }
    (pair,) = rows
    assert pair["prompt"][0]["role"] == "system"
    assert pair["prompt"] + pair["chosen"] == sft[runs[0].pk]
    assert pair["prompt"] + pair["rejected"] == sft[runs[1].pk]
    assert pair["chosen"] != pair["rejected"]
    assert (pair["chosen_reward"], pair["rejected_reward"]) == (1.0, 0.0)
    assert pair["tools"] == json.dumps([t.schema for t in catalog.get_domain("airline").tools])

    every = loaded(
        tmp_path, download(alice_client, "type=preference&pairs=all&format=parquet"), "parquet"
    )
    assert [(r["chosen_run_id"], r["rejected_run_id"]) for r in every] == [
        (runs[0].pk, runs[1].pk),
        (runs[0].pk, runs[3].pk),
        (runs[2].pk, runs[1].pk),
        (runs[2].pk, runs[3].pk),
    ]


def test_the_history_filters_select_the_runs_the_history_lists(runs, alice_client, bob):
    review.label_create(
        run=runs[2],
        by=staff_member("stella"),
        event=None,
        category="agent_error",
        severity="critical",
        note="",
    )
    query = "model=model-b&reward=1"
    filters = selectors.RunFilters.from_params({"model": "model-b", "reward": "1"})
    listed = [r.pk for r in selectors.run_list(filters=filters)]
    assert listed == [runs[2].pk]
    page = alice_client.get(f"/runs/?{query}").content.decode()
    assert f'data-run-id="{runs[2].pk}"' in page and f'data-run-id="{runs[0].pk}"' not in page
    rows = [json.loads(line) for line in download(alice_client, query).splitlines()]
    assert [r["run_id"] for r in rows] == listed

    def ids(query: str) -> list[int]:
        return [json.loads(line)["run_id"] for line in download(alice_client, query).splitlines()]

    assert ids("min_reward=1") == [runs[0].pk, runs[2].pk]
    assert ids("min_reward=0.5&no_critical=1") == [runs[0].pk]
    assert ids("person=alice&model=model-a") == [runs[0].pk, runs[1].pk]


def test_runs_not_finished_or_of_an_ablation_are_counted_and_left_out(runs, alice, alice_client):
    Run.objects.filter(pk=runs[3].pk).update(mode=Run.Mode.ORACLE_PLAN)
    Run.objects.filter(pk=runs[1].pk).update(status=Run.Status.RUNNING)
    page = alice_client.get("/datasets/?domain=airline").content.decode()
    assert "<strong>2</strong> conversations" in page
    assert "1 run not finished or not scored, left out" in page
    assert "1 run of τ²'s ablations" in page
    rows = [json.loads(line) for line in download(alice_client, "domain=airline").splitlines()]
    assert [r["run_id"] for r in rows] == [runs[0].pk, runs[2].pk]


def test_a_selection_too_large_is_refused_in_words(runs, alice_client, monkeypatch):
    monkeypatch.setattr(selectors, "MAX_RUNS", 3)
    response = alice_client.get("/datasets/download/?format=parquet")
    assert response.status_code == 400
    assert response.content.decode() == (
        "This selection holds 4 runs; a dataset holds at most 3. Narrow it down: a domain, "
        "a model, an evaluation or a lowest reward."
    )
    page = alice_client.get("/datasets/").content.decode()
    assert "a dataset holds at most 3" in page and 'data-testid="dataset-download"' not in page
    assert download(alice_client, "model=model-a")  # narrowed: it downloads


def test_preference_runs_without_a_pair_are_refused_in_words_not_an_empty_file(runs, alice_client):
    query = "type=preference&min_reward=1"  # only the solved runs: no pair
    response = alice_client.get(f"/datasets/download/?{query}")
    assert response.status_code == 400
    assert response.content.decode() == (
        "These 2 runs make no preference pair: a pair needs two runs of one task whose "
        "rewards differ. Add runs that failed the tasks others solved (or solved what others "
        "failed), or download them as SFT rows."
    )
    page = alice_client.get(f"/datasets/?{query}").content.decode()
    assert "make no preference pair" in page and 'data-testid="dataset-download"' not in page
    assert download(alice_client, "min_reward=1")  # the same runs as SFT rows download


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("min_reward=lots", "The lowest reward should be a number from 0 to 1, not 'lots'."),
        ("min_reward=2", "The lowest reward should be a number from 0 to 1, not '2'."),
        ("format=csv", "Unknown format 'csv': choose one of jsonl, parquet."),
        ("type=rl", "Unknown type 'rl': choose one of sft, preference."),
        ("evaluation=x", "The evaluation should be a number, not 'x'."),
        ("evaluation=999999", "There is no evaluation 999999."),
        ("session=999999", "There is no training session 999999."),
        ("domain=nowhere", "No finished run matches this selection: there is nothing to download."),
    ],
)
def test_a_selection_that_says_nothing_sensible_is_refused_in_words(
    alice_client, committed_db, query, said
):
    response = alice_client.get(f"/datasets/download/?{query}")
    assert (response.status_code, response.content.decode()) == (400, said)
    page = alice_client.get(f"/datasets/?{query}")
    assert page.status_code == (200 if query.startswith("domain") else 400)
    assert said.replace("'", "&#x27;") in page.content.decode()


def test_an_evaluations_runs_are_its_dataset(runs, alice, alice_client):
    evaluation = stored_evaluation(alice, outcomes={"27": [1.0, 0.0]})
    theirs = sorted(evaluation.runs.values_list("pk", flat=True))
    query = f"evaluation={evaluation.pk}"
    rows = [json.loads(line) for line in download(alice_client, query).splitlines()]
    assert [r["run_id"] for r in rows] == theirs and len(theirs) == 2
    assert {r["evaluation_id"] for r in rows} == {evaluation.pk}
    pairs = [
        json.loads(line) for line in download(alice_client, f"{query}&type=preference").splitlines()
    ]
    assert [(p["chosen_run_id"], p["rejected_run_id"]) for p in pairs] == [tuple(theirs)]


def test_a_training_sessions_episodes_are_its_dataset(runs, alice, alice_client):
    key, _ = api_key_create(user=alice, name="trainer")
    session = TrainingSession.objects.create(owner=alice, key=key, name="grpo-1", splits=["train"])
    for run in runs[1:3]:
        TrainingEpisode.objects.create(session=session, run=run, domain="airline", split="train")
    other = TrainingSession.objects.create(owner=alice, key=key, name="grpo-2")
    TrainingEpisode.objects.create(session=other, run=runs[0], domain="airline", split="train")
    query = f"session={session.pk}"
    rows = [json.loads(line) for line in download(alice_client, query).splitlines()]
    assert [r["run_id"] for r in rows] == [runs[1].pk, runs[2].pk]
    pairs = download(alice_client, f"{query}&type=preference").splitlines()
    assert [(json.loads(p)["chosen_run_id"], json.loads(p)["rejected_run_id"]) for p in pairs] == [
        (runs[2].pk, runs[1].pk)
    ]


def test_no_download_holds_a_token_or_a_key(runs, alice, bob, alice_client, llm_server):
    assert HFCredential.objects.filter(user__in=[alice, bob]).count() == 2
    _, studio_key = api_key_create(user=alice, name="trainer")
    openai_compatible_connection(llm_server, by=alice, owner=alice)
    secrets = [
        ALICE_TOKEN,
        BOB_TOKEN,
        f"{ALICE_TOKEN}_refresh",
        f"{BOB_TOKEN}_refresh",
        "hf_x7",  # the customer's route key the stored runs were played with
        studio_key,
        CONNECTION_KEY,
        "CANARY",
    ]
    for query in [
        "type=sft&format=jsonl",
        "type=sft&format=parquet",
        "type=preference&format=jsonl",
        "type=preference&format=parquet&pairs=all",
    ]:
        data = download(alice_client, query)
        assert data
        found = [s for s in secrets if s.encode() in data]
        assert found == [], query
    page = alice_client.get("/datasets/").content.decode()
    assert [s for s in secrets if s in page] == []


def test_charlie_is_asked_to_sign_in_and_bob_sees_the_teams_runs(runs, bob_client):
    charlie = Client()
    for path in ("/datasets/", "/datasets/download/"):
        response = charlie.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/sign-in/")
    rows = [json.loads(line) for line in download(bob_client, "").splitlines()]
    assert [r["run_id"] for r in rows] == [r.pk for r in runs]


def test_a_jsonl_download_streams_on_the_asgi_server(runs, alice):
    client = AsyncClient()
    session_cookie = signed_in(alice).cookies["sessionid"].value

    async def fetch() -> tuple[bool, bytes]:
        client.cookies["sessionid"] = session_cookie
        response = await client.get("/datasets/download/?format=jsonl")
        assert response.status_code == 200
        chunks = [chunk async for chunk in response.streaming_content]
        return response.is_async, b"".join(chunks)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Django warns when it reads a sync iterator whole
        is_async, data = asyncio.run(fetch())
    assert is_async
    assert [json.loads(line)["run_id"] for line in data.splitlines()] == [r.pk for r in runs]


def test_the_page_previews_the_selection_with_its_counts_and_first_row(runs, alice_client):
    page = alice_client.get("/datasets/?type=preference&pairs=all").content.decode()
    assert "<strong>4</strong> conversations" in page
    assert "<strong>4</strong> preference pairs" in page
    first = page[page.index('data-testid="dataset-first-row">') :]
    assert "chosen_run_id" in first and str(runs[0].pk) in first
    assert 'href="/datasets/download/?type=preference&amp;format=jsonl&amp;pairs=all"' in page


def test_the_download_menu_include_links_the_selections_datasets(committed_db):
    menu = "includes/dataset_download.html"
    html = render_to_string(menu, {"dataset_query": "model=qwen&reward=1"})
    assert (
        'href="/datasets/download/?model=qwen&amp;reward=1&amp;type=sft&amp;format=jsonl"' in html
    )
    assert 'href="/datasets/?model=qwen&amp;reward=1"' in html
    html = render_to_string(menu, {"dataset_evaluation": 12})
    assert 'href="/datasets/download/?evaluation=12&amp;type=sft&amp;format=parquet"' in html
    assert 'href="/datasets/download/?evaluation=12&amp;type=preference&amp;format=jsonl"' in html
    html = render_to_string(menu, {"dataset_session": 3, "dataset_query": "domain=retail"})
    assert 'href="/datasets/?domain=retail&amp;session=3"' in html
    bare = render_to_string(menu, {})
    assert 'href="/datasets/download/?type=sft&amp;format=jsonl"' in bare
    assert 'href="/datasets/"' in bare
    # Nothing a query string holds escapes the attribute.
    html = render_to_string(menu, {"dataset_query": 'model="><script>'})
    assert "<script>" not in html and "model=%22%3E%3Cscript%3E" in html
