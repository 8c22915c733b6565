"""Celery tasks of notifications: thin, ids only."""

from __future__ import annotations

from celery import shared_task

from apps.notifications import services


# max_retries=None on the task: the backoff (services.delivery_attempt) says when to stop.
# (Celery reads retry(max_retries=None) as "the task's own", whose default is 3.)
@shared_task(name=services.DELIVER, bind=True, acks_late=True, ignore_result=True, max_retries=None)
def deliver(self, delivery_id: int) -> None:
    """Make one attempt of delivery ``delivery_id``; come back after the backoff's wait
    when it is to be tried again (a new message: the worker is free meanwhile), for as
    many tries as its schedule has."""
    wait = services.delivery_attempt(delivery_id=delivery_id)
    if wait is not None:
        raise self.retry(countdown=wait, max_retries=None)


@shared_task(name="notifications.reap", ignore_result=True)
def reap() -> list[int]:
    """Send again the deliveries whose worker or message was lost (beat)."""
    return services.deliveries_reap()
