"""Baselines and verdicts: an evaluation pinned as the baseline of its settings, and
later comparable ones judged against it on their page and in the API.

alice and bob are on the team; stella is staff. Evaluations are stored with their runs'
rewards (``stored_evaluation``) over six airline tasks, one trial each unless said: a
task set where the paired bootstrap can tell "all pass" from "all fail".
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.agents.models import ApiKey
from apps.agents.services import api_key_create
from apps.evaluations import baselines
from apps.evaluations.models import Baseline
from tests.support import connections as with_connections
from tests.support.evaluations import stored_evaluation

TASKS = ("0", "1", "2", "3", "4", "5")
staff = with_connections.staff
connections_cleared = with_connections.connections_cleared


def rewards(*values: float, trials: int = 1) -> dict[str, list[float]]:
    return {task: [value] * trials for task, value in zip(TASKS, values, strict=True)}


def evaluation(user, *values: float, **kwargs):
    return stored_evaluation(user, outcomes=rewards(*values), **kwargs)


def key_of(user, scope: str = ApiKey.Scope.START) -> str:
    return api_key_create(user=user, name=f"ci {scope}", scope=scope)[1]


def api(method: str, path: str, *, key: str):
    return getattr(Client(enforce_csrf_checks=True), method)(
        path, HTTP_AUTHORIZATION=f"Bearer {key}", content_type="application/json"
    )


def test_a_later_evaluation_failing_what_the_baseline_passed_is_worse(alice):
    base = evaluation(alice, 1, 1, 1, 1, 1, 1, cost_usd="0.002000")
    baselines.baseline_pin(evaluation=base, by=alice)
    later = evaluation(alice, 0, 0, 0, 0, 0, 0, agent_model="org/agent-b", cost_usd="0.001000")

    verdict = baselines.verdict_for(later)

    assert verdict is not None and verdict.outcome == "worse" and verdict.regression
    assert verdict.baseline_id == base.pk and not verdict.provisional
    assert (verdict.difference.a, verdict.difference.b, verdict.difference.tasks) == (1.0, 0.0, 6)
    assert verdict.difference.high < 0
    assert verdict.regressed == TASKS and verdict.fixed == ()
    assert verdict.cost_per_run == Decimal("0.001") and verdict.baseline_cost_per_run == Decimal(
        "0.002"
    )
    assert verdict.sentence.startswith(f"Worse than the baseline (evaluation {base.pk})")


def test_a_later_evaluation_passing_what_the_baseline_failed_is_better(alice):
    base = evaluation(alice, 0, 0, 0, 0, 0, 0)
    baselines.baseline_pin(evaluation=base, by=alice)
    later = evaluation(alice, 1, 1, 1, 1, 1, 0, agent_model="org/agent-b")

    verdict = baselines.verdict_for(later)

    assert verdict is not None and verdict.outcome == "better" and not verdict.regression
    assert verdict.difference.low > 0
    assert verdict.fixed == ("0", "1", "2", "3", "4") and verdict.regressed == ()


def test_a_few_tasks_flipping_both_ways_are_not_distinguishable(alice):
    base = evaluation(alice, 1, 0, 1, 0, 1, 0)
    baselines.baseline_pin(evaluation=base, by=alice)
    later = evaluation(alice, 0, 1, 1, 0, 1, 0, agent_model="org/agent-b")

    verdict = baselines.verdict_for(later)

    assert verdict is not None and verdict.outcome == "indistinguishable"
    assert verdict.label == "not distinguishable"
    assert verdict.difference.low < 0 < verdict.difference.high
    assert verdict.regressed == ("0",) and verdict.fixed == ("1",)


def test_each_k_both_have_is_judged_and_the_verdict_reads_pass_1(alice):
    base = stored_evaluation(alice, outcomes=rewards(1, 1, 1, 1, 1, 1, trials=2))
    baselines.baseline_pin(evaluation=base, by=alice)
    later = stored_evaluation(alice, outcomes={t: [1, 0] for t in TASKS}, agent_model="org/agent-b")

    verdict = baselines.verdict_for(later)

    assert verdict is not None and [d.k for d in verdict.differences] == [1, 2]
    assert verdict.difference.k == 1 and verdict.difference.b == 0.5
    assert verdict.as_json()["by_k"]["2"]["this"] == 0.0
    assert verdict.regressed == ()  # a task that passed once of two did not fail every trial


def test_another_customer_is_not_judged_and_the_reason_says_so(alice):
    base = evaluation(alice, 1, 1, 1, 1, 1, 1)
    baselines.baseline_pin(evaluation=base, by=alice)
    other = evaluation(alice, 0, 0, 0, 0, 0, 0, user_model="org/another-customer")

    judged = baselines.judge(other)

    assert baselines.verdict_for(other) is None
    assert isinstance(judged, baselines.NoVerdict) and judged.baseline_id == base.pk
    assert "Not comparable with the baseline for airline" in judged.reason
    assert "another customer model (org/another-customer, not org/customer)" in judged.reason


def test_without_a_baseline_or_on_the_baseline_itself_there_is_no_verdict(alice):
    base = evaluation(alice, 1, 1, 1, 1, 1, 1)

    assert baselines.judge(base).reason == "No baseline is pinned for airline yet."
    baselines.baseline_pin(evaluation=base, by=alice)
    judged = baselines.judge(base)
    assert judged.is_baseline and "This evaluation is the baseline" in judged.reason


def test_an_unfinished_evaluation_has_a_provisional_verdict(alice):
    base = evaluation(alice, 1, 1, 1, 1, 1, 1)
    baselines.baseline_pin(evaluation=base, by=alice)
    running = evaluation(alice, 0, 0, 0, 0, 0, 0, agent_model="org/agent-b", status="running")

    verdict = baselines.verdict_for(running)

    assert verdict is not None and verdict.provisional and verdict.outcome == "worse"
    assert "Provisional: runs still to come may change it." in verdict.sentence
    assert verdict.as_json()["provisional"] is True


def test_one_baseline_per_settings_and_only_who_may_replaces_it(alice, bob, staff):
    first = evaluation(alice, 1, 1, 1, 1, 1, 1)
    baselines.baseline_pin(evaluation=first, by=alice)
    bobs = evaluation(bob, 0, 0, 0, 0, 0, 0, agent_model="org/agent-b")

    with pytest.raises(PermissionDenied, match="only whoever pinned it"):
        baselines.baseline_pin(evaluation=bobs, by=bob)  # alice's baseline stays
    with pytest.raises(PermissionDenied, match="may pin it"):
        baselines.baseline_pin(evaluation=first, by=bob)  # not his evaluation
    assert Baseline.objects.get().evaluation == first

    baselines.baseline_pin(evaluation=bobs, by=staff)  # staff replace it
    assert Baseline.objects.get().evaluation == bobs
    other_customer = evaluation(alice, 1, 1, 1, 1, 1, 1, user_model="org/another-customer")
    baselines.baseline_pin(evaluation=other_customer, by=alice)  # another identity: both stay
    assert Baseline.objects.count() == 2
    with pytest.raises(PermissionDenied):
        baselines.baseline_unpin(evaluation=bobs, by=alice)
    assert baselines.baseline_unpin(evaluation=bobs, by=bob) is True
    assert baselines.baseline_unpin(evaluation=bobs, by=bob) is False


def test_the_page_pins_and_shows_the_verdict_to_the_team(alice, alice_client, bob, bob_client):
    base = evaluation(alice, 1, 1, 1, 1, 1, 1)
    later = evaluation(alice, 0, 0, 0, 0, 0, 0, agent_model="org/agent-b")

    refused = bob_client.post(f"/evaluations/{base.pk}/baseline/")
    pinned = alice_client.post(f"/evaluations/{base.pk}/baseline/", follow=True)

    assert refused.status_code == 403 and Baseline.objects.filter(evaluation=base).exists()
    assert "Pinned: later comparable evaluations are judged against it." in (
        pinned.content.decode()
    )
    assert 'data-testid="unpin"' in pinned.content.decode()
    page = bob_client.get(f"/evaluations/{later.pk}/").content.decode()
    assert 'data-outcome="worse"' in page and 'data-provisional="false"' in page
    assert 'data-testid="verdict-regressed">Passed in the baseline, failed now (6)' in page
    assert "Cost per run: $0.0010 here, $0.0010 in the baseline." in page
    assert f"?ids={base.pk},{later.pk}" in page
    assert 'data-testid="pin"' not in page  # bob may not pin alice's evaluation

    alice_client.post(f"/evaluations/{base.pk}/baseline/", {"unpin": "1"})
    assert not Baseline.objects.exists()
    page = alice_client.get(f"/evaluations/{later.pk}/").content.decode()
    assert "No baseline is pinned for airline yet." in page and 'data-testid="pin"' in page


def test_the_api_pins_with_a_start_key_and_returns_the_verdict(alice, bob):
    base = evaluation(alice, 1, 1, 1, 1, 1, 1)
    later = evaluation(alice, 0, 0, 0, 0, 0, 0, agent_model="org/agent-b")
    read_key, start_key = key_of(alice, ApiKey.Scope.READ), key_of(alice)

    before = api("get", f"/api/evaluations/{later.pk}/", key=read_key).json()
    read_only = api("post", f"/api/evaluations/{base.pk}/baseline/", key=read_key)
    strangers = api("post", f"/api/evaluations/{base.pk}/baseline/", key=key_of(bob))
    assert before["verdict"] is None
    assert before["verdict_reason"] == "No baseline is pinned for airline yet."
    assert read_only.status_code == 403 and "may only read" in read_only.json()["detail"]
    assert strangers.status_code == 403 and "may pin it" in strangers.json()["detail"]
    assert not Baseline.objects.exists()

    pinned = api("post", f"/api/evaluations/{base.pk}/baseline/", key=start_key)
    judged = api("get", f"/api/evaluations/{later.pk}/", key=read_key).json()

    assert pinned.status_code == 200 and pinned.json()["is_baseline"] is True
    assert "This evaluation is the baseline" in pinned.json()["verdict_reason"]
    verdict = judged["verdict"]
    assert judged["verdict_reason"] is None and judged["is_baseline"] is False
    assert verdict["outcome"] == "worse" and verdict["baseline"] == base.pk
    assert verdict["pass_hat_k"] == {"baseline": 1.0, "this": 0.0} and verdict["tasks"] == 6
    assert verdict["regressed"] == list(TASKS) and verdict["fixed"] == []
    assert verdict["cost_per_run_usd"] == "0.001000" and verdict["provisional"] is False
    json.dumps(verdict)  # plain JSON all through

    unpin_read = api("delete", f"/api/evaluations/{base.pk}/baseline/", key=read_key)
    unpinned = api("delete", f"/api/evaluations/{base.pk}/baseline/", key=start_key)
    assert unpin_read.status_code == 403 and unpinned.status_code == 200
    assert unpinned.json()["is_baseline"] is False and not Baseline.objects.exists()


def test_bob_is_told_why_his_evaluation_may_not_replace_alices_baseline(alice, bob, bob_client):
    base = evaluation(alice, 1, 1, 1, 1, 1, 1)
    baselines.baseline_pin(evaluation=base, by=alice)
    bobs = evaluation(bob, 0, 0, 0, 0, 0, 0, agent_model="org/agent-b")

    page = bob_client.post(f"/evaluations/{bobs.pk}/baseline/", follow=True)

    assert page.status_code == 200
    assert f"Evaluation {base.pk} is the baseline for these settings" in page.content.decode()
    assert Baseline.objects.get().evaluation == base
    assert 'data-outcome="worse"' in page.content.decode()  # his page, judged against hers


def test_a_verdict_reads_the_same_few_queries_whatever_the_size(alice):
    base = evaluation(alice, 1, 1, 1, 1, 1, 1)
    baselines.baseline_pin(evaluation=base, by=alice)
    small = evaluation(alice, 0, 0, 0, 0, 0, 0, agent_model="org/agent-b")
    big = stored_evaluation(
        alice, outcomes={t: [0, 1, 0, 1] for t in TASKS}, agent_model="org/agent-c"
    )

    counts = []
    for judged in (small, big):
        with CaptureQueriesContext(connection) as read:
            assert baselines.verdict_for(judged) is not None
        counts.append(len(read.captured_queries))

    # The domain's baselines, then each side's scored runs and its costs.
    assert counts == [5, 5]
