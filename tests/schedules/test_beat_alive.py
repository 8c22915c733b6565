"""``manage.py beat_alive``, compose's health check of beat: alive while beat's database
scheduler has written a tick of the periodic jobs lately."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from apps.schedules.management.commands.beat_alive import beat_window
from tau2site.celery import app


def test_beat_is_alive_after_a_tick_written_and_not_once_it_is_old():
    DatabaseScheduler(app=app)  # beat's start: the periodic jobs' rows
    PeriodicTask.objects.filter(name="runs-reap").update(last_run_at=timezone.now())
    call_command("beat_alive")

    PeriodicTask.objects.exclude(last_run_at=None).update(
        last_run_at=timezone.now() - beat_window() - timedelta(seconds=1)
    )
    with pytest.raises(CommandError, match="Beat is not alive"):
        call_command("beat_alive")
