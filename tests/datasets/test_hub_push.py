"""Pushing a selection's datasets to the Hugging Face Hub, on the person's own token.

The Hub is tests/support/hub_server.py, a stand-in of exactly the endpoints
``huggingface_hub`` calls for it; the push runs on a real Celery worker of its own queue,
pointed at that stand-in (``TAU2_HF_HUB_URL``). alice pushes; bob is another member;
charlie is anonymous; stella is staff without a Hugging Face sign-in.
"""

from __future__ import annotations

import json
import time

import datasets
import huggingface_hub.constants
import pytest
from django.test import Client

from apps.datasets.models import DatasetPush
from apps.datasets.selectors import Selection
from apps.datasets.services import PushRefused, dataset_push_execute, dataset_push_request
from tests.conftest import start_celery_worker, stop_celery_worker
from tests.support.hub_server import NAMESPACE, HubServer
from tests.support.people import ALICE_TOKEN
from tests.support.review import staff_member
from tests.support.scored_runs import GOLD, LOOKUP, certificate, stored_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub():
    server = HubServer(tokens={ALICE_TOKEN}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def hub_worker(hub, scripted_llm_session, django_db_setup):
    """A worker on a queue of its own whose Hub is the stand-in; yields its queue."""
    from django.conf import settings

    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-datasets"
    proc = start_celery_worker(
        llm=scripted_llm_session,
        queue=queue,
        name="datasets",
        # The suite keeps huggingface_hub offline; this worker talks to the stand-in only.
        extra_env={"TAU2_HF_HUB_URL": hub.url, "HF_HUB_OFFLINE": "0"},
    )
    yield queue
    stop_celery_worker(proc)


@pytest.fixture
def runs(alice, llm_server, hub):
    hub.reset()
    return [
        stored_run(alice, llm_server, GOLD, model="org/model-a"),
        stored_run(alice, llm_server, [LOOKUP, certificate(100)], model="org/model-a"),
    ]


def download(client: Client, query: str) -> bytes:
    response = client.get(f"/datasets/download/?{query}")
    assert response.status_code == 200, response.content[:300]
    return b"".join(response.streaming_content)


def finished(push: DatasetPush, *, timeout: float = 60.0) -> DatasetPush:
    """The push once it is done or failed (polled); fails the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not push.is_final:
        if time.monotonic() > deadline:
            pytest.fail(f"the push is still {push.status} after {timeout:.0f} s")
        time.sleep(0.2)
        push.refresh_from_db()
    return push


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_alices_push_puts_both_datasets_in_a_private_repo_of_hers_with_her_token_only(
    runs, alice, alice_client, hub, hub_worker, tmp_path, fmt
):
    push = dataset_push_request(
        user=alice,
        selection=Selection.from_params({"format": fmt, "domain": "airline"}),
        repo_id="tau2-airline",
        private=True,
        queue=hub_worker,
    )
    push = finished(push)
    assert push.status == DatasetPush.Status.DONE, push.error
    repo = f"{NAMESPACE}/tau2-airline"
    assert push.url == f"{hub.url}/datasets/{repo}"
    assert push.commit_url.startswith(f"{hub.url}/datasets/{repo}/commit/")
    assert (push.rows, push.pairs) == (2, 1)

    # What the Hub was asked, in order, and what it was given.
    paths = [r.path.split("?")[0] for r in hub.requests]
    assert paths == [
        "/api/repos/create",
        "/api/validate-yaml",
        f"/api/datasets/{repo}/preupload/main",
        f"/api/datasets/{repo}/commit/main",
    ]
    assert json.loads(hub.requests[0].body) == {
        "name": "tau2-airline",
        "organization": None,
        "visibility": "private",
        "type": "dataset",
    }
    files = hub.files[repo]
    assert set(files) == {"README.md", f"sft/train.{fmt}", f"preference/train.{fmt}"}
    assert files[f"sft/train.{fmt}"] == download(alice_client, f"type=sft&format={fmt}")
    if fmt == "jsonl":
        assert files["preference/train.jsonl"] == download(alice_client, "type=preference")

    # The token went in the Authorization header of each request, and nowhere else.
    for request in hub.requests:
        assert request.headers["authorization"] == f"Bearer {ALICE_TOKEN}"
        others = {k: v for k, v in request.headers.items() if k != "authorization"}
        assert ALICE_TOKEN not in json.dumps(others) and ALICE_TOKEN not in request.path
        assert ALICE_TOKEN.encode() not in request.body
    assert all(ALICE_TOKEN.encode() not in data for data in files.values())

    # The repository reads back with datasets, by the card's configs.
    folder = tmp_path / "repo"
    for path, data in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    cache = str(tmp_path / "cache")
    sft = datasets.load_dataset(str(folder), "sft", split="train", cache_dir=cache)
    pairs = datasets.load_dataset(str(folder), "preference", split="train", cache_dir=cache)
    assert sft["run_id"] == [r.pk for r in runs]
    assert [(p["chosen_run_id"], p["rejected_run_id"]) for p in pairs] == [(runs[0].pk, runs[1].pk)]

    page = alice_client.get(f"/datasets/pushes/{push.pk}/").content.decode()
    assert "pushed" in page and "2 conversations and 1 pair" in page and push.url in page


def test_a_hub_that_refuses_fails_the_push_in_words_without_the_token(
    runs, alice, hub, monkeypatch
):
    monkeypatch.setenv("TAU2_HF_HUB_URL", hub.url)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    hub.refuse_with = 403
    push = dataset_push_request(
        user=alice, selection=Selection(), repo_id="someone-else/theirs", private=False
    )
    # This process is the worker here (the queued message finds the push claimed).
    assert dataset_push_execute(push_id=push.pk) == "failed"
    push.refresh_from_db()
    assert push.status == DatasetPush.Status.FAILED
    assert push.error.startswith("The Hub refused your token (HTTP 403)")
    assert ALICE_TOKEN not in push.error
    assert dataset_push_execute(push_id=push.pk) == "claimed"  # never twice


def test_a_push_is_refused_in_words_before_anything_is_queued(runs, alice, committed_db):
    stella = staff_member("stella")
    with pytest.raises(PushRefused, match="Name the dataset repository as the Hub does"):
        dataset_push_request(user=alice, selection=Selection(), repo_id="a/b/c", private=True)
    with pytest.raises(PushRefused, match="has no Hugging Face token"):
        dataset_push_request(user=stella, selection=Selection(), repo_id="mine", private=True)
    with pytest.raises(PushRefused, match="No finished run matches"):
        dataset_push_request(
            user=alice,
            selection=Selection.from_params({"domain": "telecom"}),
            repo_id="mine",
            private=True,
        )
    assert not DatasetPush.objects.exists()


def test_the_page_asks_for_a_push_and_only_alice_sees_it(
    runs, alice_client, bob_client, monkeypatch
):
    # The suite's worker would take the push off the default queue at once (and fail it:
    # its Hub is unreachable), so what is sent is recorded here, and the page stays queued.
    sent = []
    monkeypatch.setattr(
        "apps.datasets.services._send", lambda push_id, options: sent.append((push_id, options))
    )
    page = alice_client.get("/datasets/").content.decode()
    assert 'data-testid="dataset-push"' in page
    refused = alice_client.post("/datasets/push/", {"repo_id": "bad name!", "format": "jsonl"})
    assert refused.status_code == 400
    assert "Name the dataset repository as the Hub does" in refused.content.decode()

    response = alice_client.post(
        "/datasets/push/", {"repo_id": "tau2-mine", "format": "parquet", "private": "1"}
    )
    push = DatasetPush.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/datasets/pushes/{push.pk}/"
    assert (push.repo_id, push.private, push.status) == ("tau2-mine", True, "queued")
    assert "format=parquet" in push.query and ALICE_TOKEN not in push.query
    assert sent == [(push.pk, {})]  # the push's id on the workers' own queue, nothing else
    assert 'data-status="queued"' in alice_client.get(response["Location"]).content.decode()
    assert bob_client.get(response["Location"]).status_code == 404
    assert Client().get(response["Location"]).status_code == 404
    charlie = Client().post("/datasets/push/", {"repo_id": "x"})
    assert charlie.status_code == 302 and charlie["Location"].startswith("/accounts/sign-in/")
