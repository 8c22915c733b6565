"""Schedules on the production path: PostgreSQL, django-celery-beat's rows, the scripted
router's catalogue. Every worker slot is taken (``TAU2_EVAL_MAX_IN_FLIGHT=0``): a
repetition's runs are created and stay queued."""

from __future__ import annotations

import pytest

from tests.support.scripts import refresh_agent_models


@pytest.fixture(autouse=True)
def agent_models(committed_db, llm_server, settings):
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0
    yield refresh_agent_models()
    # Beat's rows outlive the people whose schedules they fired (the suite deletes people).
    from django_celery_beat.models import PeriodicTask

    PeriodicTask.objects.filter(task="schedules.repeat").delete()
