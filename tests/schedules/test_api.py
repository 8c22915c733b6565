"""``POST /api/evaluations/<id>/schedule/`` with studio keys: a key that may start repeats
an evaluation as its owner; a read-only key may not; a malformed cron is refused in words.

alice has a key that may read and start and one that may only read.
"""

from __future__ import annotations

import json

from django.test import Client
from django_celery_beat.models import PeriodicTask

from apps.agents.models import ApiKey
from apps.agents.services import api_key_create
from apps.evaluations.api import READ_ONLY_KEY
from apps.schedules.models import EvaluationSchedule
from tests.schedules.test_schedules import started


def post(path: str, *, key: str, body: dict):
    return Client(enforce_csrf_checks=True).post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )


def test_a_key_that_may_start_repeats_an_evaluation_as_its_owner(alice):
    source = started(alice)
    key = api_key_create(user=alice, name="ci", scope=ApiKey.Scope.START)[1]

    response = post(
        f"/api/evaluations/{source.pk}/schedule/",
        key=key,
        body={"preset": "custom", "cron": "30 1 * * 1-5", "name": "Weekday nights"},
    )

    assert response.status_code == 201, response.content
    answer = response.json()
    assert answer["name"] == "Weekday nights" and answer["cron"] == "30 1 * * 1-5"
    assert answer["owner"] == "alice" and answer["source"] == source.pk and answer["enabled"]
    schedule = EvaluationSchedule.objects.get(pk=answer["id"])
    assert schedule.owner == alice
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert (task.crontab.minute, task.crontab.hour, task.crontab.day_of_week) == ("30", "1", "1-5")


def test_a_read_only_key_may_not(alice):
    source = started(alice)
    key = api_key_create(user=alice, name="ci", scope=ApiKey.Scope.READ)[1]

    response = post(f"/api/evaluations/{source.pk}/schedule/", key=key, body={"preset": "nightly"})

    assert response.status_code == 403
    assert response.json()["detail"] == READ_ONLY_KEY
    assert not EvaluationSchedule.objects.exists()


def test_a_malformed_cron_is_refused_in_words(alice):
    source = started(alice)
    key = api_key_create(user=alice, name="ci", scope=ApiKey.Scope.START)[1]

    response = post(
        f"/api/evaluations/{source.pk}/schedule/",
        key=key,
        body={"preset": "custom", "cron": "every night"},
    )

    assert response.status_code == 400
    assert response.json() == {
        "cron": [
            "A schedule is five fields — minute, hour, day of month, month, day of week — "
            'e.g. "0 2 * * *" for every day at 02:00; "every night" has 2.'
        ]
    }
    assert not EvaluationSchedule.objects.exists()


def test_the_openapi_schema_describes_it():
    schema = Client().get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/evaluations/{id}/schedule/"]["post"]
    assert set(operation["responses"]) == {"201", "400", "403", "404"}
    assert "requestBody" in operation
