"""Beat's reaps and dispatch while no worker is alive: ticks nobody takes are dropped after
one period, so a worker coming back runs one, not every tick sent meanwhile (an outage
of ten minutes at a 10 s period once left 132 reaps queued)."""

from __future__ import annotations

from django.conf import settings

from tau2site.celery import RECOVERY_ENTRIES, app


def test_reap_and_dispatch_ticks_expire_after_one_period():
    schedule = settings.CELERY_BEAT_SCHEDULE
    for entry in ("runs-reap", "evaluations-dispatch", "evaluations-jobs-reap"):
        period = schedule[entry]["schedule"]
        assert period == float(settings.TAU2_RUN_REAP_SECONDS)
        assert schedule[entry]["options"]["expires"] == period, entry


def test_the_start_up_recovery_runs_what_those_entries_send():
    assert RECOVERY_ENTRIES == ("runs-reap", "evaluations-dispatch", "evaluations-jobs-reap")
    app.loader.import_default_modules()  # the worker's autodiscovery
    for entry in RECOVERY_ENTRIES:
        assert settings.CELERY_BEAT_SCHEDULE[entry]["task"] in app.tasks, entry
