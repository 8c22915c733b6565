"""Labels a newcomer misread (issue 33): a finished run's cost with no calls, a fork's
seed, and the Stop form re-rendered by the live socket."""

from __future__ import annotations

import re
import warnings

from apps.runs import presenters
from apps.runs.models import Run
from tests.support.review import stored_run


def test_a_finished_run_without_calls_says_no_calls_not_no_calls_yet(alice):
    run = stored_run(alice, status="running", messages=0)
    assert presenters.cost_view(run)["label"] == "no calls yet"
    run.status = Run.Status.COMPLETED
    assert presenters.cost_view(run)["label"] == "no calls"


def test_a_seed_given_as_itself_shows_once(alice, alice_client):
    run = stored_run(alice)
    # A fork keeps the seed its parent's orchestrator got: given and used are one.
    Run.objects.filter(pk=run.pk).update(seed=626729, given_seed=626729, seed_trial=0)
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert re.findall(r'data-testid="seed"[^>]*>([^<]+)<', page) == ["seed 626729"]

    Run.objects.filter(pk=run.pk).update(seed=626729, given_seed=300, seed_trial=0)
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert re.findall(r'data-testid="seed"[^>]*>([^<]+)<', page) == ["seed 300 (trial 0 → 626729)"]


def test_the_status_a_socket_renders_has_no_token_and_warns_nothing(alice, settings):
    run = stored_run(alice, status="running", messages=0)
    run.kind = Run.Kind.MODEL
    settings.DEBUG = True  # Django warns of a {% csrf_token %} without one in DEBUG only
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        html = presenters.status_html(run, user=alice)  # no request, as the consumer
    assert 'data-testid="stop"' in html and "csrfmiddlewaretoken" not in html
    assert [str(w.message) for w in caught if "csrf_token" in str(w.message)] == []
