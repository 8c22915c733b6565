from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    """Evaluations repeated on a schedule: a composing app over evaluations' start (the
    evaluations app knows nothing of schedules), ticked by Celery beat from the database
    (django-celery-beat's ``DatabaseScheduler``)."""

    name = "apps.schedules"
    label = "schedules"
