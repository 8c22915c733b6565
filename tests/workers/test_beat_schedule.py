"""Beat's reaps and dispatch while no worker is alive: ticks nobody takes are dropped after
one period, so a worker coming back runs one, not every tick sent meanwhile (an outage
of ten minutes at a 10 s period once left 132 reaps queued).

Beat keeps its schedule in the database (django-celery-beat's ``DatabaseScheduler``),
which syncs ``CELERY_BEAT_SCHEDULE`` into its rows: the expiry must survive that sync."""

from __future__ import annotations

from django.conf import settings
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from tau2site.celery import RECOVERY_ENTRIES, app


def test_reap_and_dispatch_ticks_expire_after_one_period_in_beats_database(committed_db):
    # committed_db: the scheduler closes the connection it used, as beat does.
    assert app.conf.beat_scheduler == "django_celery_beat.schedulers:DatabaseScheduler"
    scheduler = DatabaseScheduler(app=app)  # syncs the settings' entries into its rows
    for entry in ("runs-reap", "evaluations-dispatch", "evaluations-jobs-reap"):
        period = settings.CELERY_BEAT_SCHEDULE[entry]["schedule"]
        assert period == float(settings.TAU2_RUN_REAP_SECONDS)
        row = PeriodicTask.objects.get(name=entry)
        assert row.task == settings.CELERY_BEAT_SCHEDULE[entry]["task"]
        assert row.interval.every == period and row.expire_seconds == period, entry
        # What beat sends: a message that expires one period after it is sent.
        assert scheduler.schedule[entry].options["expires"] == period, entry


def test_the_start_up_recovery_runs_what_those_entries_send():
    assert RECOVERY_ENTRIES == ("runs-reap", "evaluations-dispatch", "evaluations-jobs-reap")
    app.loader.import_default_modules()  # the worker's autodiscovery
    for entry in RECOVERY_ENTRIES:
        assert settings.CELERY_BEAT_SCHEDULE[entry]["task"] in app.tasks, entry
