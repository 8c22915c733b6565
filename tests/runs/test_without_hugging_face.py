"""Starting runs without a Hugging Face sign-in: every face starts on what can run, and a
start that needs Hugging Face is refused before anything is stored, saying what to fix.

dana signed in with the laptop's developer sign-in (``dev-dana``: no Hugging Face token)
and added her own OpenAI-compatible endpoint as a connection. The run, race, evaluation
and play forms start her customer on her connection's model (not the server's customer on
Hugging Face's router, which cannot run for her), and every picker says why the router's
models will not run for her, with a link to sign in with Hugging Face. A start that still
names a router model — the run form, a race, an evaluation (its page and the API), a
fork, play — is refused in words on the side's field, and nothing is created; a run that
failed for the sign-in offers the fix instead of a Retry that would fail again. erin,
also a developer sign-in, has no connection: her forms start on the server's customer
and the picker tells her both ways out.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from apps.accounts.services import dev_user_get_or_create
from apps.agents.services import api_key_create
from apps.evaluations.models import Evaluation
from apps.races.models import Race
from apps.runs import defaults, services
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tests.runs.test_pickers import FORMS, select_of, selected
from tests.support.connections import CONNECTION_MODEL
from tests.support.connections import openai_compatible_connection as connection_of
from tests.support.people import signed_in
from tests.support.review import stored_run
from tests.support.scripts import AGENT_MODEL

NO_TOKEN = "This account has no Hugging Face token"


@pytest.fixture(autouse=True)
def _cleared(connections_cleared):
    """No connection (nor run on one) left over from another test."""


@pytest.fixture
def erin(committed_db):
    return dev_user_get_or_create(name="erin")


@pytest.fixture
def endpoint(llm_server, dana):
    return connection_of(llm_server, by=dana, owner=dana, name="Dana's vLLM")


@pytest.fixture
def mine(endpoint) -> str:
    return f"@{endpoint.slug}/{CONNECTION_MODEL}"


def nothing_started(user) -> bool:
    return not (
        Run.objects.filter(created_by=user).exists()
        or Evaluation.objects.filter(created_by=user).exists()
        or Race.objects.filter(created_by=user).exists()
    )


def test_every_form_starts_danas_customer_on_her_connection(dana, mine):
    client = signed_in(dana)
    for path in FORMS:
        page = client.get(path).content.decode()
        assert selected(select_of(page, "user_model")) == mine, path
        assert 'data-testid="customer-picker-sign-in"' in page, path
        assert "Hugging Face's models will not run for you" in page, path
        assert 'href="/accounts/sign-in/"' in page, path


def test_without_a_connection_the_picker_says_both_ways_out(erin):
    page = signed_in(erin).get("/runs/new/").content.decode()

    assert selected(select_of(page, "user_model")) == defaults.customer_model()
    assert NO_TOKEN in page
    assert "Sign in with Hugging Face</a>, or pick a model on a connection" in page
    assert 'href="/connections/"' in page


def test_alice_with_a_token_is_told_nothing_of_sign_in(alice_client):
    page = alice_client.get("/runs/new/").content.decode()
    assert "picker-sign-in" not in page


def test_the_run_form_refuses_the_servers_customer_before_creating_a_run(dana, mine):
    response = signed_in(dana).post(
        "/runs/new/",
        {"domain": "airline", "task_id": "27", "agent_model": mine, "max_steps": 200},
    )

    assert response.status_code == 400
    page = response.content.decode()
    assert f"The customer model {defaults.customer_model()} runs on Hugging Face" in page
    assert NO_TOKEN in page and "Or pick a customer model on a connection." in page
    assert nothing_started(dana)


def test_a_race_refuses_a_router_lane_before_creating_anything(dana, mine):
    response = signed_in(dana).post(
        "/races/new/",
        {
            "domain": "airline",
            "task_id": "27",
            "agent_model": [mine, AGENT_MODEL],
            "user_model": mine,
            "max_steps": 200,
        },
    )

    assert response.status_code == 400
    assert "runs on Hugging Face Inference Providers" in response.content.decode()
    assert nothing_started(dana)


def test_the_evaluation_page_and_the_api_refuse_in_words(dana, mine):
    form = {"domain": "airline", "split": "test", "task_ids": "27", "agent_model": mine}
    form.update(num_trials=1, max_steps=200, max_errors=10, concurrency=1, seed=300)
    page = signed_in(dana).post("/evaluations/new/", form)

    assert page.status_code == 400  # the form again, not a bounce to the sign-in page
    assert "Or pick a customer model on a connection." in page.content.decode()

    key = api_key_create(user=dana, name="ci", scope="start")[1]
    api = Client().post(
        "/api/evaluations/",
        # Left out, the customer is the form's first (hers): a router one, named.
        data=json.dumps({**form, "task_ids": ["27"], "user_model": "org/model-a"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert api.status_code == 400
    assert NO_TOKEN in api.json()["user_model"][0]
    assert "<a" not in api.content.decode()  # words, not a page's markup
    assert nothing_started(dana)


def test_play_refuses_the_servers_customer_on_its_form(dana, mine):
    response = signed_in(dana).post(
        "/play/new/", {"domain": "airline", "task_id": "27", "split": "base", "user_model": ""}
    )

    assert response.status_code == 400
    assert "Or pick a customer model on a connection." in response.content.decode()
    assert nothing_started(dana)


def test_a_fork_on_the_runs_router_customer_is_refused(dana, mine):
    parent = stored_run(dana, messages=4)  # its customer "u/m" is on the router
    before = Run.objects.count()

    response = signed_in(dana).post(
        f"/runs/{parent.pk}/fork/", {"at": 2, "continue_with": "model", "agent_model": mine}
    )

    assert response.status_code == 400
    assert "The customer model u/m runs on Hugging Face" in response.content.decode()
    assert Run.objects.count() == before


def test_a_run_that_failed_for_the_sign_in_offers_the_fix_not_a_retry(dana, mine):
    run = stored_run(dana, status=Run.Status.FAILED)
    client = signed_in(dana)

    page = client.get(f"/runs/{run.pk}/").content.decode()

    assert 'data-testid="retry"' not in page
    fix = re.search(r'data-testid="rerun-sign-in">(.*?)</p>', page, re.S).group(1)
    assert "The agent model org/model-a runs on Hugging Face" in fix
    assert "Sign in with Hugging Face</a>" in fix
    form_url = re.search(r'<a href="([^"]+)" data-testid="rerun-pick-connection"', fix)
    form = client.get(form_url.group(1).replace("&amp;", "&")).content.decode()
    assert selected(select_of(form, "user_model")) == mine  # not the failed run's "u/m"

    retried = client.post(f"/runs/{run.pk}/rerun/", follow=True)  # an old page's button
    assert NO_TOKEN in retried.content.decode()
    assert Run.objects.filter(created_by=dana).count() == 1


def advice_of(page: str) -> str | None:
    """The limits advice's opening tag, or None when the page has none."""
    found = re.search(r'<aside[^>]*data-testid="limits-advice"[^>]*>', page)
    return found.group(0) if found else None


def test_on_a_connection_the_forms_advise_bounds_and_keep_tau2s_defaults(dana, mine):
    client = signed_in(dana)  # her customer starts on her connection
    for path in ("/runs/new/", "/races/new/", "/evaluations/new/"):
        page = client.get(path).content.decode()
        assert advice_of(page) and " hidden" not in advice_of(page), path
        assert "step limit of 30–50" in page and "agent max_tokens of 1024–2048" in page
        assert 'name="max_steps" value="200"' in page, path  # the advice changes nothing
        assert re.search(r'<input[^>]*name="agent_max_tokens"(?![^>]*value=)[^>]*>', page), path


def test_on_the_router_the_advice_waits_hidden_for_a_connection(alice_client):
    page = alice_client.get("/runs/new/").content.decode()
    assert " hidden" in advice_of(page)  # the picker's script shows it if one is picked


def test_danas_evaluation_on_her_connection_starts_pauses_and_resumes(dana, mine, settings):
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0  # its runs are created and stay queued
    client = signed_in(dana)
    form = {"domain": "airline", "split": "test", "task_ids": "27", "agent_model": mine}
    form.update(user_model=mine, num_trials=1, max_steps=200, max_errors=10, concurrency=1)

    started = client.post("/evaluations/new/", {**form, "seed": 300})
    assert started.status_code == 302, started.content.decode()[:2000]
    evaluation = Evaluation.objects.get(created_by=dana)
    client.post(f"/evaluations/{evaluation.pk}/pause/")
    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.PAUSED

    resumed = client.post(f"/evaluations/{evaluation.pk}/resume/")  # no token asked for

    assert resumed["Location"] == evaluation.get_absolute_url()
    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.RUNNING


def test_the_refusal_names_each_router_side_with_its_own_code(dana, endpoint):
    routed = RunSpec(agent=Side(AGENT_MODEL), customer=Side("org/customer"))
    with pytest.raises(ValidationError) as refused:
        services.spec_sign_in_check(routed, user=dana)
    assert set(refused.value.error_dict) == {"agent_model", "user_model"}
    codes = {e.code for errors in refused.value.error_dict.values() for e in errors}
    assert codes == {services.SIGN_IN}

    hers = Side(CONNECTION_MODEL, endpoint)
    assert services.spec_sign_in_check(RunSpec(agent=hers, customer=hers), user=dana) is None
    played = RunSpec(agent=Side("human", llm=False), customer=hers)  # a person plays
    assert services.spec_router_sides(played) == []
