"""Beat's messages on a real Celery worker: two messages of one schedule delivered at once
(beat's catch-up and a redelivery, say) on a worker of four threads start one evaluation;
the other finds the tick taken. The worker consumes a queue of its own, so the runs the
repetition hands out (to the default queue) are not played here."""

from __future__ import annotations

import time

import pytest

from apps.evaluations.models import Evaluation
from apps.schedules import services, tasks
from apps.schedules.models import EvaluationSchedule
from tests.conftest import start_celery_worker, stop_celery_worker
from tests.schedules.test_schedules import started


@pytest.fixture
def own_worker(llm_server):
    queue = f"schedules-{time.monotonic_ns()}"
    proc = start_celery_worker(llm=llm_server, queue=queue, name="schedules")
    yield queue
    stop_celery_worker(proc)


def test_two_messages_for_one_tick_on_a_worker_start_one_evaluation(alice, own_worker):
    source = started(alice)
    schedule = services.schedule_create(evaluation=source, by=alice, preset="nightly")

    for _ in range(2):
        tasks.repeat.apply_async(kwargs={"schedule_id": schedule.pk}, queue=own_worker)
    deadline = time.monotonic() + 60
    while EvaluationSchedule.objects.get(pk=schedule.pk).last_evaluation_id is None:
        assert time.monotonic() < deadline, "no repetition started"
        time.sleep(0.2)
    time.sleep(2)  # the second message's turn

    repetitions = Evaluation.objects.exclude(pk=source.pk)
    assert repetitions.count() == 1
    repetition = repetitions.get()
    assert repetition.created_by == alice and repetition.spec == source.spec
    assert EvaluationSchedule.objects.get(pk=schedule.pk).last_error == ""
