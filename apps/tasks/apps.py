from django.apps import AppConfig

from tau2_env import compat


class TasksConfig(AppConfig):
    name = "apps.tasks"
    label = "tasks"
    verbose_name = "τ²-bench tasks"

    def ready(self) -> None:
        # The lowest app, always installed: web, Celery workers and manage.py all start
        # with τ²'s and litellm's hooks in place (or refuse an untested version).
        compat.install()
