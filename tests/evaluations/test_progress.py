"""The live evaluation page's progress says what its matrix shows: the legend's running
count is the runs a worker has started (the hatched cells), a run handed to the workers
and still waiting for one counts as queued; the Stop button's words say how many runs it
would stop.

alice owns a running evaluation: 1 run done, 2 started by a worker, 5 handed to the
workers and waiting, 4 not handed out yet.
"""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from apps.evaluations import presenters
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from tests.support.evaluations import stored_evaluation
from tests.support.people import signed_in


@pytest.fixture
def evaluation(alice) -> Evaluation:
    evaluation = stored_evaluation(
        alice, outcomes={str(t): [1.0, 1.0] for t in range(6)}, status="running"
    )
    runs = list(Run.objects.filter(evaluation=evaluation).order_by("pk"))
    unfinished = {"status": Run.Status.QUEUED, "reward": None, "finished_at": None}
    Run.objects.filter(pk__in=[r.pk for r in runs[1:3]]).update(
        **{**unfinished, "status": Run.Status.RUNNING}
    )
    Run.objects.filter(pk__in=[r.pk for r in runs[3:8]]).update(
        **unfinished, dispatched_at=timezone.now()
    )
    Run.objects.filter(pk__in=[r.pk for r in runs[8:]]).update(**unfinished)
    Evaluation.objects.filter(pk=evaluation.pk).update(finished_at=None)
    evaluation.refresh_from_db()
    return evaluation


def legend(html: str) -> dict[str, str]:
    return dict(
        re.findall(r'data-testid="count-(\w+)"><i class="dot seg-\w+"></i>([\d,]+) \w+', html)
    )


def test_the_legend_counts_as_running_exactly_the_cells_the_matrix_hatches(evaluation):
    state = presenters.evaluation_state(evaluation).message()
    letters = [cell[1] for cell in state["matrix"]["cells"]]
    counts = legend(state["progress_html"])
    assert letters.count("r") == 2
    assert counts["running"] == "2"
    assert counts["queued"] == "9" == str(letters.count("q"))
    assert counts["completed"] == "1" == str(letters.count("c"))


def test_stop_says_how_many_runs_it_stops(evaluation, alice):
    page = signed_in(alice).get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert 'data-confirm-from="#evaluation-progress"' in page
    words = re.search(r'id="evaluation-progress"[^>]*data-confirm="([^"]*)"', page).group(1)
    assert words.startswith(
        "Stop this evaluation? 11 unfinished runs stop (2 running, 9 queued): "
        "running ones after their current step, queued ones never start."
    )


def test_a_finished_evaluations_progress_has_nothing_left_to_stop(evaluation):
    Run.objects.filter(evaluation=evaluation).exclude(status=Run.Status.COMPLETED).update(
        status=Run.Status.STOPPED, finished_at=timezone.now()
    )
    Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.Status.STOPPED)
    evaluation.refresh_from_db()
    html = presenters.evaluation_state(evaluation).head["progress_html"]
    assert 'data-confirm="Stop this evaluation? No run is left to stop.' in html
    assert legend(html) == {
        "completed": "1",
        "failed": "0",
        "stopped": "11",
        "running": "0",
        "queued": "0",
    }
