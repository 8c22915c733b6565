"""The live evaluation page's ETA from the runs' real pace, and the dispatcher keeping
an evaluation's ``concurrency`` runs going (issue 33: "about 63 s left" for 5 minutes,
"1 running · 2 queued" at concurrency 2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from apps.evaluations import presenters, selectors, services
from apps.evaluations.models import Evaluation
from apps.evaluations.selectors import _eta_seconds
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tests.support.scripts import AGENT_MODEL

NOW = datetime(2026, 12, 3, 16, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_the_eta_counts_what_the_running_runs_have_done_already():
    # Pace 60 s, 2 lanes: one run 50 s in (10 s left), one lane free; 1 waiting run
    # goes on the free lane: 60 s.
    assert _eta_seconds(NOW, 60.0, 2, [ago(50)], 1) == 60
    # The same with 3 waiting: 0→60→120 on one lane, 10→70 on the other.
    assert _eta_seconds(NOW, 60.0, 2, [ago(50)], 3) == 120
    # The last run, 40 s in: 20 s left, not "the pace" again whatever its age.
    assert _eta_seconds(NOW, 60.0, 2, [ago(40)], 0) == 20
    # Past the pace: it may end any moment (the page says it is taking longer).
    assert _eta_seconds(NOW, 60.0, 1, [ago(300)], 0) == 0


@pytest.fixture
def evaluation(alice, settings, monkeypatch) -> Evaluation:
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 32
    sent: list[int] = []
    monkeypatch.setattr(services.queue, "run_enqueue", lambda run_id, **_: sent.append(run_id))
    return services.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL)),
        tasks=services.TaskChoice(domain="airline", task_ids=["27", "2", "5"]),
        num_trials=2,
        concurrency=2,
    )


def in_flight(evaluation: Evaluation) -> int:
    return evaluation.runs.filter(
        dispatched_at__isnull=False, status__in=(Run.Status.QUEUED, Run.Status.RUNNING)
    ).count()


def test_the_dispatcher_keeps_concurrency_runs_going_to_the_end(evaluation):
    services.evaluations_dispatch()
    left = 6
    while left:
        assert in_flight(evaluation) == min(2, left)
        run = (
            evaluation.runs.filter(dispatched_at__isnull=False)
            .exclude(status__in=Run.FINAL)
            .order_by("id")
            .first()
        )
        now = timezone.now()
        Run.objects.filter(pk=run.pk).update(
            status=Run.Status.COMPLETED, reward=1.0, started_at=now, finished_at=now
        )
        services.evaluation_run_settled(run_id=run.pk)
        left -= 1
    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.COMPLETED


def test_the_page_counts_the_eta_down_from_when_it_ends(evaluation):
    services.evaluations_dispatch()
    first, second = evaluation.runs.filter(dispatched_at__isnull=False).order_by("id")[:2]
    now = timezone.now()
    Run.objects.filter(pk=first.pk).update(
        status=Run.Status.COMPLETED,
        reward=1.0,
        started_at=now - timedelta(seconds=60),
        finished_at=now,
    )
    Run.objects.filter(pk=second.pk).update(
        status=Run.Status.RUNNING, started_at=now - timedelta(seconds=30)
    )
    services.evaluation_run_settled(run_id=first.pk)  # the next run is handed out
    summary = selectors.evaluation_summary(evaluation)
    context = presenters.progress_context(evaluation, summary)
    ends = datetime.fromisoformat(context["eta_at"])
    # 2 lanes at 60 s a run: the running run's 30 s left, then 2 more (30 → 90 → 150);
    # the free lane takes the other 2 (0 → 60 → 120).
    assert summary.eta_seconds == 150
    assert abs((ends - summary.computed_at).total_seconds() - 150) < 1


def test_the_progress_says_which_queued_runs_wait_for_a_free_worker(evaluation):
    services.evaluations_dispatch()  # 2 handed out, no worker has started them
    first = evaluation.runs.filter(dispatched_at__isnull=False).order_by("id").first()
    Run.objects.filter(pk=first.pk).update(status=Run.Status.RUNNING, started_at=timezone.now())
    html = presenters.evaluation_state(evaluation).head["progress_html"]
    assert "1 running" in html and "5 queued" in html
    assert "(1 of them waiting for a free worker)" in html
