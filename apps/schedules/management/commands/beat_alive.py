"""``manage.py beat_alive``: exit 0 while Celery beat is alive, 1 otherwise (compose's
health check of its ``beat`` service).

Beat's ``DatabaseScheduler`` writes when it last sent each periodic job into its rows every
``beat_sync_every`` / three minutes; the reaps fire every ``TAU2_RUN_REAP_SECONDS``, so a
beat that is alive has written one within a sync and two periods."""

from __future__ import annotations

from datetime import timedelta

from celery.beat import Scheduler
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django_celery_beat.models import PeriodicTask


def beat_window() -> timedelta:
    """How old beat's latest write may be for beat to count as alive."""
    return timedelta(seconds=Scheduler.sync_every + 2 * settings.TAU2_RUN_REAP_SECONDS + 30)


class Command(BaseCommand):
    help = "Exit 0 if Celery beat wrote a tick of the periodic jobs lately, else 1."

    def handle(self, *args, **options) -> None:
        names = list(settings.CELERY_BEAT_SCHEDULE)
        last = (
            PeriodicTask.objects.filter(name__in=names, last_run_at__isnull=False)
            .order_by("-last_run_at")
            .values_list("last_run_at", flat=True)
            .first()
        )
        if last is None or timezone.now() - last > beat_window():
            raise CommandError(f"Beat is not alive: its latest tick written is {last or 'none'}.")
        self.stdout.write(f"Beat is alive: its latest tick written is {last.isoformat()}.")
